// Running generated kernels on an OpenCL device: the twin of gpu_runner.h for devices of the
// opencl API, with the same result types, statuses and timing rules. The kernel's source is
// made OpenCL by codegen's dialect layer (opencl_dialect.h) and compiled to SPIR by clang
// (opencl_compile.h); here the SPIR is built with clBuildProgram, run and timed with
// profiling events.
//
// Every buffer is allocated with a guard region behind it, filled with a pattern and
// checked after each run: a kernel that writes past the end of a buffer is a runtime_fault
// (a write far beyond it may crash the process: the worker's measurement child is there
// for that). A kernel that never ends is the child's watchdog's (timeout).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu_runner.h"
#include "opencl_device.h"

namespace dc {

// Runs kernel.launches in order once, as run_on_gpu: outputs and scratch start as 0xff bytes
// (NaN, -1) or zeros if zero_init, and are read back into buffers.
GpuRunResult run_on_opencl(ocl::Device& device, const GeneratedKernel& kernel, const std::vector<char>& spir,
                           std::vector<Tensor>& buffers);

// Paired timing. A CPU device's speed moves with what else the host's cores, caches and DRAM
// serve: a memory-bound kernel's median over one second moved by up to 1.7x within a minute
// on this project's shared container, while the kernels of one workload are ranked by
// medians taken seconds apart (docs/opencl.md, "Paired timing"). A ratio
// to a kernel timed in the same second does not move so. So the first variant timed for a
// workload stays loaded as its anchor, with the median it measured; each next variant of
// that workload is timed in turns with the anchor, sample by sample, and each of its samples
// is scaled by the anchor's first median over the anchor's sample beside it. The variants of
// a workload are then all timed as in the anchor's second. One anchor is held: a tune sends
// a workload's variants one after another.
class OpenClAnchor {
 public:
  OpenClAnchor();
  ~OpenClAnchor();
  OpenClAnchor(const OpenClAnchor&) = delete;
  OpenClAnchor& operator=(const OpenClAnchor&) = delete;
  bool holds(const std::string& workload) const;
  void clear();
  struct State;  // the loaded kernel, its buffers and its first median (opencl_runner.cpp)

 private:
  friend TimingResult time_on_opencl(ocl::Device&, const GeneratedKernel&, const std::vector<char>&,
                                     const std::vector<Tensor>&, const TimingOptions&, OpenClAnchor*,
                                     const std::string&);
  std::unique_ptr<State> state_;
};

// A sample scaled to the anchor's first second: `sample_us` x anchor_first_us / anchor_now_us.
double paired_sample_us(double sample_us, double anchor_first_us, double anchor_now_us);

// Times one pass over every launch (and the zero_init fills) with profiling events: warm-up
// runs, then samples until min_samples and min_total_ms (or one second of wall time past
// min_samples; capped as on CUDA). Caches stay hot, except with L2Policy::flush, which
// writes a 64 MiB buffer between samples (outside the timing).
// With an `anchor` (paired timing, above): a kernel of `workload` other than the anchor's own
// is timed in turns with it (TimingResult::paired_with says so); any other is timed alone
// and, when it times ok, becomes the anchor of `workload`. A kernel that ran and failed (a fault,
// an out-of-bounds write) clears the anchor; one that did not build leaves it.
TimingResult time_on_opencl(ocl::Device& device, const GeneratedKernel& kernel, const std::vector<char>& spir,
                            const std::vector<Tensor>& inputs, const TimingOptions& options = {},
                            OpenClAnchor* anchor = nullptr, const std::string& workload = {});

// kernel_check.h's check_against_reference with run_on_opencl: both kernels on the same inputs (the workload's
// inputs in graph order, e.g. job_inputs).
ReferenceCheck check_on_opencl(ocl::Device& device, const Workload& w, const GeneratedKernel& variant,
                               const std::vector<char>& variant_spir, const GeneratedKernel& reference,
                               const std::vector<char>& reference_spir, const Tolerance& tolerance,
                               const std::vector<Tensor>& inputs);

}  // namespace dc
