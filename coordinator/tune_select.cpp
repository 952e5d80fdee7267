// The select stage: per GPU type, the best variant of every workload by the tuning DB's
// one definition (TuningDb::best_variants), then the cover with the least measured time.
#include <algorithm>

#include <fmt/format.h>

#include "ir/error.h"
#include "tune_stages.h"

namespace dc {

void select_measured(const ModelPlan& plan, const TuningDb& db, const std::string& nvrtc_major,
                     GpuTuneResult& gr, const std::vector<std::string>& math_paths) {
  const auto& ws = plan.workload_set.workloads;
  const std::string& gpu = gr.gpu->name;
  const auto gp_it = std::find_if(plan.gpus.begin(), plan.gpus.end(),
                                  [&](const GpuPlan& p) { return p.gpu->name == gpu; });
  DC_INTERNAL_CHECK(gp_it != plan.gpus.end(), "GPU type ", gpu, " is not in the plan");
  const GpuPlan& gp = *gp_it;

  gr.best_us.assign(ws.size(), 0);
  gr.best_key.assign(ws.size(), "");
  gr.failed_variants.clear();
  gr.ok_variants = 0;
  std::vector<int> best_results(ws.size(), 0);
  std::vector<std::string> best_hash(ws.size());
  for (size_t wi = 0; wi < ws.size(); ++wi) {
    BestVariantQuery q;
    q.gpu_type = gpu;
    q.source = gr.source;
    q.nvrtc_major = nvrtc_major;
    q.math_paths = math_paths;
    q.workload = ws[wi].signature;
    q.current_source_only = true;  // a stale result answers for a kernel that no longer exists
    for (const auto& [worker, why] : gr.quarantined) q.exclude_workers.insert(worker);
    for (const WorkloadBest& b : db.best_variants(q)) {
      for (const auto& [status, n] : b.failed_variants) gr.failed_variants[status] += n;
      gr.ok_variants += b.ok_variants;
      if (!b.has_best()) continue;
      gr.best_us[wi] = b.median_us;
      gr.best_key[wi] = b.variant_key;
      best_results[wi] = b.results;
      best_hash[wi] = b.source_hash;
    }
  }

  // The cover search runs over the candidates that have a time: measured ones, and every
  // singleton (the reference kernel at a prohibitive cost when it has none).
  std::vector<std::vector<size_t>> cand_nodes;
  std::vector<double> cost;
  std::vector<size_t> original;
  gr.unmeasured_clusters = 0;
  for (size_t c = 0; c < plan.candidates.size(); ++c) {
    const size_t wi = plan.workload_set.candidate_workload[c];
    const bool measured = !gr.best_key[wi].empty();
    if (!measured && plan.candidates[c].nodes.size() > 1) {
      ++gr.unmeasured_clusters;
      continue;
    }
    cand_nodes.push_back(plan.candidates[c].nodes);
    cost.push_back(plan.candidates[c].free_view ? 0.0 : measured ? gr.best_us[wi] : kReferenceCostUs);
    original.push_back(c);
  }
  size_t num_nodes = 0;
  for (const auto& c : plan.candidates)
    for (size_t n : c.nodes) num_nodes = std::max(num_nodes, n + 1);
  const CoverResult cover = select_cover(num_nodes, cand_nodes, cost);

  gr.cover = CoverResult{};
  gr.cover.exact = cover.exact;
  gr.choices.clear();
  gr.measured_total_us = gr.estimated_total_us = 0;
  gr.reference_fallbacks = 0;
  gr.estimate_cover_us = gp.cover.total_cost * 1e6;
  for (size_t k : cover.chosen) {
    const size_t c = original[k];
    gr.cover.chosen.push_back(c);
    ClusterChoice ch;
    ch.candidate = c;
    ch.workload = plan.workload_set.candidate_workload[c];
    const WorkloadEstimate& we = gp.workloads[ch.workload];
    ch.estimated_us = we.best_seconds() * 1e6;
    if (gr.best_key[ch.workload].empty()) {
      ch.reference = true;
      ++gr.reference_fallbacks;
    } else {
      ch.variant_key = gr.best_key[ch.workload];
      ch.measured_us = gr.best_us[ch.workload];
      ch.results = best_results[ch.workload];
      ch.source_hash = best_hash[ch.workload];
      for (const auto& sv : we.kept)
        if (sv.variant.key() == ch.variant_key) ch.estimated_us = sv.estimate.seconds * 1e6;
      gr.measured_total_us += ch.measured_us;
    }
    gr.estimated_total_us += ch.estimated_us;
    gr.choices.push_back(std::move(ch));
  }
  gr.cover.total_cost = gr.measured_total_us * 1e-6;
}

namespace tune_stage {

std::vector<GpuTuneResult> select(const ModelPlan& plan, std::vector<GpuTuneResult> gpus,
                                  const TuningDb& db, const TuneOptions& opts,
                                  const CheckedSet& checked, const CheckedSet& again) {
  for (size_t gi = 0; gi < gpus.size(); ++gi) {
    GpuTuneResult& gr = gpus[gi];
    select_measured(plan, db, gr.nvrtc_major, gr, opts.plan.space.precisions);
    if (!opts.check_winners || gr.source != TimingSource::emulated) continue;
    for (auto& c : gr.choices) c.checked = !c.reference && is_checked(checked, plan, gi, c, opts.retune, again);
  }
  return gpus;
}

std::string describe(const std::vector<GpuTuneResult>& selected) {
  std::string s;
  for (const auto& gr : selected) {
    s += s.empty() ? "" : "; ";
    if (!gr.has_results()) {
      s += gr.gpu->name + ": no results";
      continue;
    }
    s += fmt::format("{}: {:.1f} us over {} kernels{}", gr.gpu->name, gr.measured_total_us,
                     gr.choices.size(),
                     gr.reference_fallbacks ? fmt::format(" ({} reference kernels)", gr.reference_fallbacks) : "");
  }
  return s;
}

}  // namespace tune_stage

}  // namespace dc
