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
// Its interface is dc's own data (common/farm/measure_job.h): a MeasureJob in, a JobOutcome
// out; execute_wire_job is the measurement child's edge to the wire's farm::Job/Result.
// Every failure is an outcome with its JobStatus, never an exception: the variant's failures
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
#include "farm/measure_job.h"
#include "gpu/gpu_spec.h"
#include "gpu_runner.h"
#include "nvml.h"
#include "opencl_device.h"
#include "opencl_runner.h"

namespace dc {

// Faults an emulated device plants on purpose, for the tests of the coordinator's checks
// (docs/farm.md, "Test faults"); never set in normal use. dc-worker's measurement child reads
// them from DC_TEST_INTERNAL_ERROR, DC_TEST_TIME_FACTOR and DC_TEST_TIME_DRIFT (emulated
// devices only).
struct EmulatedFaults {
  // Jobs whose variant key contains this text end in internal_error ("" = none).
  std::string internal_error_on;
  // Every emulated sample is multiplied by this: 0.1 reports times 10x too fast.
  double time_factor = 1;
  // A device that drifts over a tune: the samples of the n-th job it times (from 0) are
  // also multiplied by 1 + (drift_factor - 1) x min(1, n / drift_jobs): 2 and 20 make its
  // times grow steadily to 2x over its first 20 jobs (a GPU that slows down as it heats).
  double drift_factor = 1;
  int drift_jobs = 1;
  // A passing disturbance (another process taking the host's cores for a moment): the
  // samples of jobs spike_from .. spike_from + spike_jobs - 1 are also multiplied by
  // spike_factor. In-process test farms only.
  double spike_factor = 1;
  int64_t spike_from = 0, spike_jobs = 0;
  double factor(int64_t jobs_timed_before) const;  // what the n-th job's samples are multiplied by
};

struct ExecutorConfig {
  farm::GpuInventory device;  // as offered in Hello (emulated or not, type, arch)
  GpuSpec spec;               // the catalog's figures for device.gpu_type (timing model)
  int ordinal = -1;           // real device: the CUDA ordinal
  std::string cache_dir;      // compile cache and emulator libraries; "" = none
  TimingOptions timing;       // real devices
  int emulated_samples = 10;
  EmulatedFaults faults;      // emulated devices only: test faults
  // Real CUDA devices: NVML for the health samples around the timing (nullptr: none, and
  // `no_nvml` says why; results then carry "no health data").
  std::shared_ptr<const Nvml> nvml;
  std::string no_nvml = "NVML not loaded";
};

class JobExecutor {
 public:
  explicit JobExecutor(ExecutorConfig config);
  ~JobExecutor();
  JobExecutor(const JobExecutor&) = delete;
  JobExecutor& operator=(const JobExecutor&) = delete;

  // `compiled` is called once the compile phase is over (it may not be, on an early failure).
  JobOutcome execute(const MeasureJob& job, const std::function<void()>& compiled);
  // The compile phase alone, for the worker's builders (builder_pool.h): the variant (and,
  // for a real device, the reference) through the compile cache, and for an emulated device
  // that checks, the host-emulator libraries. Status ok, or the failure execute would give.
  JobOutcome build(const MeasureJob& job);
  // A job this device cannot take (one that broke the protocol): `unsupported`, with the
  // device's figures as every outcome carries them.
  JobOutcome refuse(const std::string& why) const;
  bool must_restart() const { return must_restart_; }
  int device_index() const { return config_.device.device_index(); }

 private:
  enum class Phases { all, compile_only };
  JobOutcome run(const MeasureJob& job, const std::function<void()>& compiled, Phases phases);
  JobOutcome execute_checked(const MeasureJob& job, const std::function<void()>& compiled, Phases phases);
  // The OpenCL twin of the real-device path (worker/opencl_runner.h).
  JobOutcome execute_opencl(const MeasureJob& job, const std::function<void()>& compiled, Phases phases);
  void stamp(JobOutcome& o) const;  // the device's figures every outcome carries
  farm::DeviceHealth sample_health() const;
  ExecutorConfig config_;
  std::unique_ptr<GpuDevice> gpu_;  // opened on the first real job
  std::unique_ptr<ocl::Device> ocl_;  // OpenCL devices: opened on the first job
  OpenClAnchor anchor_;               // paired timing on a CPU device; declared after ocl_, whose buffers it holds
  bool must_restart_ = false;
  int64_t emulated_jobs_timed_ = 0;  // EmulatedFaults::factor's n
};

// The workload a job describes, as far as names go: the reference kernel's input buffers are
// the workload's graph inputs in order, its outputs the graph outputs. No compute nodes: the
// worker re-derives nothing from it (the bound and the index bounds travel in the job).
Workload job_workload(const GeneratedKernel& reference);

// The job's fresh random inputs, in the reference kernel's input order: random_inputs of its
// input buffers with the job's index bounds and seed, the values the coordinator's workload
// gives (random_workload_inputs).
std::vector<Tensor> job_inputs(const MeasureJob& job, const GeneratedKernel& reference);

// The measurement child's edge (worker_main.cpp; the in-process test farm): the wire's job
// converted (farm_codec.h; one that does not convert is refused as a malformed job), run
// in full or, with `compile_only`, built (then `compiled` is called), and the outcome as the
// wire's Result with the job's lease and id and the device's index.
farm::Result execute_wire_job(JobExecutor& executor, const farm::Job& job, const std::function<void()>& compiled,
                              bool compile_only = false);

}  // namespace dc
