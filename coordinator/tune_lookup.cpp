// The lookup stage: what each GPU type still needs measured, given what the DB has for its
// source and toolchain (reuse), plus seeds from other GPU types and the reference kernel.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "generate.h"
#include "ir/parallel.h"
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
  // Variants are data: rebuild them from their keys in this GPU's own space, which keeps
  // only those that fit it.
  const auto& paths = opts.plan.space.precisions;
  for (const std::string& key : wanted) {
    const std::optional<Variant> found = Variant::from_key(key, w, *gr.gpu);
    if (!found) continue;
    const Variant& v = *found;
    if (std::find(paths.begin(), paths.end(), v.precision) == paths.end()) continue;
    const Estimate e = dc::estimate(w, v, *gr.gpu, calibration);
    if (!std::isfinite(e.seconds)) continue;
    planned.emplace_back(v, e.seconds * 1e6);
    ++counts.seeded;
  }
}

}  // namespace

namespace {

using Planned = std::vector<std::pair<Variant, double>>;  // variant, estimate (us)

// The hash of the source today's generator writes for each (workload, variant), generated in
// parallel.
std::vector<std::string> source_hashes(const std::vector<std::pair<const Workload*, const Variant*>>& todo) {
  std::vector<std::string> out(todo.size());
  parallel_for(static_cast<int64_t>(todo.size()), 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto& [w, v] = todo[static_cast<size_t>(i)];
      const GeneratedKernel k = is_reference(*v) ? generate_reference(*w) : generate_kernel(*w, *v);
      out[static_cast<size_t>(i)] = fnv1a_hex(k.source);
    }
  });
  return out;
}

// The hash of the source today's generator writes for each planned (workload, variant),
// committed as the variant's current source: a result of another source is stale.
std::map<std::pair<size_t, std::string>, std::string> refresh_source_hashes(
    const std::vector<std::vector<Planned>>& planned, const ModelPlan& plan, TuningDb& db) {
  const auto& workloads = plan.workload_set.workloads;
  std::map<std::pair<size_t, std::string>, std::string> hashes;
  std::vector<std::pair<size_t, const Variant*>> todo;
  for (const auto& per_gpu : planned)
    for (size_t wi = 0; wi < per_gpu.size(); ++wi)
      for (const auto& [v, est] : per_gpu[wi])
        if (hashes.emplace(std::make_pair(wi, v.key()), "").second) todo.emplace_back(wi, &v);
  std::vector<std::pair<const Workload*, const Variant*>> sources;
  for (const auto& [wi, v] : todo) sources.emplace_back(&workloads[wi], v);
  const std::vector<std::string> out = source_hashes(sources);
  for (size_t i = 0; i < todo.size(); ++i) {
    const auto& [wi, v] = todo[i];
    hashes[{wi, v->key()}] = out[i];
    db.commit_variant(workloads[wi].signature, *v, out[i]);
  }
  return hashes;
}

// Whether the DB holds final results of this build's source for at least `kept` variants of
// the workload (reference kernels aside, the plan's math paths only): those planned today by
// their refreshed hash, then, where those are too few, the others by generating them.
bool holds_current_results(const Workload& w, size_t wi, const GpuSpec& gpu, const TuneOptions& opts,
                           const std::map<std::string, std::set<std::string>>& measured,
                           const std::map<std::pair<size_t, std::string>, std::string>& today, size_t kept) {
  const auto& paths = opts.plan.space.precisions;
  size_t n = 0;
  std::vector<std::pair<Variant, const std::set<std::string>*>> others;  // not planned today: their hashes
  for (const auto& [key, hashes] : measured) {
    if (is_reference_key(key)) continue;
    if (const auto t = today.find({wi, key}); t != today.end()) {
      n += hashes.count(t->second);
      continue;
    }
    std::optional<Variant> v = Variant::from_key(key, w, gpu);
    if (v && std::find(paths.begin(), paths.end(), v->precision) != paths.end())
      others.emplace_back(std::move(*v), &hashes);
  }
  if (n >= kept) return true;
  std::vector<std::pair<const Workload*, const Variant*>> sources;
  for (const auto& [v, hashes] : others) sources.emplace_back(&w, &v);
  const std::vector<std::string> generated = source_hashes(sources);
  for (size_t i = 0; i < others.size(); ++i) n += others[i].second->count(generated[i]);
  return n >= kept;
}

}  // namespace

Lookup lookup(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, TuningDb& db,
              const TuneOptions& opts, const Calibration& calibration) {
  const auto& workloads = plan.workload_set.workloads;
  Lookup out;
  out.per_gpu.resize(gpus.size());
  // What each GPU type would measure: the kept variants, seeds, and the reference kernel
  // (estimate < 0: no estimate, so the estimator's calibration never sees it).
  std::vector<std::vector<Planned>> planned(gpus.size(), std::vector<Planned>(workloads.size()));
  for (size_t gi = 0; gi < gpus.size(); ++gi)
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      Planned& p = planned[gi][wi];
      for (const auto& sv : plan.gpus[gi].workloads[wi].kept) p.emplace_back(sv.variant, sv.estimate.seconds * 1e6);
      add_seeds(workloads[wi], gpus[gi], db, opts, calibration, p, out.per_gpu[gi]);
      if (opts.measure_reference && gpus[gi].workers > 0) p.emplace_back(reference_variant(), -1.0);
    }
  const auto today = refresh_source_hashes(planned, plan, db);
  for (size_t gi = 0; gi < gpus.size(); ++gi) {
    const GpuTuneResult& gr = gpus[gi];
    LookupCounts& counts = out.per_gpu[gi];
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      const Workload& w = workloads[wi];
      std::map<std::string, std::set<std::string>> measured;
      if (!opts.retune) measured = db.measured_source_hashes(w.signature, gr.gpu->name, gr.source, gr.nvrtc_major);
      // Tuned before: the DB holds as many current results as the tune keeps variants, of
      // another kept set than today's (the calibration that those results fitted reorders
      // the variants). Its measured best stands (select_measured reads all its results):
      // measuring the newly kept ones would chase the calibration's reordering tune after
      // tune. --retune measures the kept set again.
      const size_t kept = plan.gpus[gi].workloads[wi].kept.size();
      const bool tuned = !measured.empty() && holds_current_results(w, wi, *gr.gpu, opts, measured, today, kept);
      for (auto& [v, est] : planned[gi][wi]) {
        const bool reference = est < 0;  // the baseline: not counted as a variant
        if (!reference) ++counts.planned;
        const auto m = measured.find(v.key());
        if (m != measured.end() && m->second.count(today.at({wi, v.key()}))) {
          if (!reference) ++counts.reused;
          continue;
        }
        if (tuned && !reference) {
          ++counts.settled;
          continue;
        }
        if (m != measured.end()) ++counts.stale;  // measured, but another source: again
        if (gr.workers == 0) {
          if (!reference) ++counts.abandoned;
          continue;
        }
        const double us = reference ? 0.0 : uncalibrated_us(calibration, *gr.gpu, w, v.key(), est);
        out.jobs.push_back({gi, wi, std::move(v), us, false, false, {}});
      }
    }
  }
  return out;
}

std::string describe(const Lookup& l, const TuneOptions& opts) {
  int64_t reused = 0;
  for (const auto& c : l.per_gpu) reused += c.reused;
  const auto references = std::count_if(l.jobs.begin(), l.jobs.end(),
                                        [](const PlannedJob& j) { return is_reference(j.variant); });
  int64_t stale = 0, settled = 0;
  for (const auto& c : l.per_gpu) {
    stale += c.stale;
    settled += c.settled;
  }
  return fmt::format("{} variants to measure{}, {} already in the DB{}{}{}",
                     static_cast<int64_t>(l.jobs.size()) - references,
                     references ? fmt::format(" (+ {} reference kernels)", references) : "", reused,
                     settled ? fmt::format(", {} newly kept of workloads tuned before not measured (their measured "
                                           "best stands; --retune measures the kept set again)", settled)
                             : "",
                     stale ? fmt::format(", {} stale (measured from another source: measured again)", stale) : "",
                     opts.retune ? " (--retune: measured again)" : "");
}

}  // namespace dc::tune_stage
