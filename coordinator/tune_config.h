// The tuning configuration file (YAML), shared by `plan` and, later, `tune`:
//
//   prune:
//     within: 1.5          # keep variants within this factor of the best estimate
//     top_k: 32            # and at most this many per workload
//   precisions: [fp32]     # precision paths to enumerate: fp32, tf32, fp16, bf16
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

// "fp32,fp16" -> {"fp32", "fp16"}; UserError for unknown names or an empty list.
std::vector<std::string> parse_precisions(const std::string& list);

}  // namespace dc
