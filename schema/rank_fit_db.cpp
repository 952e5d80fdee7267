#include "rank_fit_db.h"

#include <map>
#include <optional>
#include <string>

namespace dc {

std::vector<FittedRankVector> fit_rank_vectors_of_db(const TuningDb& db, const GpuSpec& gpu,
                                                     const std::vector<EstimatorSample>& samples) {
  std::map<std::string, std::string> canonical_of;
  for (const EstimatorSample& s : samples)
    if (!canonical_of.count(s.workload))
      if (std::optional<WorkloadRecord> w = db.find_workload(s.workload)) canonical_of[s.workload] = w->canonical;
  return fit_rank_vectors(gpu, rank_samples_of(samples, canonical_of));
}

}  // namespace dc
