// The per-parameter calibration (estimator/calibration_fit.h: fit_param_factors): on synthetic
// samples with a known cost per parameter value and a level of its own per workload, on the
// estimates it scales (Calibration::variant_factor), on both DB implementations' samples, in
// `dc-db calibration`, and in a real tune's calibrate stage (real results only).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <thread>
#include <chrono>

#include "calibration_fit.h"
#include "estimator.h"
#include "estimator_testing.h"
#include "gpu/gpu_catalog.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

std::string conv_key(int64_t block_k, int64_t block_m, const std::string& path = "fp32") {
  return "conv_implicit_gemm/" + path + "/block_k=" + std::to_string(block_k) +
         ",block_m=" + std::to_string(block_m);
}

// Six conv workloads, each with its own level (the model off by 0.3x to 3x), each measuring
// every (block_k, block_m) pair; block_k 32 costs `bk32` and block_k 8 `bk8` times block_k 16,
// block_m costs nothing; log-normal noise of sd `noise`.
std::vector<EstimatorSample> synthetic(double bk32, double bk8, double noise, unsigned seed = 7) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> eps(0.0, noise);
  const double levels[] = {0.3, 0.8, 1.0, 1.7, 2.2, 3.0};
  std::vector<EstimatorSample> out;
  for (int w = 0; w < 6; ++w)
    for (int64_t bk : {8, 16, 32})
      for (int64_t bm : {32, 64, 128}) {
        const double cost = bk == 32 ? bk32 : bk == 8 ? bk8 : 1.0;
        out.push_back({"w" + std::to_string(w), ClusterKind::conv, conv_key(bk, bm),
                       levels[w] * cost * std::exp(eps(rng))});
      }
  return out;
}

std::map<std::pair<std::string, int64_t>, FittedParamFactor> by_value(const std::vector<FittedParamFactor>& fit) {
  std::map<std::pair<std::string, int64_t>, FittedParamFactor> out;
  for (const FittedParamFactor& f : fit) EXPECT_TRUE(out.emplace(std::make_pair(f.param, f.value), f).second);
  return out;
}

ParamFitOptions unshrunk() {
  ParamFitOptions o;
  o.shrinkage = 0;
  return o;
}

TEST(CalibrationParamFit, RecoversEachValuesCostWithinWorkloadsWhateverTheirLevels) {
  const auto fit = by_value(fit_param_factors("pocl-cpu", synthetic(1.3, 1.1, 0.0), unshrunk()));
  ASSERT_EQ(fit.size(), 6u);  // 3 block_k and 3 block_m values
  const double bk16 = fit.at({"block_k", 16}).factor;
  EXPECT_NEAR(fit.at({"block_k", 32}).factor / bk16, 1.3, 1e-9);
  EXPECT_NEAR(fit.at({"block_k", 8}).factor / bk16, 1.1, 1e-9);
  for (int64_t bm : {32, 64, 128}) EXPECT_NEAR(fit.at({"block_m", bm}).factor, 1.0, 1e-9) << bm;
  // Centred: the values' log factors average to 0 over the results (levels carry the rest).
  EXPECT_NEAR(std::log(fit.at({"block_k", 8}).factor) + std::log(bk16) + std::log(fit.at({"block_k", 32}).factor),
              0.0, 1e-9);
  const FittedParamFactor& f = fit.at({"block_k", 32});
  EXPECT_EQ(f.group, Calibration::ParamGroup("pocl-cpu", ClusterKind::conv, MathUnit::fp32, "conv_implicit_gemm"));
  EXPECT_EQ(f.samples, 18);  // 3 block_m x 6 workloads
}

TEST(CalibrationParamFit, NoiseAndShrinkageKeepTheOrderAndPullTowardsOne) {
  const auto noisy = by_value(fit_param_factors("pocl-cpu", synthetic(1.3, 1.1, 0.05), unshrunk()));
  EXPECT_NEAR(noisy.at({"block_k", 32}).factor / noisy.at({"block_k", 16}).factor, 1.3, 0.05);
  for (int64_t bm : {32, 64, 128}) EXPECT_NEAR(noisy.at({"block_m", bm}).factor, 1.0, 0.04) << bm;
  // Default shrinkage (128 against 18 results): the same order, each log factor 18/146 of it.
  const auto shrunk = by_value(fit_param_factors("pocl-cpu", synthetic(1.3, 1.1, 0.0)));
  const double exact = std::log(1.3) - (std::log(1.3) + std::log(1.1)) / 3;  // bk32's centred effect
  EXPECT_NEAR(std::log(shrunk.at({"block_k", 32}).factor), exact * 18.0 / 146.0, 1e-6);
}

TEST(CalibrationParamFit, ParametersThatMoveTogetherShareTheCostByTheData) {
  // block_m is 64 wherever block_k is 32 in half the workloads: a per-parameter mean would give
  // block_m=64 part of block_k 32's cost, the joint fit gives it none.
  std::vector<EstimatorSample> s;
  for (int w = 0; w < 8; ++w)
    for (int64_t bk : {16, 32})
      for (int64_t bm : {32, 64}) {
        if (w % 2 == 0 && bk == 32 && bm == 32) continue;
        s.push_back({"w" + std::to_string(w), ClusterKind::conv, conv_key(bk, bm), (w + 1) * (bk == 32 ? 1.5 : 1.0)});
      }
  const auto fit = by_value(fit_param_factors("pocl-cpu", s, unshrunk()));
  EXPECT_NEAR(fit.at({"block_k", 32}).factor / fit.at({"block_k", 16}).factor, 1.5, 1e-6);
  EXPECT_NEAR(fit.at({"block_m", 64}).factor / fit.at({"block_m", 32}).factor, 1.0, 1e-6);
}

TEST(CalibrationParamFit, OnlyWorkloadsThatVaryAParameterCountAndThresholdsHold) {
  std::vector<EstimatorSample> s = synthetic(1.3, 1.1, 0.0);
  // Two workloads that measured only block_k 32: nothing about block_k against the others.
  for (int w : {10, 11})
    for (int64_t bm : {32, 64, 128})
      s.push_back({"w" + std::to_string(w), ClusterKind::conv, conv_key(32, bm), 9.0});
  auto fit = by_value(fit_param_factors("pocl-cpu", s, unshrunk()));
  EXPECT_EQ(fit.at({"block_k", 32}).samples, 18);
  EXPECT_NEAR(fit.at({"block_k", 32}).factor / fit.at({"block_k", 16}).factor, 1.3, 1e-9);
  EXPECT_EQ(fit.at({"block_m", 64}).samples, 20);  // 18 + one each: they do vary block_m
  // Fewer results than min_samples, or fewer workloads than min_workloads: no factor.
  ParamFitOptions o = unshrunk();
  o.min_samples = 19;
  EXPECT_EQ(by_value(fit_param_factors("pocl-cpu", s, o)).count({"block_k", 32}), 0u);
  o = unshrunk();
  o.min_workloads = 7;
  EXPECT_EQ(by_value(fit_param_factors("pocl-cpu", s, o)).count({"block_k", 32}), 0u);
  EXPECT_EQ(by_value(fit_param_factors("pocl-cpu", s, o)).count({"block_m", 64}), 1u);  // 8 workloads
}

TEST(CalibrationParamFit, GroupsByKindUnitAndTemplateAndSkipsWhatItCannotRead) {
  std::vector<EstimatorSample> s = synthetic(1.3, 1.1, 0.0);
  for (EstimatorSample x : synthetic(0.5, 1.0, 0.0)) {  // the tf32 path: block_k 32 is cheap
    x.variant_key = x.variant_key.replace(x.variant_key.find("/fp32/"), 6, "/tf32/");
    s.push_back(x);
  }
  s.push_back({"w0", ClusterKind::conv, "reference/fp32/", 100.0});
  s.push_back({"w0", ClusterKind::conv, "not a key", 100.0});
  s.push_back({"w0", ClusterKind::conv, conv_key(32, 64), 0.0});  // unusable ratio
  s.push_back({"w0", ClusterKind::conv, conv_key(32, 64), std::nan("")});
  const auto fit = fit_param_factors("pocl-cpu", s, unshrunk());
  ASSERT_EQ(fit.size(), 12u);
  Calibration c;
  EXPECT_EQ(apply_param_fit(fit, c), 12);
  EXPECT_NEAR(c.variant_factor("pocl-cpu", ClusterKind::conv, conv_key(32, 64)) /
                  c.variant_factor("pocl-cpu", ClusterKind::conv, conv_key(16, 64)), 1.3, 1e-9);
  EXPECT_NEAR(c.variant_factor("pocl-cpu", ClusterKind::conv, conv_key(32, 64, "tf32")) /
                  c.variant_factor("pocl-cpu", ClusterKind::conv, conv_key(16, 64, "tf32")), 0.5, 1e-9);
  // Another GPU, kind or template, and keys that do not parse: only the kind's factor.
  c.set("pocl-cpu", ClusterKind::conv, 2.0);
  EXPECT_DOUBLE_EQ(c.variant_factor("h100", ClusterKind::conv, conv_key(32, 64)), 1.0);
  EXPECT_DOUBLE_EQ(c.variant_factor("pocl-cpu", ClusterKind::gemm, conv_key(32, 64)), 1.0);
  EXPECT_DOUBLE_EQ(c.variant_factor("pocl-cpu", ClusterKind::conv, "gemm_tiled/fp32/block_k=32"), 2.0);
  EXPECT_DOUBLE_EQ(c.variant_factor("pocl-cpu", ClusterKind::conv, "not a key"), 2.0);
  EXPECT_THROW(c.set_param({"h100", ClusterKind::conv, MathUnit::fp32, "t"}, "block_k", 8, 0.0), UserError);
}

TEST(CalibrationParamFit, FactorsAreClampedAndTheLineNamesTheLargest) {
  ParamFitOptions o = unshrunk();
  o.max_factor = 1.1;
  const auto fit = fit_param_factors("pocl-cpu", synthetic(1.5, 1.0, 0.0), o);
  const auto v = by_value(fit);
  EXPECT_TRUE(v.at({"block_k", 32}).clamped);
  EXPECT_DOUBLE_EQ(v.at({"block_k", 32}).factor, 1.1);
  EXPECT_FALSE(v.at({"block_m", 64}).clamped);
  const std::string line = describe_param_fit(fit_param_factors("pocl-cpu", synthetic(1.3, 1.1, 0.0), unshrunk()));
  EXPECT_EQ(line.find("conv_implicit_gemm block_k=32 x1.15 (18)"), 0u) << line;
  EXPECT_EQ(line.find("block_m"), std::string::npos) << line;  // factor 1: not shown
  EXPECT_EQ(describe_param_fit({}), "0 value(s), none off by 2 % or more");
}

TEST(CalibrationParamFit, EstimatesOfAWorkloadAreReorderedByTheirValuesFactors) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& h100 = catalog.require("h100");
  const WorkloadShape s = analyze_workload(testing::matmul_2d(1024, 1024, 1024));
  const std::vector<Variant> variants = enumerate_variants(s, h100, SpaceOptions{{"fp32"}});
  ASSERT_FALSE(variants.empty());
  Calibration c;
  c.set("h100", ClusterKind::gemm, 2.0);
  const std::string tmpl = variants.front().template_name;
  c.set_param({"h100", ClusterKind::gemm, MathUnit::fp32, tmpl}, "block_k", 32, 3.0);
  c.set_param({"h100", ClusterKind::gemm, MathUnit::fp32, tmpl}, "stages", 2, 0.5);
  int seen = 0;
  for (const Variant& v : variants) {
    const double plain = estimate(s, v, h100).seconds;
    if (!std::isfinite(plain)) continue;
    const double want = 2.0 * (v.param("block_k") == 32 ? 3.0 : 1.0) * (v.param_or("stages", 1) == 2 ? 0.5 : 1.0);
    ASSERT_NEAR(estimate(s, v, h100, c).seconds / plain, want, 1e-12) << v.key();
    ASSERT_NEAR(c.variant_factor("h100", ClusterKind::gemm, v.key()), want, 1e-12) << v.key();
    seen += v.param("block_k") == 32 ? 1 : 0;
  }
  EXPECT_GT(seen, 0);
}

class EstimatorSamplesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EstimatorSamplesTest, EachOkResultWithItsWorkloadKeyAndRatio) {
  testing::TempDir dir;
  auto db = GetParam() == "memory" ? make_memory_db() : open_tuning_db(dir.file("t.db"));
  db->commit_gpu_type(testing::test_gpu("pocl-cpu", "cpu", 0, 0));
  const WorkerInfo real = testing::test_worker("node1", "pocl-cpu", false);
  const WorkerInfo emu = testing::test_worker("laptop", "pocl-cpu", true);
  db->commit_worker(real);
  db->commit_worker(emu);
  db->commit_workload(testing::test_workload("w1", ClusterKind::conv));
  db->commit_workload(testing::test_workload("w2", ClusterKind::gemm));
  int64_t t = 0;
  for (const char* w : {"w1", "w2"})
    for (int64_t bm : {32, 64}) {
      const Variant v = testing::test_variant(bm);
      db->commit_variant(w, v, "h");
      Measurement m = testing::test_measurement(w, v, real, bm / 8.0, ++t);
      m.estimate_us = 2.0;
      ASSERT_TRUE(db->commit_measurement(m));
      m = testing::test_measurement(w, v, emu, 1.0, ++t);
      m.estimate_us = 2.0;
      ASSERT_TRUE(db->commit_measurement(m));
    }
  std::map<std::pair<std::string, std::string>, std::pair<ClusterKind, double>> got;
  for (const EstimatorSample& s : db->estimator_samples("pocl-cpu", TimingSource::real, ""))
    got[{s.workload, s.variant_key}] = {s.kind, s.ratio};
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got.at({"w1", testing::test_variant(64).key()}), std::make_pair(ClusterKind::conv, 4.0));
  EXPECT_EQ(got.at({"w2", testing::test_variant(32).key()}), std::make_pair(ClusterKind::gemm, 2.0));
  EXPECT_EQ(db->estimator_samples("pocl-cpu", TimingSource::emulated, "").size(), 4u);
  EXPECT_TRUE(db->estimator_samples("h100", TimingSource::real, "").empty());
}

// Each result carries the run it was measured in: the latest begun when it finished (the
// ranking fit pairs results of one run only); a result before any run has none (0).
TEST_P(EstimatorSamplesTest, EachResultCarriesTheLatestRunBegunWhenItFinished) {
  testing::TempDir dir;
  auto db = GetParam() == "memory" ? make_memory_db() : open_tuning_db(dir.file("t.db"));
  db->commit_gpu_type(testing::test_gpu("pocl-cpu", "cpu", 0, 0));
  const WorkerInfo real = testing::test_worker("node1", "pocl-cpu", false);
  db->commit_worker(real);
  db->commit_workload(testing::test_workload("w1", ClusterKind::conv));
  const int64_t model = db->commit_model("m", std::string(64, 'c'));
  const int64_t first = db->begin_run({model, {"pocl-cpu"}, "{}", "coord"});
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the runs begin in distinct ms
  const int64_t second = db->begin_run({model, {"pocl-cpu"}, "{}", "coord"});
  std::map<int64_t, int64_t> started;
  for (const RunRecord& r : db->runs()) started[r.id] = r.started_ms;
  ASSERT_LT(started.at(first), started.at(second));
  const std::map<int64_t, int64_t> run_of_bm = {{32, 0}, {64, first}, {128, second}};
  const std::map<int64_t, int64_t> finished = {
      {32, started.at(first) - 1}, {64, started.at(second) - 1}, {128, started.at(second) + 1}};
  for (const auto& [bm, at] : finished) {
    const Variant v = testing::test_variant(bm);
    db->commit_variant("w1", v, "h");
    Measurement m = testing::test_measurement("w1", v, real, 1.0, at);
    m.estimate_us = 2.0;
    ASSERT_TRUE(db->commit_measurement(m));
  }
  std::map<std::string, int64_t> got;
  for (const EstimatorSample& s : db->estimator_samples("pocl-cpu", TimingSource::real, "")) got[s.variant_key] = s.run;
  ASSERT_EQ(got.size(), 3u);
  for (const auto& [bm, run] : run_of_bm) EXPECT_EQ(got.at(testing::test_variant(bm).key()), run) << "block_m " << bm;
}

INSTANTIATE_TEST_SUITE_P(BothDbs, EstimatorSamplesTest, ::testing::Values("memory", "sqlite"));

}  // namespace
}  // namespace dc
