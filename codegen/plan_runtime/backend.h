// Where a plan's kernels run: a CUDA GPU (backend_cuda.cpp), an OpenCL device
// (backend_opencl.cpp) or the host emulator (backend_emulator.cpp). The Runtime (runtime.h) validates everything a user gives it
// before calling a backend, so a backend may treat a wrong index or size as InternalError.
//
// Errors: a problem the user can act on (no GPU, a kernel the device cannot run, a kernel
// that fails or faults at run time) is a UserError with a message naming the step, its
// cluster and the kernel; a broken invariant is an InternalError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/plan_io.h"

namespace dc::rt {

class Backend {
 public:
  virtual ~Backend() = default;

  // "NVIDIA H100 80GB HBM3 (cuda:0, sm_90)" or "host emulator".
  virtual std::string device_description() const = 0;
  // GpuSpec name of the device ("h100"; "" when the device is not in common/gpu/gpus.yaml,
  // or for the emulator, which runs any plan).
  virtual std::string device_gpu_type() const = 0;

  // Prepares the plan: compiles every module (cached), allocates inputs, outputs and the
  // arena, uploads the weights once. Called once, before anything else. `plan` outlives
  // the backend.
  virtual void load(const ExecPlan& plan) = 0;

  // Called before load() when read_plan left weights.bin unchecksummed (Runtime::open):
  // load() then reads the file once, front to back, as it uploads the weights, and throws
  // UserError (its device memory freed with the backend) if the checksum differs.
  void set_unverified_weights(WeightsFile f) { unverified_weights_ = std::move(f); }

  // Copies a host buffer of exactly the input's bytes into input `index`.
  virtual void set_input(size_t index, const void* data, size_t bytes) = 0;
  // One inference: every step in order, synchronously (returns when outputs are ready).
  // Scratch and outputs flagged zero_init are zeroed by the step that needs them.
  virtual void run() = 0;
  // Copies output `index` (exactly its bytes) to the host.
  virtual void get_output(size_t index, void* data, size_t bytes) = 0;

  // Training plans (ExecPlan::training): after a step, copies each update's `next` output
  // into its `state` weight on the device (same dtype and shape), so the next step reads
  // the updated state. Returns when the copies are done.
  virtual void carry_state(const std::vector<PlanStateUpdate>& updates) = 0;
  // Copies weight tensor `weight`'s current bytes (exactly its size) to the host, and back.
  virtual void get_weight(int weight, void* data, size_t bytes) = 0;
  virtual void set_weight(int weight, const void* data, size_t bytes) = 0;

  // Latency of `runs` whole-plan runs after `warmup` untimed ones, one sample per run in
  // microseconds (device events around each replay). The emulator throws UserError: it
  // has no timing.
  virtual std::vector<double> time_runs(int warmup, int runs) = 0;

  // Device address of input/output `index`'s buffer (zero-copy binding through libdcrt's
  // dcrt_input_device_buffer); 0 where the backend has no device memory (the emulator).
  virtual uint64_t io_device_address(bool output, size_t index) const {
    (void)output;
    (void)index;
    return 0;
  }

 protected:
  std::optional<WeightsFile> unverified_weights_;
};

struct CudaBackendOptions {
  int device = 0;              // CUDA device ordinal
  std::string cache_dir;       // NVRTC compile cache ("" = none; see common/cuda/compile_cache.h)
  bool use_cuda_graph = true;  // replay the launch sequence as one CUDA graph
};

// UserError when there is no CUDA driver or no such device (the message says which).
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);

struct EmulatorBackendOptions {
  std::string cache_dir;       // the emulator's compile cache ("" = its default)
};

std::unique_ptr<Backend> make_emulator_backend(const EmulatorBackendOptions& options);

struct OpenClBackendOptions {
  int device = 0;              // OpenCL device index (dc-worker --list-devices)
  std::string cache_dir;       // SPIR compile cache ("" = none)
};

// A plan for an OpenCL device type (plan.gpu_arch "spir64"): backend_opencl.cpp. UserError
// when there is no such OpenCL device.
std::unique_ptr<Backend> make_opencl_backend(const OpenClBackendOptions& options);

}  // namespace dc::rt
