// The GPU table (common/gpu/gpus.yaml) and its loader: figures against datasheets, device-name
// matching with its traps, the generic fallback, and the loader's refusals.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "gpu/gpu_catalog.h"
#include "gpu/gpu_catalog_yaml.h"
#include "ir/error.h"
#include "testing.h"

namespace dc {
namespace {

const GpuCatalog& table() {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  return catalog;
}

double fp16_tc_peak(const GpuSpec& g) {
  return g.tc_fp16_flops_per_sm_clk * g.sm_count * g.clock_hz();
}

std::string match(const std::string& device_name) {
  const GpuSpec* s = table().match_name(device_name);
  return s ? s->name : "<none>";
}

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no UserError>";
}

// Captures what spdlog writes while alive.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

// The twelve CUDA GPUs, and five OpenCL device types (docs/opencl.md) with their own checks.
TEST(GpuCatalog, BuiltinHasTheTwelveGpus) {
  const std::vector<std::string> expected = {"a10",  "a100",    "a100-80g", "adreno-740", "arc-a770",
                                             "h100", "h100-pcie", "h200", "l4",   "l40s", "mali-g710",
                                             "mi210", "pocl-cpu", "rtx3090", "rtx4090", "t4",  "v100"};
  EXPECT_EQ(table().names(), expected);
  ASSERT_EQ(table().all().size(), 17u);
  for (const auto& g : table().all()) {
    if (g.is_opencl()) continue;
    EXPECT_GE(g.cc_major * 10 + g.cc_minor, 70) << g.name;
    EXPECT_FALSE(g.generic) << g.name;
    EXPECT_EQ(g.regs_per_thread, 255) << g.name;
    EXPECT_EQ(g.regs_per_sm, 65536) << g.name;
    EXPECT_EQ(g.warp_size, 32) << g.name;
    EXPECT_EQ(g.max_threads_per_block, 1024) << g.name;
    EXPECT_FALSE(g.device_patterns.empty()) << g.name;
  }
}

// launch_bounds_regs (codegen/param_space.h) models ptxas with GpuSpec's register-file
// defaults, for every architecture: every table entry must have them.
TEST(GpuCatalog, RegisterRulesAreShared) {
  const GpuSpec defaults;
  for (const auto& g : table().all()) {
    if (g.is_opencl()) continue;  // no ptxas: the OpenCL compiler allocates
    EXPECT_EQ(g.regs_per_block, defaults.regs_per_block) << g.name;
    EXPECT_EQ(g.reg_alloc_unit, defaults.reg_alloc_unit) << g.name;
    EXPECT_EQ(g.sm_sub_partitions, defaults.sm_sub_partitions) << g.name;
    EXPECT_EQ(g.warp_size, defaults.warp_size) << g.name;
    EXPECT_EQ(g.regs_per_thread, 255) << g.name;
  }
}

TEST(GpuCatalog, A100Figures) {
  const GpuSpec& a = table().require("a100");
  EXPECT_EQ(a.sm_count, 108);
  EXPECT_EQ(a.cc_major, 8);
  EXPECT_EQ(a.cc_minor, 0);
  EXPECT_EQ(a.sm_arch(), "sm_80");
  EXPECT_EQ(a.arch, "ampere");
  EXPECT_DOUBLE_EQ(a.dram_bandwidth_gbs, 1555);
  EXPECT_EQ(a.l2_bytes, 40 * 1024 * 1024);
  EXPECT_EQ(a.smem_per_sm_bytes, 164 * 1024);
  EXPECT_EQ(a.smem_per_block_bytes, 163 * 1024);
  EXPECT_NEAR(a.fp32_peak_flops(), 19.5e12, 0.02 * 19.5e12);
  EXPECT_NEAR(fp16_tc_peak(a), 312e12, 0.03 * 312e12);
  EXPECT_NEAR(a.tc_tf32_flops_per_sm_clk * a.sm_count * a.clock_hz(), 156e12, 0.03 * 156e12);
  EXPECT_DOUBLE_EQ(table().require("a100-80g").dram_bandwidth_gbs, 2039);
}

TEST(GpuCatalog, H100Figures) {
  const GpuSpec& h = table().require("h100");
  EXPECT_EQ(h.sm_count, 132);
  EXPECT_EQ(h.cc_major, 9);
  EXPECT_EQ(h.cc_minor, 0);
  EXPECT_EQ(h.smem_per_sm_bytes, 228 * 1024);
  EXPECT_EQ(h.l2_bytes, 50 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(h.dram_bandwidth_gbs, 3350);
  EXPECT_EQ(table().require("h100-pcie").sm_count, 114);
  EXPECT_DOUBLE_EQ(table().require("h200").dram_bandwidth_gbs, 4800);
}

// Datasheet peaks (TFLOPS: FP32 on CUDA cores, dense FP16 tensor with FP32 accumulate)
// reproduced by SMs x clock x per-SM figures.
TEST(GpuCatalog, PeaksMatchDatasheets) {
  const std::map<std::string, std::pair<double, double>> datasheet = {
      {"v100", {15.7, 125}},   {"t4", {8.1, 65}},          {"a10", {31.2, 125}},
      {"a100", {19.5, 312}},   {"a100-80g", {19.5, 312}},  {"l4", {30.3, 121}},
      {"l40s", {91.6, 362}},   {"rtx3090", {35.6, 71}},    {"rtx4090", {82.6, 165.2}},
      {"h100", {67, 989.4}},   {"h100-pcie", {51.2, 756.5}}, {"h200", {67, 989.5}},
      // OpenCL: fp32 vector peaks (Intel, AMD; Arm's and Qualcomm's as derived in gpus.yaml), no tensor cores.
      {"arc-a770", {17.2, 0}}, {"mi210", {22.6, 0}}, {"mali-g710", {1.09, 0}}, {"adreno-740", {2.09, 0}},
      {"pocl-cpu", {0.1565, 0}}};
  ASSERT_EQ(datasheet.size(), table().all().size());
  for (const auto& [name, peaks] : datasheet) {
    const GpuSpec& g = table().require(name);
    EXPECT_NEAR(g.fp32_peak_flops() / 1e12, peaks.first, 0.02 * peaks.first) << name;
    EXPECT_NEAR(fp16_tc_peak(g) / 1e12, peaks.second, 0.03 * peaks.second) << name;
  }
}

TEST(GpuCatalog, OpenClEntriesAreMarked) {
  for (const char* name : {"pocl-cpu", "arc-a770", "mi210", "mali-g710", "adreno-740"}) {
    const GpuSpec& g = table().require(name);
    EXPECT_EQ(g.api, "opencl") << name;
    EXPECT_EQ(g.sm_arch(), "spir64") << name;
    EXPECT_EQ(g.cc_major, 0) << name;
    EXPECT_EQ(g.tc_fp16_flops_per_sm_clk, 0) << name;
  }
  EXPECT_FALSE(table().require("pocl-cpu").fp16);
  // A CPU core issues a quarter of an SM's warp instructions, 8 lanes a vector, and only it
  // runs its work-items serially in the estimator (gpus.yaml says why).
  EXPECT_DOUBLE_EQ(table().require("pocl-cpu").issue_per_clk, 1.0);
  EXPECT_EQ(table().require("pocl-cpu").simd_lanes, 8);
  EXPECT_DOUBLE_EQ(table().require("pocl-cpu").fma_latency_cycles, 4.0);
  EXPECT_EQ(table().require("pocl-cpu").l1_bytes, 32768);
  EXPECT_TRUE(table().require("pocl-cpu").runs_work_items_serially());
  EXPECT_DOUBLE_EQ(table().require("h100").issue_per_clk, 4.0);
  for (const GpuSpec& g : table().all()) {
    if (g.name != "pocl-cpu") {
      EXPECT_EQ(g.simd_lanes, 0) << g.name;
    }
  }
  EXPECT_TRUE(table().require("mi210").fp16);
  EXPECT_EQ(table().require("a100").api, "cuda");
  // CUDA device names never match an OpenCL entry.
  EXPECT_EQ(table().match_name("gfx90a"), nullptr);
}

// Per-SM limits follow the CUDA programming guide's table for the compute capability.
TEST(GpuCatalog, PerSmLimitsFollowComputeCapability) {
  struct Limits {
    int threads, blocks;
    int64_t smem_sm_kb, smem_block_kb;
  };
  const std::map<int, Limits> by_cc = {{70, {2048, 32, 96, 96}},  {75, {1024, 16, 64, 64}},
                                       {80, {2048, 32, 164, 163}}, {86, {1536, 16, 100, 99}},
                                       {89, {1536, 24, 100, 99}}, {90, {2048, 32, 228, 227}}};
  for (const auto& g : table().all()) {
    if (g.is_opencl()) continue;
    const auto it = by_cc.find(g.cc_major * 10 + g.cc_minor);
    ASSERT_NE(it, by_cc.end()) << g.name;
    EXPECT_EQ(g.max_threads_per_sm, it->second.threads) << g.name;
    EXPECT_EQ(g.max_blocks_per_sm, it->second.blocks) << g.name;
    EXPECT_EQ(g.smem_per_sm_bytes, it->second.smem_sm_kb * 1024) << g.name;
    EXPECT_EQ(g.smem_per_block_bytes, it->second.smem_block_kb * 1024) << g.name;
    const bool pre_ampere = g.cc_major < 8;
    // The occupancy calculator's allocation rules (cuda_occupancy.h): shared memory in units
    // of 256 B before sm_80, 128 B from it, with 1 KB reserved per block from sm_80.
    EXPECT_EQ(g.smem_alloc_unit, pre_ampere ? 256 : 128) << g.name;
    EXPECT_EQ(g.smem_reserved_per_block, pre_ampere ? 0 : 1024) << g.name;
    EXPECT_LE(g.smem_per_block_bytes + g.smem_reserved_per_block, g.smem_per_sm_bytes) << g.name;
    EXPECT_EQ(g.tc_bf16_flops_per_sm_clk == 0, pre_ampere) << g.name;
    EXPECT_EQ(g.tc_tf32_flops_per_sm_clk == 0, pre_ampere) << g.name;
  }
}

TEST(GpuCatalog, MatchesCudaDeviceNames) {
  EXPECT_EQ(match("NVIDIA A100-SXM4-40GB"), "a100");
  EXPECT_EQ(match("NVIDIA A100-PCIE-40GB"), "a100");
  EXPECT_EQ(match("NVIDIA A100-SXM4-80GB"), "a100-80g");  // trap: contains "A100"
  EXPECT_EQ(match("NVIDIA A100 80GB PCIe"), "a100-80g");
  EXPECT_EQ(match("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(match("NVIDIA H100 PCIe"), "h100-pcie");      // trap: contains "H100"
  EXPECT_EQ(match("nvidia h100 pcie"), "h100-pcie");      // case-insensitive
  EXPECT_EQ(match("NVIDIA H200"), "h200");
  EXPECT_EQ(match("Tesla V100-SXM2-16GB"), "v100");
  EXPECT_EQ(match("Tesla V100-SXM2-32GB"), "v100");
  EXPECT_EQ(match("Tesla T4"), "t4");
  EXPECT_EQ(match("NVIDIA A10"), "a10");
  EXPECT_EQ(match("NVIDIA L4"), "l4");
  EXPECT_EQ(match("NVIDIA L40S"), "l40s");
  EXPECT_EQ(match("NVIDIA GeForce RTX 3090"), "rtx3090");
  EXPECT_EQ(match("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(match("  NVIDIA GeForce RTX 4090 "), "rtx4090");
}

// Names that contain a pattern but are other GPUs: whole-word and end-of-name rules.
TEST(GpuCatalog, DoesNotMatchLookalikes) {
  for (const char* name :
       {"NVIDIA A10G", "NVIDIA L40", "NVIDIA T400", "NVIDIA GH200 480GB", "NVIDIA H200 NVL",
        "NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 4090 Laptop GPU",
        "Tesla V100-PCIE-16GB", "NVIDIA A100X", "Quadro RTX 6000", ""})
    EXPECT_EQ(match(name), "<none>") << name;
}

DeviceReport report(std::string name, int major, int minor, int sms, double mhz, double gbs) {
  DeviceReport r;
  r.name = std::move(name);
  r.cc_major = major;
  r.cc_minor = minor;
  r.sm_count = sms;
  r.clock_mhz = mhz;
  r.memory_bandwidth_gbs = gbs;
  return r;
}

TEST(GpuCatalog, KnownDeviceGetsTheTableEntry) {
  LogCapture log;
  const GpuSpec g = table().match_device(report("NVIDIA H100 PCIe", 9, 0, 114, 1755, 2039));
  EXPECT_EQ(g.name, "h100-pcie");
  EXPECT_FALSE(g.generic);
  EXPECT_DOUBLE_EQ(g.dram_bandwidth_gbs, 2000);  // the table's figure, not the report's
  // A report without figures still maps by name.
  EXPECT_EQ(table().match_device(report("NVIDIA A100-SXM4-80GB", 0, 0, 0, 0, 0)).name,
            "a100-80g");
  EXPECT_EQ(log.text(), "");  // no warning for a known GPU
}

TEST(GpuCatalog, UnknownDeviceGetsGenericSpec) {
  LogCapture log;
  DeviceReport r = report("NVIDIA A10G", 8, 6, 80, 1710, 600.1);
  r.l2_bytes = 6 << 20;
  r.smem_per_sm = 100 << 10;
  const GpuSpec g = table().match_device(r);
  EXPECT_TRUE(g.generic);
  EXPECT_EQ(g.name, "nvidia-a10g");
  EXPECT_EQ(g.full_name, "NVIDIA A10G");
  EXPECT_EQ(g.arch, "ampere");
  EXPECT_EQ(g.sm_count, 80);
  EXPECT_DOUBLE_EQ(g.boost_clock_mhz, 1710);
  EXPECT_DOUBLE_EQ(g.dram_bandwidth_gbs, 600.1);
  EXPECT_EQ(g.l2_bytes, 6 << 20);
  // Per-SM figures from the data-centre 8.6 entry (a10), limits it did not report too.
  EXPECT_EQ(g.fp32_lanes_per_sm, 128);
  EXPECT_DOUBLE_EQ(g.tc_fp16_flops_per_sm_clk, 1024);
  EXPECT_DOUBLE_EQ(g.tc_tf32_flops_per_sm_clk, 512);
  EXPECT_EQ(g.max_threads_per_sm, 1536);
  EXPECT_EQ(g.max_blocks_per_sm, 16);
  EXPECT_EQ(g.smem_per_block_bytes, 99 * 1024);
  EXPECT_EQ(g.regs_per_thread, 255);
  EXPECT_NEAR(g.fp32_peak_flops(), 2.0 * 128 * 80 * 1710e6, 1e6);
  const std::string warning = log.text();
  EXPECT_NE(warning.find("NVIDIA A10G"), std::string::npos) << warning;
  EXPECT_NE(warning.find("rough"), std::string::npos) << warning;
}

TEST(GpuCatalog, GenericReferenceFollowsComputeCapability) {
  LogCapture log;
  const auto fp16 = [](const DeviceReport& r) {
    return table().match_device(r).tc_fp16_flops_per_sm_clk;
  };
  // GeForce Ampere runs fp16 with fp32 accumulation at half the data-centre rate.
  EXPECT_DOUBLE_EQ(fp16(report("NVIDIA GeForce RTX 3080", 8, 6, 68, 1710, 760)), 512);
  EXPECT_DOUBLE_EQ(fp16(report("NVIDIA RTX A6000", 8, 6, 84, 1800, 768)), 1024);
  EXPECT_DOUBLE_EQ(fp16(report("NVIDIA RTX 6000 Ada Generation", 8, 9, 142, 2505, 960)), 1024);
  EXPECT_DOUBLE_EQ(fp16(report("Orin", 8, 7, 16, 1300, 204)), 1024);      // newest below: 8.6
  EXPECT_DOUBLE_EQ(fp16(report("Tesla V100S-PCIE-32GB", 7, 0, 80, 1597, 1134)), 1024);
  const GpuSpec b = table().match_device(report("NVIDIA B200", 10, 0, 148, 1965, 8000));
  EXPECT_EQ(b.arch, "blackwell");
  EXPECT_DOUBLE_EQ(b.tc_fp16_flops_per_sm_clk, 3786);  // Hopper's, the newest known
  EXPECT_EQ(b.smem_per_sm_bytes, 228 * 1024);
}

TEST(GpuCatalog, MigSliceIsGenericWithTheMatchedPerSmFigures) {
  LogCapture log;
  const GpuSpec g =
      table().match_device(report("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 8, 0, 42, 1410, 777));
  EXPECT_TRUE(g.generic);
  EXPECT_EQ(g.name, "nvidia-a100-sxm4-40gb-mig-3g-20gb");
  EXPECT_EQ(g.sm_count, 42);
  EXPECT_DOUBLE_EQ(g.tc_fp16_flops_per_sm_clk, 2048);
  EXPECT_EQ(g.fp32_lanes_per_sm, 64);
  EXPECT_NE(log.text().find("matches 'a100' but it reports sm_80 with 42 SMs"), std::string::npos)
      << log.text();
}

TEST(GpuCatalog, BadDeviceReportsAreUserErrors) {
  EXPECT_NE(user_error_of([] {
              table().match_device(report("NVIDIA GeForce GTX 1080", 6, 1, 20, 1733, 320));
            }).find("compute capability 6.1"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { table().match_device(report("Mystery", 8, 0, 0, 1000, 100)); })
                .find("SM count"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { table().match_device(report("Mystery", 8, 0, 10, 1000, 0)); })
                .find("bandwidth"),
            std::string::npos);
}

TEST(GpuCatalog, RequireListsKnownNames) {
  EXPECT_EQ(table().find("x100"), nullptr);
  EXPECT_EQ(table().find("H100")->name, "h100");
  EXPECT_EQ(user_error_of([] { table().require("x100"); }),
            "unknown GPU 'x100'; known: a10, a100, a100-80g, adreno-740, arc-a770, h100, h100-pcie, h200, "
            "l4, l40s, mali-g710, mi210, pocl-cpu, rtx3090, rtx4090, t4, v100");
}

TEST(GpuCatalog, ParseGpuList) {
  const auto two = parse_gpu_list(table(), "a100,h100");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0]->name, "a100");
  EXPECT_EQ(two[1]->name, "h100");
  const auto spaced = parse_gpu_list(table(), " L4 , t4");
  ASSERT_EQ(spaced.size(), 2u);
  EXPECT_EQ(spaced[0]->name, "l4");
  EXPECT_EQ(spaced[1]->name, "t4");
  EXPECT_NE(user_error_of([] { parse_gpu_list(table(), " "); }).find("empty GPU list"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { parse_gpu_list(table(), "a100,,h100"); }).find("empty entry"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { parse_gpu_list(table(), "a100,"); }).find("empty entry"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { parse_gpu_list(table(), "a100,A100"); }).find("named twice"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { parse_gpu_list(table(), "a100,x100"); }).find("unknown GPU 'x100'"),
            std::string::npos);
}

TEST(GpuCatalog, BandwidthFromMemoryClock) {
  EXPECT_NEAR(dram_bandwidth_gbs(1215000, 5120), 1555.2, 0.1);  // A100 40GB
  EXPECT_NEAR(dram_bandwidth_gbs(9751000, 384), 936.1, 0.1);    // RTX 3090
  EXPECT_NEAR(dram_bandwidth_gbs(5001000, 256), 320.1, 0.1);    // T4
}

// ---- the loader's refusals ----

const char* const kGoodEntry = R"(
  - name: x1
    full_name: Example X1
    device_patterns: ["X1"]
    arch: ampere
    compute_capability: "8.0"
    sm_count: 10
    boost_clock_mhz: 1000
    fp32_lanes_per_sm: 64
    tc_fp16_flops_per_sm_clk: 2048
    tc_bf16_flops_per_sm_clk: 2048
    tc_tf32_flops_per_sm_clk: 1024
    dram_bandwidth_gbs: 500
    l2_bytes: 4194304
    smem_per_sm_bytes: 167936
    smem_per_block_bytes: 166912
    regs_per_sm: 65536
    regs_per_thread: 255
    max_threads_per_sm: 2048
    max_threads_per_block: 1024
    max_blocks_per_sm: 32
    warp_size: 32
    regs_per_block: 65536
    reg_alloc_unit: 256
    sm_sub_partitions: 4
    smem_alloc_unit: 128
    smem_reserved_per_block: 1024
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

std::string load_error(const std::string& yaml) {
  return user_error_of([&] { gpu_catalog_from_yaml(yaml, "test.yaml"); });
}

TEST(GpuCatalog, GoodEntryLoads) {
  const GpuCatalog c = gpu_catalog_from_yaml(std::string("gpus:") + kGoodEntry, "t");
  ASSERT_EQ(c.all().size(), 1u);
  const GpuSpec& g = c.all()[0];
  EXPECT_EQ(g.name, "x1");
  EXPECT_EQ(g.sm_count, 10);
  EXPECT_EQ(g.cc_minor, 0);
  EXPECT_DOUBLE_EQ(g.launch_overhead_us, 3.0);  // optional, defaulted
  EXPECT_DOUBLE_EQ(g.issue_per_clk, 4.0);
  EXPECT_DOUBLE_EQ(g.lsu_per_clk, 1.0);
  EXPECT_DOUBLE_EQ(g.fp32_peak_flops(), 2.0 * 64 * 10 * 1e9);
  const GpuCatalog with_overhead = gpu_catalog_from_yaml(
      std::string("gpus:") + kGoodEntry + "    launch_overhead_us: 5.5\n", "t");
  EXPECT_DOUBLE_EQ(with_overhead.all()[0].launch_overhead_us, 5.5);
  const GpuCatalog with_rates = gpu_catalog_from_yaml(
      std::string("gpus:") + kGoodEntry + "    issue_per_clk: 0.5\n    lsu_per_clk: 0.25\n", "t");
  EXPECT_DOUBLE_EQ(with_rates.all()[0].issue_per_clk, 0.5);
  EXPECT_DOUBLE_EQ(with_rates.all()[0].lsu_per_clk, 0.25);
  EXPECT_NE(load_error(std::string("gpus:") + kGoodEntry + "    issue_per_clk: 0\n").find("issue_per_clk"),
            std::string::npos);
  EXPECT_EQ(g.simd_lanes, 0);
  EXPECT_DOUBLE_EQ(g.fma_latency_cycles, 4.0);
  const GpuCatalog with_simd = gpu_catalog_from_yaml(
      std::string("gpus:") + kGoodEntry + "    simd_lanes: 16\n    fma_latency_cycles: 5\n", "t");
  EXPECT_EQ(with_simd.all()[0].simd_lanes, 16);
  EXPECT_DOUBLE_EQ(with_simd.all()[0].fma_latency_cycles, 5.0);
  EXPECT_NE(load_error(std::string("gpus:") + kGoodEntry + "    simd_lanes: 0\n").find("simd_lanes"),
            std::string::npos);
  EXPECT_EQ(g.l1_bytes, 0);  // unknown unless an entry says
  const GpuCatalog with_l1 = gpu_catalog_from_yaml(std::string("gpus:") + kGoodEntry + "    l1_bytes: 49152\n", "t");
  EXPECT_EQ(with_l1.all()[0].l1_bytes, 49152);
  EXPECT_NE(load_error(std::string("gpus:") + kGoodEntry + "    l1_bytes: 100\n").find("l1_bytes"), std::string::npos);
}

TEST(GpuCatalog, MalformedTablesAreUserErrors) {
  const std::string good = std::string("gpus:") + kGoodEntry;
  const auto expect_error = [&](const std::string& yaml, const std::string& fragment) {
    const std::string err = load_error(yaml);
    EXPECT_NE(err.find(fragment), std::string::npos) << "error: " << err;
    EXPECT_NE(err.find("test.yaml"), std::string::npos) << "error: " << err;
  };
  expect_error(replace(good, "    sm_count: 10\n", ""), "GPU 'x1': field 'sm_count': missing");
  expect_error(replace(good, "sm_count: 10", "sm_count: -5"),
               "GPU 'x1': field 'sm_count': must be in [1, 1024], got -5");
  expect_error(replace(good, "sm_count: 10", "sm_count: 0"), "field 'sm_count'");
  expect_error(replace(good, "sm_count: 10", "sm_count: 10.5"), "must be a whole number");
  expect_error(replace(good, "boost_clock_mhz: 1000", "boost_clock_mhz: fast"),
               "field 'boost_clock_mhz': must be a number");
  expect_error(replace(good, "sm_count: 10", "sm_count: 10\n    sm_cout: 10"),
               "unknown field 'sm_cout'");
  expect_error(replace(good, "sm_count: 10", "sm_count: 10\n    sm_count: 12"), "given twice");
  expect_error(good + replace(kGoodEntry, "\"X1\"", "\"X2\""), "GPU 'x1' is defined twice");
  expect_error(good + replace(kGoodEntry, "name: x1", "name: x2"),
               "device pattern 'X1' is also a pattern of 'x1'");
  expect_error(replace(good, "name: x1", "name: X 1"), "lower-case");
  expect_error(replace(good, "arch: ampere", "arch: amper"), "unknown architecture 'amper'");
  expect_error(replace(good, "\"8.0\"", "\"6.1\""), "7.0 (Volta) or newer");
  expect_error(replace(good, "\"8.0\"", "eight"), "MAJOR.MINOR");
  expect_error(replace(good, "smem_per_block_bytes: 166912", "smem_per_block_bytes: 200000"),
               "field 'smem_per_block_bytes'");
  expect_error(replace(good, "warp_size: 32", "warp_size: 64"), "field 'warp_size'");
  expect_error(replace(good, "smem_reserved_per_block: 1024", "smem_reserved_per_block: 2048"),
               "must not exceed smem_per_sm_bytes");
  expect_error(replace(good, "    reg_alloc_unit: 256\n", ""), "field 'reg_alloc_unit': missing");
  expect_error(replace(good, "max_threads_per_sm: 2048", "max_threads_per_sm: 2000"),
               "multiple of warp_size");
  expect_error(replace(good, "tc_tf32_flops_per_sm_clk: 1024", "tc_tf32_flops_per_sm_clk: 0"),
               "field 'tc_tf32_flops_per_sm_clk'");
  expect_error(replace(good, "[\"X1\"]", "[]"), "non-empty list");
  expect_error(replace(good, "[\"X1\"]", "[\"X$1\"]"), "'$' may only end a pattern");
  expect_error(replace(good, "gpus:", "gpu:"), "unknown top-level key 'gpu'");
  expect_error("gpus: []\n", "non-empty list");
  expect_error(replace(good, "sm_count: 10", "sm_count: [10"), "YAML syntax error");
}

TEST(GpuCatalog, ErrorsNameTheLine) {
  // sm_count is on line 7 of "gpus:" + the entry (which starts with a newline).
  const std::string err =
      load_error(replace(std::string("gpus:") + kGoodEntry, "sm_count: 10", "sm_count: -1"));
  EXPECT_EQ(err.rfind("test.yaml:7: GPU 'x1'", 0), 0u) << err;
}

// The built-in table is C++ generated from gpus.yaml at build time (gen_gpu_table): every
// field of every GPU must equal what the YAML reader makes of the file, in the same order.
TEST(GpuCatalog, BuiltinTableEqualsGpusYaml) {
  const GpuCatalog from_file =
      gpu_catalog_from_file(std::string(DC_SOURCE_DIR) + "/common/gpu/gpus.yaml");
  ASSERT_EQ(from_file.all().size(), table().all().size());
  for (size_t i = 0; i < table().all().size(); ++i) {
    const GpuSpec& yaml = from_file.all()[i];
    const GpuSpec& built = table().all()[i];
    EXPECT_TRUE(yaml == built) << "GPU #" << i + 1 << " '" << yaml.name << "' differs from the "
                               << "generated '" << built.name << "': rebuild, or fix gen_gpu_table";
    // Spot checks that a wrong operator== could not hide.
    EXPECT_EQ(yaml.name, built.name);
    EXPECT_EQ(yaml.device_patterns, built.device_patterns);
    EXPECT_EQ(yaml.boost_clock_mhz, built.boost_clock_mhz);
    EXPECT_EQ(yaml.tc_tf32_flops_per_sm_clk, built.tc_tf32_flops_per_sm_clk);
    EXPECT_EQ(yaml.smem_reserved_per_block, built.smem_reserved_per_block);
  }
  EXPECT_EQ(from_file.require("h200").sm_count, 132);
  // operator== sees a one-field change (so the loop above can fail).
  GpuSpec changed = table().require("h100");
  changed.launch_overhead_us += 0.5;
  EXPECT_FALSE(changed == table().require("h100"));
  EXPECT_NE(user_error_of([] { gpu_catalog_from_file("/nonexistent/gpus.yaml"); })
                .find("cannot read GPU table '/nonexistent/gpus.yaml'"),
            std::string::npos);
}

// docs/gpus.md carries the table generated from gpus.yaml; keep it in step.
TEST(GpuCatalog, DocsTableIsCurrent) {
  std::ifstream in(std::string(DC_SOURCE_DIR) + "/docs/gpus.md");
  ASSERT_TRUE(in) << "docs/gpus.md missing";
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string expected = gpu_table_markdown(table());
  EXPECT_NE(doc.str().find(expected), std::string::npos)
      << "docs/gpus.md is out of date; replace its table with:\n"
      << expected;
  EXPECT_NE(expected.find("| a100 | NVIDIA A100-SXM4-40GB | ampere | 8.0 | 108 | 1410 | 19.5 | "
                          "311.9 | 1555 | 40 |"),
            std::string::npos)
      << expected;
}

}  // namespace
}  // namespace dc
