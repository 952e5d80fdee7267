// What a tune tells its user: the summary table per GPU type (clusters, variants measured
// with failures by class, the chosen kernel and best time per cluster, estimated against
// measured, totals), one closing line per GPU type, and the files under `tune --out DIR`:
// DIR/<gpu>/summary.txt, selection.json (format in docs/tune.md) and the plan (plan.json,
// kernels.cu, weights.bin; docs/plan-format.md).
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"

#include "tune.h"

namespace dc {

// The summary of one GPU type, as printed and written to summary.txt.
std::string tune_gpu_summary(const TuneResult& r, const GpuTuneResult& g);

// The closing table: one row per GPU type and the run's totals.
std::string tune_totals(const TuneResult& r);

// The selection as JSON ("dc-tune-selection/1").
std::string tune_selection_json(const TuneResult& r, const GpuTuneResult& g);

// The plan's lines of summary.txt: steps, modules, memory, weight transforms, how to run it.
std::string plan_summary(const ExecPlan& plan, const std::string& dir);

// Writes DIR/<gpu>/summary.txt and selection.json for every GPU type, and for every GPU type
// with a selection its plan (plan.json, kernels.cu, weights.bin: codegen/plan/plan_io.h).
// Returns, per GPU type, the summary written (the tune's summary, plus the plan's lines) and
// the plan directory ("" when the type has no selection).
struct TuneOutput {
  std::string summary;
  std::string plan_dir;
};
std::vector<TuneOutput> write_tune_outputs(const TuneResult& r, const std::string& dir);

}  // namespace dc
