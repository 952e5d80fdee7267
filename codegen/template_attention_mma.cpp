// "attention_fused" on tensor cores (Variant::precision tf32, fp16, bf16), FlashAttention-2
// style. A block owns block_m query rows of one batch*head; each of its warps owns warp_m
// (16 or 32) of those rows for the whole kernel, so the online softmax never leaves the
// warp (the four lanes of a quad share a row). Per key tile of block_n keys:
//   S = Q K^T      mma.sync, Q fragments loaded once into registers, K from shared memory;
//   scale/mask     ValueEmitter on the bound raw score (the cluster's injective ops), fp32;
//   softmax        running max m and sum l per row in fp32 registers, O rescaled;
//   O += P V       P taken from S's accumulator registers, converted to the math type.
// K and V tiles stream through a ring of `stages` shared buffers filled by 16-byte cp.async
// copies where the operand's memory allows it (else loaded and converted through registers).
// With split_kv > 1 the key tiles are divided between blockIdx.z slices that write their
// unnormalised O, m and l to scratch; a second launch merges them (log-sum-exp) and runs
// the epilogue. A training step's dc.Attention also writes each row's log-sum-exp (LSE). Matching, scale/mask and epilogue code: template_attention_match.cpp.
// Every tensor-core instruction is a prelude function. docs/codegen.md.
// On sm_70 (Variant param m8n8k4 = 1, fp16) the same kernel runs Volta's mma.sync m8n8k4:
// fragments of m16 x n16 (quad pair q on the 8x8 block (q & 1, q >> 1), dc_mma884_*), Q, K
// and V read from shared memory as f16 pairs (no ldmatrix), a row's scores spread over the
// lanes l ^ 2 and l ^ 8 (the row reductions shuffle over those), and P staged through a
// per-warp shared tile, since m8n8k4's accumulator layout is not its A layout.
#include <algorithm>

#include <fmt/format.h>

#include "ir/error.h"
#include "template_attention_match.h"
#include "template_text.h"
#include "template_util.h"
#include "variant_params.h"

namespace dc {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

const char* kNegInf = "(-__int_as_float(0x7f800000))";

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// How the math path keeps its operands: tf32 keeps fp32 bits in shared memory (rounded to
// tf32 when a fragment is read); fp16/bf16 keep the 16-bit type and read it with ldmatrix.
struct MathType {
  bool tf32 = false;
  DType smem = DType::f32;  // element type in shared memory
  int64_t elem_bytes = 4;
  int64_t k_step = 8;       // mma K: m16n8k8 (tf32), m16n8k16 (fp16/bf16)
  std::string mma;          // prelude function
  std::string pack;         // pair packing (fp16/bf16)
};

MathType math_type(const std::string& precision) {
  MathType t;
  if (precision == "tf32") {
    t.tf32 = true;
    t.mma = "dc_mma_m16n8k8_tf32";
  } else {
    DC_INTERNAL_CHECK(precision == "fp16" || precision == "bf16",
                      "attention_fused: no tensor-core path for precision '", precision, "'");
    const bool f16 = precision == "fp16";
    t.smem = f16 ? DType::f16 : DType::bf16;
    t.elem_bytes = 2;
    t.k_step = 16;
    t.mma = f16 ? "dc_mma_m16n8k16_f16" : "dc_mma_m16n8k16_bf16";
    t.pack = f16 ? "dc_pack_f16x2" : "dc_pack_bf16x2";
  }
  return t;
}

// One operand tile staged into shared memory: rows (queries or keys) x cols (head dim,
// padded to `padded_cols` with zeros).
struct StagedTile {
  std::string name;            // q, k, v
  std::string tensor;          // what the MatMul reads (Q, Kt, V)
  bool transposed = false;     // the tensor is [.., col, row] (Kt)
  int64_t rows = 0, cols = 0, padded_cols = 0, extent = 0, ld = 0;
  AttentionView view;
  bool async = false;          // 16-byte cp.async copies straight into the tile
};

// cp.async needs the bytes in memory to be the bytes in shared memory (storage type = the
// shared element type) and whole 16-byte chunks along the head dimension: unit stride
// there, every other stride and the head dimension multiples of a chunk.
bool async_ok(const StagedTile& t, const MathType& mt) {
  if (!t.view.direct || t.view.dtype != mt.smem) return false;
  const int64_t chunk = 16 / mt.elem_bytes;
  const size_t r = t.view.strides.size();
  const size_t col_dim = t.transposed ? r - 2 : r - 1;
  if (t.view.strides[col_dim] != 1 || t.cols % chunk != 0) return false;
  for (size_t i = 0; i < r; ++i)
    if (i != col_dim && t.view.strides[i] % chunk != 0) return false;
  return true;
}

// sm_70: S = Q K^T and O += P V through mma.sync m8n8k4 (16x16 fragments, k4 steps). Q and
// K rows are contiguous in the head dimension, so a lane's A (row th, k 0-3) and B (key
// th, k 0-3) are two adjacent f16 pairs; P goes through the warp's shared tile (row-major,
// keys contiguous) to reach the A layout; V's B (keys 0-3 of column th) is four halves.
void volta_attention_fragments(TemplateVars& vars, int64_t dp) {
  vars["QK4"] = str(dp / 4);
  vars["Q_FRAGS"] = "";
  vars["QK_MMA"] = expand_template(R"(DC_UNROLL
for (int dc_kk = 0; dc_kk < $(QK4); ++dc_kk) {
  unsigned dc_qa[$(MT)][2];
  DC_UNROLL
  for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
    const dc_half* dc_p = dc_qs + (dc_wrow + dc_mi * 16 + dc_br + dc_th) * $(LDQ) + dc_kk * 4;
    dc_qa[dc_mi][0] = (unsigned)dc_p[0].bits | ((unsigned)dc_p[1].bits << 16);
    dc_qa[dc_mi][1] = (unsigned)dc_p[2].bits | ((unsigned)dc_p[3].bits << 16);
  }
  DC_UNROLL
  for (int dc_j = 0; dc_j < $(SN); ++dc_j) {
    const dc_half* dc_p = dc_kcur + (dc_j * 16 + dc_bc + dc_th) * $(LDK) + dc_kk * 4;
    const unsigned dc_kb[2] = {(unsigned)dc_p[0].bits | ((unsigned)dc_p[1].bits << 16),
                               (unsigned)dc_p[2].bits | ((unsigned)dc_p[3].bits << 16)};
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) $(MMA)(dc_s[dc_mi][dc_j], dc_qa[dc_mi], dc_kb);
  }
}
)", vars);
  vars["PV_MMA"] = expand_template(R"(// P to this warp's shared tile, as f16, at the accumulators' (row, key).
dc_half* dc_ps = dc_kvs + $(P_SMEM) + dc_wrow * $(LDP);
DC_UNROLL
for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
  DC_UNROLL
  for (int dc_j = 0; dc_j < $(SN); ++dc_j) {
    DC_UNROLL
    for (int dc_i = 0; dc_i < 8; ++dc_i)
      dc_ps[(dc_mi * 16 + dc_br + dc_mma884_c_row(dc_lane, dc_i)) * $(LDP) + dc_j * 16 + dc_bc +
            dc_mma884_c_col(dc_lane, dc_i)] = dc_from_f32<dc_half>(dc_s[dc_mi][dc_j][dc_i]);
  }
}
__syncwarp();
DC_UNROLL
for (int dc_kk = 0; dc_kk < $(BN) / 4; ++dc_kk) {
  unsigned dc_pa[$(MT)][2];
  DC_UNROLL
  for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
    const dc_half* dc_p = dc_ps + (dc_mi * 16 + dc_br + dc_th) * $(LDP) + dc_kk * 4;
    dc_pa[dc_mi][0] = (unsigned)dc_p[0].bits | ((unsigned)dc_p[1].bits << 16);
    dc_pa[dc_mi][1] = (unsigned)dc_p[2].bits | ((unsigned)dc_p[3].bits << 16);
  }
  DC_UNROLL
  for (int dc_dn = 0; dc_dn < $(DN); ++dc_dn) {
    const dc_half* dc_p = dc_vcur + (dc_kk * 4) * $(LDV) + dc_dn * 16 + dc_bc + dc_th;
    const unsigned dc_vb[2] = {(unsigned)dc_p[0].bits | ((unsigned)dc_p[$(LDV)].bits << 16),
                               (unsigned)dc_p[2 * $(LDV)].bits | ((unsigned)dc_p[3 * $(LDV)].bits << 16)};
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) $(MMA)(dc_o[dc_mi][dc_dn], dc_pa[dc_mi], dc_vb);
  }
}
__syncwarp();  // every lane has read P before the next key tile writes it
)", vars);
}

// The figures of one variant that every phase below shares: tiles, pitches, the key-tile
// split, shared memory.
struct MmaLayout {
  int64_t bm = 0, bn = 0, wm = 0, stages = 0, threads = 0, mtiles = 0;
  bool volta = false;
  int64_t dp = 0, dvp = 0;  // head dims padded
  int64_t ldq = 0, ldk = 0, ldv = 0, ldp = 0;
  int64_t nt = 0, tiles_per_split = 0, splits = 0;
  int64_t q_smem = 0, k_smem = 0, v_smem = 0, p_smem = 0, smem_bytes = 0;
};

MmaLayout mma_layout(const AttentionMatch& am, const MathType& mt, const Variant& v) {
  MmaLayout L;
  const AttentionParams p = AttentionParams::of(v);
  L.bm = p.block_m;
  L.bn = p.block_n;
  L.wm = p.warp_m;
  L.volta = p.m8n8k4 != 0;
  DC_INTERNAL_CHECK(!L.volta || v.precision == "fp16", "attention_fused: m8n8k4 is fp16 only");
  L.stages = std::clamp<int64_t>(p.stages, 1, 4);
  DC_INTERNAL_CHECK(L.bm > 0 && L.bn > 0 && L.bn % 16 == 0 && (L.wm == 16 || L.wm == 32) && L.bm % L.wm == 0 &&
                        L.bm / L.wm <= 8,
                    "attention_fused: bad tensor-core parameters in ", v.key());
  L.threads = L.bm / L.wm * 32;
  L.mtiles = L.wm / 16;
  // Head dims padded: K steps of the QK^T mma; for fp16/bf16, V's columns in pairs of n8
  // tiles (one ldmatrix.x4.trans) and Q/K's in whole k16 steps.
  L.dp = round_up(am.d, mt.k_step);
  L.dvp = round_up(am.dv, mt.tf32 ? 8 : 16);
  // Row pitch: one 16-byte pad per row (docs/codegen.md: why this is conflict-free).
  const int64_t pad = 16 / mt.elem_bytes;
  L.ldq = L.dp + pad;
  L.ldk = L.dp + pad;
  L.ldv = L.dvp + pad;
  L.nt = ceil_div(am.sk, L.bn);
  L.tiles_per_split = ceil_div(L.nt, std::max<int64_t>(1, p.split_kv));
  L.splits = ceil_div(L.nt, L.tiles_per_split);  // no empty slice
  L.q_smem = L.bm * L.ldq;
  L.k_smem = L.bn * L.ldk;
  L.v_smem = L.bn * L.ldv;
  // Volta: each warp's P tile (warp_m x block_n f16, 8 halves of pad per row).
  L.ldp = L.bn + 8;
  L.p_smem = L.volta ? L.bm * L.ldp : 0;
  L.smem_bytes = (L.q_smem + L.stages * (L.k_smem + L.v_smem) + L.p_smem) * mt.elem_bytes;
  return L;
}

// A staged tile's row and column strides in memory (0, 0 when it is computed, not read).
std::pair<int64_t, int64_t> tile_strides(const StagedTile& t) {
  if (!t.view.direct) return {0, 0};
  const size_t r = t.view.strides.size();
  return {t.view.strides[t.transposed ? r - 1 : r - 2], t.view.strides[t.transposed ? r - 2 : r - 1]};
}

// Load phase, cp.async: 16-byte copies straight into the tile.
std::string load_tile_async(const StagedTile& t, const MathType& mt, TemplateVars vars) {
  const int64_t chunk = 16 / mt.elem_bytes, per_row = t.padded_cols / chunk;
  vars["TOTAL"] = str(t.rows * per_row);
  vars["PER_ROW"] = str(per_row);
  vars["CHUNK"] = str(chunk);
  vars["SRC"] = fmt::format("{} + dc_{}_base + dc_gr * {} + dc_c", t.view.pointer, t.name, tile_strides(t).first);
  vars["BASE"] = t.view.pointer;
  return expand_template(R"(// $(NAME) tile: 16-byte cp.async copies, zero-filled past the tensor
for (int dc_i = (int)threadIdx.x; dc_i < $(TOTAL); dc_i += $(THREADS)) {
  const int dc_r = dc_i / $(PER_ROW), dc_c = (dc_i % $(PER_ROW)) * $(CHUNK);
  const dc_i64 dc_gr = $(ROW0) + dc_r;
  const bool dc_ok = dc_gr < $(EXTENT) && dc_c < $(COLS);
  dc_cp_async_16($(DST) + dc_r * $(LD) + dc_c, dc_ok ? (const void*)($(SRC)) : (const void*)$(BASE), dc_ok);
}
)",
                         vars);
}

// Load phase through registers: element by element (converted to the shared type), rows
// fastest where the rows have unit stride in memory (coalesced), else columns fastest.
std::string load_tile_registers(const StagedTile& t, const MathType& mt, const AttentionMatch& am, ValueEmitter& ve,
                                TemplateVars vars) {
  const auto [rs, cs] = tile_strides(t);
  std::string val;
  std::string body;
  if (t.view.direct) {
    val = load_value(t.view.dtype, fmt::format("{}[dc_{}_base + dc_gr * {} + (dc_i64)dc_c * {}]",
                                               t.view.pointer, t.name, rs, cs));
  } else {
    ve.reset_locals();
    const auto coords = t.transposed ? am.with_batch({"dc_c", "dc_gr"}) : am.with_batch({"dc_gr", "dc_c"});
    val = ve.value_dedented(t.tensor, coords, body);
    ve.reset_locals();
  }
  vars["BODY"] = body;
  vars["VAL"] = val;
  vars["TOTAL"] = str(t.rows * t.padded_cols);
  const bool rows_fastest = t.view.direct && rs == 1;
  vars["R"] = rows_fastest ? fmt::format("dc_i % {}", t.rows) : fmt::format("dc_i / {}", t.padded_cols);
  vars["C"] = rows_fastest ? fmt::format("dc_i / {}", t.rows) : fmt::format("dc_i % {}", t.padded_cols);
  vars["STORE"] = store_value(mt.smem, "dc_x");
  return expand_template(R"(// $(NAME) tile through registers, zeros past the tensor
for (int dc_i = (int)threadIdx.x; dc_i < $(TOTAL); dc_i += $(THREADS)) {
  const int dc_r = $(R), dc_c = $(C);
  const dc_i64 dc_gr = $(ROW0) + dc_r;
  float dc_x = 0.f;
  if (dc_gr < $(EXTENT) && dc_c < $(COLS)) {
    $(BODY)
    dc_x = $(VAL);
  }
  $(DST)[dc_r * $(LD) + dc_c] = $(STORE);
}
)",
                         vars);
}

// Stage one tile (rows row0.., all padded columns) into `dst`: zeros past the tensor.
std::string load_tile(const StagedTile& t, const MathType& mt, const AttentionMatch& am, ValueEmitter& ve,
                      int64_t threads, const std::string& row0, const std::string& dst) {
  const TemplateVars vars = {{"NAME", t.name},          {"THREADS", str(threads)}, {"ROW0", row0},
                             {"EXTENT", str(t.extent)}, {"DST", dst},              {"LD", str(t.ld)},
                             {"COLS", str(t.cols)}};
  return t.async ? load_tile_async(t, mt, vars) : load_tile_registers(t, mt, am, ve, vars);
}

// Mma phase, fp16/bf16: fragments by ldmatrix (x4 covers two n8 tiles or a whole A tile).
void ldmatrix_fragments(TemplateVars& vars) {
  vars["Q_FRAGS"] = expand_template(R"(unsigned dc_qf[$(MT)][$(QK)][4];
DC_UNROLL
for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
  DC_UNROLL
  for (int dc_kk = 0; dc_kk < $(QK); ++dc_kk)
    dc_ldmatrix_x4(dc_qf[dc_mi][dc_kk], dc_qs + (dc_wrow + dc_mi * 16 + (dc_lane & 15)) * $(LDQ) + dc_kk * 16 + (dc_lane >> 4) * 8);
}
)", vars);
  // B of QK^T is K^T (k = head dim, n = key), "col": K's rows as stored. Matrices of one
  // x4: keys +0..7 / +8..15 (n8 tiles 2jp, 2jp+1) x head-dim halves.
  vars["QK_MMA"] = expand_template(R"(DC_UNROLL
for (int dc_kk = 0; dc_kk < $(QK); ++dc_kk) {
  DC_UNROLL
  for (int dc_jp = 0; dc_jp < $(SN) / 2; ++dc_jp) {
    unsigned dc_kf[4];
    dc_ldmatrix_x4(dc_kf, dc_kcur + (dc_jp * 16 + (dc_lane >> 4) * 8 + (dc_lane & 7)) * $(LDK) + dc_kk * 16 + ((dc_lane >> 3) & 1) * 8);
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
      $(MMA)(dc_s[dc_mi][2 * dc_jp], dc_qf[dc_mi][dc_kk], dc_kf);
      $(MMA)(dc_s[dc_mi][2 * dc_jp + 1], dc_qf[dc_mi][dc_kk], dc_kf + 2);
    }
  }
}
)", vars);
  // A of P V from S's accumulators (the C layout of two n8 tiles is the A layout of one
  // k16 step); B is V (k = key, n = head dim) read transposed: matrices keys +0..7 /
  // +8..15 x n8 tiles 2dp, 2dp+1.
  vars["PV_MMA"] = expand_template(R"(DC_UNROLL
for (int dc_kk = 0; dc_kk < $(PK); ++dc_kk) {
  unsigned dc_pa[$(MT)][4];
  DC_UNROLL
  for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
    dc_pa[dc_mi][0] = $(PACK)(dc_s[dc_mi][2 * dc_kk][0], dc_s[dc_mi][2 * dc_kk][1]);
    dc_pa[dc_mi][1] = $(PACK)(dc_s[dc_mi][2 * dc_kk][2], dc_s[dc_mi][2 * dc_kk][3]);
    dc_pa[dc_mi][2] = $(PACK)(dc_s[dc_mi][2 * dc_kk + 1][0], dc_s[dc_mi][2 * dc_kk + 1][1]);
    dc_pa[dc_mi][3] = $(PACK)(dc_s[dc_mi][2 * dc_kk + 1][2], dc_s[dc_mi][2 * dc_kk + 1][3]);
  }
  DC_UNROLL
  for (int dc_dp = 0; dc_dp < $(DN) / 2; ++dc_dp) {
    unsigned dc_vf[4];
    dc_ldmatrix_x4_trans(dc_vf, dc_vcur + (dc_kk * 16 + ((dc_lane >> 3) & 1) * 8 + (dc_lane & 7)) * $(LDV) + (2 * dc_dp + (dc_lane >> 4)) * 8);
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
      $(MMA)(dc_o[dc_mi][2 * dc_dp], dc_pa[dc_mi], dc_vf);
      $(MMA)(dc_o[dc_mi][2 * dc_dp + 1], dc_pa[dc_mi], dc_vf + 2);
    }
  }
}
)", vars);
}

// Mma phase, tf32: one 32-bit shared load per element, rounded with cvt.rna.tf32.
void tf32_fragments(TemplateVars& vars) {
  vars["Q_FRAGS"] = expand_template(R"(unsigned dc_qf[$(MT)][$(QK)][4];
DC_UNROLL
for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
  const float* dc_qrow = dc_qs + (dc_wrow + dc_mi * 16 + dc_g) * $(LDQ) + dc_t;
  DC_UNROLL
  for (int dc_kk = 0; dc_kk < $(QK); ++dc_kk) {
    dc_qf[dc_mi][dc_kk][0] = dc_cvt_rna_tf32(dc_qrow[dc_kk * 8]);
    dc_qf[dc_mi][dc_kk][1] = dc_cvt_rna_tf32(dc_qrow[8 * $(LDQ) + dc_kk * 8]);
    dc_qf[dc_mi][dc_kk][2] = dc_cvt_rna_tf32(dc_qrow[dc_kk * 8 + 4]);
    dc_qf[dc_mi][dc_kk][3] = dc_cvt_rna_tf32(dc_qrow[8 * $(LDQ) + dc_kk * 8 + 4]);
  }
}
)", vars);
  vars["QK_MMA"] = expand_template(R"(DC_UNROLL
for (int dc_kk = 0; dc_kk < $(QK); ++dc_kk) {
  DC_UNROLL
  for (int dc_j = 0; dc_j < $(SN); ++dc_j) {
    const float* dc_krow = dc_kcur + (dc_j * 8 + dc_g) * $(LDK) + dc_kk * 8 + dc_t;
    const unsigned dc_kf[2] = {dc_cvt_rna_tf32(dc_krow[0]), dc_cvt_rna_tf32(dc_krow[4])};
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) $(MMA)(dc_s[dc_mi][dc_j], dc_qf[dc_mi][dc_kk], dc_kf);
  }
}
)", vars);
  // m16n8k8's A wants P(row, k = t) and P(row, t + 4); a lane holds P(row, 2t) and
  // P(row, 2t + 1) of each n8 score tile. The sum over the 8 keys does not care about
  // their order, so logical k = t stands for key 2t and k = t + 4 for key 2t + 1, in A and
  // in B alike: no shuffles.
  vars["PV_MMA"] = expand_template(R"(DC_UNROLL
for (int dc_j = 0; dc_j < $(SN); ++dc_j) {
  unsigned dc_pa[$(MT)][4];
  DC_UNROLL
  for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
    dc_pa[dc_mi][0] = dc_cvt_rna_tf32(dc_s[dc_mi][dc_j][0]);
    dc_pa[dc_mi][1] = dc_cvt_rna_tf32(dc_s[dc_mi][dc_j][2]);
    dc_pa[dc_mi][2] = dc_cvt_rna_tf32(dc_s[dc_mi][dc_j][1]);
    dc_pa[dc_mi][3] = dc_cvt_rna_tf32(dc_s[dc_mi][dc_j][3]);
  }
  const float* dc_vrow = dc_vcur + (dc_j * 8 + 2 * dc_t) * $(LDV) + dc_g;
  DC_UNROLL
  for (int dc_dn = 0; dc_dn < $(DN); ++dc_dn) {
    const unsigned dc_vf[2] = {dc_cvt_rna_tf32(dc_vrow[dc_dn * 8]), dc_cvt_rna_tf32(dc_vrow[$(LDV) + dc_dn * 8])};
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) $(MMA)(dc_o[dc_mi][dc_dn], dc_pa[dc_mi], dc_vf);
  }
}
)", vars);
}

// The key-tile pipeline. stages 1: load, wait, use, barrier. stages >= 2: a ring; tile
// it + stages - 1 goes into the buffer tile it - 1 used (every warp has passed this
// iteration's barrier, so nobody reads it any more) while tile it is used.
void key_pipeline(TemplateVars& vars, int64_t stages) {
  if (stages == 1) {
    vars["PROLOGUE"] = "";
    vars["NEXT"] = expand_template(R"(if (dc_it > 0) __syncthreads();  // the previous tile is no longer read
{
  const dc_i64 dc_j0 = (dc_i64)dc_jt * $(BN);
  $(SMEM_T)* dc_kbuf = dc_kvs;
  $(SMEM_T)* dc_vbuf = dc_kbuf + $(K_SMEM);
  $(LOAD_KV)
}
dc_cp_async_commit();
dc_cp_async_wait<0>();
__syncthreads();
)", vars);
    return;
  }
  vars["PROLOGUE"] = expand_template(R"(for (int dc_p = 0; dc_p < $(STAGES) - 1; ++dc_p) {
  if (dc_jt0 + dc_p < dc_jt1) {
    const dc_i64 dc_j0 = (dc_i64)(dc_jt0 + dc_p) * $(BN);
    $(SMEM_T)* dc_kbuf = dc_kvs + dc_p * $(KV_SMEM);
    $(SMEM_T)* dc_vbuf = dc_kbuf + $(K_SMEM);
    $(LOAD_KV)
  }
  dc_cp_async_commit();  // one group per tile, empty or not: the wait counts stay uniform
}
)", vars);
  vars["NEXT"] = expand_template(R"(dc_cp_async_wait<$(WAIT_LOOP)>();  // this thread's copies of tile it have landed
__syncthreads();                      // everyone's; and tile it - 1's buffer is free
if (dc_jt + $(STAGES) - 1 < dc_jt1) {
  const dc_i64 dc_j0 = (dc_i64)(dc_jt + $(STAGES) - 1) * $(BN);
  $(SMEM_T)* dc_kbuf = dc_kvs + ((dc_it + $(STAGES) - 1) % $(STAGES)) * $(KV_SMEM);
  $(SMEM_T)* dc_vbuf = dc_kbuf + $(K_SMEM);
  $(LOAD_KV)
}
dc_cp_async_commit();
)", vars);
}

// End of the key loop: normalise and run the epilogue, or (split) write the partial state
// of this slice: O unnormalised, the row max m and the row sum l.
// A training step's forward also writes each row's log-sum-exp m + log l (LSE, "" if not),
// from the lane that holds the row's column 0; -inf for a row masked entirely.
void finish(TemplateVars& vars, int64_t splits, const std::string& lse) {
  if (splits == 1) {
    vars["STORE_LSE"] =
        lse.empty() ? ""
                    : expand_template(lse + R"([dc_bz * $(SQ) + dc_qr] = dc_m[dc_mi][dc_hf] == $(NEG_INF) ? $(NEG_INF) : dc_m[dc_mi][dc_hf] + logf(dc_lrow);)",
                                      vars);
    vars["FINISH"] = expand_template(R"(const float dc_h = dc_o[dc_mi][dc_dn][dc_oi] / dc_lrow;
$(EPILOGUE)
if (dc_e == 0) {
  $(STORE_LSE)
}
)", vars);
    return;
  }
  vars["FINISH"] = expand_template(R"(const dc_i64 dc_row = ((dc_i64)blockIdx.z * $(BATCH) + dc_bz) * $(SQ) + dc_qr;
scratch0[dc_row * $(DV) + dc_e] = dc_o[dc_mi][dc_dn][dc_oi];
if (dc_e == 0) {
  scratch1[dc_row * 2] = dc_m[dc_mi][dc_hf];
  scratch1[dc_row * 2 + 1] = dc_lrow;
}
)", vars);
}

// The main kernel, by phase: set-up, Q load and fragments; per key tile the pipeline,
// S = Q K^T, scale and mask, the online softmax, O += P V; then normalise and finish.
constexpr const char* kMainKernel = R"(
extern "C" __global__ void DC_LAUNCH_BOUNDS($(THREADS)) dc_attention_mma($(PARAMS)) {
  DC_DYNAMIC_SMEM($(SMEM_T), dc_smem);
  // Shared memory: Q [BM][LDQ], then per stage a K tile [BN][LDK] and a V tile [BN][LDV];
  // each row padded by 16 bytes.
  $(SMEM_T)* dc_qs = dc_smem;
  $(SMEM_T)* dc_kvs = dc_qs + $(Q_SMEM);
  const int dc_lane = (int)threadIdx.x & 31, dc_wrow = ((int)threadIdx.x >> 5) * $(WM);
  const int dc_g = dc_lane >> 2, dc_t = dc_lane & 3;  // mma fragment group and thread in group
  // m8n8k4: this lane's 8x8 block of a 16x16 fragment, and its thread in the quad pair.
  const int dc_br = dc_mma884_block_row(dc_lane), dc_bc = dc_mma884_block_col(dc_lane);
  const int dc_th = dc_mma884_thread(dc_lane);
  (void)dc_g;
  (void)dc_t;
  (void)dc_br;
  (void)dc_bc;
  (void)dc_th;
  const dc_i64 dc_bz = blockIdx.y;
  const dc_i64 dc_q0 = (dc_i64)blockIdx.x * $(BM);
  // Key tiles of this slice.
  const int dc_jt0 = (int)blockIdx.z * $(TPS);
  const int dc_jt1 = dc_jt0 + $(TPS) < $(NT) ? dc_jt0 + $(TPS) : $(NT);
  $(SETUP)
  $(LOAD_Q)
  dc_cp_async_commit();
  $(PROLOGUE)
  dc_cp_async_wait<$(WAIT_PRO)>();  // Q has landed
  __syncthreads();
  $(Q_FRAGS)
  // Per row (g and g + 8 of each m16 tile): running max m, this lane's part of the running
  // sum l (the quad adds its four parts at the end), output accumulators.
  float dc_m[$(MT)][2], dc_l[$(MT)][2], dc_o[$(MT)][$(DN)][$(ACC)];
  DC_UNROLL
  for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
    dc_m[dc_mi][0] = dc_m[dc_mi][1] = $(NEG_INF);
    dc_l[dc_mi][0] = dc_l[dc_mi][1] = 0.f;
    DC_UNROLL
    for (int dc_dn = 0; dc_dn < $(DN); ++dc_dn)
      for (int dc_i = 0; dc_i < $(ACC); ++dc_i) dc_o[dc_mi][dc_dn][dc_i] = 0.f;
  }
  for (int dc_jt = dc_jt0; dc_jt < dc_jt1; ++dc_jt) {
    const int dc_it = dc_jt - dc_jt0;
    $(NEXT)
    const $(SMEM_T)* dc_kcur = dc_kvs + (dc_it % $(STAGES)) * $(KV_SMEM);
    const $(SMEM_T)* dc_vcur = dc_kcur + $(K_SMEM);
    // S = Q K^T for this warp's rows and the tile's keys.
    float dc_s[$(MT)][$(SN)][$(ACC)];
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
      DC_UNROLL
      for (int dc_j = 0; dc_j < $(SN); ++dc_j)
        for (int dc_i = 0; dc_i < $(ACC); ++dc_i) dc_s[dc_mi][dc_j][dc_i] = 0.f;
    }
    $(QK_MMA)
    $(SCALE_MASK)
    $(ONLINE_SOFTMAX)
    // O += P V, P converted to the math type.
    $(PV_MMA)
  }
  $(NORMALISE)
}
DC_EXPORT_KERNEL(dc_attention_mma)
)";
constexpr const char* kScaleMask = R"(    // Scale and mask (fp32), -inf outside the matrix. Accumulator i of n8 tile j holds
    // row g + 8 (i / 2), key 8 j + 2 t + i % 2 (m8n8k4: the dc_mma884_c tables).
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
      DC_UNROLL
      for (int dc_j = 0; dc_j < $(SN); ++dc_j) {
        DC_UNROLL
        for (int dc_i = 0; dc_i < $(ACC); ++dc_i) {
          const dc_i64 dc_qr = dc_q0 + dc_wrow + dc_mi * 16 + $(ROW_I);
          const dc_i64 dc_kc = (dc_i64)dc_jt * $(BN) + $(COL_I);
          float dc_val = $(NEG_INF);
          if (dc_qr < $(SQ) && dc_kc < $(SK)) {
            const float dc_sv = dc_s[dc_mi][dc_j][dc_i];
            $(SCORE_CODE)
            dc_val = $(SCORE);
          }
          dc_s[dc_mi][dc_j][dc_i] = dc_val;
        }
      }
    }
)";
constexpr const char* kOnlineSoftmax = R"(    // Online softmax, per row: the new max m' = max(m, max_j s_j) over the quad; the
    // probabilities p_j = exp(s_j - m'); everything accumulated against the old max is
    // rescaled by alpha = exp(m - m'): l = l * alpha + sum_j p_j, O = O * alpha (+ P V
    // below). A row with nothing but -inf so far subtracts 0 instead (no -inf - -inf):
    // its p and alpha are 0.
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
      DC_UNROLL
      for (int dc_hf = 0; dc_hf < 2; ++dc_hf) {
        float dc_mx = $(NEG_INF);
        DC_UNROLL
        for (int dc_j = 0; dc_j < $(SN); ++dc_j) {
          DC_UNROLL
          for (int dc_e2 = 0; dc_e2 < $(EPR); ++dc_e2) dc_mx = fmaxf(dc_mx, dc_s[dc_mi][dc_j][$(ELEM)]);
        }
        dc_mx = fmaxf(dc_mx, __shfl_xor_sync(0xffffffffu, dc_mx, $(XOR1)));
        dc_mx = fmaxf(dc_mx, __shfl_xor_sync(0xffffffffu, dc_mx, $(XOR2)));
        const float dc_mnew = fmaxf(dc_m[dc_mi][dc_hf], dc_mx);
        const float dc_muse = dc_mnew == $(NEG_INF) ? 0.f : dc_mnew;
        const float dc_alpha = expf(dc_m[dc_mi][dc_hf] - dc_muse);
        dc_m[dc_mi][dc_hf] = dc_mnew;
        float dc_sum = 0.f;
        DC_UNROLL
        for (int dc_j = 0; dc_j < $(SN); ++dc_j) {
          DC_UNROLL
          for (int dc_e2 = 0; dc_e2 < $(EPR); ++dc_e2) {
            const float dc_p = expf(dc_s[dc_mi][dc_j][$(ELEM)] - dc_muse);
            dc_s[dc_mi][dc_j][$(ELEM)] = dc_p;
            dc_sum += dc_p;
          }
        }
        dc_l[dc_mi][dc_hf] = dc_l[dc_mi][dc_hf] * dc_alpha + dc_sum;
        DC_UNROLL
        for (int dc_dn = 0; dc_dn < $(DN); ++dc_dn) {
          DC_UNROLL
          for (int dc_e2 = 0; dc_e2 < $(EPR); ++dc_e2) dc_o[dc_mi][dc_dn][$(ELEM)] *= dc_alpha;
        }
      }
    }
)";
constexpr const char* kNormalise = R"(  DC_UNROLL
  for (int dc_mi = 0; dc_mi < $(MT); ++dc_mi) {
    DC_UNROLL
    for (int dc_hf = 0; dc_hf < 2; ++dc_hf) {
      float dc_lrow = dc_l[dc_mi][dc_hf];
      dc_lrow += __shfl_xor_sync(0xffffffffu, dc_lrow, $(XOR1));
      dc_lrow += __shfl_xor_sync(0xffffffffu, dc_lrow, $(XOR2));
      const dc_i64 dc_qr = dc_q0 + dc_wrow + dc_mi * 16 + $(ROW_HF);
      DC_UNROLL
      for (int dc_dn = 0; dc_dn < $(DN); ++dc_dn) {
        DC_UNROLL
        for (int dc_e2 = 0; dc_e2 < $(EPR); ++dc_e2) {
          const int dc_oi = $(ELEM);
          const dc_i64 dc_e = $(COL_E);
          if (dc_qr < $(SQ) && dc_e < $(DV)) {
            $(FINISH)
          }
        }
      }
    }
  }
)";

// The holes of the main kernel's phases.
TemplateVars main_vars(const Workload& w, const AttentionMatch& am, const MathType& mt, const MmaLayout& L,
                       ValueEmitter& ve, const StagedTile& tq, const StagedTile& tk, const StagedTile& tv) {
  std::string setup = attention_batch_setup(am, "dc_bz");
  for (const StagedTile* t : {&tq, &tk, &tv})
    if (t->view.direct) setup += attention_view_base(am, t->view, t->name);
  std::string score_code;
  const std::string score = attention_score(ve, am, "dc_sv", score_code);
  TemplateVars vars = {
      {"BM", str(L.bm)},         {"BN", str(L.bn)},           {"WM", str(L.wm)},
      {"MT", str(L.mtiles)},     {"THREADS", str(L.threads)}, {"SQ", str(am.sq)},
      {"SK", str(am.sk)},        {"DV", str(am.dv)},          {"LDQ", str(L.ldq)},
      {"LDK", str(L.ldk)},       {"LDV", str(L.ldv)},         {"NT", str(L.nt)},
      {"TPS", str(L.tiles_per_split)}, {"STAGES", str(L.stages)}, {"NEG_INF", kNegInf},
      {"Q_SMEM", str(L.q_smem)}, {"K_SMEM", str(L.k_smem)},   {"KV_SMEM", str(L.k_smem + L.v_smem)},
      {"SN", str(L.bn / (L.volta ? 16 : 8))}, {"DN", str(L.dvp / (L.volta ? 16 : 8))},
      {"QK", str(L.dp / mt.k_step)}, {"PK", str(L.bn / mt.k_step)}, {"SMEM_T", cuda_type(mt.smem)},
      {"MMA", mt.mma},           {"PACK", mt.pack},           {"SETUP", setup},
      {"SCORE_CODE", score_code}, {"SCORE", score},           {"EPILOGUE", attention_epilogue(ve, w, am, "dc_h")},
      {"BATCH", str(am.batch)},  {"WAIT_PRO", str(L.stages - 1)},
      {"WAIT_LOOP", str(std::max<int64_t>(0, L.stages - 2))},
      {"LOAD_Q", load_tile(tq, mt, am, ve, L.threads, "dc_q0", "dc_qs")},
      {"LOAD_KV", load_tile(tk, mt, am, ve, L.threads, "dc_j0", "dc_kbuf") +
                      load_tile(tv, mt, am, ve, L.threads, "dc_j0", "dc_vbuf")}};
  // Accumulators per fragment, the elements of one row half (dc_hf) among them, the lanes
  // that share a row, and (row, key/column) of accumulator dc_i.
  const bool volta = L.volta;
  vars["ACC"] = volta ? "8" : "4";
  vars["EPR"] = volta ? "4" : "2";
  vars["ELEM"] = volta ? "2 * dc_hf + (dc_e2 & 1) + (dc_e2 >> 1) * 4" : "2 * dc_hf + dc_e2";
  vars["XOR1"] = volta ? "2" : "1";
  vars["XOR2"] = volta ? "8" : "2";
  vars["ROW_I"] = volta ? "dc_br + dc_mma884_c_row(dc_lane, dc_i)" : "dc_g + 8 * (dc_i >> 1)";
  vars["COL_I"] = volta ? "dc_j * 16 + dc_bc + dc_mma884_c_col(dc_lane, dc_i)" : "dc_j * 8 + 2 * dc_t + (dc_i & 1)";
  vars["ROW_HF"] = volta ? "dc_br + dc_mma884_c_row(dc_lane, 2 * dc_hf)" : "dc_g + 8 * dc_hf";
  vars["COL_E"] = volta ? "dc_dn * 16 + dc_bc + dc_mma884_c_col(dc_lane, dc_oi)" : "dc_dn * 8 + 2 * dc_t + dc_e2";
  vars["P_SMEM"] = str(L.stages * (L.k_smem + L.v_smem));
  vars["LDP"] = str(L.ldp);
  vars["PARAMS"] = L.splits > 1 ? kernel_params(w, {"float* DC_RESTRICT scratch0", "float* DC_RESTRICT scratch1"})
                                : kernel_params(w);
  return vars;
}

// Split over key tiles: the combine launch, one thread per output element. O = sum_s
// exp(m_s - M) O_s / sum_s exp(m_s - M) l_s with M = max_s m_s (each slice's O_s and l_s
// are relative to its own max m_s).
GeneratedKernel split_kernel(const Workload& w, const Variant& v, const AttentionMatch& am, const MmaLayout& L,
                             const TemplateVars& vars, std::string src) {
  TemplateVars cv = {{"SPLITS", str(L.splits)}, {"BATCH", str(am.batch)}, {"SQ", str(am.sq)},
                     {"DV", str(am.dv)},        {"NEG_INF", kNegInf},     {"EPILOGUE", vars.at("EPILOGUE")},
                     {"SETUP", attention_batch_setup(am, "dc_bz")},
                     {"TOTAL", str(am.batch * am.sq * am.dv)},
                     {"PARAMS", vars.at("PARAMS")}};
  // M + log(sum_s exp(m_s - M) l_s): the row's log-sum-exp over every slice.
  cv["STORE_LSE"] = vars.at("LSE").empty() ? "" : vars.at("LSE") + "[dc_bz * " + str(am.sq) + " + dc_qr] = dc_mmax == " + kNegInf + " ? " + kNegInf + " : dc_mmax + logf(dc_lsum);";
  src += expand_template(R"(
extern "C" __global__ void DC_LAUNCH_BOUNDS(256) dc_attention_combine($(PARAMS)) {
  const dc_i64 dc_lin = (dc_i64)blockIdx.x * 256 + threadIdx.x;
  if (dc_lin >= $(TOTAL)) return;
  const dc_i64 dc_e = dc_lin % $(DV), dc_qr = dc_lin / $(DV) % $(SQ), dc_bz = dc_lin / $(DV) / $(SQ);
  $(SETUP)
  float dc_mmax = $(NEG_INF);
  for (int dc_sp = 0; dc_sp < $(SPLITS); ++dc_sp)
    dc_mmax = fmaxf(dc_mmax, scratch1[(((dc_i64)dc_sp * $(BATCH) + dc_bz) * $(SQ) + dc_qr) * 2]);
  const float dc_muse = dc_mmax == $(NEG_INF) ? 0.f : dc_mmax;
  float dc_lsum = 0.f, dc_osum = 0.f;
  for (int dc_sp = 0; dc_sp < $(SPLITS); ++dc_sp) {
    const dc_i64 dc_row = ((dc_i64)dc_sp * $(BATCH) + dc_bz) * $(SQ) + dc_qr;
    const float dc_wt = expf(scratch1[dc_row * 2] - dc_muse);
    dc_lsum += dc_wt * scratch1[dc_row * 2 + 1];
    dc_osum += dc_wt * scratch0[dc_row * $(DV) + dc_e];
  }
  const float dc_h = dc_osum / dc_lsum;
  $(EPILOGUE)
  if (dc_e == 0) {
    $(STORE_LSE)
  }
}
DC_EXPORT_KERNEL(dc_attention_combine)
)",
                         cv);
  GeneratedKernel k = start_kernel(w, v);
  k.source = std::move(src);
  const int scratch0 = static_cast<int>(k.buffers.size());
  k.buffers.push_back({"scratch0", BufferRole::scratch, DType::f32, {L.splits, am.batch, am.sq, am.dv}, false});
  k.buffers.push_back({"scratch1", BufferRole::scratch, DType::f32, {L.splits, am.batch, am.sq, 2}, false});
  std::vector<int> args = all_workload_args(w);
  args.push_back(scratch0);
  args.push_back(scratch0 + 1);
  Launch main_launch;
  main_launch.kernel = "dc_attention_mma";
  main_launch.grid = {ceil_div(am.sq, L.bm), am.batch, L.splits};
  main_launch.block = {L.threads, 1, 1};
  main_launch.dynamic_smem_bytes = L.smem_bytes;
  main_launch.args = args;
  Launch combine;
  combine.kernel = "dc_attention_combine";
  combine.grid = {grid_blocks(am.batch * am.sq * am.dv, 256), 1, 1};
  combine.block = {256, 1, 1};
  combine.args = args;
  k.launches = {main_launch, combine};
  return k;
}

}  // namespace

GeneratedKernel generate_attention_mma(const Workload& w, const Variant& v) {
  DC_INTERNAL_CHECK(v.template_name == "attention_fused", "attention_fused: variant ", v.key());
  const AttentionMatch am = match_attention(w);
  const MathType mt = math_type(v.precision);
  const MmaLayout L = mma_layout(am, mt, v);

  ValueEmitter ve(w.graph);
  StagedTile tq{"q", am.q, false, L.bm, am.d, L.dp, am.sq, L.ldq, {}, false};
  StagedTile tk{"k", am.kt, true, L.bn, am.d, L.dp, am.sk, L.ldk, {}, false};
  StagedTile tv{"v", am.v, false, L.bn, am.dv, L.dvp, am.sk, L.ldv, {}, false};
  for (StagedTile* t : {&tq, &tk, &tv}) {
    t->view = attention_view(w.graph, ve, t->tensor);
    t->async = async_ok(*t, mt);
  }
  TemplateVars vars = main_vars(w, am, mt, L, ve, tq, tk, tv);
  if (L.volta) {
    vars["MMA"] = "dc_mma_m8n8k4_f16";
    volta_attention_fragments(vars, L.dp);
  } else if (!mt.tf32) {
    ldmatrix_fragments(vars);
  } else {
    tf32_fragments(vars);
  }
  key_pipeline(vars, L.stages);
  vars["LSE"] = am.lse.empty() ? "" : ve.param_name(am.lse);
  finish(vars, L.splits, vars["LSE"]);
  vars["SCALE_MASK"] = expand_template(kScaleMask, vars);
  vars["ONLINE_SOFTMAX"] = expand_template(kOnlineSoftmax, vars);
  vars["NORMALISE"] = expand_template(kNormalise, vars);

  std::string src = source_header(w, v.template_name, v.key());
  src += fmt::format(
      "// attention on tensor cores ({}): batch {}, {} queries x {} keys, head dims {} / {} "
      "(padded {} / {}); Q {}, K {}, V {}{}\n",
      v.precision, am.batch, am.sq, am.sk, am.d, am.dv, L.dp, L.dvp,
      tq.async ? "cp.async" : "via registers", tk.async ? "cp.async" : "via registers",
      tv.async ? "cp.async" : "via registers",
      L.splits > 1 ? fmt::format("; {} key slices of {} tiles", L.splits, L.tiles_per_split) : "");
  src += expand_template(kMainKernel, vars);

  DC_INTERNAL_CHECK(am.batch <= 65535, "attention_fused: ", am.batch, " batch*heads exceed grid.y");
  if (L.splits == 1)
    return one_launch_kernel(w, v, std::move(src), "dc_attention_mma", {ceil_div(am.sq, L.bm), am.batch, 1},
                             L.threads, L.smem_bytes);
  return split_kernel(w, v, am, L, vars, std::move(src));
}

}  // namespace dc
