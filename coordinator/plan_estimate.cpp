#include "plan_estimate.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "ir/error.h"

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
  plan.candidates = generate_candidates(g);
  plan.workload_set = dedupe_workloads(g, plan.candidates);
  spdlog::info("{} nodes: {} candidate clusters, {} distinct workloads", g.nodes.size(),
               plan.candidates.size(), plan.workload_set.workloads.size());

  std::vector<std::vector<size_t>> cand_nodes;
  for (const auto& c : plan.candidates) cand_nodes.push_back(c.nodes);

  for (const GpuSpec* gpu : gpus) {
    const auto t0 = std::chrono::steady_clock::now();
    GpuPlan gp;
    gp.gpu = gpu;
    for (const auto& w : plan.workload_set.workloads)
      gp.workloads.push_back(estimate_workload(w, *gpu, opts));
    std::vector<double> cost;
    for (size_t c = 0; c < plan.candidates.size(); ++c)
      cost.push_back(gp.workloads[plan.workload_set.candidate_workload[c]].best_seconds());
    gp.cover = select_cover(g.nodes.size(), cand_nodes, cost);
    gp.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("{}: estimated {:.1f} us over {} kernels ({:.3f} s)", gpu->name,
                 gp.cover.total_cost * 1e6, gp.cover.chosen.size(), gp.seconds);
    plan.gpus.push_back(std::move(gp));
  }
  return plan;
}

}  // namespace dc
