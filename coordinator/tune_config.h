// The tuning configuration file (YAML), shared by `plan` and, later, `tune`:
//
//   prune:
//     within: 1.5          # keep variants within this factor of the best estimate
//     top_k: 32            # and at most this many per workload
//   precision: fp32        # the plan's precision: fp32, tf32, fp16 or bf16 (docs/precision.md)
//                          # (the old `precisions: [P]` list of one is read as precision: P)
//   calibration:           # estimator efficiency factors per GPU type and cluster kind
//     h100: {conv: 1.2, gemm: 0.9}
//   calibration_from_db: true  # tune: fit the other factors from the DB's results
//
// Every key is optional; unknown keys and bad values are UserErrors naming the file and key.
// Command-line flags override the file.
#pragma once

#include <string>

#include "plan_estimate.h"

namespace dc {

// Reads `path` into `opts` (only the keys present change it). calibration_from_db is a
// tune option: it goes to `*from_db` when given and is accepted but ignored otherwise.
void load_tune_config(const std::string& path, PlanOptions* opts, bool* from_db = nullptr);
// Same, from YAML text; `origin` names it in messages.
void parse_tune_config(const std::string& text, const std::string& origin, PlanOptions* opts,
                       bool* from_db = nullptr);

// Sets the plan's precision and the math paths it enumerates (math_paths(p)).
void set_plan_precision(PlanOptions* opts, Precision p);

// The deprecated `--precisions LIST` / `precisions: [...]`: one name is that precision (a
// one-line note on stderr says to use --precision); several, unknown or none are UserErrors.
// `what` names the flag or key in messages.
Precision precision_from_deprecated_list(const std::vector<std::string>& names,
                                         const std::string& what);
std::vector<std::string> split_list(const std::string& list);

// UserError naming the first GPU type without the tensor cores `p` needs (tf32 and bf16
// from sm_80, fp16 from sm_75).
void check_gpus_have_precision(const std::vector<const GpuSpec*>& gpus, Precision p);

}  // namespace dc
