// The estimator against hand-computed floors and its own stated formulas, its
// monotonicity properties, calibration, and pruning.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "estimator.h"
#include "estimator_testing.h"
#include "param_space.h"
#include "prune.h"
#include "testing.h"

namespace dc {
namespace {

using namespace dc::testing;

ScoredVariant best_of(const Workload& w, const GpuSpec& g, const SpaceOptions& o = {}) {
  auto scored = score_variants(w, g, {}, o);
  EXPECT_FALSE(scored.empty());
  return prune(std::move(scored), {1.0, 1}).at(0);
}

TEST(Estimator, PeakAndFloor) {
  const GpuSpec a100 = spec_a100();
  // 2 x 64 lanes x 108 SMs x 1.41 GHz = 19.49184 TFLOPS; tf32 1024 x 108 x 1.41e9.
  EXPECT_DOUBLE_EQ(peak_flops(a100, "fp32"), 19.49184e12);
  EXPECT_DOUBLE_EQ(peak_flops(a100, "tf32"), 155.93472e12);
  // 4096^3: 2 x 4096^3 = 137438953472 FLOPs / 19.49184e12 = 7.05110 ms; bytes
  // 3 x 4096^2 x 4 = 201326592 / 1.555e12 = 0.129 ms: compute floor.
  const Workload gemm = matmul_2d(4096, 4096, 4096);
  EXPECT_NEAR(floor_seconds(gemm, a100), 137438953472.0 / 19.49184e12, 1e-12);
  EXPECT_NEAR(floor_seconds(gemm, a100, "tf32"), 137438953472.0 / 155.93472e12, 1e-12);
  // 64M-element add: 805306368 bytes / 1.555e12 = 0.5179 ms (compute 67M / 19.5e12 = 3.4 us).
  EXPECT_NEAR(floor_seconds(add_1d(64 << 20), a100), 805306368.0 / 1.555e12, 1e-12);
}

TEST(Estimator, LargeElementwiseNearBandwidth) {
  for (const GpuSpec& g : {spec_a100(), spec_h100()}) {
    const Workload w = add_1d(64 << 20);
    const double floor = 805306368.0 / (g.dram_bandwidth_gbs * 1e9);
    const auto best = best_of(w, g);
    SCOPED_TRACE(g.name + " " + best.variant.key());
    EXPECT_EQ(best.estimate.bound, "dram");
    // Best sustained bandwidth is 90% of the datasheet: floor / 0.9 + 3 us launch
    // (A100: 0.5754 + 0.003 ms = 1.117 x floor; H100: 1.124 x floor).
    EXPECT_GE(best.estimate.seconds, floor);
    EXPECT_LE(best.estimate.seconds, 1.15 * floor);
    EXPECT_NEAR(best.estimate.dram_s, floor / 0.9, 1e-9);
    EXPECT_DOUBLE_EQ(best.estimate.dram_bytes, 805306368.0);
  }
}

TEST(Estimator, LargeGemmComputeBound) {
  const GpuSpec g = spec_a100();
  const Workload w = matmul_2d(4096, 4096, 4096);
  const double floor = 137438953472.0 / 19.49184e12;  // 7.0511 ms
  const auto best = best_of(w, g, SpaceOptions{{"fp32"}});
  SCOPED_TRACE(best.variant.key());
  EXPECT_EQ(best.estimate.bound, "compute");
  EXPECT_GE(best.estimate.seconds, floor);
  // A 128x128 tile keeps A100's FMA pipes busy (2 warp FMAs per clock vs 4 issue slots);
  // what remains is wave quantization: 1024 tiles over 108 SMs x 2 -> the busiest SM runs
  // 10 tiles where the average is 9.48 (5.5%). So within 1.1 x floor.
  EXPECT_LE(best.estimate.seconds, 1.10 * floor);

  // On tensor cores (tf32, floor 0.881 ms) the model turns DRAM-bound: A and B (64 MB
  // each) exceed half of L2, so each is re-read once per tile of the other dimension.
  // The widest tiles, 128x128 (8 warps of 32x64; 64x64 warp tiles spill and are not
  // enumerated, docs/bench/registers.md), read A and B 4096/128 = 32 times each:
  // 64 MB x (32 + 32) + 64 MB out = 4.36 GB over 1.4 TB/s = 3.1 ms.
  // The known pessimism of the simple L2 model (docs/estimator.md); it still ranks tf32
  // well ahead of fp32.
  const auto tc = best_of(w, g, SpaceOptions{{"tf32"}});
  const double tc_floor = 137438953472.0 / 155.93472e12;
  SCOPED_TRACE(tc.variant.key());
  EXPECT_EQ(tc.estimate.bound, "dram");
  EXPECT_GE(tc.estimate.seconds, tc_floor);
  EXPECT_NEAR(tc.estimate.dram_bytes, 67108864.0 * 65, 1.0);
  EXPECT_LT(tc.estimate.seconds, 0.5 * best.estimate.seconds);
}

TEST(Estimator, TinyOpIsLaunchBound) {
  for (const GpuSpec& g : {spec_t4(), spec_a100(), spec_h100()}) {
    const auto best = best_of(add_1d(256), g);
    EXPECT_EQ(best.estimate.bound, "launch") << g.name;
    // 3 us launch + at most one DRAM round trip (0.5 us) / 0.9.
    EXPECT_GE(best.estimate.seconds, 3e-6);
    EXPECT_LE(best.estimate.seconds, 3e-6 + 0.5e-6 / 0.9 + 1e-12);
  }
}

// The model's GEMM formulas for one variant, by hand. 128x128x8 tiles, 8x8 per thread
// (256 threads), 2 stages: 64 + 8 + 8 + 24 + 8 staged = 112 registers -> 65536 / (112 x
// 32) = 18 warps -> 2 blocks of 8 warps per SM.
//   per K tile: 128*128*8/32 = 4096 warp FMAs / 2 per clock (64 lanes) = 2048 cycles;
//   LD/ST pipe: 8 warps*8*(2+2) LDS.128 + 8*2*2 LDG/STS (float4) = 288 cycles;
//   issue: (4096 + 256 + 32 + 8 warps*(8 steps + 6)) / 4 = 1124 cycles: all < 2048.
//   512 K tiles + epilogue 128*128/32*2/4 = 256 -> 1048832 cycles per block.
// 216 tiles = 108 SMs x 2: one round of two blocks: 2 x 1048832 cycles.
// 217 tiles: the busiest SM runs 3: a round of 2, then one alone (its 8 warps hide the
// latency, 4 are needed): 1048832, or its serial path 300 + 512 x 2048 + 256 = 1049132.
TEST(Estimator, WaveQuantizationVisible) {
  const GpuSpec g = spec_a100();
  const std::map<std::string, int64_t> want = {{"block_m", 128}, {"block_n", 128}, {"block_k", 8},
                                               {"thread_m", 8},  {"thread_n", 8},  {"warp_m", 32},
                                               {"stages", 2},    {"vec", 4},       {"split_k", 1}};
  const Workload w216 = matmul_2d(128 * 216, 4096, 128);
  const Workload w217 = matmul_2d(128 * 217, 4096, 128);
  const Variant v216 = find_variant(w216, g, "fp32", want);
  const Variant v217 = find_variant(w217, g, "fp32", want);
  ASSERT_EQ(v216.grid_blocks, 216);
  ASSERT_EQ(v217.grid_blocks, 217);
  const Estimate e216 = estimate(w216, v216, g), e217 = estimate(w217, v217, g);
  EXPECT_EQ(e216.blocks_per_sm, 2);
  EXPECT_DOUBLE_EQ(e216.occupancy, 16.0 / 64);
  EXPECT_EQ(e216.waves, 1);
  EXPECT_DOUBLE_EQ(e216.wave_efficiency, 1.0);
  EXPECT_EQ(e217.waves, 2);
  EXPECT_DOUBLE_EQ(e217.wave_efficiency, 217.0 / 432);
  EXPECT_NEAR(e216.compute_s, 2 * 1048832.0 / 1.41e9, 1e-12);
  EXPECT_NEAR(e217.compute_s, (2 * 1048832.0 + 1049132.0) / 1.41e9, 1e-12);
  EXPECT_EQ(e216.bound, "compute");
  // 1/216 more work, 1.5x the time.
  EXPECT_GT(e217.seconds / e216.seconds, 1.45);
  EXPECT_LT(e217.seconds / e216.seconds, 1.55);
}

std::vector<Workload> mixed_workloads() {
  return {matmul_2d(1024, 768, 3072),
          matmul_2d(1, 2048, 1000),
          matmul_2d(100, 300, 70),
          conv2d(1, 64, 56, 56, 64, 3, 1, 1),
          conv2d(8, 512, 7, 7, 512, 3, 1, 1),
          conv2d(1, 32, 112, 112, 32, 3, 2, 1, 32, ClusterKind::depthwise),
          attention(2, 12, 128, 64),
          softmax_2d(12 * 128, 128),
          layernorm_2d(1024, 768),
          softmax_2d(16, 1 << 22),
          global_avg_pool(1, 2048, 7, 7),
          add_1d(1 << 20),
          add_1d(1001)};
}

TEST(Estimator, NeverBelowFloor) {
  for (const GpuSpec& g : {spec_t4(), spec_a100(), spec_h100()}) {
    for (const Workload& w : mixed_workloads()) {
      const auto s = analyze_workload(w);
      for (const auto& v : enumerate_variants(s, g)) {
        const Estimate e = estimate(s, v, g);
        ASSERT_TRUE(std::isfinite(e.seconds)) << v.key();
        ASSERT_GE(e.seconds, floor_seconds(w, g, v.precision)) << g.name << " " << v.key();
        ASSERT_GE(e.dram_bytes, static_cast<double>(w.bytes));
        ASSERT_GE(e.compute_s * peak_flops(g, v.precision),
                  static_cast<double>(w.flops) * 0.999999);
      }
    }
  }
}

TEST(Estimator, MoreSmsNeverSlower) {
  for (const GpuSpec& g : {spec_t4(), spec_a100(), spec_h100()}) {
    GpuSpec twice = g;
    twice.sm_count *= 2;
    for (const Workload& w : mixed_workloads()) {
      const auto s = analyze_workload(w);
      for (const auto& v : enumerate_variants(s, g)) {
        const double t1 = estimate(s, v, g).seconds, t2 = estimate(s, v, twice).seconds;
        ASSERT_LE(t2, t1 * (1 + 1e-12)) << g.name << " " << v.key();
      }
    }
  }
}

TEST(Estimator, CalibrationScalesTime) {
  const GpuSpec g = spec_a100();
  const Workload w = matmul_2d(1024, 768, 3072);
  const Variant v = enumerate_variants(w, g).at(0);
  Calibration cal;
  EXPECT_EQ(cal.factor("a100", ClusterKind::gemm), 1.0);
  cal.set("a100", ClusterKind::gemm, 2.0);
  cal.set("a100", ClusterKind::conv, 3.0);
  EXPECT_EQ(cal.factor("a100", ClusterKind::gemm), 2.0);
  EXPECT_EQ(cal.factor("h100", ClusterKind::gemm), 1.0);
  const double base = estimate(w, v, g).seconds;
  EXPECT_DOUBLE_EQ(estimate(w, v, g, cal).seconds, 2 * base);
  // Another GPU's entry does not apply.
  GpuSpec h = spec_h100();
  const Variant vh = enumerate_variants(w, h).at(0);
  EXPECT_DOUBLE_EQ(estimate(w, vh, h, cal).seconds, estimate(w, vh, h).seconds);
  EXPECT_THROW(cal.set("a100", ClusterKind::gemm, 0.0), UserError);
  EXPECT_THROW(cal.set("a100", ClusterKind::gemm, -1.0), UserError);
  EXPECT_THROW(cal.set("a100", ClusterKind::gemm, std::numeric_limits<double>::infinity()),
               UserError);
}

TEST(Estimator, GemmDramAfterTileReuseAndL2) {
  const GpuSpec g = spec_a100();  // half of L2: 20971520 bytes
  const std::map<std::string, int64_t> want = {{"block_m", 128}, {"block_n", 128}, {"block_k", 8},
                                               {"thread_m", 8},  {"thread_n", 8},  {"warp_m", 32},
                                               {"stages", 2},    {"vec", 4}};
  // A = 8192x1024 floats = 33554432 B > L2/2: re-read once per 128-wide column of tiles,
  // 1024/128 = 8 times; B = 4 MB fits: read once.
  // bytes = 4 (8192*1024 + 1024*1024 + 8192*1024) = 71303168; + 7 x 33554432.
  Workload w = matmul_2d(8192, 1024, 1024);
  EXPECT_DOUBLE_EQ(estimate(w, find_variant(w, g, "fp32", want), g).dram_bytes,
                   71303168.0 + 7 * 33554432.0);
  // A = 4096x1024 floats = 16 MB fits: compulsory bytes only.
  w = matmul_2d(4096, 1024, 1024);
  EXPECT_DOUBLE_EQ(estimate(w, find_variant(w, g, "fp32", want), g).dram_bytes,
                   static_cast<double>(w.bytes));
  // Split-K 4 on the classifier: partial sums written and read back, 2 x 4 x 1000 x 4 B.
  w = matmul_2d(1, 2048, 1000);
  const Variant split = find_variant(w, g, "fp32", {{"split_k", 4}});
  EXPECT_DOUBLE_EQ(estimate(w, split, g).dram_bytes, static_cast<double>(w.bytes) + 32000.0);
}

// Small thread tiles (2x2) make the fp32 K tile load/store-bound, so the memory
// instructions per operand layout show in the compute time. A contiguous along k (MatMul)
// costs one cp.async per element, or one STS per element after the float4 LDG, where A
// contiguous along m (Gemm transA) takes one per vector of 4: 16 + 4 warp instructions per
// 16x16x32 tile against 4 + 4 (cp.async), 4 + 16 + 4 + 4 against 4 + 4 + 4 + 4 (registers).
TEST(Estimator, GemmMemoryInstructionsFollowOperandLayout) {
  const GpuSpec g = spec_a100();
  const Workload along_k = matmul_2d(512, 512, 512);
  Attributes trans;
  trans.set("transA", int64_t{1});
  const Workload along_m = make_test_workload(
      ClusterKind::gemm, {test_node("Gemm", {"a", "b"}, {"c"}, trans)},
      {{"a", {512, 512}}, {"b", {512, 512}}, {"c", {512, 512}}}, along_k.flops, along_k.bytes);
  for (int64_t stages : {2, 3}) {
    SCOPED_TRACE(stages);
    const std::map<std::string, int64_t> want = {
        {"block_m", 16}, {"block_n", 16}, {"block_k", 32}, {"thread_m", 2},
        {"thread_n", 2}, {"vec", 4},      {"stages", stages}, {"split_k", 1}};
    const Variant v = find_variant(along_k, g, "fp32", want);
    ASSERT_EQ(v.key(), find_variant(along_m, g, "fp32", want).key());
    const Estimate k_major = estimate(along_k, v, g), m_major = estimate(along_m, v, g);
    EXPECT_GT(k_major.compute_s, 1.05 * m_major.compute_s);
  }
}

// On a CPU device the FLOP peak is not what separates variants: a core runs a work-group's
// work-items one after another, so the variants' instruction counts rank them (measured on
// PoCL: docs/bench/estimator-accuracy.md). The GPU model at a GPU SM's rates (no SIMD width:
// warps of 32 lanes, 4 issued a clock) ties nearly every variant below at the FLOP floor.
TEST(Estimator, CpuDeviceRanksGemmVariantsByTheirInstructions) {
  const GpuSpec cpu = spec_cpu();
  GpuSpec gpu_rates = cpu;
  gpu_rates.simd_lanes = 0;
  gpu_rates.issue_per_clk = 4;
  gpu_rates.lsu_per_clk = 1;
  const Workload w = matmul_2d(128, 768, 768);
  std::set<double> on_cpu, at_gpu_rates;
  size_t n = 0;
  for (const Variant& v : enumerate_variants(w, cpu)) {
    if (v.precision != "fp32") continue;
    const Estimate c = estimate(w, v, cpu), g = estimate(w, v, gpu_rates);
    if (!std::isfinite(c.seconds)) continue;
    ++n;
    on_cpu.insert(c.seconds);
    at_gpu_rates.insert(g.seconds);
    // Never faster than the device's FLOP peak.
    EXPECT_GE(c.seconds, w.flops / cpu.fp32_peak_flops()) << v.key();
  }
  ASSERT_GT(n, 20u);
  // At a GPU's rates the CPU's FLOP floor pins most variants to a few figures; on the CPU
  // model each variant's instruction count shows.
  EXPECT_GT(on_cpu.size(), 2 * at_gpu_rates.size());
}

// A CPU device is timed hot: work that fits its last-level cache has no DRAM term (the same
// rule as the plausibility floor); larger work keeps it.
TEST(Estimator, CpuDeviceHasNoDramTermForWorkItsCacheHolds) {
  const GpuSpec cpu = spec_cpu();
  const Workload small = add_1d(1 << 20);  // 12 MiB
  const Workload large = add_1d(4 << 20);  // 48 MiB
  ASSERT_LE(static_cast<double>(small.bytes), static_cast<double>(cpu.l2_bytes));
  const Variant vs = enumerate_variants(small, cpu).at(0);
  const Variant vl = enumerate_variants(large, cpu).at(0);
  EXPECT_EQ(estimate(small, vs, cpu).dram_s, 0.0);
  EXPECT_GE(estimate(large, vl, cpu).dram_s, 50331648.0 / (12e9 * 0.9));
  // A GPU's L2 does not count: the same bytes on an A100 stay DRAM-bound.
  EXPECT_GT(estimate(small, enumerate_variants(small, spec_a100()).at(0), spec_a100()).dram_s, 0.0);
}

TEST(Estimator, ReductionRereadsLongRowsOnly) {
  const GpuSpec g = spec_a100();
  // 16 rows of 4M floats: input 256 MB > L2/2 and a row of 16 MB > 64 KB: the second
  // softmax pass reads the input again (no variant can cache such a row on chip).
  Workload w = softmax_2d(16, 1 << 22);
  for (const auto& v : enumerate_variants(w, g)) {
    EXPECT_EQ(v.param("cache"), 0);
    EXPECT_DOUBLE_EQ(estimate(w, v, g).dram_bytes, static_cast<double>(w.bytes) + 268435456.0);
  }
  // Rows of 1024 floats (4 KB): re-read from L2 even though the input (256 MB) is not.
  w = softmax_2d(64 * 1024, 1024);
  for (const auto& v : enumerate_variants(w, g))
    EXPECT_DOUBLE_EQ(estimate(w, v, g).dram_bytes, static_cast<double>(w.bytes));
}

// dc.SoftmaxCrossEntropy over [rows, classes] as its naive kernel runs: the log-probabilities
// one thread per element over its row (max, then sum); the loss one thread over every row.
Workload naive_cross_entropy(int64_t rows, int64_t classes) {
  const Workload w = make_test_workload(
      ClusterKind::opaque, {test_node("dc.SoftmaxCrossEntropy", {"x", "labels"}, {"loss", "logp"})},
      {{"x", {rows, classes}}, {"labels", {rows}}, {"loss", {}}, {"logp", {rows, classes}}},
      4 * rows * classes, 4 * (2 * rows * classes) + 8 * rows);
  return w;
}

TEST(Estimator, NaivePerChannelLoopsArePricedAsTheirFewThreads) {
  const GpuSpec g = spec_h100();
  // ResNet-50's loss at batch 32: one thread reads every row twice (64,000 loads).
  const Workload w = naive_cross_entropy(32, 1000);
  const WorkloadShape s = analyze_workload(w);
  EXPECT_EQ(s.serial_threads, 1);
  EXPECT_EQ(s.serial_loop, 2 * 32 * 1000);
  EXPECT_EQ(s.window, 2 * 1000);  // a log-probability: its row's max and sum
  // One looping thread issues its 64,000 steps one after another: far slower than the
  // output-parallel part of the same kernel (32,000 threads over their rows).
  const Variant v = enumerate_variants(s, g, SpaceOptions{{"fp32"}}).at(0);
  WorkloadShape without = s;
  without.serial_threads = 0;
  const Estimate e = estimate(s, v, g, Calibration{});
  EXPECT_GT(e.seconds, 10 * estimate(without, v, g, Calibration{}).seconds);
  EXPECT_GT(e.seconds, 100e-6);
}

TEST(Estimator, UnfitVariantIsInfinite) {
  const GpuSpec t4 = spec_t4();
  const Workload w = matmul_2d(1024, 1024, 1024);
  Variant v = enumerate_variants(w, spec_a100(), SpaceOptions{{"tf32"}}).at(0);
  const Estimate e = estimate(w, v, t4);
  EXPECT_EQ(e.bound, "unfit");
  EXPECT_TRUE(std::isinf(e.seconds));
  v = enumerate_variants(w, t4).at(0);
  v.smem_bytes = 70 * 1024;  // more than T4's SM has
  EXPECT_EQ(estimate(w, v, t4).bound, "unfit");
}

TEST(Estimator, SlowerGpuIsSlower) {
  // A100 has 2.4x T4's FP32 peak and 4.9x its bandwidth, so for every workload that
  // moves some megabytes its best estimate is lower. (Small ones are bound by the latency
  // of a few blocks, counted in cycles: T4's higher clock may win those.)
  for (const Workload& w : mixed_workloads()) {
    if (w.bytes < 4000000) continue;
    EXPECT_LT(best_of(w, spec_a100(), SpaceOptions{{"fp32"}}).estimate.seconds,
              best_of(w, spec_t4(), SpaceOptions{{"fp32"}}).estimate.seconds)
        << cluster_kind_name(w.kind);
  }
}

// --- Pruning ---------------------------------------------------------------------------

ScoredVariant scored(const std::string& name, double seconds) {
  ScoredVariant s;
  s.variant.template_name = name;
  s.estimate.seconds = seconds;
  return s;
}

std::vector<std::string> names(const std::vector<ScoredVariant>& v) {
  std::vector<std::string> out;
  for (const auto& s : v) out.push_back(s.variant.template_name);
  return out;
}

TEST(Prune, KeepsWithinFactorSortedWithTiesByKey) {
  std::vector<ScoredVariant> in = {
      scored("e", 2.0), scored("b", 1.0),  scored("d", 1.5),
      scored("a", 1.5), scored("c", 1.51), scored("x", std::numeric_limits<double>::infinity())};
  // Best 1.0, factor 1.5: keep <= 1.5 (a and d tie: ordered by key), drop 1.51 and 2.0.
  EXPECT_EQ(names(prune(in, {1.5, 32})), (std::vector<std::string>{"b", "a", "d"}));
  EXPECT_EQ(names(prune(in, {1.5, 2})), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(names(prune(in, {1.0, 32})), (std::vector<std::string>{"b"}));
  EXPECT_EQ(names(prune(in, {10.0, 32})), (std::vector<std::string>{"b", "a", "d", "c", "e"}));
  EXPECT_TRUE(prune({}, {}).empty());
  EXPECT_THROW(prune(in, {0.9, 32}), UserError);
  EXPECT_THROW(prune(in, {1.5, 0}), UserError);
}

// The best variant of each math path within the factor survives the top-K cut, in place of
// the last variant of the path that has several; one outside the factor does not.
TEST(Prune, EachPathsBestWithinTheFactorSurvivesTopK) {
  std::vector<ScoredVariant> in;
  for (int i = 0; i < 5; ++i) {
    in.push_back(scored("c" + std::to_string(i), 1.0 + 0.01 * i));
    in.back().variant.precision = "fp32";
  }
  in.push_back(scored("t", 1.1));
  in.back().variant.precision = "fp16";
  in.push_back(scored("u", 2.0));
  in.back().variant.precision = "tf32";
  EXPECT_EQ(names(prune(in, {1.5, 3})), (std::vector<std::string>{"c0", "c1", "t"}));
  EXPECT_EQ(names(prune(in, {1.5, 32})), (std::vector<std::string>{"c0", "c1", "c2", "c3", "c4", "t"}));
  EXPECT_EQ(names(prune(in, {1.05, 3})), (std::vector<std::string>{"c0", "c1", "c2"}));
  EXPECT_EQ(names(prune(in, {1.5, 1})), (std::vector<std::string>{"c0"}));  // nothing to replace
  EXPECT_EQ(names(prune(in, {3.0, 3})), (std::vector<std::string>{"c0", "t", "u"}));
}

TEST(Prune, EqualTimesPreferMoreSlack) {
  // Same time (both DRAM-bound, say), but "z" leaves more of the other resources idle.
  ScoredVariant y = scored("y", 1.0), z = scored("z", 1.0);
  y.estimate.dram_s = 0.9;
  y.estimate.compute_s = 0.5;
  z.estimate.dram_s = 0.9;
  z.estimate.compute_s = 0.1;
  EXPECT_EQ(names(prune({y, z}, {})), (std::vector<std::string>{"z", "y"}));
  // A 64M-element add: every wide enough variant is DRAM-bound at the same time; the
  // first kept does the fewest instructions: 4-wide vectors (by key alone it would be
  // the scalar elems_per_thread=1,threads=128,vec=1).
  const auto kept = prune(score_variants(add_1d(64 << 20), spec_a100()), {});
  EXPECT_EQ(kept.at(0).variant.param("vec"), 4);
  EXPECT_EQ(kept.at(0).estimate.seconds, kept.at(1).estimate.seconds);
  EXPECT_LE(kept.at(0).estimate.compute_s, kept.at(1).estimate.compute_s);
}

TEST(Prune, IndependentOfInputOrder) {
  const GpuSpec g = spec_a100();
  auto all = score_variants(conv2d(1, 256, 14, 14, 256, 3, 1, 1), g);
  ASSERT_GT(all.size(), 100u);
  const auto kept = prune(all, {});
  ASSERT_FALSE(kept.empty());
  EXPECT_LE(kept.size(), 32u);
  double best = std::numeric_limits<double>::infinity();
  for (const auto& s : all) best = std::min(best, s.estimate.seconds);
  EXPECT_EQ(kept.front().estimate.seconds, best);
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_LE(kept[i].estimate.seconds, 1.5 * best);
    if (i > 0) {
      EXPECT_LE(kept[i - 1].estimate.seconds, kept[i].estimate.seconds);
    }
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 3; ++round) {
    std::shuffle(all.begin(), all.end(), rng);
    const auto again = prune(all, {});
    ASSERT_EQ(again.size(), kept.size());
    for (size_t i = 0; i < kept.size(); ++i)
      EXPECT_EQ(again[i].variant.key(), kept[i].variant.key());
  }
}

}  // namespace
}  // namespace dc
