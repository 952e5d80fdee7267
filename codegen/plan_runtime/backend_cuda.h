// The CUDA backend over a given driver: make_cuda_backend (backend.h) with the system's
// libcuda.so.1, tests with the fake driver of tests/support/fake_cuda.cpp.
#pragma once

#include <memory>

#include "backend.h"

namespace dc::cuda {
class Driver;
}

namespace dc::rt {

// UserError when `driver` has no device `options.device` (the message says which), or the
// device cannot run NVRTC's code (older than compute capability 7.0, sm_70 on NVRTC 13).
std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const cuda::Driver> driver,
                                           const CudaBackendOptions& options);

}  // namespace dc::rt
