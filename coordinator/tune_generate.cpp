// The generate stage: CUDA source for every planned job, and the FarmJob that carries it.
// The check's bound is computed here, once, from the real workload (variant_tolerance of the
// job's path, docs/precision.md) and travels in the job: the worker applies exactly it. So do
// the index bounds of integer inputs (ir/index_bounds.h).
#include <fmt/format.h>

#include "estimator.h"
#include "generate.h"
#include "ir/error.h"
#include "ir/index_bounds.h"
#include "ir/parallel.h"
#include "tune_stages.h"
#include "variant_tolerance.h"

namespace dc::tune_stage {

std::string job_key(const std::string& workload, const std::string& variant, const std::string& gpu) {
  return workload + "/" + variant + "/" + gpu;
}

// The run phase holds the naive reference kernel, the check and the timing loop. On a slow
// device (PoCL's CPU device: a 2048^3 GEMM's floor is 0.11 s, its reference ~20 s) a fixed
// deadline kills large workloads that work, so it grows with the workload's fp32 floor.
std::chrono::milliseconds run_deadline(const Workload& w, const GpuSpec& gpu, std::chrono::milliseconds configured) {
  constexpr double kFloorsPerRun = 1000;  // the reference runs far below the peak
  const auto scaled = std::chrono::milliseconds(static_cast<int64_t>(kFloorsPerRun * floor_seconds(w, gpu) * 1000));
  return std::max(configured, std::min(scaled, std::chrono::milliseconds(3600 * 1000)));
}

std::vector<FarmJob> generate(const std::vector<PlannedJob>& jobs, const ModelPlan& plan,
                              const std::vector<GpuTuneResult>& gpus, const TuneOptions& opts) {
  const auto& workloads = plan.workload_set.workloads;
  // Kernels do not depend on the GPU type: generate each (workload, variant) once, and
  // one reference per workload.
  std::map<std::pair<size_t, std::string>, size_t> kernel_index;
  std::vector<std::pair<size_t, const Variant*>> todo;
  std::map<size_t, size_t> ref_index;
  for (const auto& j : jobs) {
    if (kernel_index.emplace(std::make_pair(j.workload, j.variant.key()), todo.size()).second)
      todo.emplace_back(j.workload, &j.variant);
    ref_index.emplace(j.workload, 0);
  }
  for (auto& [w, idx] : ref_index) {
    idx = todo.size();
    todo.emplace_back(w, nullptr);
  }
  std::vector<GeneratedKernel> kernels(todo.size());
  parallel_for(static_cast<int64_t>(todo.size()), 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto& [w, v] = todo[static_cast<size_t>(i)];
      kernels[static_cast<size_t>(i)] = v ? generate_kernel(workloads[w], *v) : generate_reference(workloads[w]);
    }
  });
  std::map<std::pair<size_t, std::string>, Tolerance> bounds;  // per (workload, path)
  std::vector<FarmJob> out;
  out.reserve(jobs.size());
  for (const auto& j : jobs) {
    const Workload& w = workloads[j.workload];
    FarmJob f;
    f.gpu_type = gpus[j.gpu].gpu->name;
    f.workload = w.signature;
    f.precision = j.variant.precision;
    f.variant_kernel = kernels[kernel_index.at({j.workload, j.variant.key()})];
    DC_INTERNAL_CHECK(f.variant_kernel.variant_key == j.variant.key(), "generated kernel of ",
                      j.variant.key(), " says it is ", f.variant_kernel.variant_key);
    f.reference = kernels[ref_index.at(j.workload)];
    f.job_id = job_key(w.signature, j.variant.key(), f.gpu_type);
    // The same inputs for every variant of a workload; the signature is 16 hex digits.
    f.seed = opts.input_seed ^ std::stoull(w.signature, nullptr, 16);
    f.check_on_emulator = j.check;
    f.estimate_us = j.estimate_us;
    f.flops = w.flops;
    f.bytes = w.bytes;
    f.index_bounds = input_index_bounds(w.graph);
    auto bound = bounds.find({j.workload, f.precision});
    if (bound == bounds.end()) bound = bounds.emplace(std::make_pair(j.workload, f.precision), variant_tolerance(f.precision, w)).first;
    f.tolerance = bound->second;
    f.compile_deadline = opts.compile_deadline;
    f.run_deadline = run_deadline(w, *gpus[j.gpu].gpu, opts.run_deadline);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace dc::tune_stage
