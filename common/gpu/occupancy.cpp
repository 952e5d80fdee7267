#include "gpu/occupancy.h"

#include <algorithm>

#include "ir/error.h"

namespace dc {

namespace {

int64_t round_up(int64_t x, int64_t unit) { return unit > 0 ? (x + unit - 1) / unit * unit : x; }

int warp_of(const GpuSpec& gpu) { return gpu.warp_size > 0 ? gpu.warp_size : 32; }

int64_t warps_of(int64_t threads, const GpuSpec& gpu) {
  return (threads + warp_of(gpu) - 1) / warp_of(gpu);
}

// Warps a block is charged against regs_per_block: its warps in multiples of the sub-partitions.
int64_t charged_warps(int64_t threads, const GpuSpec& gpu) {
  return round_up(warps_of(threads, gpu), std::max(1, gpu.sm_sub_partitions));
}

}  // namespace

int64_t smem_allocated_per_block(int64_t smem_bytes, const GpuSpec& gpu) {
  return round_up(smem_bytes + gpu.smem_reserved_per_block, gpu.smem_alloc_unit);
}

int64_t regs_allocated_per_warp(int regs_per_thread, const GpuSpec& gpu) {
  return round_up(int64_t{regs_per_thread} * warp_of(gpu), gpu.reg_alloc_unit);
}

std::string launch_refusal(int64_t threads, int64_t smem_bytes, int regs_per_thread,
                           const GpuSpec& gpu) {
  if (threads <= 0) return "no threads per block";
  if (threads > gpu.max_threads_per_block)
    return str_cat(threads, " threads per block > ", gpu.max_threads_per_block);
  if (threads > gpu.max_threads_per_sm)
    return str_cat(threads, " threads per block > ", gpu.max_threads_per_sm, " per SM");
  const int64_t smem = smem_allocated_per_block(smem_bytes, gpu);
  if (smem > gpu.smem_per_block_bytes + gpu.smem_reserved_per_block)
    return str_cat(smem_bytes, " B shared memory (", smem, " B allocated with the ",
                   gpu.smem_reserved_per_block, " B reserved per block) > ",
                   gpu.smem_per_block_bytes, " B per block");
  if (regs_per_thread > gpu.regs_per_thread)
    return str_cat(regs_per_thread, " registers per thread > ", gpu.regs_per_thread);
  if (regs_per_thread > 0) {
    const int64_t per_warp = regs_allocated_per_warp(regs_per_thread, gpu);
    const int64_t charged = charged_warps(threads, gpu);
    if (per_warp * charged > gpu.regs_per_block)
      return str_cat(regs_per_thread, " registers x ", threads, " threads: ", per_warp,
                     " per warp x ", charged, " warps (in multiples of ", gpu.sm_sub_partitions,
                     ") > ", gpu.regs_per_block, " per block");
  }
  return "";
}

int blocks_per_sm(int64_t threads, int64_t smem_bytes, int regs_per_thread, const GpuSpec& gpu) {
  if (!launch_refusal(threads, smem_bytes, regs_per_thread, gpu).empty()) return 0;
  const int64_t warps = warps_of(threads, gpu);
  int64_t limit = gpu.max_threads_per_sm / warp_of(gpu) / warps;
  if (gpu.max_blocks_per_sm > 0) limit = std::min<int64_t>(limit, gpu.max_blocks_per_sm);
  const int64_t smem = smem_allocated_per_block(smem_bytes, gpu);
  if (smem > 0) limit = std::min(limit, gpu.smem_per_sm_bytes / smem);
  if (regs_per_thread > 0) {
    const int64_t per_warp = regs_allocated_per_warp(regs_per_thread, gpu);
    const int sub = std::max(1, gpu.sm_sub_partitions);
    const int64_t warps_per_sm = gpu.regs_per_sm / sub / per_warp * sub;
    limit = std::min(limit, warps_per_sm / warps);
  }
  return static_cast<int>(std::max<int64_t>(limit, 0));
}

int max_regs_per_thread_for_block(int64_t threads, const GpuSpec& gpu) {
  DC_INTERNAL_CHECK(threads > 0, "a block of ", threads, " threads");
  const int64_t per_warp = gpu.regs_per_block / charged_warps(threads, gpu);
  const int64_t allocatable = per_warp / std::max(1, gpu.reg_alloc_unit) * gpu.reg_alloc_unit;
  return static_cast<int>(std::min<int64_t>(gpu.regs_per_thread, allocatable / warp_of(gpu)));
}

}  // namespace dc
