#include "gpu/gpu_catalog.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "ir/error.h"

namespace dc {

extern const char* const kBuiltinGpusYaml;  // generated from gpus.yaml (gpus_yaml.cpp.in)

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

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

int cc_number(int major, int minor) { return major * 10 + minor; }

const std::set<std::string>& known_arches() {
  static const std::set<std::string> arches = {"volta", "turing", "ampere",
                                               "ada",   "hopper", "blackwell"};
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
      "name", "full_name", "device_patterns", "arch", "compute_capability", "sm_count",
      "boost_clock_mhz", "fp32_lanes_per_sm", "tc_fp16_flops_per_sm_clk",
      "tc_bf16_flops_per_sm_clk", "tc_tf32_flops_per_sm_clk", "dram_bandwidth_gbs",
      "l2_bytes", "smem_per_sm_bytes", "smem_per_block_bytes", "regs_per_sm",
      "regs_per_thread", "max_threads_per_sm", "max_threads_per_block", "max_blocks_per_sm",
      "warp_size", "launch_overhead_us"};
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
  if (!is_alnum(g.name[0]) || !std::all_of(g.name.begin(), g.name.end(), is_name_char))
    r.fail("name", "must be lower-case letters, digits and '-'");
  g.full_name = r.text("full_name");
  g.device_patterns = r.strings("device_patterns");
  for (const auto& p : g.device_patterns) {
    const auto dollar = p.find('$');
    if (dollar != std::string::npos && dollar + 1 != p.size())
      r.fail("device_patterns", "'$' may only end a pattern, in '" + p + "'");
    if (p == "$") r.fail("device_patterns", "empty pattern '$'");
  }
  g.arch = r.text("arch");
  if (!known_arches().count(g.arch)) {
    std::vector<std::string> arches(known_arches().begin(), known_arches().end());
    r.fail("arch", "unknown architecture '" + g.arch + "' (known: " + join(arches, ", ") + ")");
  }

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

  g.sm_count = static_cast<int>(r.integer("sm_count", 1, 1024));
  g.boost_clock_mhz = r.number("boost_clock_mhz", 100, 5000);
  g.fp32_lanes_per_sm = static_cast<int>(r.integer("fp32_lanes_per_sm", 16, 512));
  // Every GPU from Volta on has fp16 tensor cores; bf16 and tf32 came with Ampere.
  g.tc_fp16_flops_per_sm_clk = r.number("tc_fp16_flops_per_sm_clk", 1, 65536);
  const double tc_lo = major >= 8 ? 1 : 0;
  const double tc_hi = major >= 8 ? 65536 : 0;
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
  if (g.max_threads_per_sm % g.warp_size != 0)
    r.fail("max_threads_per_sm", "must be a multiple of warp_size");
  if (g.max_threads_per_block % g.warp_size != 0)
    r.fail("max_threads_per_block", "must be a multiple of warp_size");
  if (r.has("launch_overhead_us")) g.launch_overhead_us = r.number("launch_overhead_us", 0, 1000);
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
      const auto [it, fresh] = pattern_owner.emplace(lower(p), g.name);
      if (!fresh)
        fail_line(origin, list[i], "GPU '" + g.name + "': device pattern '" + p +
                                     "' is also a pattern of '" + it->second + "'");
    }
    specs.push_back(std::move(g));
  }
  return specs;
}

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

GpuCatalog GpuCatalog::builtin() {
  static const GpuCatalog table = from_yaml_text(kBuiltinGpusYaml, "built-in gpus.yaml");
  return table;
}

GpuCatalog GpuCatalog::from_yaml_text(const std::string& text, const std::string& origin) {
  GpuCatalog c;
  c.specs_ = load(text, origin);
  return c;
}

GpuCatalog GpuCatalog::from_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw_user_error("cannot read GPU table '", path.string(), "'");
  std::ostringstream text;
  text << in.rdbuf();
  return from_yaml_text(text.str(), path.string());
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
  g.launch_overhead_us = ref.launch_overhead_us;
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
    out += fmt::format("| {} | {} | {} | {}.{} | {} | {:g} | {:.1f} | {:.1f} | {:g} | {:g} |\n",
                       g.name, g.full_name, g.arch, g.cc_major, g.cc_minor, g.sm_count,
                       g.boost_clock_mhz, g.fp32_peak_flops() / 1e12, tc_tflops,
                       g.dram_bandwidth_gbs, static_cast<double>(g.l2_bytes) / (1 << 20));
  }
  return out;
}

}  // namespace dc
