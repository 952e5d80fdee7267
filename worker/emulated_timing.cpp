#include "emulated_timing.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <set>

#include "ir/error.h"
#include "ir/workload.h"
#include "gpu/occupancy.h"

namespace dc {
namespace {

// The model's own constants (not the estimator's).
constexpr double kLaunchUs = 2.2;          // per launch: driver submission and ramp
constexpr double kMemsetUs = 1.0;          // per zero_init buffer, plus its bytes
constexpr double kOverlap = 0.15;          // share of the shorter of compute/memory not hidden
constexpr double kTensorCoreShare = 0.5;   // of the tensor-core peak a template reaches
constexpr double kFlopsPerThread = 8.0;    // when the workload's FLOPs are not given
constexpr double kNoise = 0.02;            // relative sigma of one sample
constexpr double kOutlierChance = 0.05;    // a sample hit by something else on the GPU
constexpr double kOutlierCost = 0.10;

double buffer_bytes(const KernelBuffer& b) {
  return static_cast<double>(shape_numel(b.shape)) * static_cast<double>(dtype_size(b.dtype));
}

const KernelResources* resources_of(const std::vector<KernelResources>& all, const std::string& kernel) {
  for (const KernelResources& r : all)
    if (r.kernel == kernel) return &r;
  return nullptr;
}

double peak_flops(const GpuSpec& spec, const std::string& precision) {
  const double per_sm_clk = precision == "fp16"   ? spec.tc_fp16_flops_per_sm_clk
                            : precision == "bf16" ? spec.tc_bf16_flops_per_sm_clk
                            : precision == "tf32" ? spec.tc_tf32_flops_per_sm_clk
                                                  : 0.0;
  const double tc = per_sm_clk * spec.sm_count * spec.clock_hz() * kTensorCoreShare;
  return std::max(tc, spec.fp32_peak_flops());
}

// Uniform in [0, 1) from the top 53 bits: the same on every platform.
double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

EmulatedTiming emulated_timing(const GeneratedKernel& kernel, const GpuSpec& spec,
                               const std::vector<KernelResources>& resources,
                               const EmulatedWork& work, uint64_t seed, int samples) {
  DC_INTERNAL_CHECK(spec.sm_count > 0 && spec.max_threads_per_sm > 0 && spec.dram_bandwidth_gbs > 0,
                    "GPU spec ", spec.name, " lacks the figures the timing model needs");
  EmulatedTiming out;
  double total_threads = 0;
  for (const Launch& l : kernel.launches)
    total_threads += static_cast<double>(l.grid[0] * l.grid[1] * l.grid[2] * l.block[0] * l.block[1] * l.block[2]);
  total_threads = std::max(total_threads, 1.0);
  const double bandwidth = spec.dram_bytes_per_s();
  const double peak = peak_flops(spec, work.precision);

  double seconds = 0;
  for (size_t li = 0; li < kernel.launches.size(); ++li) {
    const Launch& l = kernel.launches[li];
    const double blocks = static_cast<double>(l.grid[0] * l.grid[1] * l.grid[2]);
    const int64_t tpb = l.block[0] * l.block[1] * l.block[2];
    const KernelResources* res = resources_of(resources, l.kernel);
    const int regs = res != nullptr && res->registers > 0 ? res->registers : 32;
    const int64_t smem = (res != nullptr ? res->static_smem_bytes : 0) + l.dynamic_smem_bytes;
    const std::string where = str_cat("launch ", li, " (kernel '", l.kernel, "') on emulated ", spec.name, ": ");
    // What a real device of this type would refuse, and how many blocks share an SM: the
    // allocation rules of gpu/occupancy.h, the ones the parameter spaces and the estimator use.
    const std::string refusal = launch_refusal(tpb, smem, regs, spec);
    if (!refusal.empty()) {
      out.ok = false;
      out.error = where + refusal;
      return out;
    }
    const int64_t warps = (tpb + spec.warp_size - 1) / spec.warp_size;
    const int64_t resident = blocks_per_sm(tpb, smem, regs, spec);
    const double occupancy =
        std::min(1.0, static_cast<double>(resident * warps * spec.warp_size) / spec.max_threads_per_sm);
    const double slots = static_cast<double>(resident) * spec.sm_count;
    const double waves = std::ceil(blocks / slots);
    const double utilisation = blocks / (waves * slots);  // idle SMs in the last wave

    std::set<int> touched(l.args.begin(), l.args.end());
    double bytes = 0;
    for (int a : touched) bytes += buffer_bytes(kernel.buffers[static_cast<size_t>(a)]);
    const double threads = blocks * static_cast<double>(tpb);
    const double flops = work.flops > 0 ? static_cast<double>(work.flops) * threads / total_threads
                                        : kFlopsPerThread * threads;
    if (res != nullptr) bytes += 2.0 * (res->spill_stores_bytes + res->spill_loads_bytes) * threads;

    const double mem_eff = 0.35 + 0.5 * std::min(1.0, occupancy / 0.5);
    const double comp_eff = 0.25 + 0.6 * std::sqrt(occupancy);
    const double t_mem = bytes / (bandwidth * mem_eff);
    const double t_comp = flops / (peak * comp_eff);
    const double roof = std::max(t_mem, t_comp) + kOverlap * std::min(t_mem, t_comp);
    seconds += roof / std::pow(utilisation, 0.75) + kLaunchUs * 1e-6;
  }
  for (const KernelBuffer& b : kernel.buffers)
    if (b.zero_init) seconds += kMemsetUs * 1e-6 + buffer_bytes(b) / bandwidth;

  // What the model cannot know, fixed per variant and GPU type.
  const uint64_t h = std::stoull(fnv1a_hex(kernel.variant_key + "|" + spec.name), nullptr, 16);
  out.variation = 0.8 + 0.4 * static_cast<double>(h >> 11) * 0x1.0p-53;
  out.model_us = seconds * 1e6 * out.variation;

  std::mt19937_64 rng(seed ^ h);
  for (int i = 0; i < samples; ++i) {
    // Box-Muller from platform-independent uniforms.
    const double u1 = std::max(unit(rng), 1e-12), u2 = unit(rng);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    double s = out.model_us * std::max(0.5, 1.0 + kNoise * z);
    if (unit(rng) < kOutlierChance) s *= 1.0 + kOutlierCost;
    out.samples_us.push_back(s);
  }
  return out;
}

}  // namespace dc
