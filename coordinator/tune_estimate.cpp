// The variants stage: candidates, workloads and each GPU type's variants (plan_estimate.h),
// enumerated once; the estimate stage: their estimates with the calibrate stage's factors,
// pruning and the cover per GPU type.
#include <fmt/format.h>

#include "tune_stages.h"

namespace dc::tune_stage {

ModelVariants variants(const Graph& g, const TuneOptions& opts) {
  return enumerate_model_variants(g, opts.gpus, opts.plan.space);
}

std::string describe(const ModelVariants& v) {
  size_t n = 0;
  for (const auto& gv : v.gpus)
    for (const auto& w : gv.workloads) n += w.variants.size();
  return fmt::format("{} candidate clusters, {} distinct workloads, {} variants over {} GPU type(s)",
                     v.candidates.size(), v.workload_set.workloads.size(), n, v.gpus.size());
}

ModelPlan estimate(ModelVariants variants, const TuneOptions& opts, const Calibration& calibration) {
  PlanOptions plan_options = opts.plan;
  plan_options.calibration = calibration;
  return plan_by_estimate(std::move(variants), plan_options);
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
