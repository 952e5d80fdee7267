// The calibrate stage: the estimator's factors. The config's, then for each GPU type and
// kind the config leaves open, the fit of the DB's results of this tune's source (never
// the other source's: an emulated device's timing model says nothing about the real GPU).
// The DB is the farm's where it keeps one (the farm service of `tune --farm`, whose tune
// has a DB in memory only), else the tune's.
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "calibration_rank_fit.h"
#include "ir/error.h"
#include "prune.h"
#include "rank_fit_db.h"

#include "tune_stages.h"

namespace dc::tune_stage {

namespace {

// "conv x1.20, gemm x0.90": the factors of one GPU type.
std::string describe_factors(const Calibration& c, const std::string& gpu) {
  std::string out;
  for (const auto& [key, factor] : c.factors)
    if (key.first == gpu)
      out += fmt::format("{}{} x{:.2f}", out.empty() ? "" : ", ", cluster_kind_name(key.second), factor);
  return out;
}

int count_used(const std::vector<FittedFactor>& fit) {
  int n = 0;
  for (const FittedFactor& f : fit) n += f.used ? 1 : 0;
  return n;
}

// The per-parameter factors (calibration_fit.h), of real results only: an emulated device's
// times come from this model, so their differences between variants are the emulator's noise,
// not a cost the model lacks.
void apply_params(const std::string& gpu, const std::vector<FittedParamFactor>& fit, const StageLog& log,
                  Calibrated& c) {
  c.param_fitted += apply_param_fit(fit, c.calibration);
  if (!fit.empty())
    log.notice(fmt::format("calibration {}: {} per-parameter factor(s) within workloads: {}", gpu, fit.size(),
                           describe_param_fit(fit)));
}

// The pairwise ranking vectors (calibration_rank_fit.h) of real results, from the tune's own
// DB or the farm service's; a template with a vector drops its per-parameter factors.
void apply_rank(const GpuSpec& gpu, const std::vector<FittedRankVector>& fit, const StageLog& log, Calibrated& c) {
  c.rank_fitted += apply_rank_fit(fit, c.calibration);
  for (const FittedRankVector& f : fit) c.calibration.param_factors.erase(f.group);
  if (!fit.empty())
    log.notice(fmt::format("calibration {}: {} pairwise ranking vector(s) within workloads: {}", gpu.name,
                           fit.size(), describe_rank_fit(fit)));
}

// Today's uncalibrated estimate of each variant of the model's workloads on GPU type gi (the
// variants stage's enumeration) that the samples hold a result of: what
// compare_with_todays_estimates looks up.
EstimateTable todays_estimates(const ModelVariants& variants, size_t gi, const std::vector<EstimatorSample>& samples) {
  std::map<std::string, std::set<std::string>> sampled;  // workload signature -> variant keys
  for (const EstimatorSample& s : samples) sampled[s.workload].insert(s.variant_key);
  EstimateTable out;
  const ModelVariants::Gpu& gv = variants.gpus[gi];
  for (size_t wi = 0; wi < gv.workloads.size(); ++wi) {
    const std::string& signature = variants.workload_set.workloads[wi].signature;
    const auto keys = sampled.find(signature);
    if (keys == sampled.end()) continue;
    const WorkloadVariants& wv = gv.workloads[wi];
    for (const Variant& v : wv.variants)
      if (std::string key = v.key(); keys->second.count(key))
        out[{signature, std::move(key)}] = estimate(wv.shape, v, *gv.gpu).seconds * 1e6;
  }
  return out;
}

// The DB's results of this model's workloads are compared with today's estimates: a model
// changed since they were measured would otherwise be calibrated for its predecessor's errors
// (docs/estimator.md, "Calibration"). Results of other models' workloads keep the estimate
// recorded with them.
void compare_with_today(const ModelVariants& variants, size_t gi, const StageLog& log,
                        std::vector<EstimatorSample>& samples) {
  if (samples.empty()) return;
  const size_t changed = compare_with_todays_estimates(samples, todays_estimates(variants, gi, samples));
  log.notice(fmt::format("calibration {}: {} of {} DB results compared with today's estimates (this model's "
                         "workloads; the others with the estimate recorded with them)",
                         variants.gpus[gi].gpu->name, changed, samples.size()));
}

}  // namespace

Calibrated calibrate(const TuningDb& db, Farm& farm, const TuneOptions& opts, const StageLog& log,
                     const ModelVariants& variants) {
  DC_INTERNAL_CHECK(variants.gpus.size() == opts.gpus.size(), "calibrate: variants of ", variants.gpus.size(),
                    " GPU type(s) for ", opts.gpus.size());
  Calibrated c;
  c.calibration = opts.plan.calibration;
  c.fits.resize(opts.gpus.size());
  c.from_db = opts.calibration_from_db;
  c.source = source_of(opts.emulated);
  if (!c.from_db) return c;
  // The ranking vectors (tune --rank-calibration) are fitted, here or by the farm service, only
  // where they are applied.
  const bool rank = opts.calibration_params && opts.calibration_rank && c.source == TimingSource::real;
  for (size_t gi = 0; gi < opts.gpus.size(); ++gi) {
    const std::string& gpu = opts.gpus[gi]->name;
    // Only results of this plan's storage: an fp16 plan's factors never come from fp32
    // results, whatever the math unit (docs/estimator.md, Calibration).
    const std::string storage(dtype_name(storage_dtype(opts.plan.precision)));
    std::optional<Farm::Ratios> farms =
        farm.estimator_ratios(gpu, c.source == TimingSource::emulated, storage, /*rank_vectors=*/rank);
    const bool farms_db = farms.has_value();
    std::vector<EstimatorSample> samples;
    if (!farms_db) {
      samples = db.estimator_samples(gpu, c.source, storage);
      compare_with_today(variants, gi, log, samples);
    }
    c.fits[gi] = fit_calibration(farms_db ? farms->by_unit : ratios_of(samples));
    c.fitted += apply_fit(gpu, c.fits[gi], opts.plan.calibration, c.calibration);
    int results = 0;
    for (const FittedFactor& f : c.fits[gi]) results += f.samples;
    const std::string config = describe_factors(opts.plan.calibration, gpu);
    log.notice(fmt::format("calibration {} from {} {} DB results of {} workloads (per kind and math unit; "
                           "factors applied: {}): {}{}{}", gpu, results, source_name(c.source), storage,
                           count_used(c.fits[gi]), describe_fit(c.fits[gi]),
                           config.empty() ? "" : "; the config sets " + config,
                           farms_db ? "; the DB is the farm service's" : ""));
    if (opts.calibration_params && c.source == TimingSource::real)
      apply_params(gpu, farms_db ? farms->param_fit : fit_param_factors(gpu, samples), log, c);
    if (rank)
      apply_rank(*opts.gpus[gi], farms_db ? farms->rank_fit : fit_rank_vectors_of_db(db, *opts.gpus[gi], samples), log,
                 c);
  }
  return c;
}

std::string describe(const Calibrated& c) {
  if (!c.from_db) return "factors from the DB: off (config factors only)";
  if (c.param_fitted == 0 && c.rank_fitted == 0)
    return fmt::format("{} factor(s) fitted from {} DB results", c.fitted, source_name(c.source));
  return fmt::format("{} factor(s), {} per-parameter factor(s) and {} ranking vector(s) fitted from {} DB results",
                     c.fitted, c.param_fitted, c.rank_fitted, source_name(c.source));
}

}  // namespace dc::tune_stage
