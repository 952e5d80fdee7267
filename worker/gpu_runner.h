// Running generated kernels on a real GPU through the CUDA driver API: one correctness run
// (the device twin of codegen/emulator.h's emulate), timing with CUDA events, and the check
// of a variant against the workload's reference kernel. Every CUDA failure becomes a
// JobStatus (classify_cuda_error); a sticky one (illegal address, trap) also marks the
// device lost, since its context is unusable until the process restarts: the worker runs
// this code in a child process per GPU for that reason. docs/gpu-runtime.md describes the
// error classes, the timing method and the tolerances.
//
// Threads: a GpuDevice is used by one thread at a time (it makes its context current on
// the calling thread at every entry).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda_driver.h"
#include "kernel_check.h"
#include "ir/tensor.h"
#include "ir/tolerance.h"
#include "ir/workload.h"
#include "ir/kernel.h"
#include "variant.h"

namespace dc {

namespace cuda {
class Driver;
}


// One device opened for measurement: its primary context, retained until destruction.
class GpuDevice {
 public:
  // Device `ordinal` of the system driver. UserError when there is no driver or no such
  // device (the message says which).
  explicit GpuDevice(int ordinal);
  GpuDevice(std::shared_ptr<const cuda::Driver> driver, int ordinal);
  ~GpuDevice();
  GpuDevice(const GpuDevice&) = delete;
  GpuDevice& operator=(const GpuDevice&) = delete;

  int ordinal() const;
  const std::string& name() const;
  // "00000000:07:00.0" (domain:bus:device.function, as NVML takes it); "" when the driver
  // does not say.
  const std::string& pci_bus_id() const;
  int64_t l2_bytes() const;
  int64_t smem_per_block_optin() const;
  const cuda::Driver& driver() const;
  // True after a sticky error: every later run fails fast with runtime_fault.
  bool lost() const;

  // The handles behind the device, for gpu_runner.cpp's functions (opaque elsewhere).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Runs kernel.launches in order once, like emulate(): buffers[i] is kernel.buffers[i];
// inputs must be given, outputs and scratch may be left undefined. On the device, outputs
// and scratch start as 0xff bytes (float NaN, integer -1) or zeros if zero_init; afterwards
// buffers[i] of each is a new tensor with its final contents (left undefined when the run
// failed). A buffer whose dtype or shape differs from its description is an InternalError.
GpuRunResult run_on_gpu(GpuDevice& device, const GeneratedKernel& kernel,
                        const std::vector<char>& cubin, std::vector<Tensor>& buffers);

// How samples are kept from reusing the previous sample's data in L2.
enum class L2Policy {
  automatic,  // rotate when a few copies of the buffers cover twice the L2, else flush
  flush,      // write a buffer of twice the L2 size between samples (outside the timing)
  rotate,     // cycle through copies of every buffer, enough to cover twice the L2
  none,       // hot cache: repeated runs on the same buffers
};

struct TimingOptions {
  int warmup_runs = 3;          // untimed runs first (module load, clocks, TLB)
  // ... and, on a device that computes on the host's cores (PoCL's CPU device), untimed runs
  // until this much wall time has passed: such a device settles only after about half a
  // second of work (docs/bench/opencl.md, "Warm-up of the CPU device"), so a count alone
  // times a kernel after an idle spell (its compile) cold.
  double cpu_warmup_seconds = 0.5;
  // ... and each variant timed in turns with its workload's anchor (opencl_runner.h,
  // OpenClAnchor); false: alone, as on a GPU. The measurement child reads
  // DC_WORKER_CPU_TIMING (paired, the default, or alone).
  bool pair_cpu_timings = true;
  int min_samples = 10;         // at least this many samples ...
  double min_total_ms = 50.0;   // ... adding up to at least this much kernel time
  // A safety cap, high enough that min_total_ms holds for any real kernel: 50 ms of
  // samples down to 0.5 us each (docs/gpu-runtime.md); the farm protocol's limit too.
  int max_samples = 100000;
  double max_total_ms = 10000;  // stop once the samples add up to this (slow kernels)
  L2Policy l2 = L2Policy::automatic;
  int max_copies = 8;           // rotation: most copies of the buffers
  // Device-side busy-wait before each sample's start event, so that the host's enqueueing
  // of the event and the run never leaves the GPU idle inside the sample; 0 = none.
  double spin_us = 10.0;
};

struct TimingResult {
  JobStatus status = JobStatus::ok;
  std::string error;
  bool context_lost = false;
  std::vector<double> samples_us;  // every sample, in order: one pass over all launches
  std::string l2_method;           // "flush 100 MiB", "rotate 4 copies", "none"
  // Paired timing (opencl_runner.h, OpenClAnchor): the anchor's variant key ("" when the
  // kernel was timed alone), the median of the raw samples, and the median of the factors
  // (the anchor's first median over its sample beside each) that scaled them.
  std::string paired_with;
  double raw_median_us = 0;
  double pairing_factor = 1;
  bool ok() const { return status == JobStatus::ok; }
};

// Times the kernel's launches (one sample = every launch in order, plus the memsets of its
// zero_init buffers, which a plan pays on every run too) with CUDA events. The run is
// captured once as a CUDA graph (as the plan runtime runs it) and each sample launches it
// after a short device-side spin. Inputs as in run_on_gpu (the input tensors only:
// buffers[i] for the inputs of kernel.buffers).
TimingResult time_on_gpu(GpuDevice& device, const GeneratedKernel& kernel,
                         const std::vector<char>& cubin, const std::vector<Tensor>& inputs,
                         const TimingOptions& options = {});

// kernel_check.h's check_against_reference with run_on_gpu: the workload's reference kernel
// (codegen's generate_reference, compiled) and the variant on the same fresh random inputs
// (`inputs`, one per graph input of `w`: random_workload_inputs, or the worker's job_inputs).
ReferenceCheck check_against_reference(GpuDevice& device, const Workload& w,
                                       const GeneratedKernel& variant,
                                       const std::vector<char>& variant_cubin,
                                       const GeneratedKernel& reference,
                                       const std::vector<char>& reference_cubin,
                                       const Tolerance& tolerance, const std::vector<Tensor>& inputs);

}  // namespace dc
