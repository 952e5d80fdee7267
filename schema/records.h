// Shared by the tuning DB implementations: enum names, the JSON texts stored in the DB
// (written with ir/json_writer.h, read back by SQLite's json_each or samples_from_json),
// clock and run ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tuning_db.h"

namespace dc {

std::string samples_to_json(const std::vector<double>& samples);
// Inverse of samples_to_json; UserError on text that is not a JSON array of numbers.
std::vector<double> samples_from_json(std::string_view text);
std::string params_to_json(const Variant& v);
std::string gpu_spec_to_json(const GpuSpec& spec);
std::string strings_to_json(const std::vector<std::string>& items);
std::string plan_choices_to_json(const std::vector<PlanChoice>& choices);

int64_t now_unix_ms();
std::string random_run_uid();  // 32 hex digits

// `m` as the DB stores it: InternalError without a finished time (it identifies the job) or
// with NaN or infinite samples; a NaN max_rel_error (the output had NaNs) becomes infinity;
// the samples are thinned to kStoredSamples (thin_samples), n_samples kept.
Measurement checked_measurement(const Measurement& m);

}  // namespace dc
