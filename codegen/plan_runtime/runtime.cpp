#include "runtime.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ir/error.h"
#include "plan/plan_io.h"
#include "plan/state_alias.h"

namespace dc::rt {

struct Runtime::State {
  ExecPlan plan;                     // declared first: the backend refers to it
  std::unique_ptr<Backend> backend;
  std::vector<std::string> warnings;
  std::vector<bool> input_set;       // parallel to plan.inputs
  std::vector<PlanStateUpdate> copied_state;  // training: the pairs not updated in place
  bool ran = false;
};

namespace {

std::string describe(DType dtype, const Shape& shape) {
  return fmt::format("{}[{}]", dtype_name(dtype), shape_str(shape));
}

// PlanTensor::bytes() as a size_t, for comparisons with buffer sizes.
size_t tensor_bytes(const PlanTensor& t) { return static_cast<size_t>(t.bytes()); }

std::unique_ptr<Backend> make_backend(const RuntimeOptions& o) {
  if (o.emulate) return make_emulator_backend(EmulatorBackendOptions{o.cache_dir});
  if (o.opencl) return make_opencl_backend(OpenClBackendOptions{o.device, o.cache_dir});
  return make_cuda_backend(CudaBackendOptions{o.device, o.cache_dir, o.use_cuda_graph});
}

// What a user should know before trusting the plan's figures on this device.
std::vector<std::string> load_warnings(const ExecPlan& plan, const Backend& backend) {
  std::vector<std::string> w;
  const std::string device_type = backend.device_gpu_type();
  if (!device_type.empty() && device_type != plan.gpu_type)
    w.push_back(fmt::format("plan tuned for {} ({}) runs on {} ({}): times in the plan do not apply",
                            plan.gpu_type, plan.gpu_arch, device_type,
                            backend.device_description()));
  if (plan.reference_steps > 0)
    w.push_back(fmt::format("{} of {} steps run the naive reference kernel (no successful "
                            "measurement): expect them to be slow",
                            plan.reference_steps, plan.steps.size()));
  return w;
}

}  // namespace

Runtime Runtime::open(const std::string& plan_dir, const RuntimeOptions& options) {
  WeightsFile weights;  // checksummed by the backend as it uploads: weights.bin read once
  ExecPlan plan = read_plan(plan_dir, &weights);
  RuntimeOptions o = options;
  if (plan.gpu_arch == "spir64") o.opencl = true;  // a plan for an OpenCL device type
  return Runtime(std::move(plan), o, &weights);
}

Runtime::Runtime(ExecPlan plan, const RuntimeOptions& options, const WeightsFile* unverified_weights)
    : Runtime(std::move(plan), [&] {
        auto backend = make_backend(options);
        if (unverified_weights) backend->set_unverified_weights(*unverified_weights);
        return backend;
      }()) {}

Runtime::Runtime(ExecPlan plan, std::unique_ptr<Backend> backend) : s_(std::make_unique<State>()) {
  DC_INTERNAL_CHECK(backend != nullptr, "Runtime without a backend");
  validate_plan(plan);
  s_->plan = std::move(plan);
  s_->backend = std::move(backend);
  s_->backend->load(s_->plan);
  s_->input_set.assign(s_->plan.inputs.size(), false);
  s_->copied_state = copied_state_updates(s_->plan);
  s_->warnings = load_warnings(s_->plan, *s_->backend);
  for (const auto& w : s_->warnings) spdlog::warn("{}", w);
}

Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;
Runtime::~Runtime() = default;

const ExecPlan& Runtime::plan() const { return s_->plan; }
std::string Runtime::device_description() const { return s_->backend->device_description(); }
const std::vector<std::string>& Runtime::warnings() const { return s_->warnings; }
size_t Runtime::num_inputs() const { return s_->plan.inputs.size(); }
size_t Runtime::num_outputs() const { return s_->plan.outputs.size(); }

const PlanTensor& Runtime::input_info(size_t index) const {
  DC_USER_CHECK(index < num_inputs(), "input index ", index, " is out of range: the plan has ",
                num_inputs(), " input(s)");
  return s_->plan.tensors[s_->plan.inputs[index]];
}

const PlanTensor& Runtime::output_info(size_t index) const {
  DC_USER_CHECK(index < num_outputs(), "output index ", index, " is out of range: the plan has ",
                num_outputs(), " output(s)");
  return s_->plan.tensors[s_->plan.outputs[index]];
}

void Runtime::set_input(size_t index, const Tensor& t) {
  const PlanTensor& in = input_info(index);
  DC_USER_CHECK(t.defined(), "input '", in.name, "': no tensor given (expected ",
                describe(in.dtype, in.shape), ")");
  DC_USER_CHECK(t.dtype() == in.dtype && t.shape() == in.shape, "input '", in.name, "': expected ",
                describe(in.dtype, in.shape), ", got ", describe(t.dtype(), t.shape()));
  set_input(index, t.raw(), t.nbytes());
}

void Runtime::set_input(size_t index, const void* data, size_t bytes) {
  const PlanTensor& in = input_info(index);
  DC_USER_CHECK(data != nullptr || bytes == 0, "input '", in.name, "': no data given");
  DC_USER_CHECK(bytes == tensor_bytes(in), "input '", in.name, "': ", bytes, " bytes given, but ",
                describe(in.dtype, in.shape), " takes ", tensor_bytes(in), " bytes");
  s_->backend->set_input(index, data, bytes);
  s_->input_set[index] = true;
}

void Runtime::run() {
  for (size_t i = 0; i < num_inputs(); ++i)
    DC_USER_CHECK(s_->input_set[i], "input '", input_info(i).name,
                  "' was never set: set every input before running the plan");
  s_->backend->run();
  s_->ran = true;
}

Tensor Runtime::output(size_t index) const {
  const PlanTensor& out = output_info(index);
  Tensor t(out.dtype, out.shape);
  get_output(index, t.raw_mutable(), t.nbytes());
  return t;
}

void Runtime::get_output(size_t index, void* data, size_t bytes) const {
  const PlanTensor& out = output_info(index);
  DC_USER_CHECK(s_->ran, "output '", out.name, "' has no value yet: run the plan first");
  DC_USER_CHECK(data != nullptr || bytes == 0, "output '", out.name, "': no destination given");
  DC_USER_CHECK(bytes == tensor_bytes(out), "output '", out.name, "': a buffer of ", bytes,
                " bytes given, but ", describe(out.dtype, out.shape), " takes ",
                tensor_bytes(out), " bytes");
  s_->backend->get_output(index, data, bytes);
}

std::vector<double> Runtime::time_runs(int warmup, int runs) {
  DC_USER_CHECK(warmup >= 0 && runs >= 1, "timing needs at least one run and no negative "
                "warm-up (got ", runs, " runs, ", warmup, " warm-up)");
  for (size_t i = 0; i < num_inputs(); ++i)
    DC_USER_CHECK(s_->input_set[i], "input '", input_info(i).name,
                  "' was never set: set every input before timing the plan");
  auto samples = s_->backend->time_runs(warmup, runs);
  s_->ran = true;  // the timed runs leave their outputs behind
  return samples;
}

void Runtime::train_step() {
  DC_USER_CHECK(s_->plan.training, "this plan computes inference, not a training step (write it with "
                "`plan --train --out` or `tune --train --out`)");
  run();
  s_->backend->carry_state(s_->copied_state);  // aliased pairs were updated in place
}

Tensor Runtime::weight(const std::string& name) const {
  for (size_t i = 0; i < s_->plan.tensors.size(); ++i) {
    const PlanTensor& t = s_->plan.tensors[i];
    if (t.kind != PlanTensorKind::weight || t.name != name) continue;
    Tensor out(t.dtype, t.shape);
    s_->backend->get_weight(static_cast<int>(i), out.raw_mutable(), out.nbytes());
    return out;
  }
  throw_user_error("the plan has no weight named '", name, "'");
}

size_t Runtime::num_states() const { return s_->plan.training ? s_->plan.training->state.size() : 0; }

const PlanTensor& Runtime::state_info(size_t index) const {
  DC_USER_CHECK(s_->plan.training, "this plan computes inference: it has no training state");
  DC_USER_CHECK(index < num_states(), "state index ", index, " is out of range: the plan has ", num_states(),
                " state tensor(s)");
  return s_->plan.tensors[static_cast<size_t>(s_->plan.training->state[index].state)];
}

void Runtime::get_state(size_t index, void* data, size_t bytes) const {
  const PlanTensor& t = state_info(index);
  DC_USER_CHECK(data != nullptr && bytes == tensor_bytes(t), "state '", t.name, "': a buffer of ", bytes,
                " bytes given, but ", describe(t.dtype, t.shape), " takes ", tensor_bytes(t), " bytes");
  s_->backend->get_weight(s_->plan.training->state[index].state, data, bytes);
}

void Runtime::set_state(size_t index, const void* data, size_t bytes) {
  const PlanTensor& t = state_info(index);
  DC_USER_CHECK(data != nullptr && bytes == tensor_bytes(t), "state '", t.name, "': ", bytes, " bytes given, but ",
                describe(t.dtype, t.shape), " takes ", tensor_bytes(t), " bytes");
  s_->backend->set_weight(s_->plan.training->state[index].state, data, bytes);
}

uint64_t Runtime::input_device_buffer(size_t index) {
  const PlanTensor& in = input_info(index);
  const uint64_t address = s_->backend->io_device_address(false, index);
  DC_USER_CHECK(address != 0, "input '", in.name, "': ", device_description(),
                " has no device memory to bind (copy the input from the host instead)");
  s_->input_set[index] = true;
  return address;
}

uint64_t Runtime::output_device_buffer(size_t index) const {
  const PlanTensor& out = output_info(index);
  DC_USER_CHECK(s_->ran, "output '", out.name, "' has no value yet: run the plan first");
  const uint64_t address = s_->backend->io_device_address(true, index);
  DC_USER_CHECK(address != 0, "output '", out.name, "': ", device_description(),
                " has no device memory to read from (copy the output to the host instead)");
  return address;
}

}  // namespace dc::rt
