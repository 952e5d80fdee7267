// "attention_backward": FlashAttention-2's backward of the training step's fused attention,
// dc.AttentionGrad(Q, Kt, V, O, dO, LSE[, mask]) {scale} -> (dQ, dKt, dV) (ref/ops_attention.cpp),
// fp32 math on CUDA cores, deterministic (no atomics). Two launches of one kind of block each, per batch:
//  - a key block owns block_n keys: K and V rows stay in shared memory, the query tiles
//    stream past; per tile it recomputes S = Q Kt scale + mask and P = exp(S - LSE) from the
//    saved log-sum-exp, dP = dO V^T, dS = P (dP - D) with D = rowsum(dO * O) (the tile's
//    rows, computed as they load), and accumulates dV += P^T dO and dKt += scale Q^T dS in
//    registers;
//  - a query block owns block_m queries (Q, dO, D and LSE in shared memory), streams the key
//    tiles and accumulates dQ += scale dS K, recomputing the same P and dS.
// So no S x S matrix reaches memory, and every output element is written once by one block.
// Each block's P and dS tile lives in shared memory. Register-blocked: a thread owns
// thread_m x thread_n cells of the scores and of each gradient, so per step of a product it
// loads thread_m + thread_n operands from shared memory for thread_m x thread_n multiply-adds.
// Operands are read straight from memory (the workload's inputs, row-major, f32, f16 or
// bf16: the mixed-precision step's, read as float; outputs stored in their own dtypes; LSE
// f32); the mask with its broadcast strides. docs/training.md, "Attention backward".
// Variants of tf32, fp16 and bf16 go to the tensor-core path (template_attention_backward_mma.cpp),
// which shares the operands' loads, the mask and the stores (attention_backward_vars).
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "generate.h"
#include "ir/error.h"
#include "param_space.h"
#include "template_attention_backward.h"
#include "template_text.h"
#include "template_util.h"
#include "training_attention.h"
#include "value_emitter.h"
#include "variant_params.h"

namespace dc {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Shared tile computation: for the (query tile i0, key tile j0) pair, P and dS of every
// element into dc_ps / dc_dss ([BM][LDS]), 0 outside the sequences. D and LSE per query row
// are in dc_drow / dc_lse (LSE = -inf for a row masked entirely: P = 0).
constexpr const char* kDeviceFunctions = R"(
__device__ __forceinline__ void dc_attn_bwd_tile(const float* DC_RESTRICT dc_qs, const float* DC_RESTRICT dc_dos,
                                                 const float* DC_RESTRICT dc_ks, const float* DC_RESTRICT dc_vs,
                                                 const float* DC_RESTRICT dc_drow, const float* DC_RESTRICT dc_lse,
                                                 float* DC_RESTRICT dc_ps, float* DC_RESTRICT dc_dss,
                                                 const $(MASKT)* DC_RESTRICT dc_mask, dc_i64 dc_mbase,
                                                 dc_i64 dc_i0, dc_i64 dc_j0) {
  // A thread owns TM x TN scores, rows SRS apart and columns SCS apart (conflict-free shared
  // reads): per step of the dot products TM + TN loads for TM x TN multiply-adds.
  for (int dc_t = (int)threadIdx.x; dc_t < $(SRS) * $(SCS); dc_t += $(THREADS)) {
    const int dc_rb = dc_t / $(SCS), dc_cb = dc_t % $(SCS);
    float dc_sv[$(TM) * $(TN)], dc_dpv[$(TM) * $(TN)], dc_av[$(TM)], dc_bv[$(TN)];
    DC_UNROLL
    for (int dc_x = 0; dc_x < $(TM) * $(TN); ++dc_x) dc_sv[dc_x] = dc_dpv[dc_x] = 0.f;
    for (int dc_d = 0; dc_d < $(D); ++dc_d) {
      DC_UNROLL
      for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta) dc_av[dc_ta] = dc_qs[(dc_rb + dc_ta * $(SRS)) * $(LDQ) + dc_d];
      DC_UNROLL
      for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) dc_bv[dc_tb] = dc_ks[(dc_cb + dc_tb * $(SCS)) * $(LDQ) + dc_d];
      DC_UNROLL
      for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta)
        DC_UNROLL
        for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) dc_sv[dc_ta * $(TN) + dc_tb] = fmaf(dc_av[dc_ta], dc_bv[dc_tb], dc_sv[dc_ta * $(TN) + dc_tb]);
    }
    for (int dc_e = 0; dc_e < $(DV); ++dc_e) {
      DC_UNROLL
      for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta) dc_av[dc_ta] = dc_dos[(dc_rb + dc_ta * $(SRS)) * $(LDV) + dc_e];
      DC_UNROLL
      for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) dc_bv[dc_tb] = dc_vs[(dc_cb + dc_tb * $(SCS)) * $(LDV) + dc_e];
      DC_UNROLL
      for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta)
        DC_UNROLL
        for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) dc_dpv[dc_ta * $(TN) + dc_tb] = fmaf(dc_av[dc_ta], dc_bv[dc_tb], dc_dpv[dc_ta * $(TN) + dc_tb]);
    }
    DC_UNROLL
    for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta)
      DC_UNROLL
      for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) {
        const int dc_r = dc_rb + dc_ta * $(SRS), dc_c = dc_cb + dc_tb * $(SCS);
        const dc_i64 dc_gi = dc_i0 + dc_r, dc_gj = dc_j0 + dc_c;
        float dc_p = 0.f, dc_ds = 0.f;
        if (dc_gi < $(SQ) && dc_gj < $(SK)) {
          const float dc_s = dc_sv[dc_ta * $(TN) + dc_tb] * $(SCALE)$(MASK_TERM);
          const float dc_l = dc_lse[dc_r];
          dc_p = dc_l == $(NEG_INF) ? 0.f : expf(dc_s - dc_l);
          dc_ds = dc_p * (dc_dpv[dc_ta * $(TN) + dc_tb] - dc_drow[dc_r]);
        }
        dc_ps[dc_r * $(LDS) + dc_c] = dc_p;
        dc_dss[dc_r * $(LDS) + dc_c] = dc_ds;
      }
  }
}

// Query rows [i0, i0 + BM): Q and dO into shared memory, D = rowsum(dO * O) and LSE per row
// (rows past the sequence: zeros, P = 0 through dc_gi < SQ).
__device__ __forceinline__ void dc_attn_bwd_load_queries(const $(QT)* DC_RESTRICT dc_q, const $(OT)* DC_RESTRICT dc_o,
                                                         const $(DOT)* DC_RESTRICT dc_do, const float* DC_RESTRICT dc_lse_in,
                                                         float* DC_RESTRICT dc_qs, float* DC_RESTRICT dc_dos,
                                                         float* DC_RESTRICT dc_drow, float* DC_RESTRICT dc_lse,
                                                         dc_i64 dc_i0) {
  for (int dc_t = (int)threadIdx.x; dc_t < $(BM) * $(D); dc_t += $(THREADS)) {
    const int dc_r = dc_t / $(D), dc_d = dc_t % $(D);
    dc_qs[dc_r * $(LDQ) + dc_d] = dc_i0 + dc_r < $(SQ) ? $(LOAD_Q) : 0.f;
  }
  for (int dc_t = (int)threadIdx.x; dc_t < $(BM) * $(DV); dc_t += $(THREADS)) {
    const int dc_r = dc_t / $(DV), dc_e = dc_t % $(DV);
    dc_dos[dc_r * $(LDV) + dc_e] = dc_i0 + dc_r < $(SQ) ? $(LOAD_DO) : 0.f;
  }
  for (int dc_r = (int)threadIdx.x; dc_r < $(BM); dc_r += $(THREADS)) {
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

// Key rows [j0, j0 + BN): K (from Kt [D][SK]) and V into shared memory, zeros past the end.
__device__ __forceinline__ void dc_attn_bwd_load_keys(const $(KTT)* DC_RESTRICT dc_kt, const $(VT)* DC_RESTRICT dc_v,
                                                      float* DC_RESTRICT dc_ks, float* DC_RESTRICT dc_vs, dc_i64 dc_j0) {
  for (int dc_t = (int)threadIdx.x; dc_t < $(BN) * $(D); dc_t += $(THREADS)) {
    const int dc_d = dc_t / $(BN), dc_c = dc_t % $(BN);  // along Kt's rows: coalesced
    dc_ks[dc_c * $(LDQ) + dc_d] = dc_j0 + dc_c < $(SK) ? $(LOAD_KT) : 0.f;
  }
  for (int dc_t = (int)threadIdx.x; dc_t < $(BN) * $(DV); dc_t += $(THREADS)) {
    const int dc_c = dc_t / $(DV), dc_e = dc_t % $(DV);
    dc_vs[dc_c * $(LDV) + dc_e] = dc_j0 + dc_c < $(SK) ? $(LOAD_V) : 0.f;
  }
}

)";

// The batch's operands (block y is the batch): the pointers both paths' kernels start from,
// the hole BATCH_OPERANDS of attention_backward_vars.
constexpr const char* kBatchOperands = R"(const dc_i64 dc_b = blockIdx.y;
const $(QT)* dc_q = $(Q) + dc_b * $(SQ) * $(D);
const $(KTT)* dc_kt = $(KT) + dc_b * $(D) * $(SK);
const $(VT)* dc_v = $(V) + dc_b * $(SK) * $(DV);
const $(OT)* dc_o = $(O) + dc_b * $(SQ) * $(DV);
const $(DOT)* dc_do = $(DO) + dc_b * $(SQ) * $(DV);
const float* dc_lse_in = $(LSE) + dc_b * $(SQ);
const $(MASKT)* dc_mask = $(MASK);
const dc_i64 dc_mbase = $(MASK_BASE);
)";

// Both kernels start alike: shared memory and the batch's operands.
constexpr const char* kPrologue = R"(  DC_DYNAMIC_SMEM(float, dc_smem);
  // Shared memory: Q [BM][LDQ], dO [BM][LDV], K [BN][LDQ], V [BN][LDV], P and dS [BM][LDS],
  // D and LSE [BM].
  float* dc_qs = dc_smem;
  float* dc_dos = dc_qs + $(BM) * $(LDQ);
  float* dc_ks = dc_dos + $(BM) * $(LDV);
  float* dc_vs = dc_ks + $(BN) * $(LDQ);
  float* dc_ps = dc_vs + $(BN) * $(LDV);
  float* dc_dss = dc_ps + $(BM) * $(LDS);
  float* dc_drow = dc_dss + $(BM) * $(LDS);
  float* dc_lse = dc_drow + $(BM);
  $(BATCH_OPERANDS)
)";

// A register-blocked accumulation OUT[ROWS][COLS] += sum over k < KLEN of A(row, k) B(k, col):
// a thread owns cells of TM x TN outputs, rows RSTEP apart and columns CSTEP apart, and per k
// loads TM + TN values from shared memory. Cells past ROWS or COLS clamp their reads (their
// sums are never stored). The accumulators: ACC[slot][TM][TN].
constexpr const char* kAccumulate = R"(DC_UNROLL
for (int dc_i = 0; dc_i < $(SLOTS); ++dc_i) {
  const int dc_t = (int)threadIdx.x + dc_i * $(THREADS);
  if (dc_t < $(RSTEP) * $(CSTEP)) {
    const int dc_rb = dc_t / $(CSTEP), dc_cb = dc_t % $(CSTEP);
    int dc_rows[$(TM)], dc_cols[$(TN)];
    DC_UNROLL
    for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta) {
      const int dc_x = dc_rb + dc_ta * $(RSTEP);
      dc_rows[dc_ta] = dc_x < $(ROWS) ? dc_x : $(ROWS) - 1;
    }
    DC_UNROLL
    for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) {
      const int dc_x = dc_cb + dc_tb * $(CSTEP);
      dc_cols[dc_tb] = dc_x < $(COLS) ? dc_x : $(COLS) - 1;
    }
    for (int dc_k = 0; dc_k < $(KLEN); ++dc_k) {
      float dc_av[$(TM)], dc_bv[$(TN)];
      DC_UNROLL
      for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta) dc_av[dc_ta] = $(A);
      DC_UNROLL
      for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) dc_bv[dc_tb] = $(B);
      DC_UNROLL
      for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta)
        DC_UNROLL
        for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) {
          const int dc_x = (dc_i * $(TM) + dc_ta) * $(TN) + dc_tb;
          $(ACC)[dc_x] = fmaf(dc_av[dc_ta], dc_bv[dc_tb], $(ACC)[dc_x]);
        }
    }
  }
}
)";

// Its stores: each guarded by an early break and separate index checks (with two guards in one
// condition, t < n && j < SK, PoCL's CPU device once wrote past dKt's end in one tiling, block_m
// 32, block_n 16, 64 threads, which the host emulator ran correctly). dc_row and dc_col name
// the element, dc_acc its sum; LOCAL names it for the store, GUARD its global bound.
constexpr const char* kStore = R"(DC_UNROLL
for (int dc_i = 0; dc_i < $(SLOTS); ++dc_i) {
  const int dc_t = (int)threadIdx.x + dc_i * $(THREADS);
  if (dc_t >= $(RSTEP) * $(CSTEP)) break;
  const int dc_rb = dc_t / $(CSTEP), dc_cb = dc_t % $(CSTEP);
  DC_UNROLL
  for (int dc_ta = 0; dc_ta < $(TM); ++dc_ta) {
    const int dc_row = dc_rb + dc_ta * $(RSTEP);
    if (dc_row < $(ROWS)) {
      DC_UNROLL
      for (int dc_tb = 0; dc_tb < $(TN); ++dc_tb) {
        const int dc_col = dc_cb + dc_tb * $(CSTEP);
        if (dc_col < $(COLS)) {
          const float dc_acc = $(ACC)[(dc_i * $(TM) + dc_ta) * $(TN) + dc_tb];
          $(LOCAL)
          if ($(GUARD)) {
            $(STORE)
          }
        }
      }
    }
  }
}
)";

// Two launches, the key blocks then the query blocks.
constexpr const char* kKernels = R"(extern "C" __global__ void DC_LAUNCH_BOUNDS($(THREADS)) dc_attention_backward_kv($(PARAMS)) {
  $(PROLOGUE)
  // A key block: dV = P^T dO and dKt = scale Q^T dS over every query tile.
  const dc_i64 dc_j0 = (dc_i64)blockIdx.x * $(BN);
  dc_attn_bwd_load_keys(dc_kt, dc_v, dc_ks, dc_vs, dc_j0);
  float dc_dk[$(NK) * $(TM) * $(TN)], dc_dv[$(NV) * $(TM) * $(TN)];
  DC_UNROLL
  for (int dc_i = 0; dc_i < $(NK) * $(TM) * $(TN); ++dc_i) dc_dk[dc_i] = 0.f;
  DC_UNROLL
  for (int dc_i = 0; dc_i < $(NV) * $(TM) * $(TN); ++dc_i) dc_dv[dc_i] = 0.f;
  for (dc_i64 dc_i0 = 0; dc_i0 < $(SQ); dc_i0 += $(BM)) {
    __syncthreads();  // the previous tile's P and dS are used up
    dc_attn_bwd_load_queries(dc_q, dc_o, dc_do, dc_lse_in, dc_qs, dc_dos, dc_drow, dc_lse, dc_i0);
    __syncthreads();
    dc_attn_bwd_tile(dc_qs, dc_dos, dc_ks, dc_vs, dc_drow, dc_lse, dc_ps, dc_dss, dc_mask, dc_mbase, dc_i0, dc_j0);
    __syncthreads();
    // dKt[d][c] += Q[r][d] dS[r][c]; dV[c][e] += P[r][c] dO[r][e].
    $(ACC_DK)
    $(ACC_DV)
  }
  $(STORE_DK)
  $(STORE_DV)
}
DC_EXPORT_KERNEL(dc_attention_backward_kv)

extern "C" __global__ void DC_LAUNCH_BOUNDS($(THREADS)) dc_attention_backward_q($(PARAMS)) {
  $(PROLOGUE)
  // A query block: dQ = scale dS K over every key tile.
  const dc_i64 dc_i0 = (dc_i64)blockIdx.x * $(BM);
  dc_attn_bwd_load_queries(dc_q, dc_o, dc_do, dc_lse_in, dc_qs, dc_dos, dc_drow, dc_lse, dc_i0);
  float dc_dq[$(NQ) * $(TM) * $(TN)];
  DC_UNROLL
  for (int dc_i = 0; dc_i < $(NQ) * $(TM) * $(TN); ++dc_i) dc_dq[dc_i] = 0.f;
  for (dc_i64 dc_j0 = 0; dc_j0 < $(SK); dc_j0 += $(BN)) {
    __syncthreads();  // the previous key tile is used up
    dc_attn_bwd_load_keys(dc_kt, dc_v, dc_ks, dc_vs, dc_j0);
    __syncthreads();
    dc_attn_bwd_tile(dc_qs, dc_dos, dc_ks, dc_vs, dc_drow, dc_lse, dc_ps, dc_dss, dc_mask, dc_mbase, dc_i0, dc_j0);
    __syncthreads();
    // dQ[r][d] += dS[r][c] K[c][d].
    $(ACC_DQ)
  }
  $(STORE_DQ)
}
DC_EXPORT_KERNEL(dc_attention_backward_q)
)";

// One output's accumulation and store blocks (kAccumulate, kStore) over rows x cols, k < klen.
struct BlockedOutput {
  std::string acc, klen, a, b, local, guard, store;  // a and b: the operands of row dc_rows[dc_ta], column dc_cols[dc_tb]
};

void add_blocked(TemplateVars& vars, const std::string& acc_hole, const std::string& store_hole, const BlockedOutput& o,
                 int64_t rows, int64_t cols, int64_t tm, int64_t tn, int64_t threads, const std::string& slots_hole) {
  TemplateVars local = vars;
  const int64_t rstep = ceil_div(rows, tm), cstep = ceil_div(cols, tn);
  local["SLOTS"] = str(ceil_div(rstep * cstep, threads));
  local["RSTEP"] = str(rstep);
  local["CSTEP"] = str(cstep);
  local["ROWS"] = str(rows);
  local["COLS"] = str(cols);
  local["KLEN"] = expand_template(o.klen, vars);
  local["ACC"] = o.acc;
  local["A"] = expand_template(o.a, vars);
  local["B"] = expand_template(o.b, vars);
  local["LOCAL"] = o.local;
  local["GUARD"] = expand_template(o.guard, vars);
  local["STORE"] = o.store;
  vars[slots_hole] = local["SLOTS"];
  vars[acc_hole] = expand_template(kAccumulate, local);
  vars[store_hole] = o.store.empty() ? std::string() : expand_template(kStore, local);
}

bool is_output(const Graph& g, const std::string& t) {
  return std::find(g.outputs.begin(), g.outputs.end(), t) != g.outputs.end();
}

}  // namespace

TemplateVars attention_backward_vars(const Workload& w, ValueEmitter& ve) {
  const Graph& g = w.graph;
  DC_INTERNAL_CHECK(g.nodes.size() == 1 && g.nodes[0].op == "dc.AttentionGrad",
                    "attention_backward: the workload is not one dc.AttentionGrad");
  const Node& n = g.nodes[0];
  DC_INTERNAL_CHECK(n.inputs.size() >= 6 && n.outputs.size() == 3, "attention_backward: dc.AttentionGrad with ",
                    n.inputs.size(), " inputs and ", n.outputs.size(), " outputs");
  DC_INTERNAL_CHECK(is_attention_grad_on_template(w), "attention_backward: an operand is no workload input of ",
                    "f32, f16 or bf16, or the log-sum-exp is not f32");
  const WorkloadShape s = analyze_workload(w);
  DC_INTERNAL_CHECK(s.attention_backward, "attention_backward: not an attention backward workload");
  DC_INTERNAL_CHECK(s.batch <= 65535, "attention_backward: ", s.batch, " batch*heads exceed grid.y");
  const int64_t sq = s.m, sk = s.n, d = s.k, dv = s.dv;
  const double scale = n.attrs.get_float("scale", 1.f);
  TemplateVars vars = {{"SQ", str(sq)},          {"SK", str(sk)},         {"D", str(d)},
                       {"DV", str(dv)},          {"SCALE", float_literal(static_cast<float>(scale))},
                       {"NEG_INF", "(-__int_as_float(0x7f800000))"},
                       {"Q", ve.param_name(n.input(0))}, {"KT", ve.param_name(n.input(1))},
                       {"V", ve.param_name(n.input(2))}, {"O", ve.param_name(n.input(3))},
                       {"DO", ve.param_name(n.input(4))}, {"LSE", ve.param_name(n.input(5))}};
  // The mask's broadcast strides against the scores [B.., Sq, Sk]: its batch offset per
  // block (from the linear batch index) and its (row, column) strides in the tile.
  if (n.has_input(6)) {
    const Shape& ms = g.info(n.input(6)).shape;
    Shape scores = g.info(n.input(0)).shape;
    scores.back() = sk;
    const size_t r = scores.size();
    std::vector<int64_t> stride(r, 0);
    int64_t st = 1;
    for (size_t k = 0; k < ms.size(); ++k) {
      const size_t md = ms.size() - 1 - k, sd = r - 1 - k;
      DC_INTERNAL_CHECK(ms[md] == 1 || ms[md] == scores[sd], "attention_backward: mask ", shape_str(ms),
                        " does not broadcast to ", shape_str(scores));
      if (ms[md] != 1) stride[sd] = st;
      st *= ms[md];
    }
    std::string base = "(dc_i64)0";
    int64_t inner = 1;
    for (size_t k = r - 2; k-- > 0;) {
      if (stride[k] != 0) base += fmt::format(" + (dc_b / {} % {}) * {}", inner, scores[k], stride[k]);
      inner *= scores[k];
    }
    vars["MASK"] = ve.param_name(n.input(6));
    vars["MASK_BASE"] = base;
    vars["MASK_TERM"] = " + " + load_value(g.info(n.input(6)).dtype, fmt::format("dc_mask[dc_mbase + dc_gi * {} + dc_gj * {}]",
                                                                                   stride[r - 2], stride[r - 1]));
    vars["MASKT"] = cuda_type(g.info(n.input(6)).dtype);
  } else {
    vars["MASK"] = "(const float*)0";
    vars["MASKT"] = "float";
    vars["MASK_BASE"] = "(dc_i64)0";
    vars["MASK_TERM"] = "";
  }
  // Operands of any float storage, read as float (dc_to_f32 for f16/bf16).
  const auto operand = [&](const char* type, size_t i, const char* load, const std::string& index) {
    const DType dt = g.info(n.input(i)).dtype;
    vars[type] = cuda_type(dt);
    vars[load] = load_value(dt, fmt::format("dc_{}[{}]", std::array{"q", "kt", "v", "o", "do"}[i], index));
  };
  operand("QT", 0, "LOAD_Q", "(dc_i0 + dc_r) * $(D) + dc_d");
  operand("KTT", 1, "LOAD_KT", "(dc_i64)dc_d * $(SK) + dc_j0 + dc_c");
  operand("VT", 2, "LOAD_V", "(dc_j0 + dc_c) * $(DV) + dc_e");
  operand("OT", 3, "LOAD_O", "(dc_i0 + dc_r) * $(DV) + dc_e");
  operand("DOT", 4, "LOAD_DO", "(dc_i0 + dc_r) * $(DV) + dc_e");
  for (const char* load : {"LOAD_Q", "LOAD_KT", "LOAD_V", "LOAD_O", "LOAD_DO"}) vars[load] = expand_template(vars[load], vars);
  vars["PARAMS"] = kernel_params(w);
  vars["BATCH_OPERANDS"] = expand_template(kBatchOperands, vars);
  return vars;
}

std::string attention_backward_store(const Workload& w, const ValueEmitter& ve, size_t out, const std::string& index,
                                     const std::string& value) {
  const Graph& g = w.graph;
  const Node& n = g.nodes[0];
  if (!is_output(g, n.outputs[out])) return std::string();  // a gradient nothing reads
  return fmt::format("{}[{}] = {};", ve.param_name(n.outputs[out]), index, store_value(g.info(n.outputs[out]).dtype, value));
}

GeneratedKernel generate_attention_backward(const Workload& w, const Variant& v) {
  if (v.precision != "fp32") return generate_attention_backward_mma(w, v);
  check_variant(v, kAttentionBackwardTemplate, true);
  ValueEmitter ve(w.graph);
  TemplateVars vars = attention_backward_vars(w, ve);
  const WorkloadShape s = analyze_workload(w);
  const AttentionParams p = AttentionParams::of(v);
  const int64_t bm = p.block_m, bn = p.block_n, threads = p.threads, tm = p.thread_m, tn = p.thread_n;
  DC_INTERNAL_CHECK(bm > 0 && bn > 0 && threads > 0 && threads % 32 == 0 && tm > 0 && tn > 0 && bm % tm == 0 &&
                        bn % tn == 0,
                    "attention_backward: bad parameters in ", v.key());
  const int64_t sq = s.m, sk = s.n, d = s.k, dv = s.dv;
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, int64_t>>{{"BM", bm}, {"BN", bn}, {"THREADS", threads}, {"LDQ", d + 1},
                                                   {"LDV", dv + 1}, {"LDS", bn + 1}, {"NKB", ceil_div(sk, bn)},
                                                   {"TM", tm}, {"TN", tn}, {"SRS", bm / tm}, {"SCS", bn / tn}})
    vars[name] = str(value);
  const auto store = [&](size_t out, const std::string& index, const std::string& value) {
    return attention_backward_store(w, ve, out, index, value);
  };
  // The register-blocked outputs (kAccumulate, kStore): dKt [D][BN] and dV [BN][DV] of a key
  // block over its query tile's BM rows, dQ [BM][D] of a query block over the key tile's BN.
  const std::string scaled = "dc_acc * " + vars["SCALE"];
  add_blocked(vars, "ACC_DK", "STORE_DK",
              {"dc_dk", "$(BM)", "dc_qs[dc_k * $(LDQ) + dc_rows[dc_ta]]", "dc_dss[dc_k * $(LDS) + dc_cols[dc_tb]]",
               "const int dc_d = dc_row, dc_c = dc_col;\nconst dc_i64 dc_j = dc_j0 + dc_c;", "dc_j < $(SK)",
               store(1, fmt::format("(dc_b * {} + dc_d) * {} + dc_j", d, sk), scaled)},
              d, bn, tm, tn, threads, "NK");
  add_blocked(vars, "ACC_DV", "STORE_DV",
              {"dc_dv", "$(BM)", "dc_ps[dc_k * $(LDS) + dc_rows[dc_ta]]", "dc_dos[dc_k * $(LDV) + dc_cols[dc_tb]]",
               "const int dc_c = dc_row, dc_e = dc_col;\nconst dc_i64 dc_j = dc_j0 + dc_c;", "dc_j < $(SK)",
               store(2, fmt::format("(dc_b * {} + dc_j) * {} + dc_e", sk, dv), "dc_acc")},
              bn, dv, tm, tn, threads, "NV");
  add_blocked(vars, "ACC_DQ", "STORE_DQ",
              {"dc_dq", "$(BN)", "dc_dss[dc_rows[dc_ta] * $(LDS) + dc_k]", "dc_ks[dc_k * $(LDQ) + dc_cols[dc_tb]]",
               "const int dc_r = dc_row, dc_d = dc_col;\nconst dc_i64 dc_qi = dc_i0 + dc_r;", "dc_qi < $(SQ)",
               store(0, fmt::format("(dc_b * {} + dc_qi) * {} + dc_d", sq, d), scaled)},
              bm, d, tm, tn, threads, "NQ");
  vars["PROLOGUE"] = expand_template(kPrologue, vars);
  std::string source = source_header(w, v.template_name, v.key()) + expand_template(kDeviceFunctions, vars) +
                       expand_template(kKernels, vars);
  const int64_t smem = attention_backward_smem_bytes(s, bm, bn);
  GeneratedKernel k = one_launch_kernel(w, v, std::move(source), "dc_attention_backward_kv",
                                        {ceil_div(sk, bn), s.batch, 1}, threads, smem);
  Launch q = k.launches.front();
  q.kernel = "dc_attention_backward_q";
  q.grid = {ceil_div(sq, bm), s.batch, 1};
  k.launches.push_back(std::move(q));
  return k;
}

}  // namespace dc
