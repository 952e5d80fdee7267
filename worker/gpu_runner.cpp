#include "gpu_runner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "cuda_driver.h"
#include "kernel_module.h"
#include "random_inputs.h"

namespace dc {

struct GpuDevice::Impl {
  std::shared_ptr<const cuda::Driver> driver;  // declared first: destroyed last
  int ordinal = 0;
  CUdevice device = 0;
  std::string name;
  std::string pci_bus_id;
  int64_t l2_bytes = 0;
  int64_t smem_optin = 0;
  cuda::PrimaryContext context;
  cuda::Module spin_module;  // the timing spin (kSpinPtx), loaded on first use
  CUfunction spin = nullptr;
  bool spin_unavailable = false;
  std::string lost_reason;  // set by the first sticky error

  const cuda::Api& api() const { return driver->api(); }
  void check(CUresult r, const std::string& what) const { driver->check(r, what); }
  void make_current() const { check(api().ctx_set_current(context.get()), "cuCtxSetCurrent"); }
};

namespace {

// Timed samples recorded between two host synchronisations.
constexpr int kBatch = 256;

// The timing spin: one thread busy-waits `ns` nanoseconds of %globaltimer. Enqueued before
// each sample's start event, it keeps the GPU busy while the host enqueues the event and
// the sample's graph, so no host launch gap falls between the events. PTX (JIT-compiled by
// the driver for any sm_75+ device), so the worker needs no compiler for it.
constexpr const char* kSpinKernel = "dc_timing_spin";
constexpr const char* kSpinPtx = R"(//
// dc_timing_spin: busy-waits `ns` nanoseconds of %globaltimer on one thread.
//
.version 7.0
.target sm_75
.address_size 64

.visible .entry dc_timing_spin(.param .u64 dc_timing_spin_ns)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [dc_timing_spin_ns];
	mov.u64 	%rd2, %globaltimer;
$L_spin:
	mov.u64 	%rd3, %globaltimer;
	sub.s64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	$L_spin;
	ret;
}
)";

// The spin's function, loaded once per device; nullptr (timing goes on without the spin,
// with a warning) when the driver cannot load it, e.g. one too old for PTX 7.0.
CUfunction spin_function(GpuDevice::Impl& d) {
  if (d.spin == nullptr && !d.spin_unavailable) {
    try {
      const std::string ptx = kSpinPtx;
      d.spin_module = cuda::load_module(*d.driver, std::vector<char>(ptx.c_str(), ptx.c_str() + ptx.size() + 1));
      d.check(d.api().module_get_function(&d.spin, d.spin_module.get(), kSpinKernel),
              "cuModuleGetFunction");
    } catch (const cuda::CudaError& e) {
      if (classify_cuda_error(e.code).sticky) throw;
      d.spin = nullptr;
      d.spin_unavailable = true;
      spdlog::warn("GPU {}: cannot load the timing spin ({}); timing without it", d.ordinal, e.what());
    }
  }
  return d.spin;
}

void launch_spin(GpuDevice::Impl& d, CUstream stream, double us) {
  const CUfunction f = spin_function(d);
  if (f == nullptr) return;
  unsigned long long ns = static_cast<unsigned long long>(us * 1000.0);
  void* params[] = {&ns};
  d.check(d.api().launch_kernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr),
          "the timing spin: cuLaunchKernel");
}

size_t buffer_bytes(const KernelBuffer& b) {
  return static_cast<size_t>(shape_numel(b.shape)) * dtype_size(b.dtype);
}

// Inputs given and matching their descriptions; outputs/scratch undefined or matching.
void validate_buffers(const GeneratedKernel& k, const std::vector<Tensor>& buffers) {
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    const bool given = i < buffers.size() && buffers[i].defined();
    DC_INTERNAL_CHECK(given || b.role != BufferRole::input, "input buffer ", b.name,
                      " of kernel ", k.template_name, " was not given");
    if (!given) continue;
    DC_INTERNAL_CHECK(buffers[i].dtype() == b.dtype && buffers[i].shape() == b.shape, "buffer ",
                      b.name, " is ", dtype_name(buffers[i].dtype()),
                      shape_str(buffers[i].shape()), " where the kernel wants ",
                      dtype_name(b.dtype), shape_str(b.shape));
  }
}

// One device copy of every buffer of the kernel.
std::vector<cuda::DeviceMemory> allocate(const GpuDevice::Impl& d, const GeneratedKernel& k) {
  std::vector<cuda::DeviceMemory> mem;
  mem.reserve(k.buffers.size());
  for (const auto& b : k.buffers) mem.emplace_back(*d.driver, buffer_bytes(b));
  return mem;
}

void upload_inputs(const GpuDevice::Impl& d, const GeneratedKernel& k,
                   const std::vector<Tensor>& buffers, const std::vector<cuda::DeviceMemory>& mem) {
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    if (k.buffers[i].role != BufferRole::input || buffers[i].nbytes() == 0) continue;
    d.check(d.api().memcpy_htod(mem[i].get(), buffers[i].raw(), buffers[i].nbytes()),
            "uploading " + k.buffers[i].name);
  }
}

// Outputs and scratch: zeros where the kernel needs them, 0xff (NaN, -1) elsewhere, so an
// element the kernel never writes cannot pass as a value.
// With a stream, the memsets are enqueued on it (and captured when it captures).
void initialize_outputs(const GpuDevice::Impl& d, const GeneratedKernel& k,
                        const std::vector<cuda::DeviceMemory>& mem, bool zero_init_only,
                        CUstream stream = nullptr) {
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input || (zero_init_only && !b.zero_init)) continue;
    const unsigned char byte = b.zero_init ? 0x00 : 0xff;
    d.check(stream != nullptr ? d.api().memset_d8_async(mem[i].get(), byte, mem[i].bytes(), stream)
                              : d.api().memset_d8(mem[i].get(), byte, mem[i].bytes()),
            "initialising " + b.name);
  }
}

void launch_all(const GpuDevice::Impl& d, const GeneratedKernel& k, const cuda::LoadedKernel& lk,
                const std::vector<cuda::DeviceMemory>& mem, CUstream stream = nullptr) {
  std::vector<CUdeviceptr> args;
  std::vector<void*> params;
  for (size_t i = 0; i < k.launches.size(); ++i) {
    const Launch& l = k.launches[i];
    args.clear();
    for (int a : l.args) {
      DC_INTERNAL_CHECK(a >= 0 && static_cast<size_t>(a) < mem.size(), "launch ", i, " of ",
                        k.template_name, " names buffer ", a, " of ", mem.size());
      args.push_back(mem[static_cast<size_t>(a)].get());
    }
    params.clear();
    for (auto& p : args) params.push_back(&p);
    auto u = [](int64_t v) { return static_cast<unsigned>(v); };
    d.check(d.api().launch_kernel(lk.functions[i], u(l.grid[0]), u(l.grid[1]), u(l.grid[2]),
                                  u(l.block[0]), u(l.block[1]), u(l.block[2]),
                                  u(l.dynamic_smem_bytes), stream, params.data(), nullptr),
            cuda::launch_label(k, i) + ": cuLaunchKernel");
  }
}

std::vector<Tensor> download_outputs(const GpuDevice::Impl& d, const GeneratedKernel& k,
                                     const std::vector<cuda::DeviceMemory>& mem) {
  std::vector<Tensor> results(k.buffers.size());
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input) continue;
    results[i] = Tensor(b.dtype, b.shape);
    if (results[i].nbytes() == 0) continue;
    d.check(d.api().memcpy_dtoh(results[i].raw_mutable(), mem[i].get(), results[i].nbytes()),
            "downloading " + b.name);
  }
  return results;
}

// A call can be refused after work enqueued before it has faulted, unseen: faults are
// asynchronous. Wait for that work before its buffers and module are freed (cuMemFree only
// "may" synchronise), and report such a fault, which loses the context, with the refusal:
// otherwise the device looks usable and the next job takes the blame.
cuda::CudaError settle(const GpuDevice::Impl& d, const cuda::CudaError& e) {
  const CUresult r = d.api().ctx_synchronize();
  if (r == CUDA_SUCCESS || classify_cuda_error(e.code).sticky || !classify_cuda_error(r).sticky)
    return e;
  return cuda::CudaError(r, fmt::format("{}; then, waiting for the work before it "
                                        "(cuCtxSynchronize): {}",
                                        e.what(), d.driver->error_text(r)));
}

// Runs `enqueue`, which puts work on the device, settling a CUDA failure before it leaves.
template <class Enqueue>
void settled(const GpuDevice::Impl& d, Enqueue&& enqueue) {
  try {
    enqueue();
  } catch (const cuda::CudaError& e) {
    throw settle(d, e);
  }
}

// Timed samples, in batches of events read after one cuEventSynchronize, until the
// options' minimum count and duration (or a cap) are reached.
template <class Sample>
std::vector<double> collect_samples(const cuda::Driver& driver, const TimingOptions& options,
                                    Sample&& sample) {
  std::vector<double> samples;
  std::vector<cuda::Event> events;
  double total_ms = 0;
  double estimate_ms = 0;  // mean of the last batch; 0 before the first
  const auto max_samples = static_cast<size_t>(options.max_samples);
  const auto min_samples = static_cast<size_t>(options.min_samples);
  while (true) {
    const size_t n = samples.size();
    if (n >= max_samples || total_ms >= options.max_total_ms) break;
    if (n >= min_samples && total_ms >= options.min_total_ms) break;
    // First batch: one sample, for an estimate; then as many as the time still needed.
    size_t batch = 1;
    if (estimate_ms > 0) {
      const double by_time = std::ceil((options.min_total_ms - total_ms) / estimate_ms);
      const double to_cap = std::ceil((options.max_total_ms - total_ms) / estimate_ms);
      batch = static_cast<size_t>(std::clamp(std::max(by_time, double(min_samples) - double(n)),
                                             1.0, std::max(1.0, to_cap)));
    }
    batch = std::min({batch, static_cast<size_t>(kBatch), max_samples - n});
    while (events.size() < 2 * batch) events.push_back(cuda::create_event(driver));
    for (size_t b = 0; b < batch; ++b) sample(events[2 * b].get(), events[2 * b + 1].get());
    driver.check(driver.api().event_synchronize(events[2 * batch - 1].get()),
                 "timed runs (cuEventSynchronize)");
    double batch_ms = 0;
    for (size_t b = 0; b < batch; ++b) {
      float ms = 0;
      driver.check(
          driver.api().event_elapsed_time(&ms, events[2 * b].get(), events[2 * b + 1].get()),
          "cuEventElapsedTime");
      samples.push_back(static_cast<double>(ms) * 1000.0);
      batch_ms += ms;
    }
    total_ms += batch_ms;
    estimate_ms = std::max(batch_ms / static_cast<double>(batch), 1e-4);
  }
  return samples;
}

// Records a CUDA failure in a result; a sticky one marks the device lost.
template <class Result>
void record_failure(GpuDevice::Impl& d, const cuda::CudaError& e, Result& r) {
  const CudaErrorClass c = classify_cuda_error(e.code);
  r.status = c.status;
  r.error = e.what();
  if (c.sticky) {
    r.context_lost = true;
    if (d.lost_reason.empty()) d.lost_reason = e.what();
  }
}

template <class Result>
bool refuse_if_lost(const GpuDevice::Impl& d, Result& r) {
  if (d.lost_reason.empty()) return false;
  r.status = JobStatus::runtime_fault;
  r.context_lost = true;
  r.error = "GPU " + std::to_string(d.ordinal) +
            " lost its context to an earlier fault (restart the process): " + d.lost_reason;
  return true;
}

std::string mib(double bytes) { return fmt::format("{:.0f} MiB", bytes / (1024.0 * 1024.0)); }

}  // namespace

// ---- classification ------------------------------------------------------------------


// ---- the device ----------------------------------------------------------------------

namespace {

std::shared_ptr<const cuda::Driver> system_driver_or_throw() {
  const cuda::DriverLoad& load = cuda::system_driver();
  if (!load.driver) throw_user_error(load.error);
  return load.driver;
}

}  // namespace

GpuDevice::GpuDevice(int ordinal) : GpuDevice(system_driver_or_throw(), ordinal) {}

GpuDevice::GpuDevice(std::shared_ptr<const cuda::Driver> driver, int ordinal)
    : impl_(std::make_unique<Impl>()) {
  DC_INTERNAL_CHECK(driver != nullptr, "GpuDevice without a driver");
  Impl& d = *impl_;
  d.driver = std::move(driver);
  d.ordinal = ordinal;
  const cuda::Api& api = d.api();
  try {
    int count = 0;
    d.check(api.device_get_count(&count), "cuDeviceGetCount");
    DC_USER_CHECK(ordinal >= 0 && ordinal < count, "no CUDA device ", ordinal, ": the driver reports ",
                  count, " device(s)");
    d.check(api.device_get(&d.device, ordinal), "cuDeviceGet");
    char name[256] = {};
    d.check(api.device_get_name(name, sizeof name - 1, d.device), "cuDeviceGetName");
    d.name = name;
    int v = 0;
    d.check(api.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d.device), "L2 size");
    d.l2_bytes = v;
    d.check(api.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                     d.device),
            "shared memory per block");
    d.smem_optin = v;
    // NVML finds the device by PCI address (its indices need not be CUDA's ordinals).
    int domain = 0, bus = 0, slot = 0;
    if (api.device_get_attribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d.device) == CUDA_SUCCESS &&
        api.device_get_attribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d.device) == CUDA_SUCCESS &&
        api.device_get_attribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d.device) == CUDA_SUCCESS)
      d.pci_bus_id = fmt::format("{:08x}:{:02x}:{:02x}.0", domain, bus, slot);
    d.context = cuda::retain_primary_context(*d.driver, d.device);
  } catch (const cuda::CudaError& e) {
    throw_user_error("cannot open CUDA device ", ordinal, ": ", e.what());
  }
}

GpuDevice::~GpuDevice() {
  // Modules unload from the current context: make it this device's (errors ignored).
  if (impl_ && impl_->spin_module && impl_->context) impl_->api().ctx_set_current(impl_->context.get());
}

int GpuDevice::ordinal() const { return impl_->ordinal; }
const std::string& GpuDevice::name() const { return impl_->name; }
const std::string& GpuDevice::pci_bus_id() const { return impl_->pci_bus_id; }
int64_t GpuDevice::l2_bytes() const { return impl_->l2_bytes; }
int64_t GpuDevice::smem_per_block_optin() const { return impl_->smem_optin; }
const cuda::Driver& GpuDevice::driver() const { return *impl_->driver; }
bool GpuDevice::lost() const { return !impl_->lost_reason.empty(); }

// ---- one run -------------------------------------------------------------------------

GpuRunResult run_on_gpu(GpuDevice& device, const GeneratedKernel& kernel,
                        const std::vector<char>& cubin, std::vector<Tensor>& buffers) {
  validate_buffers(kernel, buffers);
  buffers.resize(kernel.buffers.size());
  for (size_t i = 0; i < kernel.buffers.size(); ++i)
    if (kernel.buffers[i].role != BufferRole::input) buffers[i] = Tensor();
  GpuRunResult r;
  GpuDevice::Impl& d = device.impl();
  if (refuse_if_lost(d, r)) return r;
  try {
    d.make_current();
    const cuda::LoadedKernel lk = cuda::load_kernel(*d.driver, kernel, cubin, d.smem_optin);
    const std::vector<cuda::DeviceMemory> mem = allocate(d, kernel);
    std::vector<Tensor> results;
    settled(d, [&] {
      upload_inputs(d, kernel, buffers, mem);
      initialize_outputs(d, kernel, mem, /*zero_init_only=*/false);
      launch_all(d, kernel, lk, mem);
      d.check(d.api().ctx_synchronize(), "running the launches (cuCtxSynchronize)");
      results = download_outputs(d, kernel, mem);
    });
    for (size_t i = 0; i < kernel.buffers.size(); ++i)
      if (results[i].defined()) buffers[i] = std::move(results[i]);
  } catch (const cuda::CudaError& e) {
    record_failure(d, e, r);
  }
  return r;
}

// ---- timing --------------------------------------------------------------------------

TimingResult time_on_gpu(GpuDevice& device, const GeneratedKernel& kernel,
                         const std::vector<char>& cubin, const std::vector<Tensor>& inputs,
                         const TimingOptions& options) {
  validate_buffers(kernel, inputs);
  DC_USER_CHECK(options.min_samples >= 1 && options.max_samples >= options.min_samples,
                "timing needs 1 <= min_samples <= max_samples (got ", options.min_samples, ", ",
                options.max_samples, ")");
  TimingResult r;
  GpuDevice::Impl& d = device.impl();
  if (refuse_if_lost(d, r)) return r;
  try {
    d.make_current();
    const cuda::LoadedKernel lk = cuda::load_kernel(*d.driver, kernel, cubin, d.smem_optin);

    // How to keep each sample's data out of L2: enough rotating copies of every buffer
    // that the others touched in between cover twice the L2, or a flush buffer.
    double footprint = 0;
    for (const auto& b : kernel.buffers) footprint += static_cast<double>(buffer_bytes(b));
    footprint = std::max(footprint, 1.0);
    const double l2 = d.l2_bytes > 0 ? static_cast<double>(d.l2_bytes) : 128.0 * (1 << 20);
    const int copies_needed = 1 + static_cast<int>(std::ceil(2.0 * l2 / footprint));
    L2Policy policy = options.l2;
    int copies = 1;
    if (policy == L2Policy::automatic || policy == L2Policy::rotate) {
      size_t free_bytes = 0, total_bytes = 0;
      if (d.api().mem_get_info(&free_bytes, &total_bytes) != CUDA_SUCCESS) free_bytes = 0;
      const int fit = static_cast<int>(
          std::min(static_cast<double>(options.max_copies),
                   0.5 * static_cast<double>(free_bytes) / footprint));
      if (policy == L2Policy::rotate) copies = std::max(1, std::min(copies_needed, fit));
      else if (copies_needed <= fit) {
        copies = copies_needed;
        policy = L2Policy::rotate;
      } else {
        policy = L2Policy::flush;
      }
    }
    std::vector<std::vector<cuda::DeviceMemory>> sets;
    for (int c = 0; c < copies; ++c) sets.push_back(allocate(d, kernel));
    cuda::DeviceMemory flush;
    if (policy == L2Policy::flush) {
      flush = cuda::DeviceMemory(*d.driver, static_cast<size_t>(2.0 * l2));
      r.l2_method = "flush " + mib(2.0 * l2);
    } else if (policy == L2Policy::rotate) {
      r.l2_method = fmt::format("rotate {} copies of {}", copies, mib(footprint));
    } else {
      r.l2_method = "none";
    }

    // One run of the kernel as the plan runtime runs it: its zero_init memsets and every
    // launch, captured once per buffer set as a CUDA graph (no gaps between launches).
    const cuda::Stream stream = cuda::create_stream(*d.driver);
    std::vector<cuda::GraphExec> runs;
    // One sample: [flush] [spin] start event, the run's graph, stop event.
    unsigned char flush_byte = 0;
    size_t next_set = 0;
    auto sample = [&](CUevent start, CUevent stop) {
      const cuda::GraphExec& run = runs[next_set++ % runs.size()];
      if (flush.get() != 0)
        d.check(d.api().memset_d8_async(flush.get(), flush_byte++, flush.bytes(), stream.get()),
                "flushing L2");
      if (start && options.spin_us > 0) launch_spin(d, stream.get(), options.spin_us);
      if (start) d.check(d.api().event_record(start, stream.get()), "cuEventRecord");
      d.check(d.api().graph_launch(run.get(), stream.get()), "cuGraphLaunch");
      if (stop) d.check(d.api().event_record(stop, stream.get()), "cuEventRecord");
    };

    settled(d, [&] {
      for (const auto& set : sets) {
        upload_inputs(d, kernel, inputs, set);
        initialize_outputs(d, kernel, set, /*zero_init_only=*/false);
      }
      // The stream does not wait for the legacy stream's copies and memsets above.
      d.check(d.api().ctx_synchronize(), "preparing the buffers (cuCtxSynchronize)");
      for (const auto& set : sets) {
        const cuda::Graph g = cuda::capture_graph(*d.driver, stream.get(), [&] {
          initialize_outputs(d, kernel, set, /*zero_init_only=*/true, stream.get());
          launch_all(d, kernel, lk, set, stream.get());
        });
        runs.push_back(cuda::instantiate_graph(*d.driver, g.get()));
      }
      if (options.spin_us > 0) spin_function(d);  // loaded before any timing
      for (int i = 0; i < options.warmup_runs; ++i) sample(nullptr, nullptr);
      d.check(d.api().ctx_synchronize(), "warm-up runs (cuCtxSynchronize)");
      r.samples_us = collect_samples(*d.driver, options, sample);
    });
  } catch (const cuda::CudaError& e) {
    record_failure(d, e, r);
    r.samples_us.clear();
  }
  return r;
}

// ---- correctness ---------------------------------------------------------------------

ReferenceCheck check_against_reference(GpuDevice& device, const Workload& w,
                                       const GeneratedKernel& variant,
                                       const std::vector<char>& variant_cubin,
                                       const GeneratedKernel& reference,
                                       const std::vector<char>& reference_cubin,
                                       const Tolerance& tolerance, const std::vector<Tensor>& inputs) {
  const KernelRun run = [&device](const GeneratedKernel& k, const std::vector<char>& cubin, std::vector<Tensor>& b) {
    return run_on_gpu(device, k, cubin, b);
  };
  return check_against_reference(run, w, variant, variant_cubin, reference, reference_cubin, tolerance, inputs, "");
}

}  // namespace dc
