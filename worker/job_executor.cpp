#include "job_executor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "compile_cache.h"
#include "cuda_driver.h"
#include "emulated_timing.h"
#include "emulator.h"
#include "emulator/compile.h"
#include "farm_codec.h"
#include "opencl_compile.h"
#include "opencl_dialect.h"
#include "opencl_impl.h"
#include "opencl_runner.h"
#include "random_inputs.h"
#include "ref/compare.h"

namespace dc {

// A Result with more samples than the protocol allows would be dropped by the coordinator.
static_assert(TimingOptions{}.max_samples <= farm::kMaxSamples, "default timing cap above the farm's limit");

namespace {

JobOutcome failed(JobStatus status, const std::string& error) { return JobOutcome::failure(status, error); }

// The first lines of a long compiler message: enough to read, small on the wire.
std::string head(const std::string& text, size_t max_chars = 4000) {
  return text.size() <= max_chars ? text : text.substr(0, max_chars) + "\n[...]";
}

EmulatorOptions emulator_options(const ExecutorConfig& c) {
  EmulatorOptions o;
  if (!c.cache_dir.empty()) o.cache_dir = (std::filesystem::path(c.cache_dir) / "emulator").string();
  return o;
}

// What an emulate() failure means for a job: a launch the emulated device would refuse, a
// kernel the host emulator cannot build, or a fault while running (out of bounds, trap,
// deadlock, ...).
JobStatus classify_emulator_error(const std::string& error) {
  if (error.find("invalid launch configuration") != std::string::npos ||
      error.find("dynamic shared memory of") != std::string::npos ||
      error.find("buffer parameters but its launch passes") != std::string::npos)
    return JobStatus::launch_error;
  if (error.rfind("launch ", 0) == 0) return JobStatus::runtime_fault;
  return JobStatus::unsupported;
}

// A failed reference check as the job's result (the error's head only: a device's log may be long).
JobOutcome failed_check(const ReferenceCheck& check) {
  JobOutcome r = failed(check.status, head(check.error));
  r.max_rel_error = check.max_rel_error;
  return r;
}

// The bound the coordinator computed from the real workload: applied exactly, never
// re-derived here (the worker does not have the workload's compute nodes).
Tolerance job_tolerance(const MeasureJob& job) {
  const Tolerance& t = job.tolerance;
  if (!(t.rtol > 0) || !std::isfinite(t.rtol) || !(t.atol >= 0) || !std::isfinite(t.atol))
    throw farm::ProtocolError(str_cat("the job carries no valid tolerance (rtol ", t.rtol, ", atol ", t.atol, ")"));
  return t;
}

void report_resources(const CompileResult& c, const GeneratedKernel& k, JobOutcome* r) {
  int regs = 0, spill = 0;
  int64_t smem = 0;
  for (const KernelResources& kr : c.kernels) {
    regs = std::max(regs, kr.registers);
    spill = std::max(spill, kr.spill_stores_bytes + kr.spill_loads_bytes);
  }
  for (const Launch& l : k.launches) {
    int64_t s = l.dynamic_smem_bytes;
    for (const KernelResources& kr : c.kernels)
      if (kr.kernel == l.kernel) s += kr.static_smem_bytes;
    smem = std::max(smem, s);
  }
  r->registers = regs;
  r->spill_bytes = spill;
  r->smem_bytes = smem;
  r->compile_seconds = c.compile_seconds;
  r->nvrtc_version = c.nvrtc_version;
}

// Both kernels on the host emulator, compared: the emulated device's correctness check.
ReferenceCheck emulator_check(const Workload& w, const GeneratedKernel& variant, const GeneratedKernel& reference,
                              const Tolerance& tol, const std::vector<Tensor>& inputs, const EmulatorOptions& options) {
  const KernelRun run = [&options](const GeneratedKernel& k, const std::vector<char>&, std::vector<Tensor>& buffers) {
    const EmulatorResult r = emulate(k, buffers, options);
    GpuRunResult out;
    if (!r.ok) {
      out.status = classify_emulator_error(r.error);
      out.error = r.error;
    }
    return out;
  };
  return check_against_reference(run, w, variant, {}, reference, {}, tol, inputs, " on the host emulator");
}

}  // namespace

Workload job_workload(const GeneratedKernel& reference) {
  Workload w;
  for (const KernelBuffer& b : reference.buffers) {
    if (b.role == BufferRole::scratch) continue;
    w.graph.tensors[b.name] = TensorInfo{b.dtype, b.shape};
    (b.role == BufferRole::output ? w.graph.outputs : w.graph.inputs).push_back(b.name);
  }
  return w;
}

std::vector<Tensor> job_inputs(const MeasureJob& job, const GeneratedKernel& reference) {
  std::vector<RandomInput> inputs;
  for (const KernelBuffer& b : reference.buffers) {
    if (b.role != BufferRole::input) continue;
    const size_t i = inputs.size();
    inputs.push_back({b.dtype, b.shape, i < job.index_bounds.size() ? job.index_bounds[i] : 0});
  }
  return random_inputs(inputs, static_cast<uint32_t>(job.seed));
}

double EmulatedFaults::factor(int64_t jobs_timed_before) const {
  const double ramp = std::min(1.0, static_cast<double>(jobs_timed_before) / std::max(1, drift_jobs));
  const bool spiked = jobs_timed_before >= spike_from && jobs_timed_before < spike_from + spike_jobs;
  return time_factor * (1 + (drift_factor - 1) * ramp) * (spiked ? spike_factor : 1);
}

JobExecutor::JobExecutor(ExecutorConfig config) : config_(std::move(config)) {}
JobExecutor::~JobExecutor() = default;

JobOutcome JobExecutor::execute(const MeasureJob& job, const std::function<void()>& compiled) {
  return run(job, compiled, Phases::all);
}

JobOutcome JobExecutor::build(const MeasureJob& job) { return run(job, [] {}, Phases::compile_only); }

JobOutcome JobExecutor::refuse(const std::string& why) const {
  JobOutcome r = failed(JobStatus::unsupported, "malformed job: " + why);
  stamp(r);
  return r;
}

void JobExecutor::stamp(JobOutcome& r) const {
  r.emulated = config_.device.emulated();
  r.driver_version = config_.device.driver_version();
  if (r.nvrtc_version.empty()) r.nvrtc_version = config_.device.nvrtc_version();
}

JobOutcome JobExecutor::run(const MeasureJob& job, const std::function<void()>& compiled, Phases phases) {
  JobOutcome r;
  try {
    r = execute_checked(job, compiled, phases);
  } catch (const farm::ProtocolError& e) {
    r = failed(JobStatus::unsupported, std::string("malformed job: ") + e.what());
  } catch (const UserError& e) {
    r = failed(JobStatus::unsupported, e.what());
  } catch (const cuda::CudaError& e) {
    // A CUDA failure outside the runner's own handling: still the device's answer.
    r = failed(classify_cuda_error(e.code).status, e.what());
  } catch (const std::exception& e) {
    // dc's own code failed (InternalError, bad_alloc, ...): a bug, not the variant's
    // fault. Never final: the coordinator retries the job on another worker.
    spdlog::error("job {}: INTERNAL ERROR in the worker (a dc bug): {}", job.job_id, e.what());
    r = failed(JobStatus::internal_error, std::string("internal error in the worker: ") + e.what());
  } catch (...) {
    spdlog::error("job {}: INTERNAL ERROR in the worker (a dc bug): unknown exception", job.job_id);
    r = failed(JobStatus::internal_error, "internal error in the worker: unknown exception");
  }
  stamp(r);
  if (!job.variant_kernel.source.empty()) r.source_hash = fnv1a_hex(job.variant_kernel.source);
  return r;
}

JobOutcome JobExecutor::execute_checked(const MeasureJob& job, const std::function<void()>& compiled,
                                        Phases phases) {
  const farm::GpuInventory& dev = config_.device;
  if (job.gpu_type != dev.gpu_type())
    return failed(JobStatus::unsupported, str_cat("job for ", job.gpu_type, " sent to a ", dev.gpu_type(), " device"));
  if (!job.precision.empty() && !is_math_precision(job.precision))
    return failed(JobStatus::unsupported, "unknown precision '" + job.precision + "'");
  if (dev.api() == "opencl") return execute_opencl(job, compiled, phases);
  const Tolerance tol = job_tolerance(job);
  const GeneratedKernel& variant = job.variant_kernel;
  const GeneratedKernel& reference = job.reference;
  const Workload w = job_workload(reference);

  // ---- compile ----
  const CachedCompile vc = compile_with_cache(variant.source, dev.arch(), config_.cache_dir);
  if (!vc.result.ok) {
    JobOutcome r = failed(JobStatus::compile_error, head(vc.result.error.empty() ? vc.result.log : vc.result.error));
    r.compile_seconds = vc.result.compile_seconds;
    r.nvrtc_version = vc.result.nvrtc_version;
    return r;
  }
  JobOutcome out;
  report_resources(vc.result, variant, &out);
  out.compile_cached = vc.from_cache;

  if (dev.emulated()) {
    const EmulatedFaults& faults = config_.faults;
    if (!faults.internal_error_on.empty() && job.variant_kernel.variant_key.find(faults.internal_error_on) != std::string::npos)
      throw_internal_error("planted by DC_TEST_INTERNAL_ERROR (a test fault)");
    const EmulatorOptions emu = emulator_options(config_);
    if (job.check_on_emulator) {
      for (const GeneratedKernel* k : {&reference, &variant}) {
        const emu::CompiledLibrary lib = emu::compile_library(emulator_source(*k), emu);
        if (!lib.temp_dir.empty()) std::filesystem::remove_all(lib.temp_dir);
        if (!lib.error.empty())
          return failed(JobStatus::unsupported, head(str_cat(k == &reference ? "reference kernel: " : "",
                                                             "the host emulator cannot build the kernel: ", lib.error)));
      }
    }
    if (phases == Phases::compile_only) return out;
    compiled();
    if (job.check_on_emulator) {
      const ReferenceCheck check = emulator_check(w, variant, reference, tol, job_inputs(job, reference), emu);
      if (!check.ok()) return failed_check(check);
      out.max_rel_error = check.max_rel_error;
    }
    const EmulatedTiming t = emulated_timing(variant, config_.spec, vc.result.kernels,
                                             EmulatedWork{job.flops, job.precision.empty() ? "fp32" : job.precision},
                                             job.seed, config_.emulated_samples);
    if (!t.ok) return failed(JobStatus::launch_error, t.error);
    const double factor = config_.faults.factor(emulated_jobs_timed_++);
    for (double s : t.samples_us) out.samples_us.push_back(s * factor);
    out.health = health_figures(no_health_data("emulated device: its times are modelled"));
    return out;
  }

  // ---- real device ----
  const CachedCompile rc = compile_with_cache(reference.source, dev.arch(), config_.cache_dir);
  if (!rc.result.ok)
    return failed(JobStatus::compile_error, head("reference kernel: " + (rc.result.error.empty() ? rc.result.log : rc.result.error)));
  if (phases == Phases::compile_only) return out;
  compiled();
  if (!gpu_) gpu_ = std::make_unique<GpuDevice>(config_.ordinal);
  const std::vector<Tensor> job_values = job_inputs(job, reference);
  const ReferenceCheck check =
      check_against_reference(*gpu_, w, variant, vc.result.cubin, reference, rc.result.cubin, tol, job_values);
  if (check.context_lost) must_restart_ = true;
  if (!check.ok()) return failed_check(check);
  out.max_rel_error = check.max_rel_error;
  std::vector<Tensor> inputs;
  if (std::string e = bind_inputs(w, variant, job_values, &inputs); !e.empty())
    return failed(JobStatus::unsupported, e);
  // No timing on a device slowed for power or heat or with ECC errors, and none kept when
  // that began during the timing: such a time says nothing about the variant.
  const farm::DeviceHealth before = sample_health();
  if (const std::string why = unhealthy_reason(before); !why.empty()) {
    JobOutcome r = failed(JobStatus::unhealthy, "before timing: " + why);
    r.health = health_figures(before);
    return r;
  }
  const TimingResult timing = time_on_gpu(*gpu_, variant, vc.result.cubin, inputs, config_.timing);
  if (timing.context_lost) must_restart_ = true;
  if (!timing.ok()) return failed(timing.status, timing.error);
  const farm::DeviceHealth after = sample_health();
  if (const std::string why = unhealthy_reason(after); !why.empty()) {
    JobOutcome r = failed(JobStatus::unhealthy, "during timing: " + why);
    r.health = health_figures(after);
    return r;
  }
  out.samples_us = timing.samples_us;
  out.health = health_figures(after);
  return out;
}

farm::DeviceHealth JobExecutor::sample_health() const {
  if (!config_.nvml) return no_health_data(config_.no_nvml);
  const std::string bus = gpu_ ? gpu_->pci_bus_id() : "";
  if (bus.empty()) return no_health_data("the driver gave no PCI bus id for CUDA device " + std::to_string(config_.ordinal));
  return config_.nvml->sample(bus);
}

JobOutcome JobExecutor::execute_opencl(const MeasureJob& job, const std::function<void()>& compiled, Phases phases) {
  const farm::GpuInventory& dev = config_.device;
  const GeneratedKernel& variant = job.variant_kernel;
  const GeneratedKernel& reference = job.reference;
  const Workload w = job_workload(reference);
  const Tolerance tol = job_tolerance(job);

  // ---- compile: the dialect, clang to SPIR through the cache; clBuildProgram at the run ----
  const OpenClCompileResult vc = compile_opencl(opencl_source(variant), dev.compiler(), config_.cache_dir);
  if (!vc.ok) {
    JobOutcome r = failed(JobStatus::compile_error, head(vc.error));
    r.compile_seconds = vc.compile_seconds;
    return r;
  }
  JobOutcome out;
  out.compile_seconds = vc.compile_seconds;
  out.compile_cached = vc.from_cache;
  out.nvrtc_version = clang_version(dev.compiler());
  const OpenClCompileResult rc = compile_opencl(opencl_source(reference), dev.compiler(), config_.cache_dir);
  if (!rc.ok) return failed(JobStatus::compile_error, head("reference kernel: " + rc.error));
  if (phases == Phases::compile_only) return out;
  // The device's build of both programs is compile work too (kept in the device's program
  // cache for the runs): inside the compile deadline, before compiled().
  if (!ocl_) ocl_ = std::make_unique<ocl::Device>(GpuCatalog::builtin(), dev.api_index());
  for (const OpenClCompileResult* c : {&rc, &vc}) {
    std::string log;
    if (!ocl::cached_program(*ocl_, c->binary, &log))
      return failed(JobStatus::compile_error, head((c == &rc ? "reference kernel: " : "") + log));
  }
  compiled();

  // ---- check and time on the device ----
  const std::vector<Tensor> job_values = job_inputs(job, reference);
  const ReferenceCheck check = check_on_opencl(*ocl_, w, variant, vc.binary, reference, rc.binary, tol, job_values);
  if (!check.ok()) return failed_check(check);
  out.max_rel_error = check.max_rel_error;
  std::vector<Tensor> inputs;
  if (std::string e = bind_inputs(w, variant, job_values, &inputs); !e.empty())
    return failed(JobStatus::unsupported, e);
  // Paired timing on a CPU device (opencl_runner.h, OpenClAnchor), except for the reference
  // kernel (the drift check's sentinel among them): a probe of the worker must see its drift.
  const bool paired = config_.timing.pair_cpu_timings && ocl_->info().is_cpu && variant.source != reference.source;
  const TimingResult timing = time_on_opencl(*ocl_, variant, vc.binary, inputs, config_.timing,
                                             paired ? &anchor_ : nullptr, job.workload + "/" + job.precision);
  if (!timing.ok()) return failed(timing.status, head(timing.error));
  out.samples_us = timing.samples_us;
  // The note is the same for every result of its kind (`dc-db health` counts results by
  // note); the anchor, the factor and the raw median go to the log.
  std::string note = "OpenCL device: NVML covers NVIDIA GPUs only";
  if (!timing.paired_with.empty()) {
    note += "; paired timing: samples scaled to the workload's anchor";
    spdlog::debug("{}: timed in turns with the anchor {}: median factor {:.3f}, raw median {:.4g} us",
                  variant.variant_key, timing.paired_with, timing.pairing_factor, timing.raw_median_us);
  } else if (paired) {
    note += "; paired timing: the workload's anchor, timed alone";
  }
  out.health = health_figures(no_health_data(note));
  return out;
}

farm::Result execute_wire_job(JobExecutor& executor, const farm::Job& job, const std::function<void()>& compiled,
                              bool compile_only) {
  JobOutcome o;
  try {
    const MeasureJob j = farm::job_from_proto(farm::Job(job));
    o = compile_only ? executor.build(j) : executor.execute(j, compiled);
  } catch (const farm::ProtocolError& e) {
    o = executor.refuse(e.what());
    if (!job.variant().source().empty()) o.source_hash = fnv1a_hex(job.variant().source());
  }
  if (compile_only) compiled();
  farm::Result r = farm::to_proto(o);
  r.set_lease_id(job.lease_id());
  r.set_job_id(job.job_id());
  r.set_device_index(executor.device_index());
  return r;
}

}  // namespace dc
