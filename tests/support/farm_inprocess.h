// A test farm inside this process: threads, one set per GPU type, each running the
// production JobExecutor on an emulated device of that type, with every job going through
// the same wire form and codec as a dc-worker's (farm_dispatch.h prepare, farm_codec.h).
// So it compiles with NVRTC, checks on the host emulator when the job asks, and times with
// the emulated device's timing model, exactly as `dc-worker --emulate` does; it only skips
// the sockets and the measurement child (a kernel fault is caught by the emulator's guards,
// not by a process boundary).
//
// It is a testing aid of the unit tests (and of the hidden `tune --farm inprocess` of the
// command-line tests); users run the local farm or remote dc-worker daemons. A test may
// override the times or statuses of successful jobs (`timing`) to decide which variant
// wins; nothing outside the tests can set that.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "farm.h"
#include "job_executor.h"

namespace dc {

// What a test's timing function says about one job.
struct FakeOutcome {
  JobStatus status = JobStatus::ok;
  std::vector<double> samples_us;  // ok: the samples (empty: the timing model's)
  std::string error;               // failures: the message
};
using FakeTiming = std::function<FakeOutcome(const FarmJob&)>;

struct InProcessFarmOptions {
  std::vector<std::string> gpu_types;  // workers are started for these types only
  int workers_per_type = 1;
  std::string host = "inprocess";      // workers are named host/<gpu type>-<i>
  std::string cache_dir;               // the executors' compile cache ("" = none)
  // Tests only: replaces the executor's outcome of a job that came back ok (compiled,
  // checked when asked, timed by the emulated timing model). Empty samples keep the model's.
  FakeTiming timing;
  // Test faults of the emulated devices (job_executor.h): of every worker, or of worker
  // `faulty_worker` alone (its index over all types, in order) when that is >= 0.
  EmulatedFaults faults;
  int faulty_worker = -1;
  // Testing aids: every job takes at least this long; collect() throws std::runtime_error
  // once this many results have been returned (a coordinator crash), -1 never.
  std::chrono::milliseconds job_delay{0};
  int64_t throw_after_results = -1;
};

// The farm; its threads start at once and stop at shutdown() or destruction.
std::unique_ptr<Farm> make_inprocess_farm(InProcessFarmOptions options);

}  // namespace dc
