// The one failure taxonomy shared by worker, coordinator and tuning DB: every job ends in
// exactly one of these, and failures are results to record, never reasons to stop.
#pragma once

#include <optional>
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
};

std::string_view job_status_name(JobStatus s);
std::optional<JobStatus> parse_job_status(std::string_view name);

}  // namespace dc
