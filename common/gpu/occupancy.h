// Whether a block of a given shape can launch on a GPU type, and how many share one SM: the
// allocation rules of CUDA's occupancy calculator (include/cuda_occupancy.h), with the figures
// of each architecture from gpus.yaml (GpuSpec). One definition for the parameter spaces'
// fit check (codegen fits_gpu), the estimator's residency and anything else that must not let
// a variant pass and then fail with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
//   - registers are allocated per warp, regs x 32 rounded up to reg_alloc_unit (256: per-
//     thread counts in steps of 8); a block's warps count in multiples of the SM's
//     sub-partitions (4) against regs_per_block (65536), and warps per SM are what each
//     sub-partition's quarter of the register file holds;
//   - shared memory per block is its static + dynamic bytes plus the driver's reservation
//     (1 KB from sm_80), rounded up to smem_alloc_unit (128 B; 256 B before sm_80); a block
//     launches if that is at most smem_per_block_bytes (the opt-in maximum) + the reservation.
// docs/gpus.md and docs/estimator.md describe the rules.
#pragma once

#include <cstdint>
#include <string>

#include "gpu/gpu_spec.h"

namespace dc {

// Shared memory one block holds on an SM: (smem_bytes + reservation) rounded up to the unit.
int64_t smem_allocated_per_block(int64_t smem_bytes, const GpuSpec& gpu);
// Registers one warp holds: regs_per_thread x warp size rounded up to the unit.
int64_t regs_allocated_per_warp(int regs_per_thread, const GpuSpec& gpu);

// Why a block of `threads` threads with `smem_bytes` of shared memory (static + dynamic) and
// `regs_per_thread` registers cannot launch on the GPU at all, or "" if it can.
std::string launch_refusal(int64_t threads, int64_t smem_bytes, int regs_per_thread,
                           const GpuSpec& gpu);

// Blocks of this shape resident on one SM at once: the minimum of the thread, block, shared
// memory and register limits. 0 if the block cannot launch.
int blocks_per_sm(int64_t threads, int64_t smem_bytes, int regs_per_thread, const GpuSpec& gpu);

// The most registers per thread a block of `threads` may use and still launch (what ptxas
// keeps a kernel under with __launch_bounds__(threads)): the largest count whose warp
// allocation x the warps rounded to sub-partitions fits regs_per_block, at most
// regs_per_thread.
int max_regs_per_thread_for_block(int64_t threads, const GpuSpec& gpu);

}  // namespace dc
