// The plan runtime behind libdcrt's C API (dcrt.h) and dc-run: loads a plan directory,
// checks it against the device, and runs it on a backend (backend.h). Every user mistake
// (a corrupt or truncated plan, a wrong input shape or dtype, an index out of range) is a
// UserError with a clear message; a plan tuned for another GPU type is a warning and still
// runs when the device can run its kernels (NVRTC compiles them for the device's own
// architecture; a launch beyond the device's limits is refused at load).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "ir/tensor.h"
#include "plan/plan.h"

namespace dc::rt {

struct RuntimeOptions {
  bool emulate = false;        // the host emulator instead of a GPU
  int device = 0;              // CUDA device ordinal (OpenCL: the OpenCL device index)
  // An OpenCL device; a plan for an OpenCL type (gpu_arch spir64) runs on one regardless.
  bool opencl = false;
  std::string cache_dir;       // compile cache ("" = default: $XDG_CACHE_HOME or ~/.cache/dc/...)
  bool use_cuda_graph = true;
};

class Runtime {
 public:
  // read_plan(dir), then load on the chosen backend.
  static Runtime open(const std::string& plan_dir, const RuntimeOptions& options);
  // `unverified_weights`: from read_plan(dir, &w); the backend checksums weights.bin as it
  // uploads it (the plan is refused on a mismatch).
  Runtime(ExecPlan plan, const RuntimeOptions& options, const WeightsFile* unverified_weights = nullptr);
  Runtime(ExecPlan plan, std::unique_ptr<Backend> backend);  // tests: any backend
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  ~Runtime();

  const ExecPlan& plan() const;
  std::string device_description() const;
  // Notices from loading (e.g. "plan tuned for a100, running on h100 ..."), also logged.
  const std::vector<std::string>& warnings() const;

  size_t num_inputs() const;
  size_t num_outputs() const;
  const PlanTensor& input_info(size_t index) const;   // UserError if out of range
  const PlanTensor& output_info(size_t index) const;
  // UserError unless `t` has the input's dtype and shape.
  void set_input(size_t index, const Tensor& t);
  void set_input(size_t index, const void* data, size_t bytes);  // bytes must match
  // UserError if an input was never set. On a training plan: the step's kernels, so the state
  // updated in place changes; only train_step carries the rest (docs/training.md).
  void run();
  Tensor output(size_t index) const;  // after run()
  void get_output(size_t index, void* data, size_t bytes) const;
  std::vector<double> time_runs(int warmup, int runs);

  // Training plans (plan().training, docs/training.md): one step is run(), then each state's
  // value after the step carried into its weight on the device, so the next step reads it
  // (the optimizer's updates wrote theirs in place: only the other pairs are copied).
  // UserError for an inference plan.
  void train_step();
  // The current value of weight `name` (after train_step: the trained state). UserError if
  // the plan has no weight of that name.
  Tensor weight(const std::string& name) const;
  // A training plan's state tensors (plan().training->state, in order): their descriptions,
  // and their current bytes both ways (exactly the tensor's size). UserError for an
  // inference plan or an index out of range.
  size_t num_states() const;
  const PlanTensor& state_info(size_t index) const;
  void get_state(size_t index, void* data, size_t bytes) const;
  void set_state(size_t index, const void* data, size_t bytes);
  // Zero-copy binding (GPU only; UserError on the emulator): the device address of input
  // `index`'s buffer, which the caller fills itself (the input then counts as set), and of
  // output `index` after a run.
  uint64_t input_device_buffer(size_t index);
  uint64_t output_device_buffer(size_t index) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace dc::rt
