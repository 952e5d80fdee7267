// A serialized farm::Job handled as bytes (protocol version 4): the farm service forwards a
// tune's job to a worker without parsing, converting and re-serialising its kernels. It reads
// only what it routes, deduplicates and records by (read_job_head), and the dispatcher appends
// each dispatch's lease fields to the bytes (append_dispatch_fields). The kernels are checked
// where they are used, on the worker, which answers a job that does not parse or check as a
// failed result (docs/farm.md, "Jobs as bytes").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "farm/measure_job.h"

namespace dc::farm {

// The fields of a serialized Job other than its kernels' bodies: every scalar, the job id,
// GPU type, workload and precision, and the variant kernel's template name and variant key
// (variant_kernel's source, buffers and launches and the reference stay empty). The variant's
// source is returned as a view into `bytes`. Throws ProtocolError for bytes that are not a
// well-formed Job at its top level and in its variant kernel (the reference kernel is only
// skipped), or whose names are not UTF-8.
MeasureJob read_job_head(std::string_view bytes, std::string_view* variant_source);

// Appends lease_id, device_index and attempt to a serialized Job: on parse, the last value of
// a field wins, so these override whatever the bytes held.
void append_dispatch_fields(std::string& bytes, uint64_t lease_id, int32_t device_index, uint32_t attempt);

// What a worker needs to answer a job whose bytes do not parse as a Job: its lease, job id
// and device index, read leniently from the top level (nullopt when not even that reads).
struct JobAddress {
  uint64_t lease_id = 0;
  std::string job_id;
  int32_t device_index = 0;
};
std::optional<JobAddress> read_job_address(std::string_view bytes);

}  // namespace dc::farm
