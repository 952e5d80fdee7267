// One measurement job and what a worker answers for it, as dc's own data: the coordinator's
// FarmJob (coordinator/farm/farm.h) is a MeasureJob with its dispatch wishes added, and the
// worker's JobExecutor takes a MeasureJob and gives a JobOutcome. Their wire forms,
// farm::Job and farm::Result, are converted only at the network edge (farm_codec.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "farm/measurement.h"
#include "farm/status.h"
#include "ir/kernel.h"
#include "ir/tolerance.h"

namespace dc {

struct MeasureJob {
  std::string job_id;         // stable across attempts: "<workload>/<variant key>/<gpu type>"
  std::string gpu_type;       // canonical GPU type; only workers of this type receive it
  std::string workload;       // signature
  std::string precision = "fp32";
  GeneratedKernel variant_kernel;  // the variant's generated kernel
  GeneratedKernel reference;  // the workload's naive oracle kernel; its input buffers are the
                              // workload's inputs in graph order
  uint64_t seed = 0;          // inputs are generated from it on the worker
  // The check's bound, computed once by the coordinator from the real workload
  // (codegen/variant_tolerance.h, docs/precision.md); the worker applies exactly this.
  Tolerance tolerance;
  bool check_on_emulator = false;  // emulated workers: run the host-emulator check too
  double estimate_us = 0;
  int64_t flops = 0;          // the workload's arithmetic work (emulated timing model)
  int64_t bytes = 0;          // its compulsory DRAM traffic
  // Per workload input, in the reference kernel's input order: the exclusive upper bound of
  // an integer input read as indices (0 where none: ir/index_bounds.h), so random inputs
  // stay in range.
  std::vector<int64_t> index_bounds;
  std::chrono::milliseconds compile_deadline{60000};
  std::chrono::milliseconds run_deadline{30000};
};

// A worker's answer for one MeasureJob: its status (a failure is a result, never an
// exception), the timed samples, the check's error and the compile report.
struct JobOutcome {
  JobStatus status = JobStatus::ok;
  std::string error;               // for a failure status
  std::vector<double> samples_us;  // every timed sample
  double max_rel_error = 0;        // vs the reference kernel; NaN outputs: NaN
  int registers = 0;
  int spill_bytes = 0;
  int64_t smem_bytes = 0;
  double compile_seconds = 0;
  bool compile_cached = false;     // the binary came from the worker's compile cache
  std::string nvrtc_version;       // the compiler's (clang's for OpenCL)
  std::string driver_version;
  bool emulated = false;
  std::string source_hash;         // of the variant's source that ran
  std::optional<DeviceHealthFigures> health;  // the device after timing, where sampled

  static JobOutcome failure(JobStatus s, std::string why) {
    JobOutcome o;
    o.status = s;
    o.error = std::move(why);
    return o;
  }
};

}  // namespace dc
