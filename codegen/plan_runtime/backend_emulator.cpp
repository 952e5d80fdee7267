// The host-emulator backend: runs a plan's steps on the CPU with codegen/emulator.h, for
// correctness only. It keeps the plan's memory layout honest: intermediates and scratch live
// in one host byte arena of plan.arena_bytes at their planned offsets, each step reads its
// inputs from there and writes its results back there, so a memory plan that lets two live
// tensors share bytes gives wrong outputs here exactly as it would on a GPU.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <thread>

#include "backend.h"
#include "emulator.h"
#include "emulator/compile.h"
#include "ir/error.h"
#include "plan/plan_io.h"

namespace dc::rt {
namespace {

// Threads compiling modules at load (the machine's cores are shared; two is plenty).
constexpr unsigned kCompileThreads = 2;

// PlanTensor::bytes() as a size_t, for comparisons with buffer sizes.
size_t tensor_bytes(const PlanTensor& t) { return static_cast<size_t>(t.bytes()); }

std::string module_label(const ExecPlan& plan, size_t m) {
  const GeneratedKernel& k = plan.modules[m];
  return fmt::format("module {} ({} {})", m, k.template_name, k.variant_key);
}

class EmulatorBackend final : public Backend {
 public:
  explicit EmulatorBackend(const EmulatorBackendOptions& o) { options_.cache_dir = o.cache_dir; }

  std::string device_description() const override {
    return "host emulator (CPU, correctness only, no timing)";
  }
  std::string device_gpu_type() const override { return ""; }

  void load(const ExecPlan& plan) override {
    plan_ = &plan;
    compile_modules();
    load_weights();
    // Poison: an intermediate read before any step wrote it is NaN (floats) or -1.
    arena_.assign(static_cast<size_t>(plan.arena_bytes), std::byte{0xff});
    values_.assign(plan.tensors.size(), Tensor());
    for (int id : plan.inputs) values_[id] = Tensor(plan.tensors[id].dtype, plan.tensors[id].shape);
    for (int id : plan.outputs) {  // poisoned like the arena: views of outputs write into them
      values_[id] = Tensor(plan.tensors[id].dtype, plan.tensors[id].shape);
      std::fill_n(values_[id].raw_mutable(), values_[id].nbytes(), std::byte{0xff});
    }
  }

  void set_input(size_t index, const void* data, size_t bytes) override {
    Tensor& t = values_.at(plan_->inputs.at(index));
    DC_INTERNAL_CHECK(bytes == t.nbytes(), "input ", index, ": ", bytes, " bytes for ", t.nbytes());
    std::memcpy(t.raw_mutable(), data, bytes);
  }

  void run() override {
    for (size_t i = 0; i < plan_->steps.size(); ++i) run_step(i);
  }

  void get_output(size_t index, void* data, size_t bytes) override {
    const Tensor& t = values_.at(plan_->outputs.at(index));
    DC_INTERNAL_CHECK(bytes == t.nbytes(), "output ", index, ": ", bytes, " bytes for ", t.nbytes());
    std::memcpy(data, t.raw(), bytes);
  }

  void carry_state(const std::vector<PlanStateUpdate>& updates) override {
    for (const PlanStateUpdate& u : updates) {
      const Tensor& out = values_.at(u.next);
      Tensor& w = weights_.at(u.state);
      DC_INTERNAL_CHECK(w.defined() && out.nbytes() == w.nbytes(), "output ", u.next, " does not fit weight ", u.state);
      Tensor copy(w.dtype(), w.shape());  // a new tensor: the old one may be the plan's value
      std::memcpy(copy.raw_mutable(), out.raw(), out.nbytes());
      w = std::move(copy);
    }
  }

  void get_weight(int weight, void* data, size_t bytes) override {
    const Tensor& w = weights_.at(weight);
    DC_INTERNAL_CHECK(w.defined() && bytes == w.nbytes(), "weight ", weight, ": ", bytes, " bytes for ", w.nbytes());
    std::memcpy(data, w.raw(), bytes);
  }

  void set_weight(int weight, const void* data, size_t bytes) override {
    Tensor& w = weights_.at(weight);
    DC_INTERNAL_CHECK(w.defined() && bytes == w.nbytes(), "weight ", weight, ": ", bytes, " bytes for ", w.nbytes());
    Tensor copy(w.dtype(), w.shape());  // a new tensor: the old one may be the plan's value
    std::memcpy(copy.raw_mutable(), data, bytes);
    w = std::move(copy);
  }

  std::vector<double> time_runs(int, int) override {
    throw UserError("the host emulator has no timing; run on a GPU for --bench");
  }

 private:
  // Every module once, on a couple of threads: the emulator caches compiled kernels by hash,
  // so the runs that follow only load them.
  void compile_modules() {
    const size_t n = plan_->modules.size();
    std::vector<std::string> errors(n);
    std::vector<std::exception_ptr> failures(n);
    std::atomic<size_t> next{0};
    std::atomic<size_t> cached{0};
    const auto t0 = std::chrono::steady_clock::now();
    auto work = [&] {
      for (size_t m; (m = next++) < n;) {
        try {
          const emu::CompiledLibrary lib =
              emu::compile_library(emulator_source(plan_->modules[m]), options_);
          errors[m] = lib.error;
          cached += lib.from_cache ? 1 : 0;
          if (!lib.temp_dir.empty()) std::filesystem::remove_all(lib.temp_dir);
        } catch (...) {
          failures[m] = std::current_exception();
        }
      }
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < std::min<size_t>(kCompileThreads, n); ++t) threads.emplace_back(work);
    for (auto& t : threads) t.join();
    for (size_t m = 0; m < n; ++m) {
      if (failures[m]) std::rethrow_exception(failures[m]);
      DC_USER_CHECK(errors[m].empty(), module_label(*plan_, m),
                    " does not compile for the host emulator: ", errors[m]);
    }
    spdlog::info("host emulator: {} module(s) ready in {:.2f} s ({} from the cache)", n,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                 cached.load());
  }

  // The weights in host memory, the emulator's device memory. With unverified_weights_,
  // weights.bin is read here, once, and checksummed as each chunk is copied into the
  // weights it holds; otherwise the plan's values are used as they are.
  void load_weights() {
    weights_.assign(plan_->tensors.size(), Tensor());
    owned_.assign(plan_->tensors.size(), nullptr);
    std::vector<int> ids;
    for (size_t i = 0; i < plan_->tensors.size(); ++i)
      if (plan_->tensors[i].kind == PlanTensorKind::weight) ids.push_back(static_cast<int>(i));
    if (!unverified_weights_) {
      for (int id : ids) weights_[id] = plan_->values.at(id);
      return;
    }
    for (int id : ids) weights_[id] = Tensor(plan_->tensors[id].dtype, plan_->tensors[id].shape);
    std::sort(ids.begin(), ids.end(), [&](int a, int b) { return plan_->tensors[a].offset < plan_->tensors[b].offset; });
    size_t first = 0;  // the first weight that may still receive bytes
    stream_weights_file(*unverified_weights_, size_t{16} << 20, [&](uint64_t at, const std::byte* data, size_t n) {
      const uint64_t end = at + n;
      for (size_t k = first; k < ids.size(); ++k) {
        const PlanTensor& pt = plan_->tensors[ids[k]];
        const auto lo = static_cast<uint64_t>(pt.offset), hi = lo + static_cast<uint64_t>(pt.bytes());
        if (lo >= end) break;
        if (hi <= at) {
          if (k == first) ++first;
          continue;
        }
        const uint64_t from = std::max(lo, at), to = std::min(hi, end);
        std::memcpy(weights_[ids[k]].raw_mutable() + (from - lo), data + (from - at), to - from);
      }
    });
  }

  // Where tensor `id`'s bytes live on the host: the user's input, an output buffer, a
  // weight, the arena; a view's are bytes of the tensor it views.
  std::byte* storage(int id) {
    const PlanTensor& pt = plan_->tensors[id];
    switch (pt.kind) {
      case PlanTensorKind::input:
      case PlanTensorKind::output: return values_[id].raw_mutable();
      case PlanTensorKind::weight:  // written only through an in-place state update (own_weight)
        return const_cast<std::byte*>(weights_.at(id).raw());
      case PlanTensorKind::intermediate:
      case PlanTensorKind::scratch: return arena_.data() + arena_offset(pt);
      case PlanTensorKind::view: return storage(pt.view_of) + pt.offset;
    }
    throw_internal_error("tensor ", pt.name, " has an unknown kind");
  }

  // The tensor a step reads as buffer contents.
  Tensor read_tensor(int id) {
    const PlanTensor& pt = plan_->tensors[id];
    if (pt.kind == PlanTensorKind::weight) return weights_.at(id);
    Tensor t(pt.dtype, pt.shape);
    std::memcpy(t.raw_mutable(), storage(id), t.nbytes());
    return t;
  }

  // Stores what a step wrote into tensor `id`.
  void write_tensor(int id, const Tensor& value) {
    const PlanTensor& pt = plan_->tensors[id];
    const int base = pt.kind == PlanTensorKind::view ? pt.view_of : id;
    const PlanTensorKind kind = plan_->tensors[base].kind;
    DC_INTERNAL_CHECK(kind != PlanTensorKind::input, "a step writes the model input ", pt.name);
    if (kind == PlanTensorKind::weight) own_weight(base);  // an in-place state update (validate_plan allowed it)
    DC_INTERNAL_CHECK(value.defined() && value.nbytes() == tensor_bytes(pt), "step result for ",
                      pt.name, " has the wrong size");
    std::memcpy(storage(id), value.raw(), value.nbytes());
  }

  // Before a step writes weight `id` in place: a tensor of its own, since the one it holds may
  // be the plan's value (or weights.bin's mapping), which other readers share.
  void own_weight(int id) {
    Tensor& w = weights_.at(id);
    if (w.defined() && w.raw() == owned_.at(id)) return;
    Tensor copy(w.dtype(), w.shape());
    std::memcpy(copy.raw_mutable(), w.raw(), w.nbytes());
    w = std::move(copy);
    owned_[id] = w.raw();
  }

  size_t arena_offset(const PlanTensor& pt) const {
    DC_INTERNAL_CHECK(pt.offset >= 0 && static_cast<size_t>(pt.offset) + tensor_bytes(pt) <=
                                            arena_.size(),
                      "tensor ", pt.name, " lies outside the arena");
    return static_cast<size_t>(pt.offset);
  }

  void run_step(size_t i) {
    const PlanStep& step = plan_->steps[i];
    const GeneratedKernel& k = plan_->modules.at(step.module);
    DC_INTERNAL_CHECK(step.buffers.size() == k.buffers.size(), "step ", i, " binds ",
                      step.buffers.size(), " tensors to ", k.buffers.size(), " buffers");
    // Outputs and scratch stay undefined: the emulator poisons (or zeroes) them itself.
    std::vector<Tensor> buffers(k.buffers.size());
    for (size_t j = 0; j < k.buffers.size(); ++j)
      if (k.buffers[j].role == BufferRole::input) buffers[j] = read_tensor(step.buffers[j]);
    const EmulatorResult r = emulate(k, buffers, options_);
    DC_USER_CHECK(r.ok, "step ", i, " (cluster ", step.cluster, ", kernel ", k.template_name, " ",
                  k.variant_key, ") failed on the host emulator: ", r.error);
    for (size_t j = 0; j < k.buffers.size(); ++j)
      if (k.buffers[j].role != BufferRole::input) write_tensor(step.buffers[j], buffers[j]);
  }

  const ExecPlan* plan_ = nullptr;
  EmulatorOptions options_;
  std::vector<std::byte> arena_;
  std::vector<Tensor> values_;  // parallel to plan.tensors: inputs and outputs only
  std::vector<Tensor> weights_;  // parallel to plan.tensors: weights only
  std::vector<const std::byte*> owned_;  // parallel to weights_: the bytes own_weight made
};

}  // namespace

std::unique_ptr<Backend> make_emulator_backend(const EmulatorBackendOptions& options) {
  return std::make_unique<EmulatorBackend>(options);
}

}  // namespace dc::rt
