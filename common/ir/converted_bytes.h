// Weights on disk transformed lazily: f32 values in an fp16/bf16 plan's storage dtype
// (apply_precision's rule: clamp to the dtype's finite range, then round to nearest even)
// and BatchNorm's per-channel scale folded into a weight. The result is a lazy tensor whose
// bytes are computed chunk by chunk when needed (plan writing streams them), so a plan of
// a model with billions of parameters never holds its transformed weights in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/tensor.h"

namespace dc {

// Largest finite value of f16 or bf16.
double storage_finite_max(DType to);

// Values clamped by convert_to_storage: how many, and the extremes seen.
struct ClampStats {
  int64_t clamped = 0;
  float lo = 0, hi = 0;
};

// src[0, n) as f16 or bf16 into dst: a value beyond the finite range (not NaN) is clamped to
// +-storage_finite_max first (and counted in *stats when given), inf included.
void convert_to_storage(const float* src, size_t n, DType to, uint16_t* dst, ClampStats* stats);

// The f32 tensor `src` in `to`, converted when its bytes are first needed (copy_bytes
// converts only the range asked for). `src` stays as it is: a file-backed weight is read
// in chunks, never made resident.
Tensor convert_lazily(const Tensor& src, DType to);

// What convert_to_storage clamps in the whole of `src`, read in chunks.
ClampStats scan_clamps(const Tensor& src, DType to);

// The f32 tensor `src` with element i multiplied by factors[(i / inner) % factors.size()]
// (in double, rounded to f32), computed when needed like convert_lazily: BatchNorm folded
// into a Conv weight on disk (inner = elements per output channel) or into a Gemm's B
// (inner = columns for transB, else 1).
Tensor scale_lazily(const Tensor& src, std::vector<double> factors, int64_t inner);

}  // namespace dc
