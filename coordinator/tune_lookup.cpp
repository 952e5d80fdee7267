// The lookup stage: what each GPU type still needs measured, given what the DB has for its
// source and toolchain (reuse), plus seeds from other GPU types and the reference kernel.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tune_stages.h"

namespace dc::tune_stage {

namespace {

// A workload this GPU type has no result for also tries the best variants of the nearest
// GPU type that has some (those that fit this GPU and are not already planned).
void add_seeds(const Workload& w, const GpuTuneResult& gr, const TuningDb& db,
               const TuneOptions& opts, const Calibration& calibration,
               std::vector<std::pair<Variant, double>>& planned, LookupCounts& counts) {
  if (opts.seed_k <= 0) return;
  const Seeds seeds = seed_variants(db, w.signature, *gr.gpu, gr.source, opts.seed_k);
  ++counts.seed_levels[seeds.level];
  if (seeds.level == SeedLevel::exact || seeds.level == SeedLevel::estimator_only) return;
  std::set<std::string> have;
  for (const auto& p : planned) have.insert(p.first.key());
  std::set<std::string> wanted;
  for (const auto& m : seeds.best)
    if (!have.count(m.variant_key)) wanted.insert(m.variant_key);
  if (wanted.empty()) return;
  // Variants are data: rebuild them from this GPU's own space, which keeps only those
  // that fit it.
  const auto& paths = opts.plan.space.precisions;
  for (const Variant& v : enumerate_variants(w, *gr.gpu)) {
    if (!wanted.count(v.key()) || std::find(paths.begin(), paths.end(), v.precision) == paths.end())
      continue;
    const Estimate e = dc::estimate(w, v, *gr.gpu, calibration);
    if (!std::isfinite(e.seconds)) continue;
    planned.emplace_back(v, e.seconds * 1e6);
    ++counts.seeded;
  }
}

}  // namespace

Lookup lookup(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, const TuningDb& db,
              const TuneOptions& opts, const Calibration& calibration) {
  const auto& workloads = plan.workload_set.workloads;
  Lookup out;
  out.per_gpu.resize(gpus.size());
  for (size_t gi = 0; gi < gpus.size(); ++gi) {
    const GpuTuneResult& gr = gpus[gi];
    LookupCounts& counts = out.per_gpu[gi];
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      const Workload& w = workloads[wi];
      std::vector<std::pair<Variant, double>> planned;
      for (const auto& sv : plan.gpus[gi].workloads[wi].kept)
        planned.emplace_back(sv.variant, sv.estimate.seconds * 1e6);
      add_seeds(w, gr, db, opts, calibration, planned, counts);
      std::set<std::string> measured;
      if (!opts.retune) measured = db.measured_variants(w.signature, gr.gpu->name, gr.source, gr.nvrtc_major);
      for (auto& [v, est] : planned) {
        ++counts.planned;
        if (measured.count(v.key())) {
          ++counts.reused;
          continue;
        }
        if (gr.workers == 0) {
          ++counts.abandoned;
          continue;
        }
        const double us = uncalibrated_us(calibration, *gr.gpu, w, v.key(), est);
        out.jobs.push_back({gi, wi, std::move(v), us, false});
      }
      // The baseline: the reference kernel, once per workload and GPU type (no estimate,
      // so the estimator's calibration never sees it; selection never chooses it).
      const Variant ref = reference_variant();
      if (opts.measure_reference && gr.workers > 0 && !measured.count(ref.key()))
        out.jobs.push_back({gi, wi, ref, 0.0, false});
    }
  }
  return out;
}

std::string describe(const Lookup& l, const TuneOptions& opts) {
  int64_t reused = 0;
  for (const auto& c : l.per_gpu) reused += c.reused;
  const auto references = std::count_if(l.jobs.begin(), l.jobs.end(),
                                        [](const PlannedJob& j) { return is_reference(j.variant); });
  return fmt::format("{} variants to measure{}, {} already in the DB{}",
                     static_cast<int64_t>(l.jobs.size()) - references,
                     references ? fmt::format(" (+ {} reference kernels)", references) : "", reused,
                     opts.retune ? " (--retune: measured again)" : "");
}

}  // namespace dc::tune_stage
