#include "gpu/gpu_catalog.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <tuple>

#include "ir/error.h"
#include "ir/join.h"

namespace dc {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(first, last - first + 1));
}

bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

int cc_number(int major, int minor) { return major * 10 + minor; }

// ---- device matching -------------------------------------------------------------------

// Length of `pattern` if it occurs in `name` (both lower-case) as whole words, and, for a
// pattern ending in '$', at the end of the name; 0 otherwise.
size_t match_length(const std::string& name, std::string pattern) {
  const bool at_end = !pattern.empty() && pattern.back() == '$';
  if (at_end) pattern.pop_back();
  if (pattern.empty()) return 0;
  for (size_t pos = name.find(pattern); pos != std::string::npos;
       pos = name.find(pattern, pos + 1)) {
    const size_t end = pos + pattern.size();
    const bool left = pos == 0 || !is_alnum(name[pos - 1]) || !is_alnum(pattern.front());
    const bool right = end == name.size() || !is_alnum(name[end]) || !is_alnum(pattern.back());
    if (left && right && (!at_end || end == name.size())) return pattern.size();
  }
  return 0;
}

bool is_geforce(std::string_view full_name) {
  return lower(full_name).find("geforce") != std::string::npos;
}

// The table entry whose per-SM figures stand in for an unknown device: one of the same
// compute capability, else the newest one below it, else the oldest one above it;
// among equals one that is GeForce exactly when the device is (GeForce parts run fp16
// with fp32 accumulation at half rate), then the first in the file.
const GpuSpec& reference_for(const std::vector<GpuSpec>& specs, int cc, bool geforce) {
  const GpuSpec* best = nullptr;
  auto rank = [&](const GpuSpec& s) {
    const int c = cc_number(s.cc_major, s.cc_minor);
    // Lower tuple is better: distance class, cc distance, GeForce mismatch.
    const int cls = c == cc ? 0 : (c < cc ? 1 : 2);
    return std::tuple(cls, std::abs(cc - c), is_geforce(s.full_name) != geforce);
  };
  for (const auto& s : specs)
    if (!best || rank(s) < rank(*best)) best = &s;
  DC_INTERNAL_CHECK(best != nullptr, "empty GPU catalog");
  return *best;
}

std::string arch_for(int major, int minor) {
  if (major == 7) return minor >= 5 ? "turing" : "volta";
  if (major == 8) return minor == 9 ? "ada" : "ampere";
  if (major == 9) return "hopper";
  if (major >= 10 && major <= 12) return "blackwell";
  return "unknown";
}

std::string slug(std::string_view device_name) {
  std::string out;
  for (char c : lower(device_name)) {
    if (is_alnum(c))
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown-gpu" : out;
}

template <class T>
T reported_or(T reported, T fallback) {
  return reported > 0 ? reported : fallback;
}

}  // namespace

double dram_bandwidth_gbs(double memory_clock_khz, int bus_width_bits) {
  return 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9;
}

GpuCatalog GpuCatalog::from_specs(std::vector<GpuSpec> specs) {
  GpuCatalog c;
  c.specs_ = std::move(specs);
  return c;
}

const GpuSpec* GpuCatalog::find(std::string_view canonical_name) const {
  const std::string key = lower(trim(canonical_name));
  for (const auto& s : specs_)
    if (s.name == key) return &s;
  return nullptr;
}

const GpuSpec& GpuCatalog::require(std::string_view canonical_name) const {
  const GpuSpec* s = find(canonical_name);
  if (!s) throw_user_error("unknown GPU '", canonical_name, "'; known: ", join(names(), ", "));
  return *s;
}

std::vector<std::string> GpuCatalog::names() const {
  std::vector<std::string> out;
  for (const auto& s : specs_) out.push_back(s.name);
  std::sort(out.begin(), out.end());
  return out;
}

const GpuSpec* GpuCatalog::match_name(std::string_view device_name) const {
  const std::string name = lower(trim(device_name));
  const GpuSpec* best = nullptr;
  size_t best_len = 0;
  for (const auto& s : specs_)
    for (const auto& p : s.device_patterns) {
      if (s.is_opencl()) break;  // CUDA names only; OpenCL devices: common/opencl/opencl_device.cpp
      const size_t len = match_length(name, lower(p));
      if (len > best_len) {
        best = &s;
        best_len = len;
      }
    }
  return best;
}

GpuSpec GpuCatalog::match_device(const DeviceReport& report) const {
  const GpuSpec* match = match_name(report.name);
  std::string why;
  if (match) {
    const bool cc_differs = report.cc_major > 0 && (report.cc_major != match->cc_major ||
                                                    report.cc_minor != match->cc_minor);
    const bool sms_differ = report.sm_count > 0 && report.sm_count != match->sm_count;
    if (!cc_differs && !sms_differ) return *match;
    why = fmt::format(
        "its name matches '{}' but it reports sm_{}{} with {} SMs where the table has sm_{}{} "
        "with {} (a MIG slice or another variant)",
        match->name, report.cc_major, report.cc_minor, report.sm_count, match->cc_major,
        match->cc_minor, match->sm_count);
    if (cc_differs) match = nullptr;  // per-SM figures of another architecture do not apply
  } else {
    why = "it is not in the GPU table";
  }

  const std::string dev = trim(report.name);
  DC_USER_CHECK(!dev.empty(), "device report without a name");
  DC_USER_CHECK(report.cc_major >= 7, "device '", dev, "' has compute capability ",
                report.cc_major, ".", report.cc_minor, "; dc needs 7.0 (Volta) or newer");
  DC_USER_CHECK(report.sm_count > 0, "device '", dev, "' reports no SM count");
  DC_USER_CHECK(report.clock_mhz > 0, "device '", dev, "' reports no clock rate");
  DC_USER_CHECK(report.memory_bandwidth_gbs > 0, "device '", dev,
                "' reports no memory bandwidth (memory clock and bus width)");

  const GpuSpec& ref = match ? *match
                             : reference_for(specs_, cc_number(report.cc_major, report.cc_minor),
                                             is_geforce(dev));
  GpuSpec g;
  g.name = slug(dev);
  if (find(g.name)) g.name += "-generic";  // never answer for a table entry's DB records
  g.full_name = dev;
  g.device_patterns = {dev};
  g.arch = arch_for(report.cc_major, report.cc_minor);
  g.cc_major = report.cc_major;
  g.cc_minor = report.cc_minor;
  g.sm_count = report.sm_count;
  g.boost_clock_mhz = report.clock_mhz;
  g.dram_bandwidth_gbs = report.memory_bandwidth_gbs;
  // Throughput per SM per clock is a property of the SM design: take the reference's.
  g.fp32_lanes_per_sm = ref.fp32_lanes_per_sm;
  g.tc_fp16_flops_per_sm_clk = ref.tc_fp16_flops_per_sm_clk;
  g.tc_bf16_flops_per_sm_clk = ref.tc_bf16_flops_per_sm_clk;
  g.tc_tf32_flops_per_sm_clk = ref.tc_tf32_flops_per_sm_clk;
  g.l2_bytes = reported_or(report.l2_bytes, ref.l2_bytes);
  g.smem_per_sm_bytes = reported_or(report.smem_per_sm, ref.smem_per_sm_bytes);
  g.smem_per_block_bytes = reported_or(report.smem_per_block, ref.smem_per_block_bytes);
  g.regs_per_sm = reported_or(report.regs_per_sm, ref.regs_per_sm);
  g.regs_per_thread = ref.regs_per_thread;
  g.max_threads_per_sm = reported_or(report.max_threads_per_sm, ref.max_threads_per_sm);
  g.max_threads_per_block = reported_or(report.max_threads_per_block, ref.max_threads_per_block);
  g.max_blocks_per_sm = reported_or(report.max_blocks_per_sm, ref.max_blocks_per_sm);
  g.warp_size = reported_or(report.warp_size, ref.warp_size);
  // Allocation rules belong to the architecture: the reference's (same compute capability
  // major where the table has one).
  g.regs_per_block = ref.regs_per_block;
  g.reg_alloc_unit = ref.reg_alloc_unit;
  g.sm_sub_partitions = ref.sm_sub_partitions;
  g.smem_alloc_unit = ref.smem_alloc_unit;
  g.smem_reserved_per_block = ref.smem_reserved_per_block;
  g.launch_overhead_us = ref.launch_overhead_us;
  g.issue_per_clk = ref.issue_per_clk;
  g.lsu_per_clk = ref.lsu_per_clk;
  g.simd_lanes = ref.simd_lanes;
  g.fma_latency_cycles = ref.fma_latency_cycles;
  g.l1_bytes = ref.l1_bytes;
  g.generic = true;
  spdlog::warn(
      "GPU '{}': {}; using a generic spec '{}' from its reported properties with the per-SM "
      "throughput of '{}': estimates will be rough",
      dev, why, g.name, ref.name);
  return g;
}

std::vector<const GpuSpec*> parse_gpu_list(const GpuCatalog& catalog,
                                           const std::string& comma_list) {
  if (trim(comma_list).empty())
    throw_user_error("empty GPU list; name one or more of: ", join(catalog.names(), ", "));
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t comma = comma_list.find(',', start);
    items.push_back(trim(std::string_view(comma_list).substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<const GpuSpec*> out;
  for (const auto& name : items) {
    if (name.empty()) throw_user_error("empty entry in GPU list '", comma_list, "'");
    const GpuSpec& spec = catalog.require(name);
    if (std::find(out.begin(), out.end(), &spec) != out.end())
      throw_user_error("GPU '", spec.name, "' named twice in GPU list '", comma_list, "'");
    out.push_back(&spec);
  }
  return out;
}

std::string gpu_table_markdown(const GpuCatalog& catalog) {
  std::string out =
      "| name | GPU | arch | cc | SMs | boost MHz | FP32 TFLOPS | FP16 TC TFLOPS | GB/s "
      "| L2 MiB |\n"
      "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& g : catalog.all()) {
    const double tc_tflops = g.tc_fp16_flops_per_sm_clk * g.sm_count * g.clock_hz() / 1e12;
    // OpenCL devices: "OpenCL" in the cc column, compute units in the SMs column.
    const std::string cc = g.is_opencl() ? "OpenCL" : fmt::format("{}.{}", g.cc_major, g.cc_minor);
    out += fmt::format("| {} | {} | {} | {} | {} | {:g} | {:.1f} | {:.1f} | {:g} | {:g} |\n",
                       g.name, g.full_name, g.arch, cc, g.sm_count,
                       g.boost_clock_mhz, g.fp32_peak_flops() / 1e12, tc_tflops,
                       g.dram_bandwidth_gbs, static_cast<double>(g.l2_bytes) / (1 << 20));
  }
  return out;
}

}  // namespace dc
