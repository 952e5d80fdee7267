// Parameter space of the row-reduction template (Softmax, LayerNorm, Reduce*, global
// pooling, InstanceNorm with their fused neighbours): how many threads share a row (one
// warp with shuffles, or a block with a shared-memory stage), how many rows a block
// takes, the load width, and where a row is kept between its passes.
#include "param_space.h"

namespace dc {

// Where a row lives between the passes that need it twice (softmax: max/sum, then the
// normalised write; LayerNorm: statistics, then the affine write):
constexpr int64_t kCacheNone = 0;  // re-read from global memory (L2 when it still holds it)
constexpr int64_t kCacheRegs = 1;  // held in registers: at most 64 elements per thread
constexpr int64_t kCacheSmem = 2;  // held in shared memory

std::vector<Variant> enumerate_reduction(const WorkloadShape& s, const GpuSpec& gpu) {
  std::vector<Variant> out;
  if (s.rows <= 0 || s.row_len <= 0) return out;
  for (int64_t tpr : {32, 64, 128, 256, 512, 1024})
    for (int64_t rpb : {1, 2, 4, 8})
      for (int64_t vec : {1, 2, 4}) {
        if (vec > s.vec_align) continue;
        // No more threads on a row than it has vectors (rounded up to a power of two),
        // except that a warp is the smallest unit; no more rows per block than rows.
        if (tpr > 32 && tpr > pow2_ceil(ceil_div(s.row_len, vec))) continue;
        if (rpb > 1 && rpb > pow2_ceil(s.rows)) continue;
        const int64_t threads = tpr * rpb;
        if (threads > 1024) continue;
        const int64_t per_thread = ceil_div(s.row_len, tpr);  // elements of the row per thread
        for (int64_t cache : {kCacheNone, kCacheRegs, kCacheSmem}) {
          if (cache != kCacheNone && s.stream_reads < 2) continue;  // one pass: nothing to keep
          if (cache == kCacheRegs && per_thread > 64) continue;
          Variant v;
          v.template_name = family_template_name(Family::reduction);
          v.params = {
              {"threads_per_row", tpr}, {"rows_per_block", rpb}, {"vec", vec}, {"cache", cache}};
          v.threads_per_block = static_cast<int>(threads);
          // A block-wide row reduction stages two partials per warp in shared memory.
          const int64_t scratch = tpr > 32 ? rpb * (tpr / 32) * 2 * 4 : 0;
          v.smem_bytes = scratch + (cache == kCacheSmem ? rpb * s.row_len * s.elem_bytes : 0);
          v.regs_per_thread =
              static_cast<int>(24 + 2 * vec + (cache == kCacheRegs ? per_thread : 0));
          v.grid_blocks = ceil_div(s.rows, rpb);
          if (fits_gpu(v, gpu)) out.push_back(std::move(v));
        }
      }
  return out;
}

}  // namespace dc
