// "attention_fused": MatMul(Q, Kt) -> injective scale/mask -> Softmax(last axis) -> MatMul(P, V)
// (+ any fused epilogue) in one kernel with online softmax (one pass over the keys).
// A block owns block_m query rows of one batch*head: Q stays in shared memory; K and V
// stream through shared memory in tiles of block_n keys (two buffers when stages >= 2, the
// next tile loaded while the current one is used); the block_m x block_n score tile is
// computed register-blocked, scaled and masked through ValueEmitter (whatever injective ops
// the cluster holds between the two MatMuls), turned into probabilities against each row's
// running max, and accumulated into the output rows (registers), rescaled as the max grows.
// Kt may be a graph input or a Transpose of one inside the cluster (read as a strided view);
// Q, K and V use vector loads along a unit-stride dimension when alignment allows (f32
// storage); f16/bf16 storage is read element by element through dc_to_f32, outputs stored
// in their dtype. Matching, views, scale/mask and epilogue: template_attention_match.cpp.
// This is the precision "fp32" path (CUDA cores); tf32/fp16/bf16 variants go to the
// tensor-core template (template_attention_mma.cpp). docs/codegen.md.
#include <algorithm>

#include <fmt/format.h>

#include "generate.h"
#include "ir/error.h"
#include "template_attention_match.h"
#include "template_text.h"
#include "template_util.h"
#include "value_emitter.h"
#include "variant_params.h"

namespace dc {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

const char* kNegInf = "(-__int_as_float(0x7f800000))";

// One operand tile staged into shared memory: rows (queries or keys) x cols (head dim).
struct Tile {
  std::string name;           // "q", "k", "v"
  std::string tensor;         // what the MatMul reads (Q, Kt, V)
  int64_t rows = 0, cols = 0; // tile extent: block rows x full head dimension
  int64_t extent = 0;         // rows in the tensor (Sq or Sk)
  std::string row0;           // first row of the tile (C expression)
  std::string dst;            // shared-memory pointer; element (r, c) at dst[r * ld + c]
  int64_t ld = 0;
  bool transposed = false;    // the MatMul operand is [.., col, row] (Kt)
  // Strided view when the operand is memory (a graph input, or a Transpose of one):
  bool direct = false;
  std::string pointer;
  std::vector<int64_t> strides;  // per dim of `tensor` (0 for broadcast dims)
  int64_t vec = 1;
  bool vec_along_rows = false;
  DType dtype = DType::f32;    // storage type of the view
};

// The fp32 variant's figures: the score micro-tile, the softmax's threads per row, pitches.
struct Fp32Layout {
  int64_t bm = 0, bn = 0, threads = 0, stages = 0;
  int64_t vec = 1;                  // the widest operand load the variant allows
  int64_t tmr = 0, tnc = 0;         // score micro-tile per thread, rows and columns strided
  int64_t opt = 0;                  // output elements per thread
  int64_t grp = 0, groups = 0, row_iters = 0;  // softmax: threads per row, rows at once
  int64_t ldq = 0, ldk = 0, ldv = 0, lds = 0;
};

Fp32Layout fp32_layout(const AttentionMatch& am, const Variant& v) {
  Fp32Layout L;
  const AttentionParams p = AttentionParams::of(v);
  L.bm = p.block_m;
  L.bn = p.block_n;
  L.threads = p.threads;
  L.stages = std::clamp<int64_t>(p.stages, 1, 2);
  L.vec = std::max<int64_t>(1, p.vec);
  const int64_t bm = L.bm, bn = L.bn, threads = L.threads;
  DC_INTERNAL_CHECK(bm > 0 && bn > 0 && threads > 0 && threads % 32 == 0 && threads <= 1024 &&
                        (bm * bn) % threads == 0,
                    "attention_fused: bad parameters in ", v.key());
  // Score micro-tile per thread: tmr x tnc, near square, rows and columns strided.
  const int64_t spt = bm * bn / threads;
  int64_t tnc = 1;
  while (tnc * tnc * 4 <= spt) tnc *= 2;
  int64_t tmr = spt / tnc;
  while (tmr > bm) tmr /= 2, tnc *= 2;
  while (tnc > bn) tnc /= 2, tmr *= 2;
  DC_INTERNAL_CHECK(tmr * tnc == spt && bm % tmr == 0 && bn % tnc == 0,
                    "attention_fused: no score tiling for ", v.key());
  L.tmr = tmr;
  L.tnc = tnc;
  L.opt = ceil_div(bm * am.dv, threads);
  // Threads per row in the softmax pass (a power of two <= 32 dividing the block).
  int64_t grp = 1;
  while (grp < 32 && grp * 2 * bm <= threads) grp *= 2;
  L.grp = grp;
  L.groups = threads / grp;
  L.row_iters = ceil_div(bm, L.groups);
  L.ldq = am.d + 1;
  L.ldk = am.d + 1;
  L.ldv = am.dv + 1;
  L.lds = bn + 1;
  return L;
}

Tile tile(const char* name, const std::string& tensor, int64_t rows, int64_t cols, int64_t extent, const char* row0,
          const char* dst, int64_t ld, bool transposed) {
  Tile t;
  t.name = name;
  t.tensor = tensor;
  t.rows = rows;
  t.cols = cols;
  t.extent = extent;
  t.row0 = row0;
  t.dst = dst;
  t.ld = ld;
  t.transposed = transposed;
  return t;
}

// The tile's strided view when its operand is memory, with vector loads (f32 storage)
// along whichever tile dimension has unit stride, at most `vec_param` wide.
void make_view(Tile& t, const Graph& g, const ValueEmitter& ve, int64_t vec_param) {
  const AttentionView view = attention_view(g, ve, t.tensor);
  if (!view.direct) return;
  t.direct = true;
  t.pointer = view.pointer;
  t.strides = view.strides;
  t.dtype = view.dtype;
  const std::vector<int64_t>& strides = t.strides;
  const size_t r = strides.size();
  const size_t row_dim = t.transposed ? r - 1 : r - 2, col_dim = t.transposed ? r - 2 : r - 1;
  int64_t vec = t.dtype == DType::f32 ? vec_param : 1;
  for (; vec > 1; vec /= 2) {
    bool ok = true;
    size_t unit = strides[col_dim] == 1 ? col_dim : strides[row_dim] == 1 ? row_dim : r;
    if (unit == r) {
      ok = false;
    } else {
      for (size_t i = 0; i < r; ++i)
        if (i != unit && strides[i] % vec != 0) ok = false;
      if (unit == col_dim && t.cols % vec != 0) ok = false;
      if (unit == row_dim && (t.rows % vec != 0 || t.extent % vec != 0)) ok = false;
    }
    if (ok) {
      t.vec_along_rows = unit == row_dim;
      break;
    }
  }
  t.vec = vec;
}

// Shared-memory index of the tile's element j of this thread's load.
std::string tile_dst(const Tile& t, int64_t j) {
  return t.vec_along_rows ? fmt::format("(dc_r + {}) * {} + dc_c", j, t.ld) : fmt::format("dc_r * {} + dc_c + {}", t.ld, j);
}

// What one thread's load of a tile element (or vector) does: through ValueEmitter element by
// element (f16/bf16 read with dc_to_f32), or a float2/float4 load.
std::string tile_load_body(const Tile& t, const AttentionMatch& am, ValueEmitter& ve) {
  std::string body;
  if (t.vec == 1) {
    ve.reset_locals();
    const auto coords = t.transposed ? am.with_batch({"dc_c", "dc_gr"}) : am.with_batch({"dc_gr", "dc_c"});
    const std::string val = ve.value_dedented(t.tensor, coords, body);
    ve.reset_locals();
    body += fmt::format("{}[dc_r * {} + dc_c] = {};\n", t.dst, t.ld, val);
    return body;
  }
  const size_t r = t.strides.size();
  const int64_t rs = t.strides[t.transposed ? r - 1 : r - 2];
  const int64_t cs = t.strides[t.transposed ? r - 2 : r - 1];
  const std::string addr = fmt::format("dc_{}_base + dc_gr * {} + (dc_i64)dc_c * {}", t.name, rs, cs);
  body += fmt::format("const {} dc_x = *reinterpret_cast<const {}*>({} + {});\n", t.vec == 4 ? "float4" : "float2",
                      t.vec == 4 ? "float4" : "float2", t.pointer, addr);
  const char* comp[] = {"x", "y", "z", "w"};
  for (int64_t j = 0; j < t.vec; ++j) body += fmt::format("{}[{}] = dc_x.{};\n", t.dst, tile_dst(t, j), comp[j]);
  return body;
}

// Load phase: one tile into shared memory, zero rows past the end of the tensor.
std::string load_tile(const Tile& t, const AttentionMatch& am, ValueEmitter& ve, int64_t threads) {
  TemplateVars vars = {{"NAME", t.name}, {"THREADS", str(threads)}, {"ROW0", t.row0},
                       {"EXTENT", str(t.extent)}, {"DST", t.dst}, {"LD", str(t.ld)},
                       {"VEC", str(t.vec)}};
  vars["TOTAL"] = str(t.rows * t.cols / t.vec);
  if (t.vec_along_rows) {
    vars["R"] = fmt::format("(dc_i % {}) * {}", t.rows / t.vec, t.vec);
    vars["C"] = fmt::format("dc_i / {}", t.rows / t.vec);
  } else {
    vars["R"] = fmt::format("dc_i / {}", t.cols / t.vec);
    vars["C"] = fmt::format("(dc_i % {}) * {}", t.cols / t.vec, t.vec);
  }
  std::string zero;
  for (int64_t j = 0; j < t.vec; ++j) zero += fmt::format("{}[{}] = 0.f;\n", t.dst, tile_dst(t, j));
  vars["BODY"] = tile_load_body(t, am, ve);
  vars["ZERO"] = zero;
  return expand_template(R"(    // $(NAME) tile: $(TOTAL) loads of $(VEC), zero rows past the end
    for (int dc_i = (int)threadIdx.x; dc_i < $(TOTAL); dc_i += $(THREADS)) {
      const int dc_r = $(R);
      const int dc_c = $(C);
      const dc_i64 dc_gr = $(ROW0) + dc_r;
      if (dc_gr < $(EXTENT)) {
        $(BODY)
      } else {
        $(ZERO)
      }
    }
)",
                         vars);
}

// The kernel, by phase: the two device functions a tensor-core version replaces (score
// micro-tile, O = O * alpha + P V), set-up and loads, per key tile the scores (scaled and
// masked) and the online softmax, then the normalised epilogue.
constexpr const char* kDeviceFunctions = R"(
// Score micro-tile of one thread: rows tr + i*RS, columns tc + j*CS of Q K^T (the part a
// tensor-core version replaces).
__device__ __forceinline__ void dc_attn_scores_fp32(const float* DC_RESTRICT dc_qs,
                                                    const float* DC_RESTRICT dc_ks,
                                                    float (&dc_s)[$(TMR)][$(TNC)], int dc_tr,
                                                    int dc_tc) {
  DC_UNROLL
  for (int dc_i = 0; dc_i < $(TMR); ++dc_i) {
    DC_UNROLL
    for (int dc_j = 0; dc_j < $(TNC); ++dc_j) dc_s[dc_i][dc_j] = 0.f;
  }
  for (int dc_d = 0; dc_d < $(D); ++dc_d) {
    float dc_fa[$(TMR)], dc_fb[$(TNC)];
    DC_UNROLL
    for (int dc_i = 0; dc_i < $(TMR); ++dc_i) dc_fa[dc_i] = dc_qs[(dc_tr + dc_i * $(RS)) * $(LDQ) + dc_d];
    DC_UNROLL
    for (int dc_j = 0; dc_j < $(TNC); ++dc_j) dc_fb[dc_j] = dc_ks[(dc_tc + dc_j * $(CS)) * $(LDK) + dc_d];
    DC_UNROLL
    for (int dc_i = 0; dc_i < $(TMR); ++dc_i) {
      DC_UNROLL
      for (int dc_j = 0; dc_j < $(TNC); ++dc_j)
        dc_s[dc_i][dc_j] = fmaf(dc_fa[dc_i], dc_fb[dc_j], dc_s[dc_i][dc_j]);
    }
  }
}

// O = O * alpha(row) + P V for the output elements this thread owns (the part a
// tensor-core version replaces).
__device__ __forceinline__ void dc_attn_pv_fp32(const float* DC_RESTRICT dc_ps,
                                                const float* DC_RESTRICT dc_vs,
                                                const float* DC_RESTRICT dc_alpha,
                                                float (&dc_o)[$(OPT)]) {
  DC_UNROLL
  for (int dc_i = 0; dc_i < $(OPT); ++dc_i) {
    const int dc_e = (int)threadIdx.x + dc_i * $(THREADS);
    if (dc_e < $(BM) * $(DV)) {
      const int dc_r = dc_e / $(DV), dc_col = dc_e % $(DV);
      float dc_acc = dc_o[dc_i] * dc_alpha[dc_r];
      for (int dc_c = 0; dc_c < $(BN); ++dc_c)
        dc_acc = fmaf(dc_ps[dc_r * $(LDS) + dc_c], dc_vs[dc_c * $(LDV) + dc_col], dc_acc);
      dc_o[dc_i] = dc_acc;
    }
  }
}

)";
constexpr const char* kKernel = R"(extern "C" __global__ void DC_LAUNCH_BOUNDS($(THREADS)) dc_attention($(PARAMS)) {
  DC_DYNAMIC_SMEM(float, dc_smem);
  // Shared memory: Q [BM][LDQ]; per stage a K tile [BN][LDK] and a V tile [BN][LDV];
  // scores/probabilities [BM][LDS]; per row the running max, running sum and the rescale
  // factor of the current key tile.
  float* dc_qs = dc_smem;
  float* dc_ks = dc_qs + $(Q_SMEM);
  float* dc_ss = dc_ks + $(STAGES) * $(KV_SMEM);
  float* dc_rmax = dc_ss + $(S_SMEM);
  float* dc_rsum = dc_rmax + $(BM);
  float* dc_ralpha = dc_rsum + $(BM);
  const dc_i64 dc_bz = blockIdx.y;
  const dc_i64 dc_q0 = (dc_i64)blockIdx.x * $(BM);
  $(SETUP)
  for (int dc_i = (int)threadIdx.x; dc_i < $(BM); dc_i += $(THREADS)) {
    dc_rmax[dc_i] = $(NEG_INF);
    dc_rsum[dc_i] = 0.f;
  }
  $(LOAD_Q)
  {
    const dc_i64 dc_j0 = 0;
    float* dc_kbuf = dc_ks;
    float* dc_vbuf = dc_kbuf + $(K_SMEM);
    $(LOAD_KV)
  }
  __syncthreads();
  const int dc_tc = (int)threadIdx.x % $(CS), dc_tr = (int)threadIdx.x / $(CS);
  const int dc_grp = (int)threadIdx.x / $(G), dc_gl = (int)threadIdx.x % $(G);
  float dc_o[$(OPT)];
  DC_UNROLL
  for (int dc_i = 0; dc_i < $(OPT); ++dc_i) dc_o[dc_i] = 0.f;
  for (int dc_jt = 0; dc_jt < $(NT); ++dc_jt) {
    const int dc_cur = $(CUR);
    const float* dc_kcur = dc_ks + dc_cur * $(KV_SMEM);
    const float* dc_vcur = dc_kcur + $(K_SMEM);
    $(NEXT_TILE)
    $(SCORES)
    $(ONLINE_SOFTMAX)
    __syncthreads();
    dc_attn_pv_fp32(dc_ss, dc_vcur, dc_ralpha, dc_o);
    __syncthreads();
    $(LOAD_AFTER)
  }
  DC_UNROLL
  for (int dc_i = 0; dc_i < $(OPT); ++dc_i) {
    const int dc_el = (int)threadIdx.x + dc_i * $(THREADS);
    const dc_i64 dc_qr = dc_q0 + dc_el / $(DV);
    const dc_i64 dc_e = dc_el % $(DV);
    if (dc_el < $(BM) * $(DV) && dc_qr < $(SQ)) {
      const float dc_h = dc_o[dc_i] / dc_rsum[dc_el / $(DV)];
      $(EPILOGUE)
    }
  }
  $(STORE_LSE)
}
DC_EXPORT_KERNEL(dc_attention)
)";
constexpr const char* kScores = R"(    // Scores of this key tile, scaled and masked; -inf outside the matrix.
    {
      float dc_s[$(TMR)][$(TNC)];
      dc_attn_scores_fp32(dc_qs, dc_kcur, dc_s, dc_tr, dc_tc);
      DC_UNROLL
      for (int dc_i = 0; dc_i < $(TMR); ++dc_i) {
        DC_UNROLL
        for (int dc_j = 0; dc_j < $(TNC); ++dc_j) {
          const int dc_r = dc_tr + dc_i * $(RS), dc_c = dc_tc + dc_j * $(CS);
          const dc_i64 dc_qr = dc_q0 + dc_r, dc_kc = (dc_i64)dc_jt * $(BN) + dc_c;
          float dc_val = $(NEG_INF);
          if (dc_qr < $(SQ) && dc_kc < $(SK)) {
            const float dc_sv = dc_s[dc_i][dc_j];
            $(SCORE_CODE)
            dc_val = $(SCORE);
          }
          dc_ss[dc_r * $(LDS) + dc_c] = dc_val;
        }
      }
    }
    __syncthreads();
)";
constexpr const char* kOnlineSoftmax = R"(    // Online softmax: $(G) threads per row update its max and sum, and exponentiate.
    for (int dc_it = 0; dc_it < $(ROW_ITERS); ++dc_it) {
      const int dc_r = dc_grp + dc_it * $(GROUPS);
      const bool dc_live = dc_r < $(BM);
      float dc_mx = $(NEG_INF);
      if (dc_live)
        for (int dc_c = dc_gl; dc_c < $(BN); dc_c += $(G)) dc_mx = fmaxf(dc_mx, dc_ss[dc_r * $(LDS) + dc_c]);
      $(SHUFFLE_MAX)
      const float dc_mold = dc_live ? dc_rmax[dc_r] : 0.f;
      const float dc_mnew = fmaxf(dc_mold, dc_mx);
      // A row with nothing but -inf so far keeps zero probabilities (no -inf - -inf).
      const float dc_muse = dc_mnew == $(NEG_INF) ? 0.f : dc_mnew;
      float dc_sum = 0.f;
      if (dc_live)
        for (int dc_c = dc_gl; dc_c < $(BN); dc_c += $(G)) {
          const float dc_p = expf(dc_ss[dc_r * $(LDS) + dc_c] - dc_muse);
          dc_ss[dc_r * $(LDS) + dc_c] = dc_p;
          dc_sum += dc_p;
        }
      $(SHUFFLE_SUM)
      if (dc_live && dc_gl == 0) {
        const float dc_a = expf(dc_mold - dc_muse);
        dc_ralpha[dc_r] = dc_a;
        dc_rsum[dc_r] = dc_rsum[dc_r] * dc_a + dc_sum;
        dc_rmax[dc_r] = dc_mnew;
      }
    }
)";

// The holes of every phase.
TemplateVars kernel_vars(const Workload& w, const AttentionMatch& am, const Fp32Layout& L, ValueEmitter& ve,
                         const Tile& tq, const Tile& tk, const Tile& tv) {
  // Block setup: batch coordinates and view base offsets.
  std::string setup = attention_batch_setup(am, "dc_bz");
  for (const Tile* t : {&tq, &tk, &tv})
    if (t->direct) setup += attention_view_base(am, AttentionView{true, t->pointer, t->strides, t->dtype}, t->name);
  // Scores: scale/mask through the cluster's injective ops; the epilogue.
  std::string score_code;
  const std::string score = attention_score(ve, am, "dc_sv", score_code);
  const std::string epi = attention_epilogue(ve, w, am, "dc_h");
  const int64_t q_smem = L.bm * L.ldq, k_smem = L.bn * L.ldk, v_smem = L.bn * L.ldv, s_smem = L.bm * L.lds;
  return {{"BM", str(L.bm)},         {"BN", str(L.bn)},         {"THREADS", str(L.threads)},
          {"D", str(am.d)},          {"DV", str(am.dv)},        {"SQ", str(am.sq)},
          {"SK", str(am.sk)},        {"LDQ", str(L.ldq)},       {"LDK", str(L.ldk)},
          {"LDV", str(L.ldv)},       {"LDS", str(L.lds)},       {"TMR", str(L.tmr)},
          {"TNC", str(L.tnc)},       {"RS", str(L.bm / L.tmr)}, {"CS", str(L.bn / L.tnc)},
          {"OPT", str(L.opt)},       {"G", str(L.grp)},         {"GROUPS", str(L.groups)},
          {"ROW_ITERS", str(L.row_iters)}, {"NT", str(ceil_div(am.sk, L.bn))},
          {"STAGES", str(L.stages)}, {"NEG_INF", kNegInf},
          {"CUR", L.stages > 1 ? "dc_jt & 1" : "0"},
          {"Q_SMEM", str(q_smem)},   {"KV_SMEM", str(k_smem + v_smem)},
          {"K_SMEM", str(k_smem)},   {"S_SMEM", str(s_smem)},
          {"PARAMS", kernel_params(w)}, {"SETUP", setup},
          {"LOAD_Q", load_tile(tq, am, ve, L.threads)},
          {"LOAD_KV", load_tile(tk, am, ve, L.threads) + load_tile(tv, am, ve, L.threads)},
          {"SCORE_CODE", score_code}, {"SCORE", score}, {"EPILOGUE", epi}};
}

// The softmax's shuffles over a row's threads, and the key-tile pipeline: with two stages
// the next tile is loaded into the other buffer while this one is used, else after it.
void pipeline_vars(TemplateVars& vars, const Fp32Layout& L) {
  vars["SHUFFLE_MAX"] = L.grp > 1 ? expand_template(R"(      DC_UNROLL
      for (int dc_off = $(G) / 2; dc_off > 0; dc_off >>= 1)
        dc_mx = fmaxf(dc_mx, __shfl_xor_sync(0xffffffffu, dc_mx, dc_off));
)",
                                                    vars)
                                  : "";
  vars["SHUFFLE_SUM"] = L.grp > 1 ? expand_template(R"(      DC_UNROLL
      for (int dc_off = $(G) / 2; dc_off > 0; dc_off >>= 1)
        dc_sum += __shfl_xor_sync(0xffffffffu, dc_sum, dc_off);
)",
                                                    vars)
                                  : "";
  vars["NEXT_TILE"] = L.stages >= 2 ? expand_template(R"(    // Next K/V tile into the other buffer while this one is used.
    if (dc_jt + 1 < $(NT)) {
      const dc_i64 dc_j0 = (dc_i64)(dc_jt + 1) * $(BN);
      float* dc_kbuf = dc_ks + (dc_cur ^ 1) * $(KV_SMEM);
      float* dc_vbuf = dc_kbuf + $(K_SMEM);
      $(LOAD_KV)
    }
)",
                                                      vars)
                                    : "";
  vars["LOAD_AFTER"] = L.stages >= 2 ? ""
                                     : expand_template(R"(    if (dc_jt + 1 < $(NT)) {
      const dc_i64 dc_j0 = (dc_i64)(dc_jt + 1) * $(BN);
      float* dc_kbuf = dc_ks;
      float* dc_vbuf = dc_kbuf + $(K_SMEM);
      $(LOAD_KV)
      __syncthreads();
    }
)",
                                                       vars);
}

}  // namespace

GeneratedKernel generate_attention(const Workload& workload, const Variant& v) {
  DC_INTERNAL_CHECK(v.template_name == "attention_fused", "attention_fused: variant ", v.key());
  const Workload w = expand_training_attention(workload);  // the training step's dc.Attention
  if (v.precision != "fp32") return generate_attention_mma(w, v);
  const Graph& g = w.graph;
  const AttentionMatch am = match_attention(w);
  const Fp32Layout L = fp32_layout(am, v);

  ValueEmitter ve(g);
  const int64_t vec_param = L.vec;
  Tile tq = tile("q", am.q, L.bm, am.d, am.sq, "dc_q0", "dc_qs", L.ldq, false);
  Tile tk = tile("k", am.kt, L.bn, am.d, am.sk, "dc_j0", "dc_kbuf", L.ldk, true);
  Tile tv = tile("v", am.v, L.bn, am.dv, am.sk, "dc_j0", "dc_vbuf", L.ldv, false);
  for (Tile* t : {&tq, &tk, &tv}) make_view(*t, g, ve, vec_param);

  TemplateVars vars = kernel_vars(w, am, L, ve, tq, tk, tv);
  pipeline_vars(vars, L);
  vars["SCORES"] = expand_template(kScores, vars);
  vars["ONLINE_SOFTMAX"] = expand_template(kOnlineSoftmax, vars);
  vars["STORE_LSE"] = am.lse.empty() ? "" : expand_template(R"(// Each row's log-sum-exp (the training step's backward reads it): -inf for a row masked entirely.
for (int dc_r = (int)threadIdx.x; dc_r < $(BM); dc_r += $(THREADS))
  if (dc_q0 + dc_r < $(SQ))
    $(LSE)[dc_bz * $(SQ) + dc_q0 + dc_r] = dc_rmax[dc_r] == $(NEG_INF) ? $(NEG_INF) : dc_rmax[dc_r] + logf(dc_rsum[dc_r]);
)", [&] { TemplateVars lv = vars; lv["LSE"] = ve.param_name(am.lse); return lv; }());

  std::string src = source_header(w, v.template_name, v.key());
  src += fmt::format("// attention: batch {}, {} queries x {} keys, head dims {} / {}\n", am.batch, am.sq, am.sk, am.d,
                     am.dv);
  src += expand_template(kDeviceFunctions, vars);
  src += expand_template(kKernel, vars);

  DC_INTERNAL_CHECK(am.batch <= 65535, "attention_fused: ", am.batch, " batch*heads exceed grid.y");
  const int64_t smem_floats = L.bm * L.ldq + L.stages * (L.bn * L.ldk + L.bn * L.ldv) + L.bm * L.lds + 3 * L.bm;
  return one_launch_kernel(w, v, std::move(src), "dc_attention", {ceil_div(am.sq, L.bm), am.batch, 1}, L.threads,
                           smem_floats * 4);
}

}  // namespace dc
