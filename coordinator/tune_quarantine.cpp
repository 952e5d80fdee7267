// Quarantine, the one mechanism behind the cross-check's and the drift check's verdicts
// (docs/tune.md): a quarantined worker gets no new job of this tune (dispatch adds it to
// every job's avoid_workers), selection leaves its results out, its ok results of this run
// are marked implausible in the DB (so later tunes neither select nor reuse them), and what
// only it measured is measured again elsewhere.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tune_stages.h"

namespace dc::tune_stage {

int64_t mark_run_results(size_t gi, const std::string& worker, const std::string& why, TuningDb& db,
                         const Ledger& ledger) {
  int64_t marked = 0;
  for (const auto& [k, rows] : ledger.ok_results)
    if (std::get<0>(k) == gi)
      for (const Measurement& m : rows)
        if (m.worker == worker && db.mark_implausible(m, why)) {
          ++marked;
          if (ledger.farm) ledger.farm->mark_implausible(m, why);
        }
  // Its sentinels are not in the tune's DB, but a farm service records every result it measures.
  if (const auto s = ledger.sentinels.find(gi); s != ledger.sentinels.end() && ledger.farm)
    for (const Measurement& m : s->second)
      if (m.worker == worker && m.status == JobStatus::ok) ledger.farm->mark_implausible(m, why);
  return marked;
}

int64_t quarantine(size_t gi, const std::string& worker, const std::string& check, const std::string& reason,
                   const std::vector<GpuTuneResult>& gpus, TuningDb& db, Ledger& ledger, const StageLog& log) {
  ledger.quarantined[gi][worker] = reason;
  const int64_t marked =
      mark_run_results(gi, worker, fmt::format("worker {} quarantined by tune's {}: {}", worker, check, reason), db, ledger);
  const std::string& type = gpus[gi].gpu->name;
  spdlog::error("tune: *** QUARANTINED worker {} ({}) by the {} *** {}; it gets no new jobs in this tune, its {} "
                "results of this run are marked implausible in the DB, and what only it measured is "
                "measured again elsewhere", worker, type, check, reason, marked);
  log.notice(fmt::format("QUARANTINED worker {} ({}): {}", worker, type, reason));
  return marked;
}

std::optional<PlannedJob> again_job(const ModelPlan& plan, VariantFinder& variants, const ResultKey& k,
                                    const Measurement& first, std::set<std::string> avoid) {
  const auto& [gi, signature, key] = k;
  const auto& ws = plan.workload_set.workloads;
  const auto wit = std::find_if(ws.begin(), ws.end(), [&](const Workload& w) { return w.signature == signature; });
  if (wit == ws.end()) return std::nullopt;
  const size_t wi = static_cast<size_t>(wit - ws.begin());
  const Variant* v = variants.find(gi, wi, key);
  if (!v) return std::nullopt;  // not in this build's space: nothing to send
  PlannedJob j;
  j.gpu = gi;
  j.workload = wi;
  j.variant = *v;
  j.estimate_us = first.estimate_us;  // uncalibrated, as stored
  j.again = true;
  j.avoid_workers = std::move(avoid);
  return j;
}

std::vector<PlannedJob> moved_jobs(const ModelPlan& plan, VariantFinder& variants, Ledger& ledger) {
  std::vector<PlannedJob> jobs;
  for (const auto& [k, rows] : ledger.ok_results) {
    const auto q = ledger.quarantined.find(std::get<0>(k));
    if (q == ledger.quarantined.end() || rows.empty() || is_reference_key(std::get<2>(k))) continue;
    const bool honest = std::any_of(rows.begin(), rows.end(), [&](const Measurement& m) { return !q->second.count(m.worker); });
    if (honest || !ledger.moved.insert(k).second) continue;
    if (auto j = again_job(plan, variants, k, rows.front(), {})) jobs.push_back(std::move(*j));  // dispatch adds the quarantined
  }
  return jobs;
}

}  // namespace dc::tune_stage
