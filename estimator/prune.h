// Pruning: of a workload's estimated variants, keep those whose estimate is within a
// factor of the best and at most the top K (both from the tune config), so that only
// plausible winners are compiled and measured.
#pragma once

#include <string>
#include <vector>

#include "estimator.h"
#include "gpu/gpu_spec.h"
#include "ir/workload.h"
#include "param_space.h"
#include "variant.h"

namespace dc {

struct PruneOptions {
  double within_factor = 1.5;  // keep estimates <= best x within_factor (>= 1)
  int top_k = 32;              // and at most this many (>= 1)
};

struct ScoredVariant {
  Variant variant;
  Estimate estimate;
};

// What orders a workload's variants: the estimate times exp(the ranking calibration's score)
// (Estimate::rank_log; the estimate itself without one).
double rank_seconds(const Estimate& e);

// The kept variants: those estimated within the factor of the fastest, in rank_seconds order,
// the first K of them; the best variant of each math path
// (Variant::precision) within the factor is among them even where the top K would cut it
// (it replaces the last variant of a path that has several); equal times by the sum of the estimate's
// resource times (compute + dram + l2 + smem: the variant with more slack first), then by
// Variant::key, so the result does not depend on the input order. Variants that cannot run
// ("unfit", infinite time) are dropped. UserError for options outside their ranges.
std::vector<ScoredVariant> prune(std::vector<ScoredVariant> scored, const PruneOptions& options);

// A workload's variants on a GPU before they are estimated: its shape, analysed once, and
// every variant enumerate_variants gives of it, in enumeration order.
struct WorkloadVariants {
  WorkloadShape shape;
  std::vector<Variant> variants;
};
WorkloadVariants workload_variants(const Workload& w, const GpuSpec& gpu, const SpaceOptions& space = {});

// Estimates each variant, in their order.
std::vector<ScoredVariant> score_variants(WorkloadVariants variants, const GpuSpec& gpu,
                                          const Calibration& calibration = {});
// workload_variants, then score_variants.
std::vector<ScoredVariant> score_variants(const Workload& w, const GpuSpec& gpu,
                                          const Calibration& calibration = {},
                                          const SpaceOptions& space = {});

}  // namespace dc
