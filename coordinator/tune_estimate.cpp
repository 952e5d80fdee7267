// The estimate stage: candidates, workloads, variants, estimates and pruning per GPU type
// (plan_estimate.h), with the calibrate stage's factors.
#include <fmt/format.h>

#include "tune_stages.h"

namespace dc::tune_stage {

ModelPlan estimate(const Graph& g, const TuneOptions& opts, const Calibration& calibration) {
  PlanOptions plan_options = opts.plan;
  plan_options.calibration = calibration;
  return plan_by_estimate(g, opts.gpus, plan_options);
}

std::string describe(const ModelPlan& plan) {
  size_t kept = 0;
  for (const auto& gp : plan.gpus)
    for (const auto& w : gp.workloads) kept += w.kept.size();
  return fmt::format("{} candidate clusters, {} distinct workloads, {} variants kept over {} GPU "
                     "type(s)", plan.candidates.size(), plan.workload_set.workloads.size(), kept,
                     plan.gpus.size());
}

double uncalibrated_us(const Calibration& c, const GpuSpec& gpu, const Workload& w,
                       const std::string& variant_key, double calibrated_us) {
  return calibrated_us / c.variant_factor(gpu.name, w.kind, variant_key);
}

}  // namespace dc::tune_stage
