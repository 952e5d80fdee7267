#include "plan_estimate.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "ir/error.h"
#include "plan_views.h"
#include "ir/clock.h"

namespace dc {

namespace {

WorkloadEstimate estimate_workload(const Workload& w, const GpuSpec& gpu, const PlanOptions& opts) {
  WorkloadEstimate e;
  auto scored = score_variants(w, gpu, opts.calibration, opts.space);
  e.variants_total = scored.size();
  DC_INTERNAL_CHECK(!scored.empty(), "no variant for workload ", w.signature, " (",
                    cluster_kind_name(w.kind), ") on ", gpu.name);
  e.kept = prune(std::move(scored), opts.prune);
  // The floor of the best variant's precision path (tensor cores have a higher peak).
  e.floor_seconds = floor_seconds(w, gpu, e.kept.front().variant.precision);
  return e;
}

}  // namespace

ModelPlan plan_by_estimate(const Graph& g, const std::vector<const GpuSpec*>& gpus,
                           const PlanOptions& opts) {
  ModelPlan plan;
  auto start = std::chrono::steady_clock::now();
  plan.candidates = generate_candidates(g, &plan.fusion_notes);
  for (auto& c : plan.candidates) c.free_view = is_free_view(g, c.nodes);
  const double generate_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  plan.workload_set = dedupe_workloads(g, plan.candidates);
  // Growth with node count is measured in docs/bench/scale.md from these figures.
  spdlog::info("{} nodes: {} candidate clusters in {:.3f} s, {} distinct workloads in {:.3f} s", g.nodes.size(),
               plan.candidates.size(), generate_s, plan.workload_set.workloads.size(), seconds_since(start));

  std::vector<std::vector<size_t>> cand_nodes;
  for (const auto& c : plan.candidates) cand_nodes.push_back(c.nodes);

  for (const GpuSpec* gpu : gpus) {
    const auto t0 = std::chrono::steady_clock::now();
    GpuPlan gp;
    gp.gpu = gpu;
    for (const auto& w : plan.workload_set.workloads)
      gp.workloads.push_back(estimate_workload(w, *gpu, opts));
    const double estimate_s = seconds_since(t0);
    std::vector<double> cost;
    for (size_t c = 0; c < plan.candidates.size(); ++c)
      cost.push_back(plan.candidates[c].free_view
                         ? 0.0
                         : gp.workloads[plan.workload_set.candidate_workload[c]].best_seconds());
    const auto t1 = std::chrono::steady_clock::now();
    gp.cover = select_cover(g.nodes.size(), cand_nodes, cost);
    const double cover_s = seconds_since(t1);
    gp.seconds = seconds_since(t0);
    spdlog::info("{}: estimated {:.1f} us over {} kernels ({:.3f} s: estimates {:.3f} s, {} cover {:.3f} s)",
                 gpu->name, gp.cover.total_cost * 1e6, gp.cover.chosen.size(), gp.seconds, estimate_s,
                 gp.cover.exact ? "exact" : "greedy (search budget exceeded)", cover_s);
    plan.gpus.push_back(std::move(gp));
  }
  return plan;
}

}  // namespace dc
