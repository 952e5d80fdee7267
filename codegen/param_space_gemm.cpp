// Parameter spaces of the GEMM-like templates: tiled GEMM and implicit-GEMM convolution
// (CUDA-core fp32 and tensor-core tf32/fp16/bf16 paths) and depthwise convolution (fused
// attention: param_space_attention.cpp). docs/estimator.md lists the choices and why they are bounded as they are.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "param_space.h"
#include "param_space_point.h"
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
std::vector<int64_t> split_choices(const WorkloadShape& s, const GpuSpec& gpu) {
  std::vector<int64_t> out = {1};
  // A GLU epilogue needs both columns' complete sums in one thread: no split-K.
  if (s.glu) return out;
  // OpenCL: the split-K partial sums' float atomicAdd (opencl_dialect.cpp, a compare-and-swap
  // on generic pointers) builds on no OpenCL device here (PoCL's kernel library has no
  // __atomic_compare_exchange_4); the weight gradients' long K made the plans choose it.
  if (gpu.is_opencl()) return out;
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

bool gemm_shape_ok(const WorkloadShape& s) { return s.m > 0 && s.n > 0 && s.k > 0 && s.batch > 0; }

// The choices of the CUDA-core space: 1 stage, 2 (register-staged double buffering), 3
// (cp.async, sm_80+): a CUDA-core K tile is long enough that a third buffer already covers
// the L2 latency. Thread tiles of 2 to 8; a warp's 32 threads as 4x8 or 8x4 thread tiles.
struct GemmFp32Choices {
  std::vector<int64_t> block_m, block_n, block_k, thread_tile = {2, 4, 8}, warp_rows = {4, 8}, stages, split_k;
};

GemmFp32Choices gemm_fp32_choices(const WorkloadShape& s, const GpuSpec& gpu) {
  GemmFp32Choices c;
  c.block_m = tiles_up_to({16, 32, 64, 128, 256}, s.m, 16);
  c.block_n = tiles_up_to({16, 32, 64, 128, 256}, s.n, 16);
  c.block_k = tiles_up_to({8, 16, 32}, s.k, 8);
  c.stages = gpu.cc_major >= 8 ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{1, 2};
  c.split_k = split_choices(s, gpu);
  return c;
}

// The widest load the operands' alignment allows for which each thread loads whole vectors
// of both tiles, the same count each K step (narrower loads move the same bytes with more
// instructions).
int64_t gemm_fp32_vec(const WorkloadShape& s, int64_t bm, int64_t bn, int64_t bk, int64_t threads) {
  int64_t vec = s.vec_align;
  while (vec > 1 && ((bm * bk) % (threads * vec) != 0 || (bk * bn) % (threads * vec) != 0)) vec /= 2;
  return vec;
}

// The block's tiling, the part of gemm_fp32_point without stages and split_k (the
// enumerator skips their loops where it fails): its threads, or 0 with the reason.
int64_t gemm_fp32_tiling(const WorkloadShape& s, const GemmFp32Choices& c, const GemmParams& p, std::string* why) {
  const int64_t bm = p.block_m, bn = p.block_n, bk = p.block_k, tm = p.thread_m, tn = p.thread_n;
  const auto no = [&](const auto&... args) {
    refuse(why, args...);
    return int64_t{0};
  };
  if (!offered(c.block_m, bm, "block_m", why) || !offered(c.block_n, bn, "block_n", why) ||
      !offered(c.block_k, bk, "block_k", why) || !offered(c.thread_tile, tm, "thread_m", why) ||
      !offered(c.thread_tile, tn, "thread_n", why))
    return 0;
  if (tm > 2 * tn || tn > 2 * tm) return no("thread tile ", tm, "x", tn, " is not near-square");
  if (bm % tm != 0 || bn % tn != 0)
    return no("thread tile ", tm, "x", tn, " does not divide the block tile ", bm, "x", bn);
  const int64_t threads = (bm / tm) * (bn / tn);
  if (threads < 32 || threads > 512 || threads % 32 != 0)
    return no(threads, " threads per block (whole warps, 32 to 512)");
  // A warp's 32 threads as 4x8 (or 8x4 where only that divides the block tile): one
  // arrangement only, the model does not tell them apart.
  const int64_t warp_rows = p.warp_m / tm;
  if (!contains(c.warp_rows, warp_rows) || p.warp_m != tm * warp_rows || p.warp_n != tn * (32 / warp_rows))
    return no("warp tile ", p.warp_m, "x", p.warp_n, " is not 4x8 or 8x4 thread tiles of ", tm, "x", tn);
  if (bm % p.warp_m != 0 || bn % p.warp_n != 0)
    return no("warp tile ", p.warp_m, "x", p.warp_n, " does not divide the block tile ", bm, "x", bn);
  if (warp_rows == 8 && bm % (tm * 4) == 0 && bn % (tn * 8) == 0)
    return no("warps of 8x4 threads where 4x8 divides the block tile (the space offers 4x8)");
  if ((bm * bk) % threads != 0 || (bk * bn) % threads != 0)
    return no("the ", bm, "x", bk, " and ", bk, "x", bn, " tiles do not split evenly over ", threads, " threads");
  if (const int64_t vec = gemm_fp32_vec(s, bm, bn, bk, threads); p.vec != vec)
    return no("vec=", p.vec, ", but these tiles load vectors of ", vec);
  return threads;
}

std::optional<Variant> gemm_fp32_point(const WorkloadShape& s, const GpuSpec& gpu, const GemmFp32Choices& c,
                                       const GemmParams& p, std::string* why) {
  const int64_t threads = gemm_fp32_tiling(s, c, p, why);
  if (threads == 0) return std::nullopt;
  const int64_t bm = p.block_m, bn = p.block_n, bk = p.block_k, tm = p.thread_m, tn = p.thread_n;
  if (!offered(c.stages, p.stages, "stages", why) || !offered(c.split_k, p.split_k, "split_k", why))
    return std::nullopt;
  const int64_t tiles = ceil_div(s.m, bm) * ceil_div(s.n, bn) * s.batch;
  if (!split_useful(tiles, p.split_k, gpu))
    return refuse(why, "split_k=", p.split_k, " of ", tiles, " output tiles: the grid fills the GPU without it");
  // Without cp.async copies of both operands the kernel runs stages 2: a stages-3 variant
  // would duplicate one under another name.
  if (p.stages == 3 && !gemm_async_ok(s, bm, threads))
    return refuse(why, "stages=3 without cp.async copies of both operands runs as stages=2");
  Variant v;
  v.template_name = family_template_name(s.family);
  v.precision = "fp32";
  write_params(p, kCudaCorePath, v);
  v.threads_per_block = static_cast<int>(threads);
  v.smem_bytes = gemm_smem_bytes(bm, bn, bk, p.stages, 4);
  v.regs_per_thread =
      gemm_fp32_regs(tm, tn, gemm_thread_loads(s, bm, bn, bk, p.vec, threads), p.stages, threads);
  v.grid_blocks = tiles * p.split_k;
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

void enumerate_gemm_fp32(const WorkloadShape& s, const GpuSpec& gpu, std::vector<Variant>& out) {
  const GemmFp32Choices c = gemm_fp32_choices(s, gpu);
  for (int64_t bm : c.block_m)
    for (int64_t bn : c.block_n)
      for (int64_t bk : c.block_k)
        for (int64_t tm : c.thread_tile)
          for (int64_t tn : c.thread_tile)
            for (int64_t warp_rows : c.warp_rows) {
              GemmParams p;
              p.block_m = bm, p.block_n = bn, p.block_k = bk, p.thread_m = tm, p.thread_n = tn;
              p.warp_m = tm * warp_rows;
              p.warp_n = tn * (32 / warp_rows);
              p.vec = gemm_fp32_vec(s, bm, bn, bk, (bm / tm) * (bn / tn));
              if (gemm_fp32_tiling(s, c, p, nullptr) == 0) continue;
              for (int64_t stages : c.stages)
                for (int64_t split : c.split_k) {
                  p.stages = stages;
                  p.split_k = split;
                  if (auto v = gemm_fp32_point(s, gpu, c, p, nullptr)) out.push_back(std::move(*v));
                }
            }
}

// Tensor-core path (template_gemm_mma.cpp): warps own warp_m x warp_n tiles computed with
// mma.sync (m16n8k8 for tf32, m16n8k16 for fp16/bf16; sm_80+, as cp.async), a ring of 2 to
// 4 shared stages filled by cp.async where the operand's storage allows (otherwise through
// registers, staged across the tile's mma), K tiles of one to four k16 steps (one step
// keeps the im2col elements a thread gathers through registers few).
// sm_70/72 (Volta, Xavier): fp16 through mma.sync m8n8k4, with no cp.async (one ring of 2
// stages, copied synchronously) and no ldmatrix; sm_75 has no tensor-core path here.
struct GemmMmaChoices {
  bool available = false;  // the GPU has this tensor-core path
  bool volta = false;
  std::vector<int64_t> block_m, block_n, block_k, stages, split_k;
  std::vector<std::pair<int64_t, int64_t>> warp_tiles = {{32, 32}, {32, 64}, {64, 32}, {64, 64}};
};

GemmMmaChoices gemm_mma_choices(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision) {
  GemmMmaChoices c;
  c.volta = gpu.cc_major == 7 && gpu.cc_minor < 5;
  c.available = gpu.cc_major >= 8 || (c.volta && precision == "fp16");
  c.block_m = tiles_up_to({32, 64, 128, 256}, s.m, 32);
  c.block_n = tiles_up_to({32, 64, 128, 256}, s.n, 32);
  c.block_k = precision == "tf32" ? std::vector<int64_t>{16, 32} : std::vector<int64_t>{16, 32, 64};
  c.stages = c.volta ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 3, 4};
  c.split_k = split_choices(s, gpu);
  return c;
}

// The register estimate of a tensor-core variant (the path's fit).
int gemm_mma_point_regs(const std::string& precision, bool volta, const GemmParams& p, const MmaThreadLoad& t,
                        int64_t threads) {
  if (volta) return gemm_m8n8k4_regs(p.warp_m, p.warp_n, t, threads);
  if (precision == "tf32")
    return gemm_tf32_regs({p.warp_m, p.warp_n, p.stages, t.moved, t.staged + t.scalar, t.gathered,
                           t.k_tiles > 2 ? t.narrow_copies : 0, t.conv},
                          threads);
  // Tile elements a thread moves per K tile beyond 48 (each copy or staged element keeps an
  // address live across the unrolled loop): one- and two-warp blocks with long K tiles took
  // 255 registers and spilled 88-632 bytes (compile-all.md).
  const double crowded = 4 * std::max(0.0, t.moved - 48);
  // A non-gathered conv input copied 4 bytes at a time (an image plane that no wider vector
  // divides: 7x7 with tf32): every copy's address and bounds come from a division by the
  // plane, kept live across the unrolled loop (tf32 first choices, session 7: 8 copies a
  // thread took 138-166 registers, 16 took 194-238 with 3 stages and 255 with 80-280 bytes
  // of spill with 4). 11 registers a copy per K tile for fp16/bf16; gemm_tf32_regs has its
  // own fit, which counts every 4-byte copy that is not gathered (narrow_copies) where the K
  // loop is more than 2 tiles (with at most 2 it is straight-line code: MobileNetV2's stem,
  // K = 27).
  const double divided = 11 * t.plane_copies;
  // Element-by-element register operands: the prologue's stages - 1 tiles and the loop's
  // next are loaded before the first mma (ptxas hoists the loads of the unrolled code), so
  // min(stages, K tiles) tiles of them are live at once.
  const double live_scalar = t.scalar * static_cast<double>(std::min(p.stages, t.k_tiles));
  return gemm_mma_regs(p.warp_m, p.warp_n, t.staged, live_scalar, t.gathered + crowded + divided, threads);
}

// The block's tiling, the part of gemm_mma_point without stages and split_k (the enumerator
// skips their loops where it fails): its threads, or 0 with the reason.
int64_t gemm_mma_tiling(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                        const GemmMmaChoices& c, const GemmParams& p, std::string* why) {
  const auto no = [&](const auto&... args) {
    refuse(why, args...);
    return int64_t{0};
  };
  if (!c.available) return no("no ", precision, " tensor-core GEMM path on ", gpu.sm_arch());
  const int64_t bm = p.block_m, bn = p.block_n, bk = p.block_k;
  if (!offered(c.block_m, bm, "block_m", why) || !offered(c.block_n, bn, "block_n", why) ||
      !offered(c.block_k, bk, "block_k", why))
    return 0;
  if (std::find(c.warp_tiles.begin(), c.warp_tiles.end(), std::make_pair(p.warp_m, p.warp_n)) == c.warp_tiles.end())
    return no("warp tile ", p.warp_m, "x", p.warp_n, " is not one of 32x32, 32x64, 64x32, 64x64");
  if (bm % p.warp_m != 0 || bn % p.warp_n != 0)
    return no("warp tile ", p.warp_m, "x", p.warp_n, " does not divide the block tile ", bm, "x", bn);
  // tf32 64x64 warp tiles: ptxas took 240-255 registers, mostly 255 with 8-364 bytes of
  // spill (session 4); outside the data of the tf32 fit, so not offered. m8n8k4 likewise:
  // the sm_80 formula dropped them (above 255), so the sm_70 matrix that gemm_m8n8k4_regs
  // is fitted on has none.
  if ((precision == "tf32" || c.volta) && p.warp_m * p.warp_n > 64 * 32)
    return no("no 64x64 warp tiles on the ", c.volta ? "m8n8k4" : "tf32", " path");
  const int64_t warps = (bm / p.warp_m) * (bn / p.warp_n);
  if (warps > 8) return no(warps, " warps per block (at most 8)");
  if (p.vec != s.vec_align) return no("vec=", p.vec, ", but the operands align to ", s.vec_align);
  if ((p.m8n8k4 != 0) != c.volta) return no("m8n8k4=", p.m8n8k4, " on ", gpu.sm_arch(), " (the path of sm_70 and sm_72)");
  return warps * 32;
}

std::optional<Variant> gemm_mma_point(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                                      const GemmMmaChoices& c, const GemmParams& p, std::string* why) {
  const int64_t threads = gemm_mma_tiling(s, gpu, precision, c, p, why);
  if (threads == 0) return std::nullopt;
  const bool tf32 = precision == "tf32";
  const int64_t bm = p.block_m, bn = p.block_n, bk = p.block_k;
  if (!offered(c.stages, p.stages, "stages", why) || !offered(c.split_k, p.split_k, "split_k", why))
    return std::nullopt;
  const int64_t tiles = ceil_div(s.m, bm) * ceil_div(s.n, bn) * s.batch;
  if (!split_useful(tiles, p.split_k, gpu))
    return refuse(why, "split_k=", p.split_k, " of ", tiles, " output tiles: the grid fills the GPU without it");
  // A ring deeper than the K tiles of a split never fills: it only costs shared memory, and
  // ptxas spilled 28-60 bytes at 48 registers on such kernels for sm_86/89/90
  // (compile-all.md, session 6).
  const MmaThreadLoad t = gemm_mma_thread_load(s, precision, bm, bn, bk, p.split_k, threads);
  if (p.stages > std::max<int64_t>(2, t.k_tiles))
    return refuse(why, "stages=", p.stages, " for ", t.k_tiles, " K tiles a split: the ring never fills");
  Variant v;
  v.template_name = family_template_name(s.family);
  v.precision = precision;
  write_params(p, param_path(precision, c.volta), v);
  v.threads_per_block = static_cast<int>(threads);
  v.smem_bytes = gemm_mma_smem_bytes(s, precision, bm, bn, bk, p.stages);
  v.regs_per_thread = gemm_mma_point_regs(precision, c.volta, p, t, threads);
  if (tf32 && v.regs_per_thread > kMaxTf32Regs)
    return refuse(why, "estimated ", v.regs_per_thread, " registers, above the ", kMaxTf32Regs, " tf32 variants may take");
  if (c.volta && v.regs_per_thread > kMaxM8n8k4Regs)
    return refuse(why, "estimated ", v.regs_per_thread, " registers, above the ", kMaxM8n8k4Regs,
                  " m8n8k4 variants may take");
  v.grid_blocks = tiles * p.split_k;
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

void enumerate_gemm_mma(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                        std::vector<Variant>& out) {
  const GemmMmaChoices c = gemm_mma_choices(s, gpu, precision);
  if (!c.available) return;
  for (int64_t bm : c.block_m)
    for (int64_t bn : c.block_n)
      for (int64_t bk : c.block_k)
        for (const auto& [warp_m, warp_n] : c.warp_tiles) {
          GemmParams p;
          p.block_m = bm, p.block_n = bn, p.block_k = bk, p.warp_m = warp_m, p.warp_n = warp_n;
          p.vec = s.vec_align;
          p.m8n8k4 = c.volta ? 1 : 0;
          if (gemm_mma_tiling(s, gpu, precision, c, p, nullptr) == 0) continue;
          for (int64_t stages : c.stages)
            for (int64_t split : c.split_k) {
              p.stages = stages;
              p.split_k = split;
              if (auto v = gemm_mma_point(s, gpu, precision, c, p, nullptr)) out.push_back(std::move(*v));
            }
        }
}

// Depthwise convolution, direct: a block computes tile_h x tile_w output pixels of
// block_c channels from an input tile (with halo) staged in shared memory; a thread
// computes pixels_per_thread adjacent pixels of one channel, reusing the input row in
// registers across the kernel's width.
struct DepthwiseChoices {
  std::vector<int64_t> tile_h, tile_w, block_c, pixels_per_thread = {1, 2, 4};
};

DepthwiseChoices depthwise_choices(const WorkloadShape& s) {
  DepthwiseChoices c;
  c.tile_h = tiles_up_to({1, 2, 4, 8, 16}, s.out_h, 1);
  c.tile_w = tiles_up_to({4, 8, 16, 32}, s.out_w, 4);
  c.block_c = tiles_up_to({1, 2, 4, 8, 16, 32, 64}, s.out_channels, 1);
  return c;
}

std::optional<Variant> depthwise_point(const WorkloadShape& s, const GpuSpec& gpu, const DepthwiseChoices& c,
                                       const DepthwiseParams& p, std::string* why) {
  if (s.out_h <= 0 || s.out_w <= 0 || s.out_channels <= 0) return refuse(why, "the workload has an empty output");
  const int64_t th = p.tile_h, tw = p.tile_w, bc = p.block_c, ppt = p.pixels_per_thread;
  if (!offered(c.tile_h, th, "tile_h", why) || !offered(c.tile_w, tw, "tile_w", why) ||
      !offered(c.block_c, bc, "block_c", why) || !offered(c.pixels_per_thread, ppt, "pixels_per_thread", why))
    return std::nullopt;
  if (tw % ppt != 0) return refuse(why, "pixels_per_thread=", ppt, " does not divide tile_w=", tw);
  const int64_t threads = th * tw * bc / ppt;
  if (threads < 32 || threads > 512 || threads % 32 != 0)
    return refuse(why, threads, " threads per block (whole warps, 32 to 512)");
  const int64_t multiplier = std::max<int64_t>(1, s.out_channels / std::max<int64_t>(1, s.groups));
  const int64_t in_th = (th - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1;
  const int64_t in_tw = (tw - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1;
  const int64_t in_c = ceil_div(bc, multiplier);
  Variant v;
  v.template_name = family_template_name(Family::depthwise);
  write_params(p, kEveryPath, v);
  v.threads_per_block = static_cast<int>(threads);
  v.smem_bytes = (in_c * in_th * in_tw + bc * s.kernel_h * s.kernel_w) * 4;
  v.regs_per_thread = static_cast<int>(24 + 2 * ppt + (ppt - 1) * s.stride_w + s.kernel_w);
  v.grid_blocks = s.images * ceil_div(s.out_channels, bc) * ceil_div(s.out_h, th) * ceil_div(s.out_w, tw);
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

}  // namespace

std::vector<Variant> enumerate_gemm_family(const WorkloadShape& s, const GpuSpec& gpu,
                                           const std::vector<std::string>& precisions) {
  std::vector<Variant> out;
  if (!gemm_shape_ok(s)) return out;
  for (const auto& p : precisions) {
    if (p == "fp32") {
      enumerate_gemm_fp32(s, gpu, out);
    } else {
      enumerate_gemm_mma(s, gpu, p, out);
    }
  }
  return out;
}

std::optional<Variant> gemm_point(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision,
                                  const GemmParams& p, std::string* why) {
  if (!gemm_shape_ok(s)) return refuse(why, "the workload has an empty GEMM");
  if (precision == "fp32") return gemm_fp32_point(s, gpu, gemm_fp32_choices(s, gpu), p, why);
  return gemm_mma_point(s, gpu, precision, gemm_mma_choices(s, gpu, precision), p, why);
}

std::vector<Variant> enumerate_depthwise(const WorkloadShape& s, const GpuSpec& gpu) {
  std::vector<Variant> out;
  if (s.out_h <= 0 || s.out_w <= 0 || s.out_channels <= 0) return out;
  const DepthwiseChoices c = depthwise_choices(s);
  for (int64_t th : c.tile_h)
    for (int64_t tw : c.tile_w)
      for (int64_t bc : c.block_c)
        for (int64_t ppt : c.pixels_per_thread)
          if (auto v = depthwise_point(s, gpu, c, {th, tw, bc, ppt}, nullptr)) out.push_back(std::move(*v));
  return out;
}

std::optional<Variant> depthwise_point(const WorkloadShape& s, const GpuSpec& gpu, const DepthwiseParams& p,
                                       std::string* why) {
  return depthwise_point(s, gpu, depthwise_choices(s), p, why);
}

}  // namespace dc
