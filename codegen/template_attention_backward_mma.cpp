// "attention_backward" on tensor cores (Variant::precision tf32, fp16, bf16): FlashAttention-2's
// backward of dc.AttentionGrad with every product on mma.sync (m16n8k8 tf32, m16n8k16
// fp16/bf16, fp32 accumulators), deterministic (no atomics), in the CUDA-core path's two
// launches (template_attention_backward.cpp), per batch:
//  - a key block of block_n keys, one warp per 16 of them; per query tile of block_m queries
//    the warp recomputes S^T = K Q^T and dP^T = V dO^T (mma), P^T = exp(S^T scale + mask -
//    LSE^T) and dS^T = P^T o (dP^T - D^T) (fp32, in the accumulators), then dV += P^T dO
//    and dK^T += dS^T Q (mma), P^T and dS^T the A operands straight from the accumulator
//    registers: the C layout of one (tf32) or two (fp16/bf16) n8 tiles holds a k step's A
//    elements, so no shared-memory round trip (tf32: the A's logical k = t stands for column
//    2t and k = t + 4 for 2t + 1, and B's rows are read in the same order);
//  - a query block of block_m queries, one warp per 16: per key tile S = Q K^T and dP = dO V^T
//    (mma), P and dS as above, dQ += dS K (mma, dS from the accumulators).
// Operands are staged in shared memory as float (any storage, read with dc_to_f32; head dims
// zero-padded to the mma's k step, rows and columns past the sequences zero) and rounded to
// the math type as a fragment is read: dc_cvt_rna_tf32, or pairs packed by dc_pack_f16x2 /
// dc_pack_bf16x2. Fragments are gathered element by element at the PTX ISA's positions
// (prelude_mma.cpp's dc_mma_*_row/col), so one loader serves every operand, transposed or
// not. LSE and D = rowsum(dO o O) in f32; gradients stored once in their dtypes.
// docs/training.md, "Attention backward".
#include <fmt/format.h>

#include "ir/error.h"
#include "param_space.h"
#include "template_attention_backward.h"
#include "template_util.h"
#include "variant_params.h"

namespace dc {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Fragment loaders of the tf32 path: one 32-bit element per register, rounded with
// cvt.rna.tf32. dc_bwd_b's dc_perm: B's row k is the tile's row 2 (k % 4) + k / 4, the
// order of an A taken from accumulators (dc_bwd_a_acc).
constexpr const char* kTf32Fragments = R"(
// A (16 x 8): element (r, c) at dc_p[r * dc_ld + c].
__device__ __forceinline__ void dc_bwd_a(unsigned dc_a[4], const float* dc_p, int dc_ld, int dc_lane) {
  DC_UNROLL
  for (int dc_i = 0; dc_i < 4; ++dc_i)
    dc_a[dc_i] = dc_cvt_rna_tf32(dc_p[dc_mma_tf32_a_row(dc_lane, dc_i) * dc_ld + dc_mma_tf32_a_col(dc_lane, dc_i)]);
}
// B (8 x 8): element (k, n) at dc_p[k * dc_lk + n * dc_ln].
__device__ __forceinline__ void dc_bwd_b(unsigned dc_b[2], const float* dc_p, int dc_lk, int dc_ln, int dc_lane,
                                         bool dc_perm) {
  DC_UNROLL
  for (int dc_i = 0; dc_i < 2; ++dc_i) {
    const int dc_k = dc_mma_tf32_b_row(dc_lane, dc_i);
    const int dc_row = dc_perm ? 2 * (dc_k & 3) + (dc_k >> 2) : dc_k;
    dc_b[dc_i] = dc_cvt_rna_tf32(dc_p[dc_row * dc_lk + dc_mma_tf32_b_col(dc_lane, dc_i) * dc_ln]);
  }
}
// A from one n8 tile of accumulators c0 (c1 unused): a[0] = (g, t) <- c0[0] = (g, 2t),
// a[1] = (g + 8, t) <- c0[2], a[2] = (g, t + 4) <- c0[1] = (g, 2t + 1), a[3] <- c0[3].
__device__ __forceinline__ void dc_bwd_a_acc(unsigned dc_a[4], const float dc_c0[4], const float dc_c1[4]) {
  (void)dc_c1;
  dc_a[0] = dc_cvt_rna_tf32(dc_c0[0]);
  dc_a[1] = dc_cvt_rna_tf32(dc_c0[2]);
  dc_a[2] = dc_cvt_rna_tf32(dc_c0[1]);
  dc_a[3] = dc_cvt_rna_tf32(dc_c0[3]);
}
)";

// fp16/bf16: register j holds elements 2j (low half) and 2j + 1, packed by $(PACK).
constexpr const char* kHalfFragments = R"(
// A (16 x 16): element (r, c) at dc_p[r * dc_ld + c].
__device__ __forceinline__ void dc_bwd_a(unsigned dc_a[4], const float* dc_p, int dc_ld, int dc_lane) {
  DC_UNROLL
  for (int dc_j = 0; dc_j < 4; ++dc_j)
    dc_a[dc_j] = $(PACK)(dc_p[dc_mma_f16_a_row(dc_lane, 2 * dc_j) * dc_ld + dc_mma_f16_a_col(dc_lane, 2 * dc_j)],
                         dc_p[dc_mma_f16_a_row(dc_lane, 2 * dc_j + 1) * dc_ld + dc_mma_f16_a_col(dc_lane, 2 * dc_j + 1)]);
}
// B (16 x 8): element (k, n) at dc_p[k * dc_lk + n * dc_ln] (dc_perm: the tf32 path's only).
__device__ __forceinline__ void dc_bwd_b(unsigned dc_b[2], const float* dc_p, int dc_lk, int dc_ln, int dc_lane,
                                         bool dc_perm) {
  (void)dc_perm;
  DC_UNROLL
  for (int dc_j = 0; dc_j < 2; ++dc_j)
    dc_b[dc_j] = $(PACK)(dc_p[dc_mma_f16_b_row(dc_lane, 2 * dc_j) * dc_lk + dc_mma_f16_b_col(dc_lane, 2 * dc_j) * dc_ln],
                         dc_p[dc_mma_f16_b_row(dc_lane, 2 * dc_j + 1) * dc_lk +
                              dc_mma_f16_b_col(dc_lane, 2 * dc_j + 1) * dc_ln]);
}
// A of one k16 step from two n8 tiles of accumulators c0, c1 (the C layout of the pair is
// the A layout): a[0] = (g, 2t..2t+1) = c0[0..1], a[1] = (g + 8, ..) = c0[2..3], a[2] =
// (g, 2t+8..) = c1[0..1], a[3] = c1[2..3].
__device__ __forceinline__ void dc_bwd_a_acc(unsigned dc_a[4], const float dc_c0[4], const float dc_c1[4]) {
  dc_a[0] = $(PACK)(dc_c0[0], dc_c0[1]);
  dc_a[1] = $(PACK)(dc_c0[2], dc_c0[3]);
  dc_a[2] = $(PACK)(dc_c1[0], dc_c1[1]);
  dc_a[3] = $(PACK)(dc_c1[2], dc_c1[3]);
}
)";

// Staging, both launches: dc_nt threads copy, as float, zeros past the sequences and the
// head dimensions (to DP / DVP).
constexpr const char* kLoads = R"(
// Query rows [i0, i0 + BM): Q [BM][LDQ], dO [BM][LDV]; D = rowsum(dO o O) and LSE per row
// (rows past the sequence: zeros, P = 0 through dc_gi < SQ).
__device__ __forceinline__ void dc_attn_bwd_mma_load_queries(const $(QT)* DC_RESTRICT dc_q, const $(OT)* DC_RESTRICT dc_o,
                                                             const $(DOT)* DC_RESTRICT dc_do, const float* DC_RESTRICT dc_lse_in,
                                                             float* DC_RESTRICT dc_qs, float* DC_RESTRICT dc_dos,
                                                             float* DC_RESTRICT dc_drow, float* DC_RESTRICT dc_lse,
                                                             dc_i64 dc_i0, int dc_nt) {
  for (int dc_x = (int)threadIdx.x; dc_x < $(BM) * $(DP); dc_x += dc_nt) {
    const int dc_r = dc_x / $(DP), dc_d = dc_x % $(DP);
    dc_qs[dc_r * $(LDQ) + dc_d] = dc_i0 + dc_r < $(SQ) && dc_d < $(D) ? $(LOAD_Q) : 0.f;
  }
  for (int dc_x = (int)threadIdx.x; dc_x < $(BM) * $(DVP); dc_x += dc_nt) {
    const int dc_r = dc_x / $(DVP), dc_e = dc_x % $(DVP);
    dc_dos[dc_r * $(LDV) + dc_e] = dc_i0 + dc_r < $(SQ) && dc_e < $(DV) ? $(LOAD_DO) : 0.f;
  }
  for (int dc_r = (int)threadIdx.x; dc_r < $(BM); dc_r += dc_nt) {
    float dc_sum = 0.f, dc_l = 0.f;
    if (dc_i0 + dc_r < $(SQ)) {
      for (int dc_e = 0; dc_e < $(DV); ++dc_e)
        dc_sum = fmaf($(LOAD_DO), $(LOAD_O), dc_sum);
      dc_l = dc_lse_in[dc_i0 + dc_r];
    }
    dc_drow[dc_r] = dc_sum;
    dc_lse[dc_r] = dc_l;
  }
}

// Key rows [j0, j0 + BN): K [BN][LDK] (from Kt [D][SK], along its rows: coalesced), V [BN][LDV].
__device__ __forceinline__ void dc_attn_bwd_mma_load_keys(const $(KTT)* DC_RESTRICT dc_kt, const $(VT)* DC_RESTRICT dc_v,
                                                          float* DC_RESTRICT dc_ks, float* DC_RESTRICT dc_vs, dc_i64 dc_j0,
                                                          int dc_nt) {
  for (int dc_x = (int)threadIdx.x; dc_x < $(BN) * $(DP); dc_x += dc_nt) {
    const int dc_d = dc_x / $(BN), dc_c = dc_x % $(BN);
    dc_ks[dc_c * $(LDK) + dc_d] = dc_j0 + dc_c < $(SK) && dc_d < $(D) ? $(LOAD_KT) : 0.f;
  }
  for (int dc_x = (int)threadIdx.x; dc_x < $(BN) * $(DVP); dc_x += dc_nt) {
    const int dc_c = dc_x / $(DVP), dc_e = dc_x % $(DVP);
    dc_vs[dc_c * $(LDV) + dc_e] = dc_j0 + dc_c < $(SK) && dc_e < $(DV) ? $(LOAD_V) : 0.f;
  }
}
)";

constexpr const char* kPrologue = R"(DC_DYNAMIC_SMEM(float, dc_smem);
  // Shared memory: K [BN][LDK], V [BN][LDV], Q [BM][LDQ], dO [BM][LDV], D and LSE [BM];
  // rows padded by 16 bytes.
  float* dc_ks = dc_smem;
  float* dc_vs = dc_ks + $(BN) * $(LDK);
  float* dc_qs = dc_vs + $(BN) * $(LDV);
  float* dc_dos = dc_qs + $(BM) * $(LDQ);
  float* dc_drow = dc_dos + $(BM) * $(LDV);
  float* dc_lse = dc_drow + $(BM);
  $(BATCH_OPERANDS)
  (void)dc_mask;
  (void)dc_mbase;
  const int dc_lane = (int)threadIdx.x & 31, dc_warp = (int)threadIdx.x >> 5;
  const int dc_g = dc_lane >> 2, dc_t = dc_lane & 3;  // mma fragment group and thread in group
)";

// Scores of one tile: dc_s and dc_dp [NT][4] accumulate OUT = A B^T over KLEN (A's 16 rows at
// A_BASE, pitch A_LD; B's rows (the n8 tiles) at B_BASE, pitch B_LD).
constexpr const char* kProduct = R"(DC_UNROLL
for (int dc_kk = 0; dc_kk < $(KLEN) / $(KSTEP); ++dc_kk) {
  unsigned dc_a[4];
  dc_bwd_a(dc_a, $(A_BASE) + dc_kk * $(KSTEP), $(A_LD), dc_lane);
  DC_UNROLL
  for (int dc_j = 0; dc_j < $(NT); ++dc_j) {
    unsigned dc_bf[2];
    dc_bwd_b(dc_bf, $(B_BASE) + dc_j * 8 * $(B_LD) + dc_kk * $(KSTEP), 1, $(B_LD), dc_lane, false);
    $(MMA)($(OUT)[dc_j], dc_a, dc_bf);
  }
}
)";

// P and dS in place of S and dP, accumulator dc_i of n8 tile dc_j: query row dc_r and key
// column dc_c of the tile (ROW, COL). 0 outside the sequences; a row masked entirely (LSE
// -inf) has P = 0.
constexpr const char* kProbabilities = R"(DC_UNROLL
for (int dc_j = 0; dc_j < $(NT); ++dc_j) {
  DC_UNROLL
  for (int dc_i = 0; dc_i < 4; ++dc_i) {
    const int dc_r = $(ROW), dc_c = $(COL);
    const dc_i64 dc_gi = dc_i0 + dc_r, dc_gj = dc_j0 + dc_c;
    float dc_p = 0.f, dc_ds = 0.f;
    if (dc_gi < $(SQ) && dc_gj < $(SK)) {
      const float dc_sv = dc_s[dc_j][dc_i] * $(SCALE)$(MASK_TERM);
      const float dc_l = dc_lse[dc_r];
      dc_p = dc_l == $(NEG_INF) ? 0.f : expf(dc_sv - dc_l);
      dc_ds = dc_p * (dc_dp[dc_j][dc_i] - dc_drow[dc_r]);
    }
    dc_s[dc_j][dc_i] = dc_p;
    dc_dp[dc_j][dc_i] = dc_ds;
  }
}
)";

// OUT[NO][4] += (P or dS from the accumulators ACC_IN, k = the tile's KLEN rows) x B, B's
// element (k, n) at B_BASE[k * B_LD + n], its rows in the A's order (dc_perm).
constexpr const char* kGradient = R"(DC_UNROLL
for (int dc_kk = 0; dc_kk < $(KLEN) / $(KSTEP); ++dc_kk) {
  unsigned dc_a[4];
  dc_bwd_a_acc(dc_a, $(ACC_IN)[$(T0)], $(ACC_IN)[$(T1)]);
  DC_UNROLL
  for (int dc_n = 0; dc_n < $(NO); ++dc_n) {
    unsigned dc_bf[2];
    dc_bwd_b(dc_bf, $(B_BASE) + dc_kk * $(KSTEP) * $(B_LD) + dc_n * 8, $(B_LD), 1, dc_lane, true);
    $(MMA)($(OUT)[dc_n], dc_a, dc_bf);
  }
}
)";

// A gradient's stores: accumulator dc_i of n8 tile dc_n is row ROW of the warp's 16, column
// dc_col; LOCAL names them for STORE under GUARD.
constexpr const char* kStore = R"(DC_UNROLL
for (int dc_n = 0; dc_n < $(NO); ++dc_n) {
  DC_UNROLL
  for (int dc_i = 0; dc_i < 4; ++dc_i) {
    const int dc_row = $(ROW), dc_col = dc_n * 8 + 2 * dc_t + (dc_i & 1);
    const float dc_acc = $(OUT)[dc_n][dc_i];
    $(LOCAL)
    if ($(GUARD)) {
      $(STORE)
    }
  }
}
)";

constexpr const char* kKernels = R"(extern "C" __global__ void DC_LAUNCH_BOUNDS($(KV_THREADS)) dc_attention_backward_mma_kv($(PARAMS)) {
  $(PROLOGUE)
  // A key block: warp w owns keys j0 + 16 w .. + 15, its dK^T and dV over every query tile.
  const dc_i64 dc_j0 = (dc_i64)blockIdx.x * $(BN);
  const int dc_kw = dc_warp * 16;
  dc_attn_bwd_mma_load_keys(dc_kt, dc_v, dc_ks, dc_vs, dc_j0, $(KV_THREADS));
  float dc_dk[$(NDK)][4], dc_dv[$(NDV)][4];
  DC_UNROLL
  for (int dc_n = 0; dc_n < $(NDK); ++dc_n)
    for (int dc_i = 0; dc_i < 4; ++dc_i) dc_dk[dc_n][dc_i] = 0.f;
  DC_UNROLL
  for (int dc_n = 0; dc_n < $(NDV); ++dc_n)
    for (int dc_i = 0; dc_i < 4; ++dc_i) dc_dv[dc_n][dc_i] = 0.f;
  for (dc_i64 dc_i0 = 0; dc_i0 < $(SQ); dc_i0 += $(BM)) {
    __syncthreads();  // the previous query tile is used up
    dc_attn_bwd_mma_load_queries(dc_q, dc_o, dc_do, dc_lse_in, dc_qs, dc_dos, dc_drow, dc_lse, dc_i0, $(KV_THREADS));
    __syncthreads();
    // S^T = K Q^T and dP^T = V dO^T: the warp's 16 keys x the tile's queries (n8 tiles).
    float dc_s[$(NQT)][4], dc_dp[$(NQT)][4];
    DC_UNROLL
    for (int dc_j = 0; dc_j < $(NQT); ++dc_j)
      for (int dc_i = 0; dc_i < 4; ++dc_i) dc_s[dc_j][dc_i] = dc_dp[dc_j][dc_i] = 0.f;
    $(KV_S)
    $(KV_DP)
    $(KV_PROBS)
    // dV += P^T dO, dK^T += dS^T Q (scaled at the store): k = the tile's queries.
    $(KV_DV)
    $(KV_DK)
  }
  $(STORE_DK)
  $(STORE_DV)
}
DC_EXPORT_KERNEL(dc_attention_backward_mma_kv)

extern "C" __global__ void DC_LAUNCH_BOUNDS($(Q_THREADS)) dc_attention_backward_mma_q($(PARAMS)) {
  $(PROLOGUE)
  // A query block: warp w owns queries i0 + 16 w .. + 15, their dQ over every key tile.
  const dc_i64 dc_i0 = (dc_i64)blockIdx.x * $(BM);
  const int dc_qw = dc_warp * 16;
  dc_attn_bwd_mma_load_queries(dc_q, dc_o, dc_do, dc_lse_in, dc_qs, dc_dos, dc_drow, dc_lse, dc_i0, $(Q_THREADS));
  float dc_dq[$(NDK)][4];
  DC_UNROLL
  for (int dc_n = 0; dc_n < $(NDK); ++dc_n)
    for (int dc_i = 0; dc_i < 4; ++dc_i) dc_dq[dc_n][dc_i] = 0.f;
  for (dc_i64 dc_j0 = 0; dc_j0 < $(SK); dc_j0 += $(BN)) {
    __syncthreads();  // the previous key tile is used up
    dc_attn_bwd_mma_load_keys(dc_kt, dc_v, dc_ks, dc_vs, dc_j0, $(Q_THREADS));
    __syncthreads();
    // S = Q K^T and dP = dO V^T: the warp's 16 queries x the tile's keys (n8 tiles).
    float dc_s[$(NKT)][4], dc_dp[$(NKT)][4];
    DC_UNROLL
    for (int dc_j = 0; dc_j < $(NKT); ++dc_j)
      for (int dc_i = 0; dc_i < 4; ++dc_i) dc_s[dc_j][dc_i] = dc_dp[dc_j][dc_i] = 0.f;
    $(Q_S)
    $(Q_DP)
    $(Q_PROBS)
    // dQ += dS K (scaled at the store): k = the tile's keys.
    $(Q_DQ)
  }
  $(STORE_DQ)
}
DC_EXPORT_KERNEL(dc_attention_backward_mma_q)
)";

// Row (0..15) of accumulator dc_i in the warp's 16.
constexpr const char* kAccRow = "dc_g + 8 * (dc_i >> 1)";
// Column of accumulator dc_i of n8 tile dc_j.
constexpr const char* kAccCol = "dc_j * 8 + 2 * dc_t + (dc_i & 1)";

// `text` with the holes of `vars` and `more`, whose values may name holes of `vars`.
std::string expand_with(const char* text, TemplateVars vars, const TemplateVars& more) {
  for (const auto& [k, v] : more) vars[k] = expand_template(v, vars);
  return expand_template(text, vars);
}

}  // namespace

GeneratedKernel generate_attention_backward_mma(const Workload& w, const Variant& v) {
  DC_INTERNAL_CHECK(v.template_name == kAttentionBackwardTemplate, "attention_backward: variant ", v.key());
  const bool tf32 = v.precision == "tf32";
  DC_INTERNAL_CHECK(tf32 || v.precision == "fp16" || v.precision == "bf16",
                    "attention_backward: no tensor-core path for precision '", v.precision, "'");
  ValueEmitter ve(w.graph);
  TemplateVars vars = attention_backward_vars(w, ve);
  const WorkloadShape s = analyze_workload(w);
  const AttentionParams p = AttentionParams::of(v);
  const int64_t bm = p.block_m, bn = p.block_n, k_step = tf32 ? 8 : 16;
  DC_INTERNAL_CHECK(bm > 0 && bn > 0 && bm % 16 == 0 && bn % 16 == 0 && bm <= 128 && bn <= 128,
                    "attention_backward: bad tensor-core parameters in ", v.key());
  const AttentionBackwardMmaLayout L = attention_backward_mma_layout(s, v.precision, bm, bn);
  for (const auto& [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"BM", bm}, {"BN", bn}, {"KSTEP", k_step}, {"DP", L.dp}, {"DVP", L.dvp}, {"LDQ", L.ldq}, {"LDK", L.ldk},
           {"LDV", L.ldv}, {"NDK", L.dp / 8}, {"NDV", L.dvp / 8}, {"NQT", bm / 8}, {"NKT", bn / 8},
           {"KV_THREADS", L.kv_threads}, {"Q_THREADS", L.q_threads}})
    vars[name] = str(value);
  vars["MMA"] = tf32 ? "dc_mma_m16n8k8_tf32" : v.precision == "fp16" ? "dc_mma_m16n8k16_f16" : "dc_mma_m16n8k16_bf16";
  vars["PACK"] = v.precision == "fp16" ? "dc_pack_f16x2" : "dc_pack_bf16x2";
  // A k step of P or dS from the accumulators: n8 tile kk (tf32), or tiles 2 kk and 2 kk + 1.
  vars["T0"] = tf32 ? "dc_kk" : "2 * dc_kk";
  vars["T1"] = tf32 ? "dc_kk" : "2 * dc_kk + 1";

  // The key launch: the warp's keys are the rows, the tile's queries the columns.
  vars["KV_S"] = expand_with(kProduct, vars, {{"KLEN", "$(DP)"}, {"A_BASE", "dc_ks + dc_kw * $(LDK)"},
                                              {"A_LD", "$(LDK)"}, {"NT", "$(NQT)"}, {"B_BASE", "dc_qs"},
                                              {"B_LD", "$(LDQ)"}, {"OUT", "dc_s"}});
  vars["KV_DP"] = expand_with(kProduct, vars, {{"KLEN", "$(DVP)"}, {"A_BASE", "dc_vs + dc_kw * $(LDV)"},
                                               {"A_LD", "$(LDV)"}, {"NT", "$(NQT)"}, {"B_BASE", "dc_dos"},
                                               {"B_LD", "$(LDV)"}, {"OUT", "dc_dp"}});
  vars["KV_PROBS"] = expand_with(kProbabilities, vars,
                                 {{"NT", "$(NQT)"}, {"ROW", kAccCol}, {"COL", std::string("dc_kw + ") + kAccRow}});
  vars["KV_DV"] = expand_with(kGradient, vars, {{"KLEN", "$(BM)"}, {"ACC_IN", "dc_s"}, {"NO", "$(NDV)"},
                                                {"B_BASE", "dc_dos"}, {"B_LD", "$(LDV)"}, {"OUT", "dc_dv"}});
  vars["KV_DK"] = expand_with(kGradient, vars, {{"KLEN", "$(BM)"}, {"ACC_IN", "dc_dp"}, {"NO", "$(NDK)"},
                                                {"B_BASE", "dc_qs"}, {"B_LD", "$(LDQ)"}, {"OUT", "dc_dk"}});
  // The query launch: the warp's queries are the rows, the tile's keys the columns.
  vars["Q_S"] = expand_with(kProduct, vars, {{"KLEN", "$(DP)"}, {"A_BASE", "dc_qs + dc_qw * $(LDQ)"},
                                             {"A_LD", "$(LDQ)"}, {"NT", "$(NKT)"}, {"B_BASE", "dc_ks"},
                                             {"B_LD", "$(LDK)"}, {"OUT", "dc_s"}});
  vars["Q_DP"] = expand_with(kProduct, vars, {{"KLEN", "$(DVP)"}, {"A_BASE", "dc_dos + dc_qw * $(LDV)"},
                                              {"A_LD", "$(LDV)"}, {"NT", "$(NKT)"}, {"B_BASE", "dc_vs"},
                                              {"B_LD", "$(LDV)"}, {"OUT", "dc_dp"}});
  vars["Q_PROBS"] = expand_with(kProbabilities, vars,
                                {{"NT", "$(NKT)"}, {"ROW", std::string("dc_qw + ") + kAccRow}, {"COL", kAccCol}});
  vars["Q_DQ"] = expand_with(kGradient, vars, {{"KLEN", "$(BN)"}, {"ACC_IN", "dc_dp"}, {"NO", "$(NDK)"},
                                               {"B_BASE", "dc_ks"}, {"B_LD", "$(LDK)"}, {"OUT", "dc_dq"}});
  // Stores, the gradients in their dtypes (dK^T and dQ scaled here).
  const std::string scaled = "dc_acc * " + vars["SCALE"];
  const auto store = [&](size_t out, const std::string& index, const std::string& value) {
    return attention_backward_store(w, ve, out, index, value);
  };
  const std::string d = vars["D"], dv = vars["DV"], sq = vars["SQ"], sk = vars["SK"];
  vars["STORE_DK"] = expand_with(
      kStore, vars,
      {{"NO", "$(NDK)"}, {"ROW", kAccRow}, {"OUT", "dc_dk"},
       {"LOCAL", "const dc_i64 dc_j = dc_j0 + dc_kw + dc_row;\nconst int dc_d = dc_col;"},
       {"GUARD", "dc_j < $(SK) && dc_d < $(D)"},
       {"STORE", store(1, fmt::format("(dc_b * {} + dc_d) * {} + dc_j", d, sk), scaled)}});
  vars["STORE_DV"] = expand_with(
      kStore, vars,
      {{"NO", "$(NDV)"}, {"ROW", kAccRow}, {"OUT", "dc_dv"},
       {"LOCAL", "const dc_i64 dc_j = dc_j0 + dc_kw + dc_row;\nconst int dc_e = dc_col;"},
       {"GUARD", "dc_j < $(SK) && dc_e < $(DV)"},
       {"STORE", store(2, fmt::format("(dc_b * {} + dc_j) * {} + dc_e", sk, dv), "dc_acc")}});
  vars["STORE_DQ"] = expand_with(
      kStore, vars,
      {{"NO", "$(NDK)"}, {"ROW", kAccRow}, {"OUT", "dc_dq"},
       {"LOCAL", "const dc_i64 dc_qi = dc_i0 + dc_qw + dc_row;\nconst int dc_d = dc_col;"},
       {"GUARD", "dc_qi < $(SQ) && dc_d < $(D)"},
       {"STORE", store(0, fmt::format("(dc_b * {} + dc_qi) * {} + dc_d", sq, d), scaled)}});
  vars["PROLOGUE"] = expand_template(kPrologue, vars);

  std::string source = source_header(w, v.template_name, v.key());
  source += fmt::format(
      "// attention backward on tensor cores ({}): batch {}, {} queries x {} keys, head dims {} / {} (padded {} / {})\n",
      v.precision, s.batch, s.m, s.n, s.k, s.dv, L.dp, L.dvp);
  source += expand_template(tf32 ? kTf32Fragments : kHalfFragments, vars) + expand_template(kLoads, vars) +
            expand_template(kKernels, vars);
  GeneratedKernel k = one_launch_kernel(w, v, std::move(source), "dc_attention_backward_mma_kv",
                                        {ceil_div(s.n, bn), s.batch, 1}, L.kv_threads, L.smem_bytes);
  Launch q = k.launches.front();
  q.kernel = "dc_attention_backward_mma_q";
  q.grid = {ceil_div(s.m, bm), s.batch, 1};
  q.block = {L.q_threads, 1, 1};
  k.launches.push_back(std::move(q));
  return k;
}

}  // namespace dc
