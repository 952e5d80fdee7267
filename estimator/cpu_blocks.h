// The block models of a CPU device (GpuSpec::runs_work_items_serially: pocl-cpu). PoCL runs a
// work-group on one core as loops over its work-items, one loop per region between
// barriers, and on dc's kernels it does not vectorise those loops across work-items (the
// disassembled work-group functions are scalar loops over the work-items; docs/estimator.md,
// "CPU devices"). A work-item is then a serial thread: its only SIMD is its own vectors
// (`vec` loads, a GEMM thread's row of thread_n columns packed into vector FMAs) and its
// only latency hiding is its own independent chains (a thread tile's accumulator vectors).
// So a work-group costs the sum of its work-items' cycles, each counted from its
// instructions against the core's ports, plus the work-item loop's own overhead.
#pragma once

#include "block_model.h"
#include "param_space.h"

namespace dc::estimator_detail {

// Instructions a core's work-item loop spends per work-item and region between barriers:
// the loop's increment, compare and branch, and the work-item's ids and values live across
// the barrier reloaded from PoCL's context arrays (a modelling constant).
constexpr double kWorkItemLoopInstructions = 10;

// The block model of `v` on the CPU device `g`; false where the family has none (attention,
// which keeps the GPU model).
bool cpu_block(const WorkloadShape& s, const Params& p, const Variant& v, const GpuSpec& g,
               BlockModel* out);

// Cycles of one k step of a GEMM work-item's thread tile (thread_m x thread_n): its row of
// thread_n columns in ceil(thread_n / lanes) vectors, one broadcast of A per row; the
// thread_m x those vectors accumulators are independent FMA chains, so a step takes at
// least one FMA latency, and at least its FMAs over the FMA pipes, its loads over the load
// ports and all its instructions over the issue width.
double cpu_gemm_step_cycles(int64_t thread_m, int64_t thread_n, const GpuSpec& g);

}  // namespace dc::estimator_detail
