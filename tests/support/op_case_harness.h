// The one harness over the op-case table (op_cases.h). For a case at a precision on a device:
// build its parts, run the CPU reference executor on the part's seeded random inputs, compile
// every kernel (the reference kernel, the picked variants of the device's parameter space,
// the hand-built ones) on worker threads, run each on the device through its KernelRun
// (worker/kernel_check.h: the runner poisons outputs first) and compare every workload
// output with the CPU result: bit for bit, or within variant_tolerance (docs/precision.md).
// A perf mode times each kernel on the device and reports GFLOP/s from Workload::flops.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_spec.h"
#include "gpu_runner.h"
#include "kernel_check.h"
#include "op_cases.h"

namespace dc::testing {

// A device the table runs on.
struct CaseDevice {
  std::string name;  // in messages: "host emulator", "OpenCL pocl-cpu", "CUDA sm_90"
  GpuSpec spec;      // whose parameter space the variants come from
  // The kernel in the form `run` takes ({} for the emulator); on failure *error says why.
  std::function<std::vector<char>(const GeneratedKernel&, std::string* error)> compile;
  KernelRun run;
  // Perf mode: one pass over the kernel's launches timed (inputs only, as time_on_gpu).
  std::function<TimingResult(const GeneratedKernel&, const std::vector<char>&, const std::vector<Tensor>&)> time;
  // Strict: every pick finds a variant and every template a case names runs (the variants
  // were chosen on the A100's space); on other devices a pick may find none.
  bool strict = false;
  std::string nvrtc_arch;  // also compile every kernel with NVRTC for it ("": not)
  size_t max_per_pick = 0; // at most this many variants of each pick, of each template for a
                           // per-template pick (0: as the case says)
};

// The host emulator on the A100's parameter space, every kernel also compiled by NVRTC for
// sm_80 (the suite's emulator cache: EmulatorOptions' default).
CaseDevice emulator_device();

struct CaseRun {
  std::vector<std::string> failures;     // each names the case, part, kernel and device
  size_t kernels = 0;                    // kernels run and compared
  std::map<std::string, int> templates;  // kernels run per template
};

// Runs a case at `storage` on `device`. A failed comparison names the output, its error
// against the bound and the worst element (index, value, reference value).
CaseRun run_op_case(const OpCase& c, DType storage, const CaseDevice& device);

struct CaseTiming {
  std::string kernel;  // "part: variant key"
  double median_us = 0;
  double gflops = 0;   // Workload::flops / median
  std::string error;   // a kernel that did not compile or run
};

// Perf mode: the reference kernel and the first variant of each pick (of each template for a
// per-template pick), timed on `device`.
std::vector<CaseTiming> time_op_case(const OpCase& c, DType storage, const CaseDevice& device);

// Runs `k` once through `run` on the workload's `inputs` (graph order) and compares every
// workload output with `want` (the CPU reference executor's): "" or, per failing output, its
// error and worst element; a run that fails, its status and error.
std::string run_and_compare_outputs(const KernelRun& run, const Workload& w, const GeneratedKernel& k,
                                    const std::vector<char>& binary, const std::vector<Tensor>& inputs,
                                    const ref::TensorMap& want, bool exact, const Tolerance& tol);

// "" when `got` matches `want` (bitwise if exact, else within tol); otherwise the error and
// the worst element.
std::string compare_output(const Tensor& got, const Tensor& want, bool exact, const Tolerance& tol);

}  // namespace dc::testing
