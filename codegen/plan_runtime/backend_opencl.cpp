// The OpenCL backend: a plan's modules through the dialect layer (codegen/opencl_dialect.h),
// clang to SPIR (through the compile cache), clBuildProgram; memory as coarse-grained SVM
// (OpenCL 2.0+), so that a step's buffer is a pointer anywhere in an allocation, as on CUDA:
// the arena at plan offsets, views inside the tensor they view. Timing with profiling events
// around each whole run, as dc-worker times kernels (worker/opencl_runner.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend.h"
#include "ir/error.h"
#include "opencl_compile.h"
#include "opencl_dialect.h"
#include "opencl_impl.h"
#include "plan/plan_io.h"

namespace dc::rt {
namespace {

size_t tensor_bytes(const PlanTensor& t) { return static_cast<size_t>(t.bytes()); }

// One SVM allocation, freed with its context.
class Svm {
 public:
  Svm(cl_context c, size_t bytes) : context_(c), bytes_(std::max<size_t>(bytes, 16)) {
    ptr_ = clSVMAlloc(c, CL_MEM_READ_WRITE, bytes_, 64);
    DC_USER_CHECK(ptr_ != nullptr, "OpenCL: cannot allocate ", bytes_, " bytes of shared virtual memory (the device "
                  "needs OpenCL 2.0 SVM)");
  }
  ~Svm() {
    if (ptr_) clSVMFree(context_, ptr_);
  }
  Svm(const Svm&) = delete;
  Svm& operator=(const Svm&) = delete;
  std::byte* get() const { return static_cast<std::byte*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  cl_context context_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

struct Module {
  ocl::Program program;
  std::vector<ocl::Kernel> kernels;  // one per launch
};

class OpenClBackend final : public Backend {
 public:
  explicit OpenClBackend(const OpenClBackendOptions& o)
      : options_(o), device_(GpuCatalog::builtin(), o.device) {
    clang_ = opencl_clang_for(device_.info().platform_version);
  }

  std::string device_description() const override {
    return fmt::format("{} (opencl:{}, {}, {})", device_.info().name, options_.device, device_.info().platform_version,
                       clang_);
  }
  std::string device_gpu_type() const override { return device_.info().gpu_type; }

  void load(const ExecPlan& plan) override {
    plan_ = &plan;
    build_modules();
    cl_context c = device_.impl().context.get();
    arena_ = std::make_unique<Svm>(c, static_cast<size_t>(plan.arena_bytes));
    fill(arena_->get(), arena_->bytes(), 0xff);  // poison: reading an unwritten intermediate gives NaN
    own_.resize(plan.tensors.size());
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      const PlanTensor& pt = plan.tensors[i];
      if (pt.kind == PlanTensorKind::input || pt.kind == PlanTensorKind::output || pt.kind == PlanTensorKind::weight)
        own_[i] = std::make_unique<Svm>(c, tensor_bytes(pt));
    }
    for (int id : plan.outputs) fill(own_[id]->get(), own_[id]->bytes(), 0xff);
    load_weights();
    finish("loading the plan");
  }

  void set_input(size_t index, const void* data, size_t bytes) override {
    const int id = plan_->inputs.at(index);
    DC_INTERNAL_CHECK(bytes == tensor_bytes(plan_->tensors[id]), "input ", index, ": ", bytes, " bytes");
    ocl::check(clEnqueueSVMMemcpy(queue(), CL_TRUE, own_[id]->get(), data, bytes, 0, nullptr, nullptr),
               "clEnqueueSVMMemcpy (input)");
  }

  void run() override {
    for (size_t i = 0; i < plan_->steps.size(); ++i) enqueue_step(i, nullptr);
    finish("running the plan");
  }

  void carry_state(const std::vector<PlanStateUpdate>& updates) override {
    for (const PlanStateUpdate& u : updates) {
      const size_t bytes = tensor_bytes(plan_->tensors.at(u.next));
      DC_INTERNAL_CHECK(bytes == tensor_bytes(plan_->tensors.at(u.state)), "output ", u.next, " does not fit weight ", u.state);
      if (bytes == 0) continue;
      ocl::check(clEnqueueSVMMemcpy(queue(), CL_FALSE, storage(u.state), storage(u.next), bytes, 0, nullptr, nullptr),
                 "clEnqueueSVMMemcpy (training state)");
    }
    ocl::check(clFinish(queue()), "clFinish (training state)");
  }

  void get_weight(int weight, void* data, size_t bytes) override {
    DC_INTERNAL_CHECK(bytes == tensor_bytes(plan_->tensors.at(weight)), "weight ", weight, ": wrong size");
    if (bytes == 0) return;
    ocl::check(clEnqueueSVMMemcpy(queue(), CL_TRUE, data, storage(weight), bytes, 0, nullptr, nullptr),
               "clEnqueueSVMMemcpy (weight)");
  }

  void set_weight(int weight, const void* data, size_t bytes) override {
    DC_INTERNAL_CHECK(bytes == tensor_bytes(plan_->tensors.at(weight)), "weight ", weight, ": wrong size");
    if (bytes == 0) return;
    ocl::check(clEnqueueSVMMemcpy(queue(), CL_TRUE, storage(weight), data, bytes, 0, nullptr, nullptr),
               "clEnqueueSVMMemcpy (weight)");
  }

  void get_output(size_t index, void* data, size_t bytes) override {
    const int id = plan_->outputs.at(index);
    DC_INTERNAL_CHECK(bytes == tensor_bytes(plan_->tensors[id]), "output ", index, ": ", bytes, " bytes");
    ocl::check(clEnqueueSVMMemcpy(queue(), CL_TRUE, data, storage(id), bytes, 0, nullptr, nullptr),
               "clEnqueueSVMMemcpy (output)");
  }

  std::vector<double> time_runs(int warmup, int runs) override {
    for (int i = 0; i < warmup; ++i) run();
    std::vector<double> samples;
    for (int r = 0; r < runs; ++r) {
      std::vector<cl_event> events;
      for (size_t i = 0; i < plan_->steps.size(); ++i) enqueue_step(i, &events);
      DC_INTERNAL_CHECK(!events.empty(), "a plan without launches");
      ocl::check(clWaitForEvents(1, &events.back()), "clWaitForEvents");
      samples.push_back(ocl::event_us(events.front(), events.back()));
      for (cl_event e : events) clReleaseEvent(e);
    }
    return samples;
  }

 private:
  cl_command_queue queue() { return device_.impl().queue.get(); }

  void finish(const char* what) {
    const cl_int rc = clFinish(queue());
    DC_USER_CHECK(rc == CL_SUCCESS, "OpenCL: ", what, " failed: ", ocl::error_name(rc));
  }

  void fill(std::byte* p, size_t bytes, unsigned char byte) {
    ocl::check(clEnqueueSVMMemFill(queue(), p, &byte, 1, bytes, 0, nullptr, nullptr), "clEnqueueSVMMemFill");
  }

  void build_modules() {
    const auto t0 = std::chrono::steady_clock::now();
    int cached = 0;
    for (size_t m = 0; m < plan_->modules.size(); ++m) {
      const GeneratedKernel& k = plan_->modules[m];
      const OpenClCompileResult c = compile_opencl(opencl_source(k), clang_, options_.cache_dir);
      DC_USER_CHECK(c.ok, "module ", m, " (", k.template_name, " ", k.variant_key, ") does not compile for OpenCL: ",
                    c.error.substr(0, 2000));
      cached += c.from_cache ? 1 : 0;
      Module mod;
      std::string log;
      mod.program = ocl::build_spir(device_, c.binary, &log);
      DC_USER_CHECK(mod.program != nullptr, "module ", m, " (", k.template_name, "): ", log.substr(0, 2000));
      for (const Launch& l : k.launches) {
        cl_int rc = CL_SUCCESS;
        mod.kernels.emplace_back(clCreateKernel(mod.program.get(), l.kernel.c_str(), &rc));
        ocl::check(rc, "clCreateKernel");
      }
      modules_.push_back(std::move(mod));
    }
    spdlog::info("opencl: {} module(s) ready in {:.2f} s ({} from the cache)", plan_->modules.size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), cached);
  }

  void load_weights() {
    for (size_t i = 0; i < plan_->tensors.size(); ++i)
      if (plan_->tensors[i].kind == PlanTensorKind::weight && !unverified_weights_) {
        const Tensor& t = plan_->values.at(static_cast<int>(i));
        ocl::check(clEnqueueSVMMemcpy(queue(), CL_TRUE, own_[i]->get(), t.raw(), t.nbytes(), 0, nullptr, nullptr),
                   "uploading a weight");
      }
    if (!unverified_weights_) return;
    std::vector<int> ids;
    for (size_t i = 0; i < plan_->tensors.size(); ++i)
      if (plan_->tensors[i].kind == PlanTensorKind::weight) ids.push_back(static_cast<int>(i));
    std::sort(ids.begin(), ids.end(), [&](int a, int b) { return plan_->tensors[a].offset < plan_->tensors[b].offset; });
    size_t first = 0;
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
        ocl::check(clEnqueueSVMMemcpy(queue(), CL_TRUE, own_[ids[k]]->get() + (from - lo), data + (from - at), to - from,
                                      0, nullptr, nullptr),
                   "uploading a weight");
      }
    });
  }

  std::byte* storage(int id) {
    const PlanTensor& pt = plan_->tensors[id];
    switch (pt.kind) {
      case PlanTensorKind::input:
      case PlanTensorKind::output:
      case PlanTensorKind::weight: return own_[id]->get();
      case PlanTensorKind::intermediate:
      case PlanTensorKind::scratch:
        DC_INTERNAL_CHECK(pt.offset >= 0 && static_cast<size_t>(pt.offset) + tensor_bytes(pt) <= arena_->bytes(),
                          "tensor ", pt.name, " lies outside the arena");
        return arena_->get() + pt.offset;
      case PlanTensorKind::view: return storage(pt.view_of) + pt.offset;
    }
    throw_internal_error("tensor ", pt.name, " has an unknown kind");
  }

  // The step's zero_init fills and launches; each command's event into *events if given.
  void enqueue_step(size_t i, std::vector<cl_event>* events) {
    const PlanStep& step = plan_->steps[i];
    const GeneratedKernel& k = plan_->modules.at(step.module);
    Module& mod = modules_.at(step.module);
    for (size_t j = 0; j < k.buffers.size(); ++j) {
      if (!k.buffers[j].zero_init) continue;
      const int id = step.buffers[j];
      const unsigned char zero = 0;
      cl_event e = nullptr;
      ocl::check(clEnqueueSVMMemFill(queue(), storage(id), &zero, 1, tensor_bytes(plan_->tensors[id]), 0, nullptr,
                                     events ? &e : nullptr),
                 "zero_init fill");
      if (events) events->push_back(e);
    }
    for (size_t li = 0; li < k.launches.size(); ++li) {
      const Launch& l = k.launches[li];
      cl_kernel kern = mod.kernels[li].get();
      for (size_t a = 0; a < l.args.size(); ++a)
        ocl::check(clSetKernelArgSVMPointer(kern, static_cast<cl_uint>(a), storage(step.buffers.at(l.args[a]))),
                   "clSetKernelArgSVMPointer");
      size_t global[3], local[3];
      for (size_t d = 0; d < 3; ++d) {
        local[d] = static_cast<size_t>(l.block[d]);
        global[d] = static_cast<size_t>(l.grid[d]) * local[d];
      }
      cl_event e = nullptr;
      const cl_int rc = clEnqueueNDRangeKernel(queue(), kern, 3, nullptr, global, local, 0, nullptr, events ? &e : nullptr);
      DC_USER_CHECK(rc == CL_SUCCESS, "step ", i, " (cluster ", step.cluster, ", kernel ", k.template_name, " ",
                    k.variant_key, "): clEnqueueNDRangeKernel failed: ", ocl::error_name(rc));
      if (events) events->push_back(e);
    }
  }

  OpenClBackendOptions options_;
  ocl::Device device_;
  std::string clang_;
  const ExecPlan* plan_ = nullptr;
  std::vector<Module> modules_;
  std::unique_ptr<Svm> arena_;
  std::vector<std::unique_ptr<Svm>> own_;  // inputs, outputs, weights (parallel to plan.tensors)
};

}  // namespace

std::unique_ptr<Backend> make_opencl_backend(const OpenClBackendOptions& options) {
  return std::make_unique<OpenClBackend>(options);
}

}  // namespace dc::rt
