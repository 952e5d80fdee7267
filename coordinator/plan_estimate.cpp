#include "plan_estimate.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "ir/error.h"
#include "plan_views.h"
#include "ir/clock.h"

namespace dc {

namespace {

WorkloadEstimate estimate_workload(const Workload& w, WorkloadVariants variants, const GpuSpec& gpu,
                                   const PlanOptions& opts) {
  WorkloadEstimate e;
  auto scored = score_variants(std::move(variants), gpu, opts.calibration);
  e.variants_total = scored.size();
  DC_INTERNAL_CHECK(!scored.empty(), "no variant for workload ", w.signature, " (",
                    cluster_kind_name(w.kind), ") on ", gpu.name);
  e.kept = prune(std::move(scored), opts.prune);
  // The floor of the best variant's precision path (tensor cores have a higher peak).
  e.floor_seconds = floor_seconds(w, gpu, e.kept.front().variant.precision);
  return e;
}

}  // namespace

ModelVariants enumerate_model_variants(const Graph& g, const std::vector<const GpuSpec*>& gpus,
                                       const SpaceOptions& space) {
  ModelVariants out;
  out.nodes = g.nodes.size();
  auto start = std::chrono::steady_clock::now();
  out.candidates = generate_candidates(g, &out.fusion_notes);
  for (auto& c : out.candidates) c.free_view = is_free_view(g, c.nodes);
  const double generate_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  out.workload_set = dedupe_workloads(g, out.candidates);
  // Growth with node count is measured in docs/bench/scale.md from these figures.
  spdlog::info("{} nodes: {} candidate clusters in {:.3f} s, {} distinct workloads in {:.3f} s", g.nodes.size(),
               out.candidates.size(), generate_s, out.workload_set.workloads.size(), seconds_since(start));
  for (const GpuSpec* gpu : gpus) {
    const auto t0 = std::chrono::steady_clock::now();
    ModelVariants::Gpu per_gpu;
    per_gpu.gpu = gpu;
    for (const auto& w : out.workload_set.workloads) per_gpu.workloads.push_back(workload_variants(w, *gpu, space));
    per_gpu.seconds = seconds_since(t0);
    out.gpus.push_back(std::move(per_gpu));
  }
  return out;
}

ModelPlan plan_by_estimate(ModelVariants variants, const PlanOptions& opts) {
  ModelPlan plan;
  plan.candidates = std::move(variants.candidates);
  plan.fusion_notes = std::move(variants.fusion_notes);
  plan.workload_set = std::move(variants.workload_set);

  std::vector<std::vector<size_t>> cand_nodes;
  for (const auto& c : plan.candidates) cand_nodes.push_back(c.nodes);

  for (ModelVariants::Gpu& per_gpu : variants.gpus) {
    const GpuSpec* gpu = per_gpu.gpu;
    const auto t0 = std::chrono::steady_clock::now();
    GpuPlan gp;
    gp.gpu = gpu;
    for (size_t wi = 0; wi < plan.workload_set.workloads.size(); ++wi)
      gp.workloads.push_back(estimate_workload(plan.workload_set.workloads[wi], std::move(per_gpu.workloads[wi]),
                                               *gpu, opts));
    const double estimate_s = per_gpu.seconds + seconds_since(t0);
    std::vector<double> cost;
    for (size_t c = 0; c < plan.candidates.size(); ++c)
      cost.push_back(plan.candidates[c].free_view
                         ? 0.0
                         : gp.workloads[plan.workload_set.candidate_workload[c]].best_seconds());
    const auto t1 = std::chrono::steady_clock::now();
    gp.cover = select_cover(variants.nodes, cand_nodes, cost);
    const double cover_s = seconds_since(t1);
    gp.seconds = per_gpu.seconds + seconds_since(t0);
    spdlog::info("{}: estimated {:.1f} us over {} kernels ({:.3f} s: estimates {:.3f} s, {} cover {:.3f} s)",
                 gpu->name, gp.cover.total_cost * 1e6, gp.cover.chosen.size(), gp.seconds, estimate_s,
                 gp.cover.exact ? "exact" : "greedy (search budget exceeded)", cover_s);
    plan.gpus.push_back(std::move(gp));
  }
  return plan;
}

ModelPlan plan_by_estimate(const Graph& g, const std::vector<const GpuSpec*>& gpus,
                           const PlanOptions& opts) {
  return plan_by_estimate(enumerate_model_variants(g, gpus, opts.space), opts);
}

}  // namespace dc
