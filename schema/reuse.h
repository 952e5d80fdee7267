// Reuse across GPU types: which measured variants to try first for a workload on a GPU
// type, and which level of the fallback answered (issue: a new GPU type starts from what
// other GPU types learned, and the report says where its seeds came from).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tuning_db.h"

namespace dc {

enum class SeedLevel {
  exact,           // the GPU type's own results
  same_family,     // the nearest GPU type of the same architecture family
  other_family,    // the nearest GPU type of another family
  estimator_only,  // nothing measured anywhere: the estimator's picks alone
};
std::string_view seed_level_name(SeedLevel level);

struct Seeds {
  SeedLevel level = SeedLevel::estimator_only;
  std::string from_gpu;           // the GPU type that answered; empty for estimator_only
  std::vector<Measurement> best;  // its top-k, fastest first
};

// The k best variants of `workload` for `target`: its own results when it has any, else
// those of the nearest GPU type with results (same architecture family first, then the
// closest compute capability, then name). Only results of `source` count. Variants seeded
// from another GPU type may exceed the target's limits: filter them with fits_gpu.
Seeds seed_variants(const TuningDb& db, const std::string& workload, const GpuSpec& target,
                    TimingSource source, int k);

}  // namespace dc
