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
#include <vector>

#include "gpu_runner.h"
#include "opencl_device.h"

namespace dc {

// Runs kernel.launches in order once, as run_on_gpu: outputs and scratch start as 0xff bytes
// (NaN, -1) or zeros if zero_init, and are read back into buffers.
GpuRunResult run_on_opencl(ocl::Device& device, const GeneratedKernel& kernel, const std::vector<char>& spir,
                           std::vector<Tensor>& buffers);

// Times one pass over every launch (and the zero_init fills) with profiling events: warm-up
// runs, then samples until min_samples and min_total_ms (or one second of wall time past
// min_samples; capped as on CUDA). Caches stay hot, except with L2Policy::flush, which
// writes a 64 MiB buffer between samples (outside the timing).
TimingResult time_on_opencl(ocl::Device& device, const GeneratedKernel& kernel, const std::vector<char>& spir,
                            const std::vector<Tensor>& inputs, const TimingOptions& options = {});

// kernel_check.h's check_against_reference with run_on_opencl: both kernels on the same inputs (the workload's
// inputs in graph order, e.g. job_inputs).
ReferenceCheck check_on_opencl(ocl::Device& device, const Workload& w, const GeneratedKernel& variant,
                               const std::vector<char>& variant_spir, const GeneratedKernel& reference,
                               const std::vector<char>& reference_spir, const Tolerance& tolerance,
                               const std::vector<Tensor>& inputs);

}  // namespace dc
