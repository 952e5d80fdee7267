// The plan runtime on a CUDA GPU (docs/gpu-runtime.md, "Plan runtime (libdcrt) on the
// GPU"). load() compiles every module for the device's own architecture through the
// compile cache, checks each launch against the device's limits, allocates one buffer per
// model input and output, one arena for intermediates and scratch and one for the weights
// (uploaded once), and resolves every kernel parameter to a device address. The launch
// sequence (per step: zero the step's zero_init buffers, then its launches) is captured
// once as a CUDA graph and replayed by run(), or enqueued launch by launch without one.
// All work goes to one non-blocking stream of the device's primary context.
#include "backend_cuda.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>

#include "compile_cache.h"
#include "cuda_driver.h"
#include "device_discovery.h"
#include "kernel_module.h"
#include "ir/error.h"
#include "ir/parallel.h"

namespace dc::rt {
namespace {

// Timed runs recorded between two host synchronisations.
constexpr int kTimingBatch = 256;

// What load() needs to know about the device.
struct DeviceInfo {
  int ordinal = 0;
  CUdevice device = 0;
  std::string name;
  std::string own_arch;   // "sm_90": the device's compute capability
  std::string arch;       // NVRTC target (own_arch, or the newest compatible one)
  std::string gpu_type;   // GpuSpec name; "" for a device gpus.yaml does not know
  std::array<int64_t, 3> max_block{};
  std::array<int64_t, 3> max_grid{};
  int64_t smem_optin = 0;
};

int read_attribute(const cuda::Driver& d, CUdevice dev, CUdevice_attribute which,
                   const char* what) {
  int v = 0;
  d.check(d.api().device_get_attribute(&v, which, dev), what);
  return v;
}

DeviceInfo device_info(const cuda::Driver& d, const DiscoveredDevice& found) {
  DeviceInfo info;
  info.ordinal = found.ordinal;
  info.name = found.attributes.name;
  info.own_arch = fmt::format("sm_{}{}", found.attributes.cc_major, found.attributes.cc_minor);
  info.arch = found.arch;
  info.gpu_type = found.spec.generic ? std::string() : found.spec.name;
  info.smem_optin = found.attributes.smem_per_block_optin;
  d.check(d.api().device_get(&info.device, found.ordinal), "cuDeviceGet");
  const CUdevice dev = info.device;
  info.max_block = {read_attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, "block x"),
                    read_attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, "block y"),
                    read_attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, "block z")};
  info.max_grid = {read_attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "grid x"),
                   read_attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, "grid y"),
                   read_attribute(d, dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, "grid z")};
  return info;
}

// Device `ordinal` of `driver`, mapped to its GPU type and NVRTC target.
DeviceInfo find_device(const std::shared_ptr<const cuda::Driver>& driver, int ordinal) {
  cuda::DriverLoad load;
  load.driver = driver;
  load.library = driver->library();
  load.library_found = true;
  std::string why;
  const auto devices = discover_devices(load, GpuCatalog::builtin(), &why);
  DC_USER_CHECK(!devices.empty(), why);
  DC_USER_CHECK(ordinal >= 0 && static_cast<size_t>(ordinal) < devices.size(), "no CUDA device ",
                ordinal, ": the driver reports ", devices.size(), " device(s)");
  const DiscoveredDevice& found = devices[static_cast<size_t>(ordinal)];
  DC_USER_CHECK(found.usable(), "CUDA device ", ordinal, " (", found.attributes.name,
                ") cannot run plans: ", found.problem);
  try {
    return device_info(*driver, found);
  } catch (const cuda::CudaError& e) {
    throw_user_error("cannot open CUDA device ", ordinal, ": ", e.what());
  }
}

// ---- the plan, checked -------------------------------------------------------------------

std::string step_label(const ExecPlan& plan, size_t s) {
  return fmt::format("step {} ({})", s, plan.steps[s].cluster);
}

std::string module_label(const ExecPlan& plan, size_t m) {
  const GeneratedKernel& k = plan.modules[m];
  return fmt::format("module {} ({} {})", m, k.template_name, k.variant_key);
}

// "step 4 (conv+add+relu#57)" or "steps 4 (...), 9 (...) and 3 more".
std::string steps_using(const ExecPlan& plan, size_t m) {
  std::vector<std::string> names;
  for (size_t s = 0; s < plan.steps.size(); ++s)
    if (plan.steps[s].module == static_cast<int>(m))
      names.push_back(fmt::format("{} ({})", s, plan.steps[s].cluster));
  if (names.empty()) return "no step";
  std::string out = names.size() == 1 ? "step " : "steps ";
  for (size_t i = 0; i < names.size() && i < 2; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 2) out += fmt::format(" and {} more", names.size() - 2);
  return out;
}

int64_t kernel_buffer_bytes(const KernelBuffer& b) {
  return shape_numel(b.shape) * static_cast<int64_t>(dtype_size(b.dtype));
}

// The runtime validates a plan before a backend sees it; these checks make the backend
// memory-safe on its own: every address it computes lies inside a buffer it allocated.
void check_bindings(const ExecPlan& plan) {
  const auto tensor_count = static_cast<int>(plan.tensors.size());
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    DC_USER_CHECK(step.module >= 0 && static_cast<size_t>(step.module) < plan.modules.size(),
                  "corrupt plan: ", step_label(plan, s), " names module ", step.module, " of ",
                  plan.modules.size());
    const GeneratedKernel& k = plan.modules[static_cast<size_t>(step.module)];
    DC_USER_CHECK(step.buffers.size() == k.buffers.size(), "corrupt plan: ", step_label(plan, s),
                  " binds ", step.buffers.size(), " buffers to a module with ", k.buffers.size());
    for (size_t j = 0; j < k.buffers.size(); ++j) {
      const int t = step.buffers[j];
      DC_USER_CHECK(t >= 0 && t < tensor_count, "corrupt plan: ", step_label(plan, s),
                    " binds buffer ", k.buffers[j].name, " to tensor ", t, " of ", tensor_count);
      const PlanTensor& pt = plan.tensors[static_cast<size_t>(t)];
      DC_USER_CHECK(pt.bytes() == kernel_buffer_bytes(k.buffers[j]), "corrupt plan: ",
                    step_label(plan, s), " binds buffer ", k.buffers[j].name, " (",
                    kernel_buffer_bytes(k.buffers[j]), " bytes) to tensor ", pt.name, " (",
                    pt.bytes(), " bytes)");
    }
    for (const Launch& l : k.launches)
      for (int a : l.args)
        DC_USER_CHECK(a >= 0 && static_cast<size_t>(a) < k.buffers.size(), "corrupt plan: ",
                      step_label(plan, s), ": kernel ", l.kernel, " takes buffer ", a, " of ",
                      k.buffers.size());
  }
}

void check_tensors(const ExecPlan& plan) {
  DC_USER_CHECK(plan.arena_bytes >= 0, "corrupt plan: arena of ", plan.arena_bytes, " bytes");
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const PlanTensor& pt = plan.tensors[t];
    if (pt.kind == PlanTensorKind::intermediate || pt.kind == PlanTensorKind::scratch)
      DC_USER_CHECK(pt.offset >= 0 && pt.offset + pt.bytes() <= plan.arena_bytes,
                    "corrupt plan: tensor ", pt.name, " (", pt.bytes(), " bytes at ", pt.offset,
                    ") lies outside the arena of ", plan.arena_bytes, " bytes");
    if (pt.kind == PlanTensorKind::weight) {
      DC_USER_CHECK(pt.offset >= 0, "corrupt plan: weight ", pt.name, " at offset ", pt.offset);
      DC_USER_CHECK(t < plan.values.size() && plan.values[t].defined() &&
                        static_cast<int64_t>(plan.values[t].nbytes()) == pt.bytes(),
                    "corrupt plan: weight ", pt.name, " has no value of ", pt.bytes(), " bytes");
    }
  }
  auto check_ids = [&](const std::vector<int>& ids, PlanTensorKind kind, const char* what) {
    for (int id : ids)
      DC_USER_CHECK(id >= 0 && static_cast<size_t>(id) < plan.tensors.size() &&
                        plan.tensors[static_cast<size_t>(id)].kind == kind,
                    "corrupt plan: ", what, " names tensor ", id, ", which is no ", what);
  };
  check_ids(plan.inputs, PlanTensorKind::input, "input");
  check_ids(plan.outputs, PlanTensorKind::output, "output");
}

// ---- the recorded launch sequence ----------------------------------------------------

struct ZeroFill {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  std::string buffer;  // for messages
};

struct KernelCall {
  CUfunction function = nullptr;
  std::array<unsigned, 3> grid{};
  std::array<unsigned, 3> block{};
  unsigned smem = 0;
  std::vector<CUdeviceptr> args;  // kernel parameters: one device address per buffer
  std::string kernel;
};

struct StepProgram {
  std::string label;  // "step 4 (conv+add+relu#57)"
  std::vector<ZeroFill> zero_fills;
  std::vector<KernelCall> calls;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<const cuda::Driver> driver, const CudaBackendOptions& options)
      : driver_(std::move(driver)), options_(options) {
    DC_INTERNAL_CHECK(driver_ != nullptr, "CUDA backend without a driver");
    device_ = find_device(driver_, options.device);
    try {
      context_ = cuda::retain_primary_context(*driver_, device_.device);
      stream_ = cuda::create_stream(*driver_);
    } catch (const cuda::CudaError& e) {
      throw_user_error("cannot open CUDA device ", options.device, ": ", e.what());
    }
  }

  ~CudaBackend() override {
    // Nothing may be freed under a running launch; errors no longer matter here.
    if (context_ && driver_->api().ctx_set_current(context_.get()) == CUDA_SUCCESS && stream_)
      driver_->api().stream_synchronize(stream_.get());
  }

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string device_description() const override {
    return fmt::format("{} (cuda:{}, {})", device_.name, device_.ordinal, device_.own_arch);
  }
  std::string device_gpu_type() const override { return device_.gpu_type; }

  void load(const ExecPlan& plan) override;
  void set_input(size_t index, const void* data, size_t bytes) override;
  void run() override;
  void get_output(size_t index, void* data, size_t bytes) override;
  void carry_state(const std::vector<PlanStateUpdate>& updates) override;
  void get_weight(int weight, void* data, size_t bytes) override;
  void set_weight(int weight, const void* data, size_t bytes) override;
  std::vector<double> time_runs(int warmup, int runs) override;
  uint64_t io_device_address(bool output, size_t index) const override {
    DC_INTERNAL_CHECK(plan_ != nullptr, "io_device_address before load");
    const auto& list = output ? plan_->outputs : plan_->inputs;
    DC_USER_CHECK(index < list.size(), output ? "output " : "input ", index, " of ", list.size());
    return io_buffer(list[index]);
  }

 private:
  const cuda::Api& api() const { return driver_->api(); }
  void check(CUresult r, const std::string& what) const { driver_->check(r, what); }

  void enter();
  [[noreturn]] void fail(const std::string& doing, const cuda::CudaError& e);

  std::vector<CompileResult> compile_modules() const;
  cuda::LoadedKernel load_module(size_t m, const CompileResult& compiled);
  int function_attribute(CUfunction f, CUfunction_attribute which, const std::string& kernel) const;
  void check_launch(size_t m, size_t i, CUfunction f) const;
  void copy_weight(int weight, void* host, size_t bytes, bool to_device);
  void allocate();
  void upload_weights();
  CUdeviceptr address_of(int tensor) const;
  void build_program();
  void capture();
  void enqueue_step(const StepProgram& step);
  void replay();
  void synchronize(const std::string& what);
  CUdeviceptr io_buffer(int tensor) const;

  // Declared first: destroyed last, after everything that calls into it.
  std::shared_ptr<const cuda::Driver> driver_;
  CudaBackendOptions options_;
  DeviceInfo device_;
  cuda::PrimaryContext context_;
  cuda::Stream stream_;
  const ExecPlan* plan_ = nullptr;
  std::vector<cuda::LoadedKernel> modules_;
  std::map<int, cuda::DeviceMemory> io_;  // model inputs and outputs, by tensor id
  cuda::DeviceMemory arena_;
  cuda::DeviceMemory weights_;
  std::vector<StepProgram> program_;
  cuda::GraphExec graph_;    // empty without use_cuda_graph
  std::string lost_reason_;  // set by the first sticky error
};

// ---- entry and errors ----------------------------------------------------------------

void CudaBackend::enter() {
  DC_USER_CHECK(lost_reason_.empty(), "GPU ", device_.ordinal,
                " lost its CUDA context to an earlier fault (restart the process to use it "
                "again): ",
                lost_reason_);
  try {
    check(api().ctx_set_current(context_.get()), "cuCtxSetCurrent");
  } catch (const cuda::CudaError& e) {
    fail("making the CUDA context current", e);
  }
}

void CudaBackend::fail(const std::string& doing, const cuda::CudaError& e) {
  CudaErrorClass c = classify_cuda_error(e.code);
  std::string message = fmt::format("{} on {}: {}", doing, device_description(), e.what());
  // Faults are asynchronous: a refused call may follow queued work that faulted unseen.
  // Wait for it, so that a lost context is said now and not blamed on the next call.
  if (!c.sticky && context_) {
    const CUresult r = api().ctx_synchronize();
    if (r != CUDA_SUCCESS && classify_cuda_error(r).sticky) {
      c = classify_cuda_error(r);
      message += fmt::format("; then, waiting for the work before it (cuCtxSynchronize): {}",
                             driver_->error_text(r));
    }
  }
  if (c.sticky) {
    if (lost_reason_.empty()) lost_reason_ = e.what();
    message += "; the CUDA context is lost: restart the process to use this GPU again";
  }
  throw UserError(message);
}

// ---- load ----------------------------------------------------------------------------

void CudaBackend::load(const ExecPlan& plan) {
  DC_INTERNAL_CHECK(plan_ == nullptr, "CUDA backend loaded twice");
  check_bindings(plan);
  check_tensors(plan);
  plan_ = &plan;
  enter();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<CompileResult> compiled = compile_modules();
  const double compile_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t m = 0; m < plan.modules.size(); ++m) modules_.push_back(load_module(m, compiled[m]));
  try {
    allocate();
    upload_weights();
  } catch (const cuda::CudaError& e) {
    fail("allocating the plan's memory and uploading its weights", e);
  }
  build_program();
  if (options_.use_cuda_graph) capture();
  spdlog::debug("libdcrt: {} steps, {} modules for {} ({:.2f} s to compile), arena {} bytes, "
                "weights {} bytes, {}",
                plan.steps.size(), plan.modules.size(), device_.arch, compile_s, arena_.bytes(),
                weights_.bytes(), graph_ ? "one CUDA graph" : "direct launches");
}

// Distinct sources compile once, in parallel (NVRTC is thread-safe), through the cache.
std::vector<CompileResult> CudaBackend::compile_modules() const {
  const ExecPlan& plan = *plan_;
  std::vector<size_t> first_with_source(plan.modules.size());
  std::vector<size_t> unique;
  std::map<std::string, size_t> seen;
  for (size_t m = 0; m < plan.modules.size(); ++m) {
    const auto [it, inserted] = seen.emplace(plan.modules[m].source, unique.size());
    if (inserted) unique.push_back(m);
    first_with_source[m] = it->second;
  }
  std::vector<CompileResult> results(unique.size());
  parallel_for(static_cast<int64_t>(unique.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const auto i = static_cast<size_t>(u);
      results[i] = compile_with_cache(plan.modules[unique[i]].source, device_.arch,
                                      options_.cache_dir).result;
    }
  });
  std::vector<CompileResult> out;
  out.reserve(plan.modules.size());
  for (size_t m = 0; m < plan.modules.size(); ++m) {
    const CompileResult& r = results[first_with_source[m]];
    DC_USER_CHECK(r.ok, module_label(plan, m), " of the plan (", steps_using(plan, m),
                  ") does not compile for ", device_.arch, " with NVRTC ", r.nvrtc_version, ": ",
                  r.error.empty() ? r.log : r.error);
    out.push_back(r);
  }
  return out;
}

cuda::LoadedKernel CudaBackend::load_module(size_t m, const CompileResult& compiled) {
  const GeneratedKernel& k = plan_->modules[m];
  cuda::LoadedKernel lm;
  try {
    lm = cuda::load_functions(*driver_, k, compiled.cubin);
    for (size_t i = 0; i < k.launches.size(); ++i) check_launch(m, i, lm.functions[i]);
    cuda::opt_in_shared_memory(*driver_, k, lm, device_.smem_optin);
  } catch (const cuda::CudaError& e) {
    fail(fmt::format("loading {} ({})", module_label(*plan_, m), steps_using(*plan_, m)), e);
  }
  return lm;
}

int CudaBackend::function_attribute(CUfunction f, CUfunction_attribute which,
                                    const std::string& kernel) const {
  int v = 0;
  check(api().func_get_attribute(&v, which, f), "kernel " + kernel + ": cuFuncGetAttribute");
  return v;
}

// A launch the device cannot run is refused here, with the limit it exceeds, rather than
// failing inside the graph at the first run.
void CudaBackend::check_launch(size_t m, size_t i, CUfunction f) const {
  const Launch& l = plan_->modules[m].launches[i];
  const std::string who = fmt::format("{}, kernel {} of {}", steps_using(*plan_, m), l.kernel,
                                      module_label(*plan_, m));
  for (size_t d = 0; d < 3; ++d) {
    DC_USER_CHECK(l.grid[d] >= 1 && l.grid[d] <= device_.max_grid[d], who, ": grid ", l.grid[0],
                  "x", l.grid[1], "x", l.grid[2], " exceeds what ", device_.name, " allows (",
                  device_.max_grid[0], "x", device_.max_grid[1], "x", device_.max_grid[2], ")");
    DC_USER_CHECK(l.block[d] >= 1 && l.block[d] <= device_.max_block[d], who, ": block ",
                  l.block[0], "x", l.block[1], "x", l.block[2], " exceeds what ", device_.name,
                  " allows (", device_.max_block[0], "x", device_.max_block[1], "x",
                  device_.max_block[2], ")");
  }
  const int max_threads = function_attribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, l.kernel);
  const int static_smem = function_attribute(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, l.kernel);
  const int64_t threads = l.block[0] * l.block[1] * l.block[2];
  DC_USER_CHECK(threads <= max_threads, who, ": ", threads,
                " threads per block, but compiled for ", device_.arch, " it can run at most ",
                max_threads, " per block on ", device_.name, " (its registers per thread)");
  DC_USER_CHECK(l.dynamic_smem_bytes >= 0 &&
                    l.dynamic_smem_bytes + static_smem <= device_.smem_optin,
                who, ": ", l.dynamic_smem_bytes, " bytes of dynamic and ", static_smem,
                " of static shared memory per block, but ", device_.name, " has at most ",
                device_.smem_optin);
}

void CudaBackend::allocate() {
  const ExecPlan& plan = *plan_;
  for (const std::vector<int>* ids : {&plan.inputs, &plan.outputs})
    for (int id : *ids)
      if (!io_.count(id))
        io_.emplace(id, cuda::DeviceMemory(
                            *driver_, static_cast<size_t>(plan.tensors[static_cast<size_t>(id)].bytes())));
  arena_ = cuda::DeviceMemory(*driver_, static_cast<size_t>(plan.arena_bytes));
  int64_t weight_bytes = 0;
  for (const PlanTensor& t : plan.tensors)
    if (t.kind == PlanTensorKind::weight) weight_bytes = std::max(weight_bytes, t.offset + t.bytes());
  weights_ = cuda::DeviceMemory(*driver_, static_cast<size_t>(weight_bytes));
}

// Once, at load: every weight at its offset, as in weights.bin. A file-backed weight (a
// plan read from disk) goes through one host staging chunk, so that loading a plan of
// billions of parameters never holds its weights in host memory.
void CudaBackend::upload_weights() {
  constexpr size_t kChunk = size_t{16} << 20;
  const ExecPlan& plan = *plan_;
  if (unverified_weights_) {
    // weights.bin laid out as the device arena: each chunk read once, checksummed and copied
    // from the stream's one staging buffer; a checksum mismatch throws after the last chunk
    // and the backend (with its device memory) is discarded.
    const size_t capacity = weights_.bytes();
    stream_weights_file(*unverified_weights_, kChunk, [&](uint64_t at, const std::byte* data, size_t n) {
      if (at >= capacity) return;  // zero padding past the last weight
      n = std::min<size_t>(n, capacity - static_cast<size_t>(at));
      check(api().memcpy_htod(weights_.get() + static_cast<CUdeviceptr>(at), data, n), "uploading weights.bin");
    });
    return;
  }
  std::vector<char> staging;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const PlanTensor& pt = plan.tensors[t];
    if (pt.kind != PlanTensorKind::weight || pt.bytes() == 0) continue;
    const Tensor& value = plan.values[t];
    const CUdeviceptr dst = weights_.get() + static_cast<CUdeviceptr>(pt.offset);
    if (value.resident()) {
      check(api().memcpy_htod_async(dst, value.raw(), value.nbytes(), stream_.get()), "uploading weight " + pt.name);
      continue;
    }
    staging.resize(std::min(kChunk, value.nbytes()));
    for (size_t from = 0; from < value.nbytes(); from += staging.size()) {
      const size_t n = std::min(staging.size(), value.nbytes() - from);
      value.copy_bytes(from, n, staging.data());
      check(api().memcpy_htod(dst + static_cast<CUdeviceptr>(from), staging.data(), n), "uploading weight " + pt.name);
    }
  }
  check(api().stream_synchronize(stream_.get()), "uploading the weights (cuStreamSynchronize)");
}

CUdeviceptr CudaBackend::io_buffer(int tensor) const {
  const auto it = io_.find(tensor);
  DC_USER_CHECK(it != io_.end(), "corrupt plan: tensor ",
                plan_->tensors[static_cast<size_t>(tensor)].name,
                " is a model input or output the plan does not list");
  return it->second.get();
}

CUdeviceptr CudaBackend::address_of(int tensor) const {
  const PlanTensor& t = plan_->tensors[static_cast<size_t>(tensor)];
  switch (t.kind) {
    case PlanTensorKind::input:
    case PlanTensorKind::output: return io_buffer(tensor);
    case PlanTensorKind::weight: return weights_.get() + static_cast<CUdeviceptr>(t.offset);
    case PlanTensorKind::intermediate:
    case PlanTensorKind::scratch: return arena_.get() + static_cast<CUdeviceptr>(t.offset);
    case PlanTensorKind::view: return address_of(t.view_of) + static_cast<CUdeviceptr>(t.offset);
  }
  throw_internal_error("tensor ", t.name, " of unknown kind");
}

void CudaBackend::build_program() {
  const ExecPlan& plan = *plan_;
  auto u = [](int64_t v) { return static_cast<unsigned>(v); };  // ranges checked at load
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    const GeneratedKernel& k = plan.modules[static_cast<size_t>(step.module)];
    StepProgram p;
    p.label = step_label(plan, s);
    for (size_t j = 0; j < k.buffers.size(); ++j) {
      const int64_t bytes = plan.tensors[static_cast<size_t>(step.buffers[j])].bytes();
      if (k.buffers[j].zero_init && bytes > 0)
        p.zero_fills.push_back({address_of(step.buffers[j]), static_cast<size_t>(bytes),
                                k.buffers[j].name});
    }
    for (size_t i = 0; i < k.launches.size(); ++i) {
      const Launch& l = k.launches[i];
      KernelCall c;
      c.function = modules_[static_cast<size_t>(step.module)].functions[i];
      c.grid = {u(l.grid[0]), u(l.grid[1]), u(l.grid[2])};
      c.block = {u(l.block[0]), u(l.block[1]), u(l.block[2])};
      c.smem = u(l.dynamic_smem_bytes);
      for (int a : l.args) c.args.push_back(address_of(step.buffers[static_cast<size_t>(a)]));
      c.kernel = l.kernel;
      p.calls.push_back(std::move(c));
    }
    program_.push_back(std::move(p));
  }
}

// The whole sequence as one graph: a run is then one cuGraphLaunch instead of one launch
// per kernel (the CPU cost of many small launches is what graphs remove).
void CudaBackend::capture() {
  try {
    const cuda::Graph graph = cuda::capture_graph(*driver_, stream_.get(), [this] {
      for (const StepProgram& step : program_) enqueue_step(step);
    });
    graph_ = cuda::instantiate_graph(*driver_, graph.get());
  } catch (const cuda::CudaError& e) {
    fail("capturing the plan as a CUDA graph", e);
  }
}

// ---- running -------------------------------------------------------------------------

void CudaBackend::enqueue_step(const StepProgram& step) {
  for (const ZeroFill& z : step.zero_fills)
    check(api().memset_d8_async(z.ptr, 0, z.bytes, stream_.get()),
          step.label + ": zeroing " + z.buffer);
  std::vector<CUdeviceptr> args;
  std::vector<void*> params;
  for (const KernelCall& c : step.calls) {
    args = c.args;  // the driver reads parameters through pointers to their values
    params.clear();
    for (CUdeviceptr& a : args) params.push_back(&a);
    check(api().launch_kernel(c.function, c.grid[0], c.grid[1], c.grid[2], c.block[0],
                              c.block[1], c.block[2], c.smem, stream_.get(), params.data(),
                              nullptr),
          step.label + ", kernel " + c.kernel + ": cuLaunchKernel");
  }
}

void CudaBackend::replay() {
  if (graph_) {
    check(api().graph_launch(graph_.get(), stream_.get()), "cuGraphLaunch");
    return;
  }
  for (const StepProgram& step : program_) enqueue_step(step);
}

// A kernel fault surfaces here, without its step: execution is asynchronous.
void CudaBackend::synchronize(const std::string& what) {
  check(api().stream_synchronize(stream_.get()),
        fmt::format("cuStreamSynchronize after {} ({} steps as {}; a fault inside a kernel "
                    "cannot be traced to its step)",
                    what, program_.size(), graph_ ? "one CUDA graph" : "direct launches"));
}

void CudaBackend::run() {
  DC_INTERNAL_CHECK(plan_ != nullptr, "run before load");
  enter();
  try {
    replay();
    synchronize("the launches");
  } catch (const cuda::CudaError& e) {
    fail("running the plan", e);
  }
}

void CudaBackend::set_input(size_t index, const void* data, size_t bytes) {
  DC_INTERNAL_CHECK(plan_ != nullptr, "set_input before load");
  DC_USER_CHECK(index < plan_->inputs.size(), "input ", index, " of ", plan_->inputs.size());
  const int id = plan_->inputs[index];
  const PlanTensor& t = plan_->tensors[static_cast<size_t>(id)];
  DC_USER_CHECK(bytes == static_cast<size_t>(t.bytes()), "input ", t.name, " takes ", t.bytes(),
                " bytes, not ", bytes);
  enter();
  if (bytes == 0) return;
  try {
    check(api().memcpy_htod_async(io_buffer(id), data, bytes, stream_.get()),
          "copying input " + t.name);
    check(api().stream_synchronize(stream_.get()), "copying input " + t.name);
  } catch (const cuda::CudaError& e) {
    fail("setting an input", e);
  }
}

void CudaBackend::get_output(size_t index, void* data, size_t bytes) {
  DC_INTERNAL_CHECK(plan_ != nullptr, "get_output before load");
  DC_USER_CHECK(index < plan_->outputs.size(), "output ", index, " of ", plan_->outputs.size());
  const int id = plan_->outputs[index];
  const PlanTensor& t = plan_->tensors[static_cast<size_t>(id)];
  DC_USER_CHECK(bytes == static_cast<size_t>(t.bytes()), "output ", t.name, " has ", t.bytes(),
                " bytes, not ", bytes);
  enter();
  if (bytes == 0) return;
  try {
    check(api().memcpy_dtoh_async(data, io_buffer(id), bytes, stream_.get()),
          "copying output " + t.name);
    check(api().stream_synchronize(stream_.get()), "copying output " + t.name);
  } catch (const cuda::CudaError& e) {
    fail("reading an output", e);
  }
}

void CudaBackend::carry_state(const std::vector<PlanStateUpdate>& updates) {
  DC_INTERNAL_CHECK(plan_ != nullptr, "carry_state before load");
  enter();
  try {
    for (const PlanStateUpdate& u : updates) {
      const PlanTensor &out = plan_->tensors.at(static_cast<size_t>(u.next)), &w = plan_->tensors.at(static_cast<size_t>(u.state));
      DC_INTERNAL_CHECK(w.kind == PlanTensorKind::weight && out.bytes() == w.bytes(), "output ", out.name,
                        " does not fit weight ", w.name);
      if (w.bytes() == 0) continue;
      check(api().memcpy_dtod_async(address_of(u.state), io_buffer(u.next), static_cast<size_t>(w.bytes()), stream_.get()),
            "carrying " + w.name + " to the next step");
    }
    check(api().stream_synchronize(stream_.get()), "carrying the training state to the next step");
  } catch (const cuda::CudaError& e) {
    fail("updating the training state", e);
  }
}

// Both directions of a weight's copy (get_weight, set_weight): checked, then one async copy
// on the stream and a sync.
void CudaBackend::copy_weight(int weight, void* host, size_t bytes, bool to_device) {
  const std::string doing = to_device ? "writing" : "reading";
  DC_INTERNAL_CHECK(plan_ != nullptr, doing, " a weight before load");
  const PlanTensor& w = plan_->tensors.at(static_cast<size_t>(weight));
  DC_INTERNAL_CHECK(w.kind == PlanTensorKind::weight && bytes == static_cast<size_t>(w.bytes()), "weight ",
                    w.name, ": wrong size");
  enter();
  if (bytes == 0) return;
  const std::string what = doing + " weight " + w.name;
  try {
    check(to_device ? api().memcpy_htod_async(address_of(weight), host, bytes, stream_.get())
                    : api().memcpy_dtoh_async(host, address_of(weight), bytes, stream_.get()),
          what);
    check(api().stream_synchronize(stream_.get()), what);
  } catch (const cuda::CudaError& e) {
    fail(doing + " a weight", e);
  }
}

void CudaBackend::get_weight(int weight, void* data, size_t bytes) { copy_weight(weight, data, bytes, false); }

void CudaBackend::set_weight(int weight, const void* data, size_t bytes) {
  copy_weight(weight, const_cast<void*>(data), bytes, true);  // only read: host to device
}

// One sample per run: events on the stream around each replay, read in batches.
std::vector<double> CudaBackend::time_runs(int warmup, int runs) {
  DC_INTERNAL_CHECK(plan_ != nullptr, "time_runs before load");
  DC_USER_CHECK(warmup >= 0 && runs >= 1, "timing needs warmup >= 0 and runs >= 1 (got ", warmup,
                " and ", runs, ")");
  enter();
  std::vector<double> samples;
  try {
    for (int i = 0; i < warmup; ++i) replay();
    synchronize("warm-up runs");
    std::vector<cuda::Event> events;
    while (samples.size() < static_cast<size_t>(runs)) {
      const size_t batch = std::min(static_cast<size_t>(kTimingBatch),
                                    static_cast<size_t>(runs) - samples.size());
      while (events.size() < 2 * batch) events.push_back(cuda::create_event(*driver_));
      for (size_t b = 0; b < batch; ++b) {
        check(api().event_record(events[2 * b].get(), stream_.get()), "cuEventRecord");
        replay();
        check(api().event_record(events[2 * b + 1].get(), stream_.get()), "cuEventRecord");
      }
      synchronize("timed runs");
      for (size_t b = 0; b < batch; ++b) {
        float ms = 0;
        check(api().event_elapsed_time(&ms, events[2 * b].get(), events[2 * b + 1].get()),
              "cuEventElapsedTime");
        samples.push_back(static_cast<double>(ms) * 1000.0);
      }
    }
  } catch (const cuda::CudaError& e) {
    fail("timing the plan", e);
  }
  return samples;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const cuda::Driver> driver,
                                           const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(std::move(driver), options);
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  const cuda::DriverLoad& load = cuda::system_driver();
  DC_USER_CHECK(load.driver != nullptr, load.error);
  return make_cuda_backend(load.driver, options);
}

}  // namespace dc::rt
