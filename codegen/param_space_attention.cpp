// Parameter spaces of fused attention ("attention_fused"): the CUDA-core fp32 template
// (template_attention.cpp) and the tensor-core FlashAttention-2 template for tf32, fp16 and
// bf16 (template_attention_mma.cpp). docs/estimator.md lists the choices.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "param_space.h"
#include "param_space_point.h"
#include "param_space_mma.h"

namespace dc {

namespace {

// Tensor-core attention variants estimated above this many registers are not offered:
// ptxas compiled every fitted variant estimated at 232 or less without spills, and most of
// those above 232 at 255 registers with 92 to 2,400 bytes of spills
// (docs/bench/compile-all.md).
constexpr int kMaxMmaAttentionRegs = 232;

// Fused attention registers, fitted to ptxas (docs/bench/registers.md). One key tile: the
// key loop runs once and the scores dominate. Tiles of <= 32 keys: the P.V loop over the
// tile is unrolled whole, and with two stages ptxas fills the file whatever the tile.
// Otherwise the output accumulators dominate. At most the launch bound below 255.
int attention_regs(int64_t scores_per_thread, int64_t out_per_thread, bool one_key_tile,
                   int64_t block_n, int64_t stages, int64_t threads) {
  int64_t demand = 43 + 5 * out_per_thread;
  if (one_key_tile) {
    demand = 32 + scores_per_thread;
  } else if (block_n <= 32) {
    demand = stages >= 2 ? 200 + out_per_thread : 32 + 8 * out_per_thread;
  }
  const int bound = launch_bounds_regs(threads);
  return static_cast<int>(bound < 255 ? std::min<int64_t>(demand, bound) : demand);
}

// Fused attention with online softmax on CUDA cores: a block owns block_m query rows of
// one (batch, head), keeps Q in shared memory, streams K and V in tiles of block_n keys
// (stages buffers each), and holds its rows' output accumulators and running max/sum in
// registers. Vector widths: 1 always, and the widest the operands' alignment allows (f32
// storage).
struct AttentionFp32Choices {
  std::vector<int64_t> block_m, block_n, threads = {64, 128, 256}, stages = {1, 2}, vec = {1};
};

AttentionFp32Choices attention_fp32_choices(const WorkloadShape& s) {
  AttentionFp32Choices c;
  c.block_m = tiles_up_to({16, 32, 64, 128}, s.m, 16);
  c.block_n = tiles_up_to({16, 32, 64, 128}, s.n, 16);
  if (s.vec_align > 1 && s.elem_bytes == 4) c.vec.push_back(s.vec_align);
  return c;
}

std::optional<Variant> attention_fp32_point(const WorkloadShape& s, const GpuSpec& gpu, const AttentionFp32Choices& c,
                                            const AttentionParams& p, std::string* why) {
  const int64_t bm = p.block_m, bn = p.block_n, threads = p.threads, dv = s.dv;
  if (!offered(c.block_m, bm, "block_m", why) || !offered(c.block_n, bn, "block_n", why) ||
      !offered(c.threads, threads, "threads", why) || !offered(c.stages, p.stages, "stages", why) ||
      !offered(c.vec, p.vec, "vec", why))
    return std::nullopt;
  if ((bm * bn) % threads != 0) return refuse(why, "the ", bm, "x", bn, " scores do not split over ", threads, " threads");
  const int64_t scores_per_thread = bm * bn / threads;
  const int64_t out_per_thread = ceil_div(bm * dv, threads);
  Variant v;
  v.template_name = family_template_name(Family::attention);
  write_params(p, kCudaCorePath, v);
  v.threads_per_block = static_cast<int>(threads);
  v.smem_bytes = (bm * s.k + p.stages * bn * (s.k + dv) + bm * bn) * 4 + (2 * bm + 2 * p.stages * bn) * kSmemPadBytes;
  v.regs_per_thread = attention_regs(scores_per_thread, out_per_thread, s.n <= bn, bn, p.stages, threads);
  v.grid_blocks = ceil_div(s.m, bm) * s.batch;
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

void enumerate_attention_fp32(const WorkloadShape& s, const GpuSpec& gpu, std::vector<Variant>& out) {
  const AttentionFp32Choices c = attention_fp32_choices(s);
  for (int64_t bm : c.block_m)
    for (int64_t bn : c.block_n)
      for (int64_t threads : c.threads)
        for (int64_t stages : c.stages)
          for (int64_t vec : c.vec) {
            AttentionParams p;
            p.block_m = bm, p.block_n = bn, p.threads = threads, p.stages = stages, p.vec = vec;
            if (auto v = attention_fp32_point(s, gpu, c, p, nullptr)) out.push_back(std::move(*v));
          }
}

// Split over key tiles only where the query blocks x heads leave most SMs idle (batch 1,
// short sequences): fewer blocks than half the SMs. Each doubling is tried while the grid
// before it still had fewer blocks than SMs, and every slice keeps at least one key tile.
std::vector<int64_t> split_kv_choices(int64_t blocks, int64_t key_tiles, const GpuSpec& gpu) {
  std::vector<int64_t> out = {1};
  if (2 * blocks >= gpu.sm_count) return out;
  for (int64_t sp : {2, 4, 8})
    if (sp <= key_tiles && blocks * (sp / 2) < gpu.sm_count) out.push_back(sp);
  return out;
}

// Tensor-core attention: warps of warp_m rows (one or two m16 tiles), 1 to 8 warps a block,
// key tiles of 16 to 128, 1 to 3 shared stages (cp.async ring), split_kv as above
// (split_kv_choices: per block tiling). mma.sync of these shapes needs sm_80; sm_70/72: fp16
// through mma.sync m8n8k4 (no cp.async ring deeper than 2, a per-warp P tile).
struct AttentionMmaChoices {
  bool available = false, volta = false;
  std::vector<int64_t> block_m, warp_m = {16, 32}, block_n, stages;
};

AttentionMmaChoices attention_mma_choices(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision) {
  AttentionMmaChoices c;
  c.volta = gpu.cc_major == 7 && gpu.cc_minor < 5;
  c.available = gpu.cc_major >= 8 || (c.volta && precision == "fp16");
  c.block_m = tiles_up_to({16, 32, 64, 128}, s.m, 16);
  c.block_n = tiles_up_to({16, 32, 64, 128}, s.n, 16);
  c.stages = c.volta ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 2, 3};
  return c;
}

std::optional<Variant> attention_mma_point(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                                           const AttentionMmaChoices& c, const AttentionParams& p, std::string* why) {
  if (!c.available) return refuse(why, "no ", precision, " tensor-core attention path on ", gpu.sm_arch());
  const int64_t bm = p.block_m, wm = p.warp_m, bn = p.block_n;
  if (!offered(c.block_m, bm, "block_m", why) || !offered(c.warp_m, wm, "warp_m", why) ||
      !offered(c.block_n, bn, "block_n", why) || !offered(c.stages, p.stages, "stages", why))
    return std::nullopt;
  if (bm % wm != 0 || bm / wm > 8) return refuse(why, "block_m=", bm, " is not 1 to 8 warps of ", wm, " rows");
  if ((p.m8n8k4 != 0) != c.volta)
    return refuse(why, "m8n8k4=", p.m8n8k4, " on ", gpu.sm_arch(), " (the path of sm_70 and sm_72)");
  const int64_t threads = bm / wm * 32;
  const int64_t key_tiles = ceil_div(s.n, bn);
  const int64_t blocks = ceil_div(s.m, bm) * s.batch;
  if (p.stages > key_tiles) return refuse(why, "stages=", p.stages, " for ", key_tiles, " key tiles buffers nothing");
  if (!offered(split_kv_choices(blocks, key_tiles, gpu), p.split_kv, "split_kv", why)) return std::nullopt;
  if (p.stages > ceil_div(key_tiles, p.split_kv))
    return refuse(why, "stages=", p.stages, " for the key tiles of a split_kv=", p.split_kv, " slice");
  const bool tf32 = precision == "tf32";
  const int64_t elem = tf32 ? 4 : 2, k_step = tf32 ? 8 : 16;
  const int64_t dp = ceil_div(s.k, k_step) * k_step;
  const int64_t dvp = ceil_div(s.dv, tf32 ? 8 : 16) * (tf32 ? 8 : 16);
  const int64_t pad = 16 / elem;
  Variant v;
  v.template_name = family_template_name(Family::attention);
  v.precision = precision;
  write_params(p, param_path(precision, c.volta), v);
  v.threads_per_block = static_cast<int>(threads);
  v.smem_bytes =
      (bm * (dp + pad) + p.stages * bn * (dp + dvp + 2 * pad) + (c.volta ? bm * (bn + 8) : 0)) * elem;
  v.regs_per_thread = c.volta ? attention_m8n8k4_regs(s, wm, bn, threads) : attention_mma_regs(s, precision, wm, bn, threads);
  // Above this estimate ptxas reaches 255 and mostly spills (the fit's data). Not on sm_70:
  // every kept m8n8k4 variant compiled without spills, up to 252 registers estimated 250
  // (BERT-base, registers.md); fits_gpu drops above 255.
  if (!c.volta && v.regs_per_thread > kMaxMmaAttentionRegs)
    return refuse(why, "estimated ", v.regs_per_thread, " registers, above the ", kMaxMmaAttentionRegs,
                  " tensor-core attention variants may take");
  v.grid_blocks = blocks * p.split_kv;
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

void enumerate_attention_mma(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                             std::vector<Variant>& out) {
  const AttentionMmaChoices c = attention_mma_choices(s, gpu, precision);
  if (!c.available) return;
  for (int64_t bm : c.block_m)
    for (int64_t wm : c.warp_m)
      for (int64_t bn : c.block_n)
        for (int64_t stages : c.stages)
          for (int64_t split : split_kv_choices(ceil_div(s.m, bm) * s.batch, ceil_div(s.n, bn), gpu)) {
            AttentionParams p;
            p.block_m = bm, p.warp_m = wm, p.block_n = bn, p.stages = stages, p.split_kv = split;
            p.m8n8k4 = c.volta ? 1 : 0;
            if (auto v = attention_mma_point(s, gpu, precision, c, p, nullptr)) out.push_back(std::move(*v));
          }
}

// FlashAttention-2's backward on CUDA cores (template_attention_backward.cpp): one launch of
// ceil(Sk / block_n) key blocks (dKt, dV) and ceil(Sq / block_m) query blocks (dQ) per batch,
// each streaming the other side's tiles through shared memory; its accumulators in registers.
// Choices: block_m and block_n of 16 to 64, 64 to 256 threads, a thread's tile thread_m x
// thread_n of 1, 2 or 4 (scores and gradients register-blocked: thread_m + thread_n shared
// loads per thread_m x thread_n multiply-adds).
struct AttentionBackwardChoices {
  std::vector<int64_t> block_m, block_n, threads = {64, 128, 256}, thread_m = {1, 2, 4}, thread_n = {1, 2, 4};
};

AttentionBackwardChoices attention_backward_choices(const WorkloadShape& s) {
  AttentionBackwardChoices c;
  c.block_m = tiles_up_to({16, 32, 64}, s.m, 16);
  c.block_n = tiles_up_to({16, 32, 64}, s.n, 16);
  return c;
}

// Accumulators a thread holds at most (ptxas keeps these arrays in registers).
constexpr int64_t kMaxBackwardAccumulators = 64;

// A thread's accumulators for an output of rows x cols in thread_m x thread_n cells
// (template_attention_backward.cpp's kAccumulate).
int64_t backward_accumulators(int64_t rows, int64_t cols, const AttentionParams& p) {
  return ceil_div(ceil_div(rows, p.thread_m) * ceil_div(cols, p.thread_n), p.threads) * p.thread_m * p.thread_n;
}

// attention_backward on tensor cores (template_attention_backward_mma.cpp): block_m and
// block_n of 16 to 64, one warp per 16 keys of a key block and per 16 queries of a query
// block; mma.sync m16n8k8 (tf32) and m16n8k16 (fp16, bf16) need sm_80.
std::optional<Variant> attention_backward_mma_point(const WorkloadShape& s, const GpuSpec& gpu,
                                                    const std::string& precision, const AttentionParams& p,
                                                    std::string* why) {
  if (precision != "tf32" && precision != "fp16" && precision != "bf16")
    return refuse(why, "attention_backward has no '", precision, "' path");
  if (gpu.cc_major < 8)
    return refuse(why, "no ", precision, " tensor-core attention_backward on ", gpu.sm_arch(), " (mma.sync needs sm_80)");
  const AttentionBackwardChoices c = attention_backward_choices(s);
  const int64_t bm = p.block_m, bn = p.block_n;
  if (!offered(c.block_m, bm, "block_m", why) || !offered(c.block_n, bn, "block_n", why)) return std::nullopt;
  const AttentionBackwardMmaLayout L = attention_backward_mma_layout(s, precision, bm, bn);
  Variant v;
  v.template_name = kAttentionBackwardTemplate;
  v.precision = precision;
  write_params(p, kAttentionBackwardMmaPath, v);
  // The larger of the two launches' blocks (the key launch's block_n / 16 warps, the query
  // launch's block_m / 16).
  v.threads_per_block = static_cast<int>(std::max(L.kv_threads, L.q_threads));
  v.smem_bytes = L.smem_bytes;
  // Registers of the larger launch: a lane's gradient accumulators (dK^T and dV: (dp + dvp)
  // / 2; dQ: dp / 2) held all along, plus per query (key launch: 1.9) or key (query launch:
  // 1.4) of the tile its S and dP accumulators and their fragments, plus 40. Fitted to ptxas
  // (NVRTC 13, sm_80 and sm_90) on BERT-base's 27 tensor-core variants: the larger launch
  // at most 3 registers above the estimate, at most 34 below
  // (CodegenAttentionBackward.TensorCoreVariantsOfBertBaseCompileForTheGpu).
  const double kv_demand = 40 + static_cast<double>(L.dp + L.dvp) / 2 + 1.9 * static_cast<double>(bm);
  const double q_demand = 40 + static_cast<double>(L.dp) / 2 + 1.4 * static_cast<double>(bn);
  const int bound = launch_bounds_regs(std::min(L.kv_threads, L.q_threads));
  const auto demand = static_cast<int64_t>(std::ceil(std::max(kv_demand, q_demand)));
  v.regs_per_thread = static_cast<int>(bound < 255 ? std::min<int64_t>(demand, bound) : demand);
  if (v.regs_per_thread > kMaxMmaAttentionRegs)
    return refuse(why, "estimated ", v.regs_per_thread, " registers, above the ", kMaxMmaAttentionRegs,
                  " tensor-core attention variants may take");
  v.grid_blocks = (ceil_div(s.n, bn) + ceil_div(s.m, bm)) * s.batch;
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

void enumerate_attention_backward_mma(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                                      std::vector<Variant>& out) {
  const AttentionBackwardChoices c = attention_backward_choices(s);
  for (int64_t bm : c.block_m)
    for (int64_t bn : c.block_n) {
      AttentionParams p;
      p.block_m = bm, p.block_n = bn;
      if (auto v = attention_backward_mma_point(s, gpu, precision, p, nullptr)) out.push_back(std::move(*v));
    }
}

std::optional<Variant> attention_backward_point(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                                                const AttentionParams& p, std::string* why) {
  if (precision != "fp32") return attention_backward_mma_point(s, gpu, precision, p, why);
  const AttentionBackwardChoices c = attention_backward_choices(s);
  const int64_t bm = p.block_m, bn = p.block_n, threads = p.threads;
  if (!offered(c.block_m, bm, "block_m", why) || !offered(c.block_n, bn, "block_n", why) ||
      !offered(c.threads, threads, "threads", why) || !offered(c.thread_m, p.thread_m, "thread_m", why) ||
      !offered(c.thread_n, p.thread_n, "thread_n", why))
    return std::nullopt;
  if (bm * bn / (p.thread_m * p.thread_n) < threads)
    return refuse(why, "the ", bm, "x", bn, " scores in ", p.thread_m, "x", p.thread_n, " tiles leave some of ", threads,
                  " threads idle");
  const int64_t kv_acc = backward_accumulators(s.k, bn, p) + backward_accumulators(bn, s.dv, p);
  const int64_t q_acc = backward_accumulators(bm, s.k, p);
  if (std::max(kv_acc, q_acc) > kMaxBackwardAccumulators)
    return refuse(why, "a thread would hold ", std::max(kv_acc, q_acc), " accumulators (at most ",
                  kMaxBackwardAccumulators, ")");
  Variant v;
  v.template_name = kAttentionBackwardTemplate;
  write_params(p, kCudaCorePath | kAttentionBackwardPath, v);
  v.threads_per_block = static_cast<int>(threads);
  v.smem_bytes = attention_backward_smem_bytes(s, bm, bn);
  // The accumulators, the scores' tile (S and dP) and the operands of one step.
  const int64_t tile = 2 * p.thread_m * p.thread_n + p.thread_m + p.thread_n;
  const int bound = launch_bounds_regs(threads);
  v.regs_per_thread =
      static_cast<int>(std::min<int64_t>(48 + std::max(kv_acc, q_acc) + tile, bound < 255 ? bound : 255));
  v.grid_blocks = (ceil_div(s.n, bn) + ceil_div(s.m, bm)) * s.batch;
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

void enumerate_attention_backward(const WorkloadShape& s, const GpuSpec& gpu, std::vector<Variant>& out) {
  const AttentionBackwardChoices c = attention_backward_choices(s);
  for (int64_t bm : c.block_m)
    for (int64_t bn : c.block_n)
      for (int64_t threads : c.threads)
        for (int64_t tm : c.thread_m)
          for (int64_t tn : c.thread_n) {
            AttentionParams p;
            p.block_m = bm, p.block_n = bn, p.threads = threads, p.thread_m = tm, p.thread_n = tn;
            if (auto v = attention_backward_point(s, gpu, "fp32", p, nullptr)) out.push_back(std::move(*v));
          }
}

bool attention_shape_ok(const WorkloadShape& s) {
  // Head dimensions above 256 get no fused variant (the separate GEMM/softmax clusters
  // cover them).
  return s.m > 0 && s.n > 0 && s.k > 0 && s.dv > 0 && s.k <= 256 && s.dv <= 256;
}

}  // namespace

int attention_mma_regs(const WorkloadShape& s, const std::string& precision, int64_t warp_m,
                       int64_t block_n, int64_t threads) {
  const bool tf32 = precision == "tf32";
  const int64_t k_step = tf32 ? 8 : 16;
  const int64_t mt = warp_m / 16;
  const int64_t q_frags = ceil_div(s.k, k_step) * 4;      // Q's A fragments, kept all along
  const int64_t scores = block_n / 8 * 4;                   // S accumulators
  const int64_t outs = ceil_div(s.dv, tf32 ? 8 : 16) * (tf32 ? 4 : 8);  // O accumulators
  const double demand = 37 + 1.17 * static_cast<double>(mt * (q_frags + scores + outs + 4));
  const int bound = launch_bounds_regs(threads);
  const int64_t regs = static_cast<int64_t>(std::ceil(demand));
  return static_cast<int>(bound < 255 ? std::min<int64_t>(regs, bound) : regs);
}

int attention_m8n8k4_regs(const WorkloadShape& s, int64_t warp_m, int64_t block_n, int64_t threads) {
  const int64_t mt = warp_m / 16;
  const int64_t fixed = ceil_div(s.k, 4) * 2 + ceil_div(s.dv, 16) * 8 + 4;  // Q, O, m and l
  const double demand = 53.3 + static_cast<double>(mt) * (0.43 * static_cast<double>(fixed) +
                                                          2.61 * static_cast<double>(block_n) / 2);
  const int bound = launch_bounds_regs(threads);
  const int64_t regs = std::lround(demand);
  return static_cast<int>(bound < 255 ? std::min<int64_t>(regs, bound) : regs);
}

int64_t attention_backward_smem_bytes(const WorkloadShape& s, int64_t block_m, int64_t block_n) {
  // Q and dO rows, K and V rows (each padded by one), P and dS tiles, D and LSE per row.
  return ((block_m + block_n) * (s.k + 1 + s.dv + 1) + 2 * block_m * (block_n + 1) + 2 * block_m) * 4;
}

AttentionBackwardMmaLayout attention_backward_mma_layout(const WorkloadShape& s, const std::string& precision,
                                                         int64_t block_m, int64_t block_n) {
  const int64_t k_step = precision == "tf32" ? 8 : 16;
  AttentionBackwardMmaLayout L;
  L.dp = ceil_div(s.k, k_step) * k_step;
  L.dvp = ceil_div(s.dv, k_step) * k_step;  // dV's n8 tiles and dP's k steps
  L.ldq = L.ldk = L.dp + 4;
  L.ldv = L.dvp + 4;
  L.kv_threads = block_n / 16 * 32;
  L.q_threads = block_m / 16 * 32;
  L.smem_bytes = (block_n * (L.ldk + L.ldv) + block_m * (L.ldq + L.ldv) + 2 * block_m) * 4;
  return L;
}

std::vector<Variant> enumerate_attention(const WorkloadShape& s, const GpuSpec& gpu,
                                         const std::vector<std::string>& precisions) {
  std::vector<Variant> out;
  if (!attention_shape_ok(s)) return out;
  for (const auto& p : precisions) {
    if (s.attention_backward) {
      if (p == "fp32") {
        enumerate_attention_backward(s, gpu, out);
      } else {
        enumerate_attention_backward_mma(s, gpu, p, out);
      }
    } else if (p == "fp32") {
      enumerate_attention_fp32(s, gpu, out);
    } else {
      enumerate_attention_mma(s, gpu, p, out);
    }
  }
  return out;
}

std::optional<Variant> attention_point(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                                       const AttentionParams& p, std::string* why) {
  if (!attention_shape_ok(s)) return refuse(why, "no fused attention for head dimensions ", s.k, " and ", s.dv);
  if (s.attention_backward) return attention_backward_point(s, gpu, precision, p, why);
  if (precision == "fp32") return attention_fp32_point(s, gpu, attention_fp32_choices(s), p, why);
  return attention_mma_point(s, gpu, precision, attention_mma_choices(s, gpu, precision), p, why);
}

}  // namespace dc
