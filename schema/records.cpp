#include "records.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/json_writer.h"
#include "ir/precision.h"
#include "tuning_db.h"

namespace dc {

std::string_view source_name(TimingSource s) { return s == TimingSource::emulated ? "emulated" : "real"; }

namespace {
constexpr std::array<std::pair<RunStatus, std::string_view>, 4> kRunStatusNames = {{
    {RunStatus::running, "running"},
    {RunStatus::ok, "ok"},
    {RunStatus::failed, "failed"},
    {RunStatus::interrupted, "interrupted"},
}};
constexpr std::array<ClusterKind, 7> kKinds = {
    ClusterKind::gemm,        ClusterKind::conv,      ClusterKind::depthwise, ClusterKind::reduction,
    ClusterKind::elementwise, ClusterKind::attention, ClusterKind::opaque};
}  // namespace

std::string_view run_status_name(RunStatus s) {
  for (const auto& [k, v] : kRunStatusNames)
    if (k == s) return v;
  return "?";
}

std::optional<RunStatus> parse_run_status(std::string_view name) {
  for (const auto& [k, v] : kRunStatusNames)
    if (v == name) return k;
  return std::nullopt;
}

std::optional<ClusterKind> parse_cluster_kind(std::string_view name) {
  for (ClusterKind k : kKinds)
    if (name == cluster_kind_name(k)) return k;
  return std::nullopt;
}

WorkloadRecord workload_record(const Workload& w) {
  return {w.signature, w.kind, w.canonical, w.flops, w.bytes,
          precision_free_signature(w.canonical)};
}

std::string workload_storage(const std::string& canonical) {
  if (canonical.find("bf16[") != std::string::npos) return "bf16";
  if (canonical.find("f16[") != std::string::npos) return "f16";
  return "f32";
}

std::string toolchain_major(std::string_view version) {
  return std::string(version.substr(0, version.find('.')));
}

// The text JsonWriter writes (null for what is not finite), without a stream: one per
// measurement row, and a stream's construction was most of its cost (round 8 of
// docs/bench/farm-service.md).
std::string samples_to_json(const std::vector<double>& samples) {
  std::string out = "[";
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i > 0) out += ',';
    if (std::isfinite(samples[i])) fmt::format_to(std::back_inserter(out), "{}", samples[i]);  // shortest exact
    else out += "null";
  }
  out += ']';
  return out;
}

std::vector<double> samples_from_json(std::string_view text) {
  std::vector<double> out;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
  };
  auto bad = [&]() { throw_user_error("bad samples in tuning DB: '", text.substr(0, 40), "'"); };
  skip_space();
  if (i >= text.size() || text[i] != '[') bad();
  ++i;
  skip_space();
  if (i < text.size() && text[i] == ']') return out;
  while (true) {
    skip_space();
    double v = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    if (ec != std::errc()) bad();
    out.push_back(v);
    i = static_cast<size_t>(end - text.data());
    skip_space();
    if (i >= text.size()) bad();
    if (text[i] == ']') return out;
    if (text[i] != ',') bad();
    ++i;
  }
}

std::string params_to_json(const Variant& v) {
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_object();
  for (const auto& [name, value] : v.params) j.field(name, value);
  j.end_object();
  return os.str();
}

std::string gpu_spec_to_json(const GpuSpec& s) {
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_object()
      .field("name", s.name)
      .field("full_name", s.full_name)
      .field("arch", s.arch)
      .field("cc_major", s.cc_major)
      .field("cc_minor", s.cc_minor)
      .field("sm_count", s.sm_count)
      .field("boost_clock_mhz", s.boost_clock_mhz)
      .field("fp32_lanes_per_sm", s.fp32_lanes_per_sm)
      .field("tc_fp16_flops_per_sm_clk", s.tc_fp16_flops_per_sm_clk)
      .field("tc_bf16_flops_per_sm_clk", s.tc_bf16_flops_per_sm_clk)
      .field("tc_tf32_flops_per_sm_clk", s.tc_tf32_flops_per_sm_clk)
      .field("dram_bandwidth_gbs", s.dram_bandwidth_gbs)
      .field("l2_bytes", s.l2_bytes)
      .field("smem_per_sm_bytes", s.smem_per_sm_bytes)
      .field("smem_per_block_bytes", s.smem_per_block_bytes)
      .field("regs_per_sm", s.regs_per_sm)
      .field("regs_per_thread", s.regs_per_thread)
      .field("max_threads_per_sm", s.max_threads_per_sm)
      .field("max_threads_per_block", s.max_threads_per_block)
      .field("max_blocks_per_sm", s.max_blocks_per_sm)
      .field("warp_size", s.warp_size)
      .field("launch_overhead_us", s.launch_overhead_us)
      .field("issue_per_clk", s.issue_per_clk)
      .field("lsu_per_clk", s.lsu_per_clk)
      .field("simd_lanes", s.simd_lanes)
      .field("fma_latency_cycles", s.fma_latency_cycles)
      .field("l1_bytes", s.l1_bytes)
      .field("generic", s.generic)
      .end_object();
  return os.str();
}

std::string strings_to_json(const std::vector<std::string>& items) {
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_array();
  for (const auto& s : items) j.value(s);
  j.end_array();
  return os.str();
}

std::string plan_choices_to_json(const std::vector<PlanChoice>& choices) {
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_array();
  for (const auto& c : choices)
    j.begin_object()
        .field("cluster", c.cluster)
        .field("workload", c.workload)
        .field("variant", c.variant_key)
        .field("estimated_us", c.estimated_us)
        .field("measured_us", c.measured_us)
        .end_object();
  j.end_array();
  return os.str();
}

int64_t now_unix_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string random_run_uid() {
  std::random_device rd;
  std::mt19937_64 rng((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(now_unix_ms()));
  return fmt::format("{:016x}{:016x}", rng(), rng());
}

Measurement checked_measurement(const Measurement& m) {
  DC_INTERNAL_CHECK(m.finished_unix_ms > 0, "measurement of ", m.variant_key,
                    " has no finished time (it identifies the job)");
  DC_INTERNAL_CHECK(m.attempts >= 1, "measurement of ", m.variant_key, " has ", m.attempts,
                    " attempts");
  for (double s : m.samples_us)
    DC_INTERNAL_CHECK(std::isfinite(s), "measurement of ", m.variant_key, " has sample ", s);
  DC_INTERNAL_CHECK(!std::isnan(m.median_us) && !std::isnan(m.min_us) && !std::isnan(m.spread) &&
                        !std::isnan(m.estimate_us) && !std::isnan(m.compile_seconds),
                    "measurement of ", m.variant_key, " has NaN figures");
  DC_INTERNAL_CHECK(!std::isnan(m.p10_us) && !std::isnan(m.p90_us) && !std::isnan(m.mean_us) &&
                        !std::isnan(m.mad_us),
                    "measurement of ", m.variant_key, " has NaN figures");
  Measurement out = m;
  if (std::isnan(out.max_rel_error)) out.max_rel_error = std::numeric_limits<double>::infinity();
  // The summary is of every sample; the DB keeps at most kStoredSamples of them.
  out.n_samples = std::max<int64_t>(out.n_samples, static_cast<int64_t>(out.samples_us.size()));
  out.samples_us = thin_samples(out.samples_us);
  return out;
}

double gpu_busy_fraction(const std::vector<GpuBusyRecord>& devices_of_one_gpu_type) {
  double busy = 0, measure = 0;
  for (const auto& r : devices_of_one_gpu_type) {
    busy += r.busy_seconds;
    measure = std::max(measure, r.measure_seconds);
  }
  if (measure <= 0) return 0;
  return busy / (measure * static_cast<double>(devices_of_one_gpu_type.size()));
}

}  // namespace dc
