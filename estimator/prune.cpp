#include "prune.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ir/error.h"

namespace dc {

double rank_seconds(const Estimate& e) { return e.rank_log == 0 ? e.seconds : e.seconds * std::exp(e.rank_log); }

std::vector<ScoredVariant> prune(std::vector<ScoredVariant> scored, const PruneOptions& options) {
  DC_USER_CHECK(std::isfinite(options.within_factor) && options.within_factor >= 1.0,
                "prune within_factor must be a finite number >= 1, got ", options.within_factor);
  DC_USER_CHECK(options.top_k >= 1, "prune top_k must be >= 1, got ", options.top_k);
  std::erase_if(scored, [](const ScoredVariant& s) { return !std::isfinite(s.estimate.seconds); });
  if (scored.empty()) return scored;

  // Sort indices with the keys computed once: key() builds a string.
  std::vector<std::string> keys;
  keys.reserve(scored.size());
  for (const auto& s : scored) keys.push_back(s.variant.key());
  std::vector<size_t> order(scored.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Exact ties are common (every variant of a DRAM-bound kernel that keeps enough bytes in
  // flight has the same time): prefer the one using the other resources least, then key.
  auto work = [&](size_t i) {
    const Estimate& e = scored[i].estimate;
    return e.compute_s + e.dram_s + e.l2_s + e.smem_s;
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ta = rank_seconds(scored[a].estimate), tb = rank_seconds(scored[b].estimate);
    if (ta != tb) return ta < tb;
    const double wa = work(a), wb = work(b);
    if (wa != wb) return wa < wb;
    return keys[a] < keys[b];
  });

  // The cut is the model's (estimates, within a factor of the fastest); the order the ranking's.
  double fastest = scored.front().estimate.seconds;
  for (const auto& s : scored) fastest = std::min(fastest, s.estimate.seconds);
  const double limit = fastest * options.within_factor;
  std::vector<size_t> picked;  // positions in `order`
  for (size_t r = 0; r < order.size() && static_cast<int>(picked.size()) < options.top_k; ++r)
    if (scored[order[r]].estimate.seconds <= limit) picked.push_back(r);
  // Each math path's best variant within the limit stays even where top K cut it, in place
  // of the last variant of a path that has several: on small launch-bound kernels the model
  // puts the paths within a few percent of each other, and only measurement can tell.
  auto path_count = [&](const std::string& p) {
    return std::count_if(picked.begin(), picked.end(),
                         [&](size_t r) { return scored[order[r]].variant.precision == p; });
  };
  std::vector<std::string> seen;
  for (size_t r = 0; r < order.size(); ++r) {
    if (scored[order[r]].estimate.seconds > limit) continue;
    const std::string& p = scored[order[r]].variant.precision;
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
    seen.push_back(p);
    if (path_count(p) > 0) continue;
    for (size_t j = picked.size(); j-- > 0;)
      if (path_count(scored[order[picked[j]]].variant.precision) > 1) {
        picked[j] = r;
        break;
      }
    std::sort(picked.begin(), picked.end());
  }
  std::vector<ScoredVariant> kept;
  for (size_t r : picked) kept.push_back(std::move(scored[order[r]]));
  return kept;
}

WorkloadVariants workload_variants(const Workload& w, const GpuSpec& gpu, const SpaceOptions& space) {
  WorkloadVariants out;
  out.shape = analyze_workload(w);
  out.variants = enumerate_variants(out.shape, gpu, space);
  return out;
}

std::vector<ScoredVariant> score_variants(WorkloadVariants variants, const GpuSpec& gpu,
                                          const Calibration& calibration) {
  std::vector<ScoredVariant> out;
  out.reserve(variants.variants.size());
  for (auto& v : variants.variants) {
    Estimate e = estimate(variants.shape, v, gpu, calibration);
    out.push_back({std::move(v), std::move(e)});
  }
  return out;
}

std::vector<ScoredVariant> score_variants(const Workload& w, const GpuSpec& gpu,
                                          const Calibration& calibration,
                                          const SpaceOptions& space) {
  return score_variants(workload_variants(w, gpu, space), gpu, calibration);
}

}  // namespace dc
