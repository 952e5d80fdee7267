// Parameter spaces of the GEMM-like templates: tiled GEMM and implicit-GEMM convolution
// (CUDA-core fp32 and tensor-core tf32/fp16/bf16 paths) and depthwise convolution (fused
// attention: param_space_attention.cpp). docs/estimator.md lists the choices and why they are bounded as they are.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "param_space.h"
#include "param_space_mma.h"

namespace dc {

namespace {

// tf32 tensor-core variants estimated above this many registers are not offered: the fit
// (gemm_tf32_regs) has an rmse of 22 registers, and over its data 560 of the 610 compiles
// that spilled were estimated above 200, against 864 of the 8,944 that did not (570 of
// those at 200-255 registers; docs/bench/registers.md, session 8).
constexpr int kMaxTf32Regs = 200;
// sm_70's m8n8k4 variants estimated above this are not offered: over the sm_70 kept matrix
// every spilling compile (BERT-base's GEMMs with f16 operands through registers) was
// estimated above 215, against 21 of 575 others, 19 of those at 230-254 registers.
constexpr int kMaxM8n8k4Regs = 215;

// Split-K only pays when K is long compared to the output (few output tiles to spread over
// the SMs, e.g. a classifier's GEMV or the last convolutions of a CNN): K >= 4 sqrt(M N batch).
// Each split still covers at least two K tiles of the largest block_k (64 elements), and
// split_useful() drops splits of tilings that already fill the GPU.
std::vector<int64_t> split_choices(const WorkloadShape& s) {
  std::vector<int64_t> out = {1};
  // A GLU epilogue needs both columns' complete sums in one thread: no split-K.
  if (s.glu) return out;
  const double out_elems =
      static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.batch);
  if (static_cast<double>(s.k) < 4.0 * std::sqrt(out_elems)) return out;
  for (int64_t sk : {2, 4, 8})
    if (ceil_div(s.k, sk) >= 64) out.push_back(sk);
  return out;
}

// A split doubles the blocks; it is worth trying only while the previous level left SMs
// idle (fewer blocks than SMs), so splits stop once the grid fills the GPU.
bool split_useful(int64_t tiles, int64_t split, const GpuSpec& gpu) {
  return split == 1 || tiles * (split / 2) < gpu.sm_count;
}

void keep_if_fits(std::vector<Variant>& out, Variant v, const GpuSpec& gpu) {
  if (fits_gpu(v, gpu)) out.push_back(std::move(v));
}

void enumerate_gemm_fp32(const WorkloadShape& s, const GpuSpec& gpu, std::vector<Variant>& out) {
  // 1 stage, 2 (register-staged double buffering), 3 (cp.async, sm_80+): a CUDA-core K
  // tile is long enough that a third buffer already covers the L2 latency.
  const bool async = gpu.cc_major >= 8;
  const std::vector<int64_t> stage_list =
      async ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{1, 2};
  const auto splits = split_choices(s);
  for (int64_t bm : tiles_up_to({16, 32, 64, 128, 256}, s.m, 16))
    for (int64_t bn : tiles_up_to({16, 32, 64, 128, 256}, s.n, 16))
      for (int64_t bk : tiles_up_to({8, 16, 32}, s.k, 8))
        for (int64_t tm : {2, 4, 8})
          for (int64_t tn : {2, 4, 8}) {
            if (tm > 2 * tn || tn > 2 * tm) continue;  // near-square thread tiles
            if (bm % tm != 0 || bn % tn != 0) continue;
            const int64_t threads = (bm / tm) * (bn / tn);
            if (threads < 32 || threads > 512 || threads % 32 != 0) continue;
            // A warp's 32 threads as 4x8 (or 8x4 where only that divides the block tile):
            // one arrangement only, the model does not tell them apart.
            for (int64_t warp_rows : {4, 8}) {
              const int64_t warp_m = tm * warp_rows;
              const int64_t warp_n = tn * (32 / warp_rows);
              if (bm % warp_m != 0 || bn % warp_n != 0) continue;
              if (warp_rows == 8 && bm % (tm * 4) == 0 && bn % (tn * 8) == 0) continue;
              // The widest load the operands' alignment allows for which each thread loads
              // whole vectors of both tiles, the same count each K step (narrower loads
              // move the same bytes with more instructions).
              int64_t vec = s.vec_align;
              while (vec > 1 &&
                     ((bm * bk) % (threads * vec) != 0 || (bk * bn) % (threads * vec) != 0))
                vec /= 2;
              if ((bm * bk) % threads != 0 || (bk * bn) % threads != 0) continue;
              {
                const int64_t tiles = ceil_div(s.m, bm) * ceil_div(s.n, bn) * s.batch;
                for (int64_t stages : stage_list)
                  for (int64_t split : splits) {
                    if (!split_useful(tiles, split, gpu)) continue;
                    // Without cp.async copies of both operands the kernel runs stages 2:
                    // a stages-3 variant would duplicate one under another name.
                    if (stages == 3 && !gemm_async_ok(s, bm, threads)) continue;
                    Variant v;
                    v.template_name = family_template_name(s.family);
                    v.precision = "fp32";
                    v.params = {{"block_m", bm},    {"block_n", bn},    {"block_k", bk},
                                {"warp_m", warp_m}, {"warp_n", warp_n}, {"thread_m", tm},
                                {"thread_n", tn},   {"vec", vec},       {"stages", stages},
                                {"split_k", split}};
                    v.threads_per_block = static_cast<int>(threads);
                    v.smem_bytes = gemm_smem_bytes(bm, bn, bk, stages, 4);
                    v.regs_per_thread = gemm_fp32_regs(
                        tm, tn, gemm_thread_loads(s, bm, bn, bk, vec, threads), stages, threads);
                    v.grid_blocks = tiles * split;
                    keep_if_fits(out, std::move(v), gpu);
                  }
              }
            }
          }
}

// Tensor-core path (template_gemm_mma.cpp): warps own warp_m x warp_n tiles computed with
// mma.sync (m16n8k8 for tf32, m16n8k16 for fp16/bf16; sm_80+, as cp.async), a ring of 2 to
// 4 shared stages filled by cp.async where the operand's storage allows (otherwise through
// registers, staged across the tile's mma), K tiles of one to four k16 steps (one step
// keeps the im2col elements a thread gathers through registers few).
void enumerate_gemm_mma(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                        std::vector<Variant>& out) {
  // sm_70/72 (Volta, Xavier): fp16 through mma.sync m8n8k4, with no cp.async (one ring of 2
  // stages, copied synchronously) and no ldmatrix; sm_75 has no tensor-core path here.
  const bool volta = gpu.cc_major == 7 && gpu.cc_minor < 5;
  if (gpu.cc_major < 8 && !(volta && precision == "fp16")) return;
  const bool tf32 = precision == "tf32";
  const std::vector<int64_t> bks =
      tf32 ? std::vector<int64_t>{16, 32} : std::vector<int64_t>{16, 32, 64};
  const auto splits = split_choices(s);
  const std::pair<int64_t, int64_t> warp_tiles[] = {{32, 32}, {32, 64}, {64, 32}, {64, 64}};
  for (int64_t bm : tiles_up_to({32, 64, 128, 256}, s.m, 32))
    for (int64_t bn : tiles_up_to({32, 64, 128, 256}, s.n, 32))
      for (int64_t bk : bks)
        for (const auto& [warp_m, warp_n] : warp_tiles) {
          if (bm % warp_m != 0 || bn % warp_n != 0) continue;
          // tf32 64x64 warp tiles: ptxas took 240-255 registers, mostly 255 with 8-364 bytes
          // of spill (session 4); outside the data of the tf32 fit, so not offered.
          if (tf32 && warp_m * warp_n > 64 * 32) continue;
          // m8n8k4 likewise: the sm_80 formula dropped them (above 255), so the sm_70 matrix
          // that gemm_m8n8k4_regs is fitted on has none.
          if (volta && warp_m * warp_n > 64 * 32) continue;
          const int64_t warps = (bm / warp_m) * (bn / warp_n);
          if (warps > 8) continue;
          const int64_t threads = warps * 32;
          const int64_t tiles = ceil_div(s.m, bm) * ceil_div(s.n, bn) * s.batch;
          for (int64_t stages : {2, 3, 4})
            for (int64_t split : splits) {
              if (volta && stages > 2) continue;
              if (!split_useful(tiles, split, gpu)) continue;
              // A ring deeper than the K tiles of a split never fills: it only costs shared
              // memory, and ptxas spilled 28-60 bytes at 48 registers on such kernels for
              // sm_86/89/90 (compile-all.md, session 6).
              const MmaThreadLoad t = gemm_mma_thread_load(s, precision, bm, bn, bk, split, threads);
              const int64_t k_tiles = t.k_tiles;
              if (stages > std::max<int64_t>(2, k_tiles)) continue;
              // Tile elements a thread moves per K tile beyond 48 (each copy or staged element
              // keeps an address live across the unrolled loop): one- and two-warp blocks with
              // long K tiles took 255 registers and spilled 88-632 bytes (compile-all.md).
              const double crowded = 4 * std::max(0.0, t.moved - 48);
              // A non-gathered conv input copied 4 bytes at a time (an image plane that no
              // wider vector divides: 7x7 with tf32): every copy's address and bounds come
              // from a division by the plane, kept live across the unrolled loop (tf32 first
              // choices, session 7: 8 copies a thread took 138-166 registers, 16 took 194-238
              // with 3 stages and 255 with 80-280 bytes of spill with 4). 11 registers a copy
              // per K tile for fp16/bf16; gemm_tf32_regs has its own fit, which counts every
              // 4-byte copy that is not gathered (narrow_copies) where the K loop is more than
              // 2 tiles (with at most 2 it is straight-line code: MobileNetV2's stem, K = 27).
              const double divided = 11 * t.plane_copies;
              // Element-by-element register operands: the prologue's stages - 1 tiles and
              // the loop's next are loaded before the first mma (ptxas hoists the loads of
              // the unrolled code), so min(stages, K tiles) tiles of them are live at once.
              const double live_scalar = t.scalar * static_cast<double>(std::min(stages, k_tiles));
              Variant v;
              v.template_name = family_template_name(s.family);
              v.precision = precision;
              v.params = {{"block_m", bm},    {"block_n", bn},    {"block_k", bk},
                          {"warp_m", warp_m}, {"warp_n", warp_n}, {"vec", s.vec_align},
                          {"stages", stages}, {"split_k", split}};
              if (volta) v.params["m8n8k4"] = 1;
              v.threads_per_block = static_cast<int>(threads);
              v.smem_bytes = gemm_mma_smem_bytes(s, precision, bm, bn, bk, stages);
              v.regs_per_thread =
                  volta ? gemm_m8n8k4_regs(warp_m, warp_n, t, threads)
                  : tf32 ? gemm_tf32_regs({warp_m, warp_n, stages, t.moved, t.staged + t.scalar, t.gathered,
                                         k_tiles > 2 ? t.narrow_copies : 0, t.conv},
                                        threads)
                       : gemm_mma_regs(warp_m, warp_n, t.staged, live_scalar,
                                       t.gathered + crowded + divided, threads);
              if (tf32 && v.regs_per_thread > kMaxTf32Regs) continue;
              if (volta && v.regs_per_thread > kMaxM8n8k4Regs) continue;
              v.grid_blocks = tiles * split;
              keep_if_fits(out, std::move(v), gpu);
            }
        }
}

}  // namespace

std::vector<Variant> enumerate_gemm_family(const WorkloadShape& s, const GpuSpec& gpu,
                                           const std::vector<std::string>& precisions) {
  std::vector<Variant> out;
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0) return out;
  for (const auto& p : precisions) {
    if (p == "fp32") {
      enumerate_gemm_fp32(s, gpu, out);
    } else {
      enumerate_gemm_mma(s, gpu, p, out);
    }
  }
  return out;
}

// Depthwise convolution, direct: a block computes tile_h x tile_w output pixels of
// block_c channels from an input tile (with halo) staged in shared memory; a thread
// computes pixels_per_thread adjacent pixels of one channel, reusing the input row in
// registers across the kernel's width.
std::vector<Variant> enumerate_depthwise(const WorkloadShape& s, const GpuSpec& gpu) {
  std::vector<Variant> out;
  if (s.out_h <= 0 || s.out_w <= 0 || s.out_channels <= 0) return out;
  const int64_t multiplier = std::max<int64_t>(1, s.out_channels / std::max<int64_t>(1, s.groups));
  for (int64_t th : tiles_up_to({1, 2, 4, 8, 16}, s.out_h, 1))
    for (int64_t tw : tiles_up_to({4, 8, 16, 32}, s.out_w, 4))
      for (int64_t bc : tiles_up_to({1, 2, 4, 8, 16, 32, 64}, s.out_channels, 1))
        for (int64_t ppt : {1, 2, 4}) {
          if (tw % ppt != 0) continue;
          const int64_t threads = th * tw * bc / ppt;
          if (threads < 32 || threads > 512 || threads % 32 != 0) continue;
          const int64_t in_th = (th - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1;
          const int64_t in_tw = (tw - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1;
          const int64_t in_c = ceil_div(bc, multiplier);
          Variant v;
          v.template_name = family_template_name(Family::depthwise);
          v.params = {{"tile_h", th}, {"tile_w", tw}, {"block_c", bc}, {"pixels_per_thread", ppt}};
          v.threads_per_block = static_cast<int>(threads);
          v.smem_bytes = (in_c * in_th * in_tw + bc * s.kernel_h * s.kernel_w) * 4;
          v.regs_per_thread = static_cast<int>(24 + 2 * ppt + (ppt - 1) * s.stride_w + s.kernel_w);
          v.grid_blocks = s.images * ceil_div(s.out_channels, bc) * ceil_div(s.out_h, th) *
                          ceil_div(s.out_w, tw);
          keep_if_fits(out, std::move(v), gpu);
        }
  return out;
}

}  // namespace dc
