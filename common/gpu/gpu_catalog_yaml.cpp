// Reading and checking a GPU table in gpus.yaml's format (gpu_catalog_yaml.h).
#include "gpu/gpu_catalog_yaml.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ir/join.h"
#include "ir/error.h"

namespace dc {

namespace {

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(first, last - first + 1));
}

const std::set<std::string>& known_arches() {
  static const std::set<std::string> arches = {"volta", "turing", "ampere",
                                               "ada",   "hopper", "blackwell"};
  return arches;
}

// Architecture families of OpenCL devices (api: opencl).
const std::set<std::string>& known_opencl_arches() {
  static const std::set<std::string> arches = {"cpu", "xe-hpg", "cdna2", "rdna3", "valhall", "adreno7xx"};
  return arches;
}

// ---- loading ---------------------------------------------------------------------------

// Reads one `gpus:` entry, remembering which keys it consumed so that the rest (typos) can
// be reported. Every error names the origin, the line, the GPU and the field.
class EntryReader {
 public:
  EntryReader(const YAML::Node& node, const std::string& origin, int index)
      : node_(node), origin_(origin), where_(fmt::format("GPU #{}", index + 1)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    const YAML::Node field = key.empty() ? YAML::Node() : node_[key];
    fail_at(field.IsDefined() ? field : node_, key, what);
  }

  [[noreturn]] void fail_at(const YAML::Node& at, const std::string& key,
                            const std::string& what) const {
    throw_user_error(origin_, ":", at.Mark().line + 1, ": ", where_,
                     key.empty() ? std::string() : ": field '" + key + "'", ": ", what);
  }

  void set_gpu_name(const std::string& name) { where_ = "GPU '" + name + "'"; }

  std::string scalar(const std::string& key) {
    const YAML::Node field = node_[key];
    if (!field.IsDefined() || field.IsNull()) fail(key, "missing");
    if (!field.IsScalar()) fail(key, "must be a single value");
    return field.Scalar();
  }

  std::string text(const std::string& key) {
    std::string value = trim(scalar(key));
    if (value.empty()) fail(key, "must not be empty");
    return value;
  }

  int64_t integer(const std::string& key, int64_t lo, int64_t hi) {
    const std::string s = trim(scalar(key));
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size())
      fail(key, "must be a whole number, got '" + s + "'");
    if (value < lo || value > hi)
      fail(key, fmt::format("must be in [{}, {}], got {}", lo, hi, value));
    return value;
  }

  double number(const std::string& key, double lo, double hi) {
    const std::string s = trim(scalar(key));
    double value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size())
      fail(key, "must be a number, got '" + s + "'");
    if (!(value >= lo && value <= hi))
      fail(key, fmt::format("must be in [{}, {}], got {}", lo, hi, value));
    return value;
  }

  bool has(const std::string& key) const { return node_[key].IsDefined(); }

  std::vector<std::string> strings(const std::string& key) {
    const YAML::Node field = node_[key];
    if (!field.IsDefined() || field.IsNull()) fail(key, "missing");
    if (!field.IsSequence() || field.size() == 0) fail(key, "must be a non-empty list");
    std::vector<std::string> out;
    for (const auto& item : field) {
      if (!item.IsScalar() || trim(item.Scalar()).empty())
        fail(key, "entries must be non-empty strings");
      out.push_back(trim(item.Scalar()));
    }
    return out;
  }

  // Keys not among `known` are typos; a key given twice is ambiguous.
  void reject_unknown_keys(const std::vector<std::string>& known) const {
    std::set<std::string> seen;
    for (const auto& kv : node_) {
      const std::string key = kv.first.Scalar();
      if (!seen.insert(key).second) fail_at(kv.first, key, "given twice");
      if (std::find(known.begin(), known.end(), key) == known.end())
        fail_at(kv.first, "", "unknown field '" + key + "' (known: " + join(known, ", ") + ")");
    }
  }

 private:
  const YAML::Node& node_;
  const std::string& origin_;
  std::string where_;
};

// Every field of an entry, in the order docs/gpus.md lists them.
const std::vector<std::string>& entry_fields() {
  static const std::vector<std::string> fields = {
      "name", "full_name", "api", "fp16", "device_patterns", "arch", "compute_capability", "sm_count",
      "boost_clock_mhz", "fp32_lanes_per_sm", "tc_fp16_flops_per_sm_clk",
      "tc_bf16_flops_per_sm_clk", "tc_tf32_flops_per_sm_clk", "dram_bandwidth_gbs",
      "l2_bytes", "smem_per_sm_bytes", "smem_per_block_bytes", "regs_per_sm",
      "regs_per_thread", "max_threads_per_sm", "max_threads_per_block", "max_blocks_per_sm",
      "warp_size", "regs_per_block", "reg_alloc_unit", "sm_sub_partitions", "smem_alloc_unit",
      "smem_reserved_per_block", "launch_overhead_us", "issue_per_clk", "lsu_per_clk",
      "simd_lanes", "fma_latency_cycles", "l1_bytes"};
  return fields;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

GpuSpec read_entry(const YAML::Node& node, const std::string& origin, int index) {
  EntryReader r(node, origin, index);
  if (!node.IsMap()) r.fail("", "must be a map of fields");
  GpuSpec g;
  g.name = r.text("name");
  r.set_gpu_name(g.name);
  if (!std::isalnum(static_cast<unsigned char>(g.name[0])) || !std::all_of(g.name.begin(), g.name.end(), is_name_char))
    r.fail("name", "must be lower-case letters, digits and '-'");
  g.full_name = r.text("full_name");
  g.device_patterns = r.strings("device_patterns");
  for (const auto& p : g.device_patterns) {
    const auto dollar = p.find('$');
    if (dollar != std::string::npos && dollar + 1 != p.size())
      r.fail("device_patterns", "'$' may only end a pattern, in '" + p + "'");
    if (p == "$") r.fail("device_patterns", "empty pattern '$'");
  }
  g.api = r.has("api") ? r.text("api") : "cuda";
  if (g.api != "cuda" && g.api != "opencl") r.fail("api", "must be cuda or opencl, got '" + g.api + "'");
  const bool opencl = g.api == "opencl";
  g.arch = r.text("arch");
  const auto& arches = opencl ? known_opencl_arches() : known_arches();
  if (!arches.count(g.arch)) {
    std::vector<std::string> names(arches.begin(), arches.end());
    r.fail("arch", "unknown architecture '" + g.arch + "' (known: " + join(names, ", ") + ")");
  }
  if (r.has("fp16")) {
    const std::string f = r.text("fp16");
    if (f != "true" && f != "false") r.fail("fp16", "must be true or false, got '" + f + "'");
    g.fp16 = f == "true";
  }

  if (opencl) {
    // No compute capability and no tensor cores: OpenCL's GEMMs run on the vector units.
    if (r.has("compute_capability")) r.fail("compute_capability", "an OpenCL device has none");
  } else {
    const std::string cc = r.text("compute_capability");
    int major = 0, minor = 0;
    const auto dot = cc.find('.');
    const char* const b = cc.data();
    const char* const e = cc.data() + cc.size();
    const bool cc_ok = dot != std::string::npos &&
                       std::from_chars(b, b + dot, major).ptr == b + dot && dot > 0 &&
                       std::from_chars(b + dot + 1, e, minor).ptr == e && dot + 1 < cc.size();
    if (!cc_ok) r.fail("compute_capability", "must read MAJOR.MINOR, e.g. \"8.0\", got '" + cc + "'");
    if (major < 7 || major > 20 || minor < 0 || minor > 9)
      r.fail("compute_capability", "must be 7.0 (Volta) or newer, got " + cc);
    g.cc_major = major;
    g.cc_minor = minor;
  }

  g.sm_count = static_cast<int>(r.integer("sm_count", 1, 1024));
  g.boost_clock_mhz = r.number("boost_clock_mhz", 100, 5000);
  g.fp32_lanes_per_sm = static_cast<int>(r.integer("fp32_lanes_per_sm", opencl ? 4 : 16, 512));
  // Every GPU from Volta on has fp16 tensor cores; bf16 and tf32 came with Ampere.
  g.tc_fp16_flops_per_sm_clk = r.number("tc_fp16_flops_per_sm_clk", opencl ? 0 : 1, opencl ? 0 : 65536);
  const double tc_lo = g.cc_major >= 8 ? 1 : 0;
  const double tc_hi = g.cc_major >= 8 ? 65536 : 0;
  g.tc_bf16_flops_per_sm_clk = r.number("tc_bf16_flops_per_sm_clk", tc_lo, tc_hi);
  g.tc_tf32_flops_per_sm_clk = r.number("tc_tf32_flops_per_sm_clk", tc_lo, tc_hi);
  g.dram_bandwidth_gbs = r.number("dram_bandwidth_gbs", 10, 100000);
  g.l2_bytes = r.integer("l2_bytes", int64_t{256} << 10, int64_t{1} << 30);
  g.smem_per_sm_bytes = r.integer("smem_per_sm_bytes", int64_t{16} << 10, int64_t{4} << 20);
  g.smem_per_block_bytes =
      r.integer("smem_per_block_bytes", int64_t{16} << 10, g.smem_per_sm_bytes);
  g.regs_per_sm = static_cast<int>(r.integer("regs_per_sm", 16384, 1 << 20));
  g.regs_per_thread = static_cast<int>(r.integer("regs_per_thread", 32, 1024));
  g.warp_size = static_cast<int>(r.integer("warp_size", 32, 32));
  g.max_threads_per_sm = static_cast<int>(r.integer("max_threads_per_sm", 256, 8192));
  g.max_threads_per_block =
      static_cast<int>(r.integer("max_threads_per_block", 32, g.max_threads_per_sm));
  g.max_blocks_per_sm = static_cast<int>(r.integer("max_blocks_per_sm", 1, 256));
  g.regs_per_block = static_cast<int>(r.integer("regs_per_block", 8192, g.regs_per_sm));
  g.reg_alloc_unit = static_cast<int>(r.integer("reg_alloc_unit", 1, 1024));
  g.sm_sub_partitions = static_cast<int>(r.integer("sm_sub_partitions", 1, 8));
  g.smem_alloc_unit = static_cast<int>(r.integer("smem_alloc_unit", 1, 4096));
  g.smem_reserved_per_block = r.integer("smem_reserved_per_block", 0, 65536);
  if (g.smem_per_block_bytes + g.smem_reserved_per_block > g.smem_per_sm_bytes)
    r.fail("smem_reserved_per_block", "smem_per_block_bytes + smem_reserved_per_block must not "
                                      "exceed smem_per_sm_bytes");
  if (g.max_threads_per_sm % g.warp_size != 0)
    r.fail("max_threads_per_sm", "must be a multiple of warp_size");
  if (g.max_threads_per_block % g.warp_size != 0)
    r.fail("max_threads_per_block", "must be a multiple of warp_size");
  if (r.has("launch_overhead_us")) g.launch_overhead_us = r.number("launch_overhead_us", 0, 1000);
  if (r.has("issue_per_clk")) g.issue_per_clk = r.number("issue_per_clk", 0.01, 64);
  if (r.has("lsu_per_clk")) g.lsu_per_clk = r.number("lsu_per_clk", 0.01, 64);
  if (r.has("simd_lanes")) g.simd_lanes = static_cast<int>(r.integer("simd_lanes", 1, 64));
  if (r.has("fma_latency_cycles")) g.fma_latency_cycles = r.number("fma_latency_cycles", 1, 64);
  if (r.has("l1_bytes")) g.l1_bytes = r.integer("l1_bytes", int64_t{4} << 10, int64_t{16} << 20);
  r.reject_unknown_keys(entry_fields());
  return g;
}

[[noreturn]] void fail_line(const std::string& origin, const YAML::Node& node,
                            const std::string& what) {
  throw_user_error(origin, ":", node.Mark().line + 1, ": ", what);
}

std::vector<GpuSpec> load(const std::string& text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw_user_error(origin, ":", e.mark.line + 1, ":", e.mark.column + 1,
                     ": YAML syntax error: ", e.msg);
  }
  if (!root.IsMap()) throw_user_error(origin, ": expected a map with the key 'gpus'");
  for (const auto& kv : root)
    if (kv.first.Scalar() != "gpus")
      fail_line(origin, kv.first,
                "unknown top-level key '" + kv.first.Scalar() + "' (expected 'gpus')");
  const YAML::Node list = root["gpus"];
  if (!list.IsDefined() || !list.IsSequence() || list.size() == 0)
    throw_user_error(origin, ": 'gpus' must be a non-empty list of GPUs");

  std::vector<GpuSpec> specs;
  std::map<std::string, std::string> pattern_owner;  // lower-cased pattern -> GPU
  for (size_t i = 0; i < list.size(); ++i) {
    GpuSpec g = read_entry(list[i], origin, static_cast<int>(i));
    for (const auto& s : specs)
      if (s.name == g.name) fail_line(origin, list[i], "GPU '" + g.name + "' is defined twice");
    for (const auto& p : g.device_patterns) {
      std::string key = p;
      for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const auto [it, fresh] = pattern_owner.emplace(key, g.name);
      if (!fresh)
        fail_line(origin, list[i], "GPU '" + g.name + "': device pattern '" + p +
                                     "' is also a pattern of '" + it->second + "'");
    }
    specs.push_back(std::move(g));
  }
  return specs;
}

}  // namespace

std::vector<GpuSpec> read_gpu_specs_yaml(const std::string& text, const std::string& origin) {
  return load(text, origin);
}

std::vector<GpuSpec> read_gpu_specs_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw_user_error("cannot read GPU table '", path.string(), "'");
  std::ostringstream text;
  text << in.rdbuf();
  return load(text.str(), path.string());
}

}  // namespace dc
