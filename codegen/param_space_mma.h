// Register estimates of the tensor-core GEMM/conv and attention paths that need more than
// param_space.h's figures: what a thread moves per K tile (also written into codegen's kernel
// JSON for the fits) and sm_70's m8n8k4 estimates. Defined in param_space.cpp (GEMM/conv) and
// param_space_attention.cpp (attention).
#pragma once

#include <cstdint>
#include <string>

#include "param_space.h"

namespace dc {

// What a thread of a tensor-core GEMM/conv block moves per K tile: the inputs of the register
// estimates (enumerate_gemm_mma), also written beside ptxas's figures in codegen's kernel
// JSON ("mma_thread_load") for the fits (scripts/fit_m8n8k4_regs.py).
struct MmaThreadLoad {
  double moved = 0;          // tile elements of both operands, (block_m + block_n)·block_k / threads
  double staged = 0;         // through registers in vector loads (f32 storage, the gathered conv input)
  double scalar = 0;         // f16/bf16 elements through registers one by one
  double gathered = 0;       // im2col cost: 2 per element copied, 4 per element through registers
  double plane_copies = 0;   // 4-byte copies of a conv A that is not gathered (a 7x7 plane)
  double narrow_copies = 0;  // 4-byte copies of operands that are not gathered
  int a_copy = 0, b_copy = 0;  // gemm_mma_copy_bytes of A and B (0: through registers)
  double copies = 0;         // vector copies of the copied operands (cp.async, synchronous on sm_70)
  int64_t k_tiles = 0;       // the K loop's trip count per split
  bool conv = false;
};
MmaThreadLoad gemm_mma_thread_load(const WorkloadShape& s, const std::string& precision, int64_t block_m,
                                   int64_t block_n, int64_t block_k, int64_t split_k, int64_t threads);

// sm_70's mma.sync m8n8k4 GEMM/conv registers (fp16), fitted to ptxas (NVRTC 12.9) over the
// sm_70 kept matrix of ResNet-50 and BERT-base, MobileNetV2's held out as the check
// (scripts/fit_m8n8k4_regs.py, docs/bench/registers.md): a·(0.8 + a/256) for a = warp_m·warp_n/32 accumulators + 7.2 per
// vector copy a thread makes per K tile where there is a next tile (every copy is synchronous
// before sm_80: the next tile's values and addresses are live across the tile's mma; with one
// K tile the code is straight-line) + 2.86 per f16 element loaded one by one through registers
// times min(2, K tiles) + 1.0 x the im2col cost + 12 for a conv + 14. At most the launch bound
// below 255.
int gemm_m8n8k4_regs(int64_t warp_m, int64_t warp_n, const MmaThreadLoad& t, int64_t threads);
// sm_70's m8n8k4 attention registers (fp16), fitted the same way on BERT-base's kept
// variants: 53.3 + per m16 tile of a warp 0.43 x (Q's fragments, 2 per k4 step, the Dv/2
// output accumulators, 4 for m and l) + 2.61 x the block_n/2 score accumulators (each with
// its exponential and its f16 copy for P's shared tile). At most the launch bound below 255.
int attention_m8n8k4_regs(const WorkloadShape& s, int64_t warp_m, int64_t block_n, int64_t threads);

}  // namespace dc
