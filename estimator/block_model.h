// The estimator's internal description of one thread block (work-group), shared by the GPU
// block models (estimator.cpp) and the CPU device's (cpu_blocks.cpp); estimate() combines a
// BlockModel into time on the device. Not part of the estimator's interface.
#pragma once

#include <cstdint>

#include "gpu/gpu_spec.h"
#include "param_space.h"
#include "variant.h"

namespace dc::estimator_detail {

// A variant's parameters, decoded once per estimate (map lookups by string are the cost).
struct Params {
  int64_t block_m = 0, block_n = 0, block_k = 0, warp_m = 0, warp_n = 0;
  int64_t thread_m = 0, thread_n = 0, vec = 1, stages = 1, split_k = 1, split_kv = 1;
  int64_t tile_h = 1, tile_w = 1, block_c = 1, pixels_per_thread = 1;
  int64_t threads = 0, threads_per_row = 32, rows_per_block = 1, cache = 0, elems_per_thread = 1;
};

Params decode(const Variant& v);

// One thread block as the model sees it.
struct BlockModel {
  double pipe_cycles = 0;        // SM cycles of issue/pipe work, latency fully hidden
  double warps_needed = 4;       // resident warps per SM that hide the pipes' latency
  double critical_cycles = 0;    // the block alone on an SM: its serial latency path
  double smem_bytes = 0;         // shared-memory bank traffic
  double l2_bytes = -1;          // global loads through the SM's L2 port (< 0: DRAM share)
  double dram_bytes = 0;         // the whole kernel's DRAM traffic
  double inflight_per_warp = 0;  // DRAM bytes a warp keeps requested at once
};

double cdiv(double a, double b);
// FLOPs per output element beyond the GEMM's multiply-adds (bias, activation, residual).
double epilogue_flops_per_output(const WorkloadShape& s, double gemm_flops, double outputs);
// Operand re-reads after tile reuse (an operand is re-read once per tile of the other
// dimension unless half of L2 holds it).
double reread_bytes(double operand_bytes, double reads, const GpuSpec& g);

// Instructions (warp instructions on a GPU, a work-item's on a CPU device: the count per
// element is the same) that move one GEMM operand's `elems` of a K tile into shared memory
// through registers, or with cp.async (`async`), as template_gemm_loads.cpp emits them.
double fp32_operand_instructions(const GemmOperandLayout& o, double elems, int64_t vec, bool async);

}  // namespace dc::estimator_detail
