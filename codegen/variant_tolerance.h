// The bound a variant's output is checked against (the worker's reference check, tune's
// jobs): common/ir/tolerance.h's kernel_tolerance for the variant's math path, the
// workload's output dtypes and its reduction length. docs/precision.md.
#pragma once

#include <cstdint>
#include <string>

#include "ir/tolerance.h"
#include "ir/workload.h"
#include "param_space.h"

namespace dc {

// The longest sum behind one output element of the workload: GEMM / convolution K
// (depthwise: the kernel window), attention max(D, Sk), a reduction's row length, a pool's
// window; for an opaque workload the largest such length over its nodes; 1 for purely
// elementwise work.
int64_t reduction_length(const Workload& w, const WorkloadShape& s);

// kernel_tolerance(precision, d, reduction_length) for the dtype d of the coarsest storage
// (largest unit roundoff) among the tensors the workload computes, intermediates included:
// an f16 intermediate that the kernel and the reference round one ulp apart carries that
// ulp into an f32 output. f32 when everything computed is f32.
Tolerance variant_tolerance(const std::string& precision, const Workload& w);

}  // namespace dc
