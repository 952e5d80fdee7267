// `dc-db import`: bring another tuning DB's records into this one, keeping their provenance
// (worker host, finished time, toolchain versions, and an `imports` row that every imported
// measurement points to). Idempotent: records already present are not duplicated.
#pragma once

#include <cstdint>
#include <string>

#include "sqlite.h"

namespace dc {

struct MergeStats {
  int64_t import_id = 0;
  int64_t gpu_types = 0, workers = 0, models = 0, workloads = 0, variants = 0;
  int64_t measurements = 0, runs = 0, plans = 0;  // rows added
};

// Merges the DB at `from_path` (opened read-only) into `into`, in one transaction.
// UserError if it is the same file, not a tuning DB, or of another schema version.
MergeStats merge_tuning_db(sqlite::Connection& into, const std::string& from_path);

}  // namespace dc
