// A generated kernel's module on a CUDA device, loaded the one way that the worker's runner
// (worker/gpu_runner.cpp) and the plan runtime's CUDA backend
// (codegen/plan_runtime/backend_cuda.cpp) share: the image loaded, one function per
// launch, each launch's figures in the range the driver takes, and dynamic shared memory
// opted in above 48 KiB. Every failure is a cuda::CudaError naming the launch; the caller
// says what it means (a job's launch_error, a plan refused for this device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_driver.h"
#include "ir/kernel.h"

namespace dc::cuda {

// Kernels may use 48 KiB of shared memory (static and dynamic) without opting in.
inline constexpr int64_t kDefaultDynamicSmem = 48 * 1024;

struct LoadedKernel {
  Module module;
  std::vector<CUfunction> functions;  // parallel to GeneratedKernel::launches
};

// "launch 1 (gemm_main)": how errors name a launch.
std::string launch_label(const GeneratedKernel& k, size_t launch);

// Loads `image` into the current context and finds each launch's function; a grid, block
// or dynamic shared memory size that cannot be passed to the driver (below 1, above
// INT32_MAX) is CUDA_ERROR_INVALID_VALUE. Shared memory is not opted in yet: callers that
// check launches against the device's limits first do so between the two calls.
LoadedKernel load_functions(const Driver& driver, const GeneratedKernel& k, const std::vector<char>& image);

// Above 48 KiB of static plus dynamic shared memory a function must opt in (cuda.h: its
// default dynamic limit is 48 KiB minus its static size), to the most any of its launches
// uses: launches of one kernel name share one handle, hence one limit. `smem_optin`, the
// device's maximum, is named in the error when the driver refuses.
void opt_in_shared_memory(const Driver& driver, const GeneratedKernel& k, const LoadedKernel& lk, int64_t smem_optin);

// load_functions, then opt_in_shared_memory.
LoadedKernel load_kernel(const Driver& driver, const GeneratedKernel& k, const std::vector<char>& image,
                         int64_t smem_optin);

}  // namespace dc::cuda
