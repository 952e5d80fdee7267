// What a tune tells its user: the summary table per GPU type (clusters, variants measured
// with failures by class, the chosen kernel and best time per cluster, estimated against
// measured, totals), one closing line per GPU type, and the files under `tune --out DIR`:
// DIR/<gpu>/summary.txt and DIR/<gpu>/selection.json (format in docs/tune.md).
#pragma once

#include <string>

#include "tune.h"

namespace dc {

// The summary of one GPU type, as printed and written to summary.txt.
std::string tune_gpu_summary(const TuneResult& r, const GpuTuneResult& g);

// The closing table: one row per GPU type and the run's totals.
std::string tune_totals(const TuneResult& r);

// The selection as JSON ("dc-tune-selection/1").
std::string tune_selection_json(const TuneResult& r, const GpuTuneResult& g);

// Writes DIR/<gpu>/summary.txt and DIR/<gpu>/selection.json for every GPU type.
void write_tune_outputs(const TuneResult& r, const std::string& dir);

}  // namespace dc
