// Parameter spaces of fused attention ("attention_fused"): the CUDA-core fp32 template
// (template_attention.cpp) and the tensor-core FlashAttention-2 template for tf32, fp16 and
// bf16 (template_attention_mma.cpp). docs/estimator.md lists the choices.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "param_space.h"
#include "param_space_mma.h"

namespace dc {

namespace {

// Tensor-core attention variants estimated above this many registers are not offered:
// ptxas compiled every fitted variant estimated at 232 or less without spills, and most of
// those above 232 at 255 registers with 92 to 2,400 bytes of spills
// (docs/bench/compile-all.md).
constexpr int kMaxMmaAttentionRegs = 232;

void keep_if_fits(std::vector<Variant>& out, Variant v, const GpuSpec& gpu) {
  if (fits_gpu(v, gpu)) out.push_back(std::move(v));
}

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
// registers.
void enumerate_attention_fp32(const WorkloadShape& s, const GpuSpec& gpu, std::vector<Variant>& out) {
  const int64_t dv = s.dv;
  // Vector widths: 1 always, and the widest the operands' alignment allows (f32 storage).
  std::vector<int64_t> vecs = {1};
  if (s.vec_align > 1 && s.elem_bytes == 4) vecs.push_back(s.vec_align);
  for (int64_t bm : tiles_up_to({16, 32, 64, 128}, s.m, 16))
    for (int64_t bn : tiles_up_to({16, 32, 64, 128}, s.n, 16))
      for (int64_t threads : {64, 128, 256}) {
        if ((bm * bn) % threads != 0) continue;
        const int64_t scores_per_thread = bm * bn / threads;
        const int64_t out_per_thread = ceil_div(bm * dv, threads);
        for (int64_t stages : {1, 2})
          for (int64_t vec : vecs) {
            Variant v;
            v.template_name = family_template_name(Family::attention);
            v.params = {{"block_m", bm},
                        {"block_n", bn},
                        {"threads", threads},
                        {"stages", stages},
                        {"vec", vec}};
            v.threads_per_block = static_cast<int>(threads);
            v.smem_bytes = (bm * s.k + stages * bn * (s.k + dv) + bm * bn) * 4 +
                           (2 * bm + 2 * stages * bn) * kSmemPadBytes;
            v.regs_per_thread =
                attention_regs(scores_per_thread, out_per_thread, s.n <= bn, bn, stages, threads);
            v.grid_blocks = ceil_div(s.m, bm) * s.batch;
            keep_if_fits(out, std::move(v), gpu);
          }
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
// key tiles of 16 to 128, 1 to 3 shared stages (cp.async ring), split_kv as above. mma.sync
// of these shapes needs sm_80.
void enumerate_attention_mma(const WorkloadShape& s, const GpuSpec& gpu,
                             const std::string& precision, std::vector<Variant>& out) {
  // sm_70/72: fp16 through mma.sync m8n8k4 (no cp.async ring deeper than 2, a per-warp P tile).
  const bool volta = gpu.cc_major == 7 && gpu.cc_minor < 5;
  if (gpu.cc_major < 8 && !(volta && precision == "fp16")) return;
  const bool tf32 = precision == "tf32";
  const int64_t elem = tf32 ? 4 : 2, k_step = tf32 ? 8 : 16;
  const int64_t dp = ceil_div(s.k, k_step) * k_step;
  const int64_t dvp = ceil_div(s.dv, tf32 ? 8 : 16) * (tf32 ? 8 : 16);
  const int64_t pad = 16 / elem;
  for (int64_t bm : tiles_up_to({16, 32, 64, 128}, s.m, 16))
    for (int64_t wm : {16, 32}) {
      if (bm % wm != 0 || bm / wm > 8) continue;
      const int64_t threads = bm / wm * 32;
      for (int64_t bn : tiles_up_to({16, 32, 64, 128}, s.n, 16)) {
        const int64_t key_tiles = ceil_div(s.n, bn);
        const int64_t blocks = ceil_div(s.m, bm) * s.batch;
        for (int64_t stages : {1, 2, 3}) {
          if (stages > key_tiles) continue;  // a ring longer than the keys buffers nothing
          if (volta && stages > 2) continue;
          for (int64_t split : split_kv_choices(blocks, key_tiles, gpu)) {
            if (stages > ceil_div(key_tiles, split)) continue;
            Variant v;
            v.template_name = family_template_name(Family::attention);
            v.precision = precision;
            v.params = {{"block_m", bm}, {"block_n", bn}, {"warp_m", wm},
                        {"stages", stages}, {"split_kv", split}};
            v.threads_per_block = static_cast<int>(threads);
            v.smem_bytes = (bm * (dp + pad) + stages * bn * (dp + dvp + 2 * pad) + (volta ? bm * (bn + 8) : 0)) * elem;
            if (volta) v.params["m8n8k4"] = 1;
            v.regs_per_thread = volta ? attention_m8n8k4_regs(s, wm, bn, threads)
                                      : attention_mma_regs(s, precision, wm, bn, threads);
            // Above this estimate ptxas reaches 255 and mostly spills (the fit's data). Not
            // on sm_70: every kept m8n8k4 variant compiled without spills, up to 252
            // registers estimated 250 (BERT-base, registers.md); fits_gpu drops above 255.
            if (!volta && v.regs_per_thread > kMaxMmaAttentionRegs) continue;
            v.grid_blocks = blocks * split;
            keep_if_fits(out, std::move(v), gpu);
          }
        }
      }
    }
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

std::vector<Variant> enumerate_attention(const WorkloadShape& s, const GpuSpec& gpu,
                                         const std::vector<std::string>& precisions) {
  std::vector<Variant> out;
  const int64_t d = s.k, dv = s.dv;
  // Head dimensions above 256 get no fused variant (the separate GEMM/softmax clusters
  // cover them).
  if (s.m <= 0 || s.n <= 0 || d <= 0 || dv <= 0 || d > 256 || dv > 256) return out;
  for (const auto& p : precisions) {
    if (p == "fp32") {
      enumerate_attention_fp32(s, gpu, out);
    } else {
      enumerate_attention_mma(s, gpu, p, out);
    }
  }
  return out;
}

}  // namespace dc
