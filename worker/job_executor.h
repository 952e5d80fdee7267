// Runs one measurement job on one device, inside the measurement child (measure_child.h):
//
//   compile   the variant (and the reference) with NVRTC for the device's arch, through the
//             on-disk compile cache; emulated devices with a correctness check also build
//             the host-emulator libraries here, so that compile work stays in the compile
//             deadline. Then `compiled()` tells the parent's watchdog the run phase began.
//   check     real device: check_against_reference on fresh seeded inputs; emulated device,
//             when the job asks: the same comparison with both kernels on the host emulator.
//   time      real device: time_on_gpu (warm-up, CUDA events, L2 policy, all samples);
//             emulated device: the timing model (emulated_timing.h), marked emulated.
//
// Every failure is a Result with its JobStatus, never an exception: the variant's failures
// (compile, launch, fault, wrong result) as such, and an exception from dc's own code
// (InternalError, bad_alloc, anything but a CUDA error) as internal_error, which is never
// final (the coordinator retries it on another worker). A sticky CUDA error
// (the context is lost) sets must_restart(): the child exits after sending the result and
// the worker starts a new one.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "farm.pb.h"
#include "gpu/gpu_spec.h"
#include "gpu_runner.h"

namespace dc {

struct ExecutorConfig {
  farm::GpuInventory device;  // as offered in Hello (emulated or not, type, arch)
  GpuSpec spec;               // the catalog's figures for device.gpu_type (timing model)
  int ordinal = -1;           // real device: the CUDA ordinal
  std::string cache_dir;      // compile cache and emulator libraries; "" = none
  TimingOptions timing;       // real devices
  int emulated_samples = 10;
};

class JobExecutor {
 public:
  explicit JobExecutor(ExecutorConfig config);
  ~JobExecutor();
  JobExecutor(const JobExecutor&) = delete;
  JobExecutor& operator=(const JobExecutor&) = delete;

  // `compiled` is called once the compile phase is over (it may not be, on an early failure).
  farm::Result execute(const farm::Job& job, const std::function<void()>& compiled);
  // The compile phase alone, for the worker's builders (builder_pool.h): the variant (and,
  // for a real device, the reference) through the compile cache, and for an emulated device
  // that checks, the host-emulator libraries. Status ok, or the failure execute would give.
  farm::Result build(const farm::Job& job);
  bool must_restart() const { return must_restart_; }

 private:
  enum class Phases { all, compile_only };
  farm::Result run(const farm::Job& job, const std::function<void()>& compiled, Phases phases);
  farm::Result execute_checked(const farm::Job& job, const std::function<void()>& compiled, Phases phases);
  ExecutorConfig config_;
  std::unique_ptr<GpuDevice> gpu_;  // opened on the first real job
  bool must_restart_ = false;
};

// The workload a job describes, as far as inputs go: the reference kernel's input buffers
// are the workload's graph inputs in order, its outputs the graph outputs; index bounds
// make Gather indices valid. random_workload_inputs on it gives the coordinator's values.
Workload job_workload(const farm::Job& job, const GeneratedKernel& reference);

}  // namespace dc
