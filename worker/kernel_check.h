// What every device's kernel runner returns (CUDA: gpu_runner.h, OpenCL: opencl_runner.h, the
// host emulator through job_executor.cpp), and the one check of a variant against its
// workload's reference kernel built on them. The check is the same on every device: both
// kernels run once on the same fresh inputs (each runner poisons outputs first), and every
// workload output is compared within the bound the coordinator computed
// (docs/precision.md); only running a kernel differs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "farm/status.h"
#include "ir/kernel.h"
#include "ir/tensor.h"
#include "ir/tolerance.h"
#include "ir/workload.h"

namespace dc {

// One run of a kernel's launches on a device.
struct GpuRunResult {
  JobStatus status = JobStatus::ok;
  // For a failure: the step, the launch and kernel, the device API's error name and text.
  std::string error;
  bool context_lost = false;  // a sticky error: restart the process to use the GPU again
  bool ok() const { return status == JobStatus::ok; }
};

struct ReferenceCheck {
  JobStatus status = JobStatus::ok;  // ok, wrong_result, or the failure of a run
  std::string error;
  bool context_lost = false;
  double max_rel_error = 0;  // worst output's relative L2 error
  double max_abs_error = 0;  // worst element over all outputs
  bool ok() const { return status == JobStatus::ok; }
};

// A device's runner: runs kernel.launches once from its compiled form (`binary`: a cubin,
// SPIR, or nothing for the emulator), buffers[i] being kernel.buffers[i], inputs given,
// outputs and scratch poisoned before the run and read back after it.
using KernelRun =
    std::function<GpuRunResult(const GeneratedKernel& kernel, const std::vector<char>& binary, std::vector<Tensor>& buffers)>;

// The kernel's buffers with the workload's inputs (in graph order) filled in by name; "" or
// why not: the kernel reads a tensor that is no input of the workload, or reads it with
// another dtype or shape (a malformed job, not a dc bug on this side).
std::string bind_inputs(const Workload& w, const GeneratedKernel& k, const std::vector<Tensor>& inputs,
                        std::vector<Tensor>* buffers);

// Runs the reference kernel, then the variant, on the same `inputs` and compares every
// workload output. A failing reference is reported with its status and an error starting
// "reference kernel: "; `device` ends the wrong_result message (" on OpenCL", "" on CUDA).
ReferenceCheck check_against_reference(const KernelRun& run, const Workload& w, const GeneratedKernel& variant,
                                       const std::vector<char>& variant_binary, const GeneratedKernel& reference,
                                       const std::vector<char>& reference_binary, const Tolerance& tolerance,
                                       const std::vector<Tensor>& inputs, const std::string& device);

}  // namespace dc
