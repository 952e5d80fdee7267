// The check stage (emulated tunes): selects, then sends a host-emulator check for every
// chosen winner that has not had one; a winner that fails it is excluded by the next
// selection (TuningDb::best_variants drops a variant with any final failure). A few
// rounds at most.
#include <fmt/format.h>

#include "tune_stages.h"

namespace dc::tune_stage {

namespace {

constexpr int kMaxCheckRounds = 4;

}  // namespace

const Variant* VariantFinder::find(size_t gi, size_t wi, const std::string& key) {
  for (const auto& sv : plan_.gpus[gi].workloads[wi].kept)
    if (sv.variant.key() == key) return &sv.variant;
  const auto [it, added] = parsed_.try_emplace({gi, wi, key});
  if (added) it->second = Variant::from_key(key, plan_.workload_set.workloads[wi], *gpus_[gi].gpu);
  return it->second ? &*it->second : nullptr;
}

bool is_checked(const CheckedSet& checked, const ModelPlan& plan, size_t gi, const ClusterChoice& c,
                bool retune, const CheckedSet& again) {
  const std::tuple<size_t, std::string, std::string> k{gi, plan.workload_set.workloads[c.workload].signature,
                                                       c.variant_key};
  if (checked.count(k)) return true;
  return !retune && c.results >= 2 && !again.count(k);
}

Checked check_winners(const ModelPlan& plan, std::vector<GpuTuneResult> gpus, const TuningDb& db,
                      const TuneOptions& opts, const Calibration& calibration,
                      const std::function<Collected(std::vector<PlannedJob>)>& measure,
                      const CheckedSet& again) {
  Checked out;
  out.failed_per_gpu.assign(gpus.size(), 0);
  VariantFinder variants(plan, gpus);
  const auto& workloads = plan.workload_set.workloads;
  for (int round = 0; round < kMaxCheckRounds; ++round) {
    std::vector<PlannedJob> jobs;
    for (size_t gi = 0; gi < gpus.size(); ++gi) {
      GpuTuneResult& gr = gpus[gi];
      if (gr.source != TimingSource::emulated || gr.workers == 0) continue;
      select_measured(plan, db, gr.nvrtc_major, gr, opts.plan.space.precisions);
      std::set<std::pair<size_t, std::string>> seen;
      for (const auto& c : gr.choices) {
        if (c.reference || !seen.insert({c.workload, c.variant_key}).second) continue;
        if (is_checked(out.checked, plan, gi, c, opts.retune, again)) continue;
        const Variant* v = variants.find(gi, c.workload, c.variant_key);
        if (!v) continue;  // measured by an earlier run with another space: trust it
        const double us = uncalibrated_us(calibration, *gr.gpu, workloads[c.workload],
                                          c.variant_key, c.estimated_us);
        jobs.push_back({gi, c.workload, *v, us, true, false, {}});
      }
    }
    if (jobs.empty()) break;
    for (const auto& j : jobs) out.checked.insert({j.gpu, workloads[j.workload].signature, j.variant.key()});
    out.sent += static_cast<int64_t>(jobs.size());
    const Collected got = measure(std::move(jobs));
    for (size_t gi = 0; gi < gpus.size(); ++gi)
      for (const auto& [status, n] : got.by_status[gi])
        if (status != JobStatus::ok) {
          out.failed += n;
          out.failed_per_gpu[gi] += static_cast<int>(n);
        }
    if (got.interrupted) break;
  }
  return out;
}

std::string describe(const Checked& c) {
  return fmt::format("{} winners checked on the host emulator, {} failed", c.sent, c.failed);
}

}  // namespace dc::tune_stage
