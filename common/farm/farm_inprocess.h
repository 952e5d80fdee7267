// An in-process Farm: jobs run on a small pool of threads inside this process, one set of
// threads per GPU type, and come back as Measurements marked emulated. It is the farm of the
// unit tests and a testing aid for the command line (`tune --farm inprocess`); the real
// farm is the ZeroMQ broker with dc-worker daemons.
//
// Times come from a deterministic timing model (modelled_samples) or from the test's own
// function, so that a test can decide which variant wins. Optionally each job is compiled
// with NVRTC for the GPU type's architecture (a compile error becomes compile_error; the
// registers, spills and shared memory are ptxas's) and, for jobs that ask for it, checked on
// the host emulator against the reference kernel. Nothing is isolated in a child process:
// a kernel fault is caught only by the emulator's own guards.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "farm.h"

namespace dc {

// What a fake timing function says about one job.
struct FakeOutcome {
  JobStatus status = JobStatus::ok;
  std::vector<double> samples_us;  // ok: the samples (empty: the modelled ones)
  std::string error;               // failures: the message
};
using FakeTiming = std::function<FakeOutcome(const FarmJob&)>;

struct InProcessFarmOptions {
  std::vector<std::string> gpu_types;  // workers are started for these types only
  int workers_per_type = 1;
  std::string host = "inprocess";      // workers are named host/<gpu type>-<i>
  FakeTiming timing;                   // default: modelled_samples, always ok
  bool compile = false;                // NVRTC for the type's architecture (catalog)
  bool emulator_check = false;         // honour FarmJob::check_on_emulator on the host emulator
  // Testing aids: every job takes at least this long; collect() throws std::runtime_error
  // once this many results have been returned (a coordinator crash), -1 never.
  std::chrono::milliseconds job_delay{0};
  int64_t throw_after_results = -1;
};

// The farm; its threads start at once and stop at shutdown() or destruction.
std::unique_ptr<Farm> make_inprocess_farm(InProcessFarmOptions options);

// The in-process timing model (distinct from the estimator, which it only scales): the
// job's estimate times a deterministic per-variant factor in [0.8, 1.4) from a hash of the
// variant key and GPU type, plus deterministic noise of up to 3% over 9 samples.
std::vector<double> modelled_samples(const FarmJob& job);

}  // namespace dc
