// The estimate-only plan: per GPU type, every candidate cluster's workload scored by the
// estimator (variants enumerated, estimated, pruned) and the cover of the graph with the
// least estimated time. The same structure later carries measured times (tuning).
#pragma once

#include <string>
#include <vector>

#include "candidates.h"
#include "cover.h"
#include "estimator.h"
#include "gpu/gpu_spec.h"
#include "ir/precision.h"
#include "prune.h"

namespace dc {

struct WorkloadEstimate {
  size_t variants_total = 0;  // in the parameter space after the GPU's hard limits
  std::vector<ScoredVariant> kept;  // after pruning, best first
  double floor_seconds = 0;   // max(FLOPs/peak, bytes/bandwidth)
  double best_seconds() const { return kept.empty() ? 0 : kept.front().estimate.seconds; }
};

struct GpuPlan {
  const GpuSpec* gpu = nullptr;
  std::vector<WorkloadEstimate> workloads;  // parallel to WorkloadSet::workloads
  CoverResult cover;                        // chosen candidates and the total estimate
  double seconds = 0;                       // estimate + scoring wall time of this GPU
};

struct ModelPlan {
  std::vector<Candidate> candidates;
  std::vector<std::string> fusion_notes;  // attention sites left unfused and why (plan --explain)
  WorkloadSet workload_set;
  std::vector<GpuPlan> gpus;
};

struct PlanOptions {
  PruneOptions prune;
  Calibration calibration;
  // The plan's precision (--precision; docs/precision.md). The graph a plan is built from
  // has been through apply_precision for it.
  Precision precision = Precision::fp32;
  // Math paths to enumerate: always math_paths(precision) (set_plan_precision keeps the two
  // in step), so an fp32 model never silently changes precision.
  SpaceOptions space{{"fp32"}};
};

// A model's variants before they are estimated, the one place that enumerates them: candidate
// clusters, distinct workloads and, per GPU type, each workload's variants. `tune` estimates
// them twice, without calibration (the calibrate stage compares the DB's results with
// today's estimates) and with it (plan_by_estimate).
struct ModelVariants {
  size_t nodes = 0;  // the graph's, which the cover covers
  std::vector<Candidate> candidates;  // free_view marked
  std::vector<std::string> fusion_notes;
  WorkloadSet workload_set;
  struct Gpu {
    const GpuSpec* gpu = nullptr;
    std::vector<WorkloadVariants> workloads;  // parallel to WorkloadSet::workloads
    double seconds = 0;                       // the enumeration's wall time
  };
  std::vector<Gpu> gpus;
};

// Candidates -> workloads -> variants, per GPU, in the math paths of `space`.
ModelVariants enumerate_model_variants(const Graph& g, const std::vector<const GpuSpec*>& gpus,
                                       const SpaceOptions& space);

// Estimates -> pruning -> cover, per GPU, of the variants (enumerated in their own space:
// opts.space is not read).
ModelPlan plan_by_estimate(ModelVariants variants, const PlanOptions& opts);

// Candidates -> workloads -> variants -> estimates -> pruning -> cover, per GPU.
ModelPlan plan_by_estimate(const Graph& g, const std::vector<const GpuSpec*>& gpus,
                           const PlanOptions& opts);

}  // namespace dc
