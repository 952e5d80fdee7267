// Parameter space of the row-reduction template (Softmax, LayerNorm, Reduce*, global
// pooling, InstanceNorm with their fused neighbours): how many threads share a row (one
// warp with shuffles, or a block with a shared-memory stage), how many rows a block
// takes, the load width, and where a row is kept between its passes.
#include "param_space.h"
#include "param_space_point.h"

namespace dc {

namespace {

// Where a row lives between the passes that need it twice (softmax: max/sum, then the
// normalised write; LayerNorm: statistics, then the affine write):
constexpr int64_t kCacheNone = 0;  // re-read from global memory (L2 when it still holds it)
constexpr int64_t kCacheRegs = 1;  // held in registers: at most 64 elements per thread
constexpr int64_t kCacheSmem = 2;  // held in shared memory

const std::vector<int64_t> kThreadsPerRow = {32, 64, 128, 256, 512, 1024};
const std::vector<int64_t> kRowsPerBlock = {1, 2, 4, 8};
const std::vector<int64_t> kVecs = {1, 2, 4};
const std::vector<int64_t> kCaches = {kCacheNone, kCacheRegs, kCacheSmem};

}  // namespace

std::optional<Variant> reduction_point(const WorkloadShape& s, const GpuSpec& gpu, const ReductionParams& p,
                                       std::string* why) {
  if (s.rows <= 0 || s.row_len <= 0) return refuse(why, "the workload has no rows");
  const int64_t tpr = p.threads_per_row, rpb = p.rows_per_block, vec = p.vec, cache = p.cache;
  if (!offered(kThreadsPerRow, tpr, "threads_per_row", why) || !offered(kRowsPerBlock, rpb, "rows_per_block", why) ||
      !offered(kVecs, vec, "vec", why) || !offered(kCaches, cache, "cache", why))
    return std::nullopt;
  if (vec > s.vec_align) return refuse(why, "vec=", vec, ", but the rows align to ", s.vec_align);
  // No more threads on a row than it has vectors (rounded up to a power of two), except
  // that a warp is the smallest unit; no more rows per block than rows.
  if (tpr > 32 && tpr > pow2_ceil(ceil_div(s.row_len, vec)))
    return refuse(why, "threads_per_row=", tpr, " for rows of ", s.row_len, " elements");
  if (rpb > 1 && rpb > pow2_ceil(s.rows)) return refuse(why, "rows_per_block=", rpb, " for ", s.rows, " rows");
  const int64_t threads = tpr * rpb;
  if (threads > 1024) return refuse(why, threads, " threads per block (at most 1024)");
  const int64_t per_thread = ceil_div(s.row_len, tpr);  // elements of the row per thread
  if (cache != kCacheNone && s.stream_reads < 2) return refuse(why, "cache=", cache, " for a one-pass reduction");
  if (cache == kCacheRegs && per_thread > 64)
    return refuse(why, "cache=1 keeps at most 64 elements a thread, not ", per_thread);
  Variant v;
  v.template_name = family_template_name(Family::reduction);
  write_params(p, kEveryPath, v);
  v.threads_per_block = static_cast<int>(threads);
  // A block-wide row reduction stages two partials per warp in shared memory.
  const int64_t scratch = tpr > 32 ? rpb * (tpr / 32) * 2 * 4 : 0;
  v.smem_bytes = scratch + (cache == kCacheSmem ? rpb * s.row_len * s.elem_bytes : 0);
  v.regs_per_thread = static_cast<int>(24 + 2 * vec + (cache == kCacheRegs ? per_thread : 0));
  v.grid_blocks = ceil_div(s.rows, rpb);
  if (!fits_gpu(v, gpu, why)) return std::nullopt;
  return v;
}

std::vector<Variant> enumerate_reduction(const WorkloadShape& s, const GpuSpec& gpu) {
  std::vector<Variant> out;
  if (s.rows <= 0 || s.row_len <= 0) return out;
  for (int64_t tpr : kThreadsPerRow)
    for (int64_t rpb : kRowsPerBlock)
      for (int64_t vec : kVecs)
        for (int64_t cache : kCaches)
          if (auto v = reduction_point(s, gpu, {tpr, rpb, vec, cache}, nullptr)) out.push_back(std::move(*v));
  return out;
}

}  // namespace dc
