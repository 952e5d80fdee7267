#include "reuse.h"

#include <algorithm>
#include <cstdlib>
#include <tuple>

namespace dc {

std::string_view seed_level_name(SeedLevel level) {
  switch (level) {
    case SeedLevel::exact: return "exact";
    case SeedLevel::same_family: return "same family";
    case SeedLevel::other_family: return "other family";
    case SeedLevel::estimator_only: return "estimator only";
  }
  return "?";
}

Seeds seed_variants(const TuningDb& db, const std::string& workload, const GpuSpec& target,
                    TimingSource source, int k) {
  Seeds out;
  out.best = db.top_k(workload, target.name, source, k);
  if (!out.best.empty()) {
    out.level = SeedLevel::exact;
    out.from_gpu = target.name;
    return out;
  }
  std::vector<GpuTypeRecord> others = db.gpu_types();
  std::erase_if(others, [&](const GpuTypeRecord& g) { return g.name == target.name; });
  const int target_cc = target.cc_major * 10 + target.cc_minor;
  auto rank = [&](const GpuTypeRecord& g) {
    return std::tuple(g.arch != target.arch, std::abs(g.cc_major * 10 + g.cc_minor - target_cc),
                      g.name);
  };
  std::sort(others.begin(), others.end(),
            [&](const GpuTypeRecord& a, const GpuTypeRecord& b) { return rank(a) < rank(b); });
  for (const GpuTypeRecord& g : others) {
    out.best = db.top_k(workload, g.name, source, k);
    if (out.best.empty()) continue;
    out.level = g.arch == target.arch ? SeedLevel::same_family : SeedLevel::other_family;
    out.from_gpu = g.name;
    return out;
  }
  return out;
}

}  // namespace dc
