// TuningDb::best_variants and TuningDb::top_k: the one definition of "best variant" and of
// "the k fastest" (tuning_db.h). Both DB implementations answer them through query(), so
// the rules live here only.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "tuning_db.h"
#include "variant.h"

namespace dc {

namespace {

// "13" > "12" > "9": toolchain majors compare as numbers.
bool newer_major(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() > b.size() : a > b;
}

// The newest toolchain major among the results, "" when there are none.
std::string newest_major(const std::vector<Measurement>& results) {
  std::string newest;
  for (const Measurement& m : results) {
    const std::string major = toolchain_major(m.nvrtc_version);
    if (newest.empty() || newer_major(major, newest)) newest = major;
  }
  return newest;
}

// One variant's results: its fastest ok measurement and its first final failure.
struct VariantStats {
  const Measurement* best = nullptr;
  int results = 0;
  std::optional<JobStatus> failure;
};

}  // namespace

std::vector<WorkloadBest> TuningDb::best_variants(const BestVariantQuery& q) const {
  MeasurementQuery mq;
  mq.workload = q.workload;
  mq.gpu_type = q.gpu_type;
  mq.source = q.source;
  mq.current_source_only = q.current_source_only;
  const std::vector<Measurement> results = query(mq);  // in finished order: first failure first
  const std::string major = q.nvrtc_major.empty() ? newest_major(results) : q.nvrtc_major;

  std::map<std::string, std::map<std::string, VariantStats>> by_workload;  // by key: ties
  for (const Measurement& m : results) {
    if (!is_final_status(m.status)) continue;  // worker_lost, implausible: nothing about the variant
    if (is_reference_key(m.variant_key)) continue;     // the baseline, never a candidate
    if (!q.math_paths.empty() && std::find(q.math_paths.begin(), q.math_paths.end(),
                                           variant_key_precision(m.variant_key)) == q.math_paths.end())
      continue;  // another precision's math path (a tf32 tune of the same f32 workload)
    if (toolchain_major(m.nvrtc_version) != major) continue;
    if (q.exclude_workers.count(m.worker)) continue;  // a quarantined worker's figure
    VariantStats& s = by_workload[m.workload][m.variant_key];
    ++s.results;
    if (m.status != JobStatus::ok) {
      if (!s.failure) s.failure = m.status;
    } else if (!s.best || m.median_us < s.best->median_us) {
      s.best = &m;
    }
  }

  std::vector<WorkloadBest> out;
  for (const auto& [workload, variants] : by_workload) {
    WorkloadBest b;
    b.workload = workload;
    std::vector<std::pair<double, std::string>> ranked;
    for (const auto& [key, s] : variants) {
      if (s.failure) {
        ++b.failed_variants[*s.failure];
        continue;
      }
      ++b.ok_variants;
      ranked.emplace_back(s.best->median_us, key);
      // The map's order breaks ties: the first key of the least time wins.
      if (b.has_best() && !(s.best->median_us < b.median_us)) continue;
      b.variant_key = key;
      b.median_us = s.best->median_us;
      b.min_us = s.best->min_us;
      b.estimate_us = s.best->estimate_us;
      b.source_hash = s.best->source_hash;
      b.results = s.results;
    }
    std::sort(ranked.begin(), ranked.end());  // by time, then key: the best first
    for (auto& [us, key] : ranked) b.ranked.push_back(std::move(key));
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<Measurement> TuningDb::top_k(const std::string& workload, const std::string& gpu_type, TimingSource source,
                                         int k) const {
  MeasurementQuery mq;
  mq.workload = workload;
  mq.gpu_type = gpu_type;
  mq.source = source;
  mq.status = JobStatus::ok;
  std::map<std::string, Measurement> best;  // per variant: its lowest median, the first of ties
  for (Measurement& m : query(mq)) {
    if (is_reference_key(m.variant_key)) continue;  // the baseline, not a variant
    auto it = best.find(m.variant_key);
    if (it == best.end()) best.emplace(m.variant_key, std::move(m));
    else if (m.median_us < it->second.median_us) it->second = std::move(m);
  }
  std::vector<Measurement> out;
  for (auto& [key, m] : best) out.push_back(std::move(m));
  std::stable_sort(out.begin(), out.end(), [](const Measurement& a, const Measurement& b) {
    return a.median_us < b.median_us;  // ties keep key order
  });
  if (k >= 0 && out.size() > static_cast<size_t>(k)) out.resize(static_cast<size_t>(k));
  return out;
}

}  // namespace dc
