// The one failure taxonomy shared by worker, coordinator and tuning DB: every job ends in
// exactly one of these, and failures are results to record, never reasons to stop.
// Three statuses say nothing about the variant and are never final: worker_lost (the farm
// lost the job), internal_error (dc's own code failed: a bug, not the kernel's fault) and
// implausible (the worker reported a time the GPU cannot reach: the worker's fault).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dc {

enum class JobStatus {
  ok,             // compiled, matched the reference, timed
  compile_error,  // NVRTC or ptxas rejected the source
  launch_error,   // the launch was refused (resources, bad configuration)
  runtime_fault,  // illegal address, sticky CUDA error, emulator fault
  wrong_result,   // output differs from the reference kernel beyond tolerance
  timeout,        // compile or run exceeded its deadline (watchdog)
  worker_lost,    // the worker holding the job died or went silent, attempts exhausted
  unsupported,    // the worker cannot run this job (arch, precision, template)
  internal_error, // dc's own code failed (InternalError, bad_alloc, ...): retried elsewhere
  implausible,    // the time reported is more than 20% below the variant's physical floor
                  // (FLOPs / peak, bytes / bandwidth): the worker's figure cannot be true
  unhealthy,      // the device was slowed for power or heat, or had ECC errors: the worker
                  // refused to time (worker/device_health.h); retried on another device
};

// True for the statuses that are a verdict on the variant (it ran, or it cannot): false for
// worker_lost, internal_error, implausible and unhealthy, which a later tune measures again.
bool is_final_status(JobStatus s);

// True for the results the tuning DB keeps: every status but internal_error (a dc bug) and
// unhealthy (the device refused to time): neither measured anything.
bool is_recorded_status(JobStatus s);

std::string_view job_status_name(JobStatus s);
// The statuses is_final_status rejects, as an SQL list: "('worker_lost', 'internal_error',
// 'implausible')" (the tuning DB's queries; one definition with is_final_status).
const std::string& not_final_statuses_sql();
std::optional<JobStatus> parse_job_status(std::string_view name);

}  // namespace dc
