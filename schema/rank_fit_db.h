// The pairwise ranking fit (estimator/calibration_rank_fit.h) of a tuning DB's results: the
// fit needs each result's workload shape, which the DB keeps as `workloads.canonical`. One
// place for what a local tune, the farm service and `dc-db calibration` fit alike.
#pragma once

#include <vector>

#include "calibration_rank_fit.h"
#include "gpu/gpu_spec.h"
#include "tuning_db.h"

namespace dc {

// fit_rank_vectors over `samples` (db.estimator_samples of `gpu`'s real results), each with
// its workload's canonical text from `db`; a workload the DB lacks leaves its samples out.
std::vector<FittedRankVector> fit_rank_vectors_of_db(const TuningDb& db, const GpuSpec& gpu,
                                                     const std::vector<EstimatorSample>& samples);

}  // namespace dc
