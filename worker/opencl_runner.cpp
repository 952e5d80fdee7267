#include "opencl_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "ir/error.h"
#include "opencl_impl.h"
#include "random_inputs.h"
#include "ref/compare.h"

namespace dc {

namespace {

constexpr size_t kGuardBytes = 4096;
constexpr unsigned char kGuardByte = 0xA5;

// The kernel's program, kernels (one per launch) and buffers (each with its guard).
struct Loaded {
  std::shared_ptr<std::remove_pointer_t<cl_program>> program;
  std::vector<ocl::Kernel> kernels;
  std::vector<ocl::Mem> mem;
  std::vector<size_t> bytes;  // each buffer's size without the guard
};

// Builds the program and its kernels; a build failure is a compile_error in *failure.
bool load(ocl::Device& device, const GeneratedKernel& k, const std::vector<char>& spir, Loaded* out,
          GpuRunResult* failure) {
  std::string log;
  out->program = ocl::cached_program(device, spir, &log);
  if (!out->program) {
    failure->status = JobStatus::compile_error;
    failure->error = log;
    return false;
  }
  for (const Launch& l : k.launches) {
    cl_int rc = CL_SUCCESS;
    out->kernels.emplace_back(clCreateKernel(out->program.get(), l.kernel.c_str(), &rc));
    ocl::check(rc, "clCreateKernel");
  }
  for (const KernelBuffer& b : k.buffers) {
    const size_t n = static_cast<size_t>(shape_numel(b.shape)) * dtype_size(b.dtype);
    out->bytes.push_back(n);
    out->mem.push_back(ocl::create_buffer(device, n + kGuardBytes));
  }
  return true;
}

// Inputs uploaded; outputs and scratch 0xff (or 0 with zero_init); every guard patterned.
void prepare(ocl::Device& device, const GeneratedKernel& k, const std::vector<Tensor>& buffers, Loaded& L) {
  cl_command_queue q = device.impl().queue.get();
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input && L.bytes[i] > 0) {
      DC_INTERNAL_CHECK(buffers[i].defined() && buffers[i].nbytes() == L.bytes[i], "opencl: input ", b.name,
                        " missing or of another size");
      ocl::check(clEnqueueWriteBuffer(q, L.mem[i].get(), CL_FALSE, 0, L.bytes[i], buffers[i].raw(), 0, nullptr, nullptr),
                 "clEnqueueWriteBuffer");
    } else if (L.bytes[i] > 0) {
      const unsigned char byte = b.zero_init ? 0x00 : 0xff;
      ocl::check(clEnqueueFillBuffer(q, L.mem[i].get(), &byte, 1, 0, L.bytes[i], 0, nullptr, nullptr), "fill");
    }
    ocl::check(clEnqueueFillBuffer(q, L.mem[i].get(), &kGuardByte, 1, L.bytes[i], kGuardBytes, 0, nullptr, nullptr),
               "fill guard");
  }
  ocl::check(clFinish(q), "clFinish (preparing buffers)");
}

// Enqueues the zero_init fills and every launch. With `first` and `last`: the events of the
// first and the last command (owned by the caller; one retained twice when they are one).
void enqueue_run(ocl::Device& device, const GeneratedKernel& k, Loaded& L, cl_event* first, cl_event* last) {
  cl_command_queue q = device.impl().queue.get();
  const bool timed = first != nullptr && last != nullptr;
  std::vector<cl_event> events;
  cl_event* ev = nullptr;
  cl_event e = nullptr;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    if (!k.buffers[i].zero_init || L.bytes[i] == 0) continue;
    const unsigned char zero = 0;
    ev = timed ? &e : nullptr;
    ocl::check(clEnqueueFillBuffer(q, L.mem[i].get(), &zero, 1, 0, L.bytes[i], 0, nullptr, ev), "fill zero_init");
    if (ev) events.push_back(e);
  }
  for (size_t li = 0; li < k.launches.size(); ++li) {
    const Launch& l = k.launches[li];
    cl_kernel kern = L.kernels[li].get();
    for (size_t a = 0; a < l.args.size(); ++a) {
      cl_mem m = L.mem[static_cast<size_t>(l.args[a])].get();
      ocl::check(clSetKernelArg(kern, static_cast<cl_uint>(a), sizeof(cl_mem), &m), "clSetKernelArg");
    }
    size_t global[3], local[3];
    for (size_t d = 0; d < 3; ++d) {
      local[d] = static_cast<size_t>(l.block[d]);
      global[d] = static_cast<size_t>(l.grid[d]) * local[d];
    }
    ev = timed ? &e : nullptr;
    ocl::check(clEnqueueNDRangeKernel(q, kern, 3, nullptr, global, local, 0, nullptr, ev),
               fmt::format("launch {} ({}): clEnqueueNDRangeKernel", li, l.kernel).c_str());
    if (ev) events.push_back(e);
  }
  if (!timed) return;
  DC_INTERNAL_CHECK(!events.empty(), "opencl: a kernel without launches");
  *first = events.front();
  *last = events.back();
  if (events.size() == 1) clRetainEvent(events[0]);
  for (size_t i = 1; i + 1 < events.size(); ++i) clReleaseEvent(events[i]);
}

// The name of the first buffer whose guard is not intact, or "".
std::string broken_guard(ocl::Device& device, const GeneratedKernel& k, Loaded& L) {
  std::vector<unsigned char> guard(kGuardBytes);
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    ocl::check(clEnqueueReadBuffer(device.impl().queue.get(), L.mem[i].get(), CL_TRUE, L.bytes[i], kGuardBytes,
                                   guard.data(), 0, nullptr, nullptr),
               "reading a guard");
    if (std::any_of(guard.begin(), guard.end(), [](unsigned char c) { return c != kGuardByte; }))
      return k.buffers[i].name;
  }
  return "";
}

void record(const ocl::ClError& e, JobStatus* status, std::string* error) {
  // Refused launches (work-group size, resources) are launch errors; a failed command in the
  // queue is a fault of the kernel.
  const bool launch = e.code == CL_INVALID_WORK_GROUP_SIZE || e.code == CL_INVALID_WORK_ITEM_SIZE ||
                      e.code == CL_INVALID_GLOBAL_WORK_SIZE || e.code == CL_OUT_OF_RESOURCES ||
                      e.code == CL_INVALID_KERNEL_ARGS || e.code == CL_INVALID_KERNEL_NAME;
  *status = launch ? JobStatus::launch_error : JobStatus::runtime_fault;
  *error = e.what();
}

}  // namespace

GpuRunResult run_on_opencl(ocl::Device& device, const GeneratedKernel& kernel, const std::vector<char>& spir,
                           std::vector<Tensor>& buffers) {
  DC_INTERNAL_CHECK(buffers.size() == kernel.buffers.size(), "run_on_opencl: ", buffers.size(), " buffers for ",
                    kernel.buffers.size());
  GpuRunResult r;
  try {
    Loaded L;
    if (!load(device, kernel, spir, &L, &r)) return r;
    prepare(device, kernel, buffers, L);
    enqueue_run(device, kernel, L, nullptr, nullptr);
    ocl::check(clFinish(device.impl().queue.get()), "clFinish (the run)");
    if (const std::string b = broken_guard(device, kernel, L); !b.empty()) {
      r.status = JobStatus::runtime_fault;
      r.error = "out-of-bounds write: the kernel wrote past the end of buffer " + b;
      return r;
    }
    for (size_t i = 0; i < kernel.buffers.size(); ++i) {
      const KernelBuffer& b = kernel.buffers[i];
      if (b.role == BufferRole::input) continue;
      buffers[i] = Tensor(b.dtype, b.shape);
      if (L.bytes[i] == 0) continue;
      ocl::check(clEnqueueReadBuffer(device.impl().queue.get(), L.mem[i].get(), CL_TRUE, 0, L.bytes[i],
                                     buffers[i].raw_mutable(), 0, nullptr, nullptr),
                 "clEnqueueReadBuffer");
    }
  } catch (const ocl::ClError& e) {
    record(e, &r.status, &r.error);
  }
  return r;
}

struct OpenClAnchor::State {
  std::string workload;
  GeneratedKernel kernel;
  Loaded loaded;
  double first_median_us = 0;
};

OpenClAnchor::OpenClAnchor() = default;
OpenClAnchor::~OpenClAnchor() = default;
bool OpenClAnchor::holds(const std::string& workload) const { return state_ && state_->workload == workload; }
void OpenClAnchor::clear() { state_.reset(); }

double paired_sample_us(double sample_us, double anchor_first_us, double anchor_now_us) {
  DC_INTERNAL_CHECK(anchor_now_us > 0, "paired timing: an anchor sample of ", anchor_now_us, " us");
  return sample_us * anchor_first_us / anchor_now_us;
}

namespace {

double median_of(std::vector<double> v) {
  DC_INTERNAL_CHECK(!v.empty(), "median of no samples");
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

// One timed pass of `k`, in microseconds from its first command's start to its last one's end.
double timed_run(ocl::Device& device, const GeneratedKernel& k, Loaded& L) {
  cl_event first = nullptr, last = nullptr;
  enqueue_run(device, k, L, &first, &last);
  ocl::Event e0(first), e1(last);
  ocl::check(clWaitForEvents(1, &last), "clWaitForEvents");
  return ocl::event_us(first, last);
}

}  // namespace

TimingResult time_on_opencl(ocl::Device& device, const GeneratedKernel& kernel, const std::vector<char>& spir,
                            const std::vector<Tensor>& inputs, const TimingOptions& options, OpenClAnchor* anchor,
                            const std::string& workload) {
  TimingResult r;
  // Paired with the workload's anchor unless this is the anchor's own kernel (timed again,
  // it would only be scaled to its own first median).
  OpenClAnchor::State* pair = anchor && anchor->holds(workload) && anchor->state_->kernel.source != kernel.source
                                  ? anchor->state_.get()
                                  : nullptr;
  try {
    Loaded L;
    GpuRunResult failure;
    if (!load(device, kernel, spir, &L, &failure)) {
      r.status = failure.status;
      r.error = failure.error;
      return r;
    }
    std::vector<Tensor> buffers(kernel.buffers.size());
    for (size_t i = 0; i < buffers.size() && i < inputs.size(); ++i)
      if (kernel.buffers[i].role == BufferRole::input) buffers[i] = inputs[i];
    prepare(device, kernel, buffers, L);
    cl_command_queue q = device.impl().queue.get();
    // Caches: hot (automatic, none, rotate), as a plan's consecutive layers hand their data
    // over on a CPU device; `flush` writes 64 MiB between samples (above this host's LLC).
    const bool flush = options.l2 == L2Policy::flush;
    const size_t flush_bytes = size_t{64} << 20;
    ocl::Mem flush_buf = flush ? ocl::create_buffer(device, flush_bytes) : nullptr;
    r.l2_method = flush ? "flush 64 MiB" : "none (hot caches)";
    const auto warm_start = std::chrono::steady_clock::now();
    for (int i = 0; i < options.warmup_runs; ++i) enqueue_run(device, kernel, L, nullptr, nullptr);
    ocl::check(clFinish(q), "clFinish (warm-up)");
    if (device.info().is_cpu)
      while (std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_start).count() <
             options.cpu_warmup_seconds) {
        enqueue_run(device, kernel, L, nullptr, nullptr);
        ocl::check(clFinish(q), "clFinish (warm-up)");
      }
    if (pair) {
      enqueue_run(device, pair->kernel, pair->loaded, nullptr, nullptr);
      ocl::check(clFinish(q), "clFinish (warm-up of the anchor)");
    }
    double total_ms = 0;
    unsigned char flush_byte = 0;
    std::vector<double> raw, factors;
    // Tiny kernels on a CPU device are dominated by the enqueue: past min_samples, a second
    // of wall time ends the sampling even before min_total_ms of kernel time.
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      const auto n = static_cast<int>(raw.size());
      if (n >= options.max_samples || total_ms >= options.max_total_ms) break;
      if (n >= options.min_samples &&
          (total_ms >= options.min_total_ms || std::chrono::steady_clock::now() - start > std::chrono::seconds(1)))
        break;
      if (flush) {
        ++flush_byte;
        ocl::check(clEnqueueFillBuffer(q, flush_buf.get(), &flush_byte, 1, 0, flush_bytes, 0, nullptr, nullptr),
                   "flushing the caches");
      }
      double us = 0;
      if (!pair) {
        us = timed_run(device, kernel, L);
      } else {
        // In turns, the order swapped every pair: whichever runs second finds the caches
        // holding the other's data.
        double anchor_us = 0;
        if (n % 2 == 0) {
          us = timed_run(device, kernel, L);
          anchor_us = timed_run(device, pair->kernel, pair->loaded);
        } else {
          anchor_us = timed_run(device, pair->kernel, pair->loaded);
          us = timed_run(device, kernel, L);
        }
        factors.push_back(pair->first_median_us / anchor_us);
        r.samples_us.push_back(paired_sample_us(us, pair->first_median_us, anchor_us));
      }
      raw.push_back(us);
      total_ms += us * 1e-3;
    }
    if (!pair) r.samples_us = raw;
    if (const std::string b = broken_guard(device, kernel, L); !b.empty()) {
      r.status = JobStatus::runtime_fault;
      r.error = "out-of-bounds write: the kernel wrote past the end of buffer " + b;
      r.samples_us.clear();
      if (anchor) anchor->clear();
      return r;
    }
    if (!raw.empty()) r.raw_median_us = median_of(raw);
    if (pair) {
      r.paired_with = pair->kernel.variant_key;
      r.pairing_factor = median_of(factors);
    } else if (anchor && !raw.empty()) {
      auto state = std::make_unique<OpenClAnchor::State>();
      state->workload = workload;
      state->kernel = kernel;
      state->loaded = std::move(L);
      state->first_median_us = r.raw_median_us;
      anchor->state_ = std::move(state);
    }
  } catch (const ocl::ClError& e) {
    record(e, &r.status, &r.error);
    r.samples_us.clear();
    if (anchor) anchor->clear();
  }
  return r;
}

ReferenceCheck check_on_opencl(ocl::Device& device, const Workload& w, const GeneratedKernel& variant,
                               const std::vector<char>& variant_spir, const GeneratedKernel& reference,
                               const std::vector<char>& reference_spir, const Tolerance& tolerance,
                               const std::vector<Tensor>& inputs) {
  const KernelRun run = [&device](const GeneratedKernel& k, const std::vector<char>& spir, std::vector<Tensor>& b) {
    return run_on_opencl(device, k, spir, b);
  };
  return check_against_reference(run, w, variant, variant_spir, reference, reference_spir, tolerance, inputs,
                                 " on OpenCL");
}

}  // namespace dc
