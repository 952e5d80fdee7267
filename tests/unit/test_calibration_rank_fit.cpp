// The pairwise ranking calibration (estimator/rank_features.h, calibration_rank_fit.h): the
// features of a hand-computed conv variant (shape parsed from a DB's canonical text), the fit
// recovering known weights from synthetic results, the thresholds, the factor's clamp and its
// inverse, and an estimate reordered as the weights say.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "calibration_rank_fit.h"
#include "estimator.h"
#include "estimator_testing.h"
#include "gpu/gpu_catalog.h"
#include "prune.h"

namespace dc {
namespace {

// A MobileNetV2 stem convolution as a tuning DB stores it (workloads.canonical).
const char* kStemConv =
    "kind conv\n"
    "in t0 act f32[1,3,224,224]\n"
    "in t1 weight f32[32,3,3,3]\n"
    "in t2 weight f32[32]\n"
    "n0 Conv(dilations=[1,1],group=1,kernel_shape=[3,3],pads=[1,1,1,1],strides=[2,2]) t0,t1,t2 -> t3 : "
    "f32[1,32,112,112]\n"
    "out t3";

TEST(RankFeatures, ConvFeaturesOfAHandComputedVariant) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& pocl = catalog.require("pocl-cpu");  // 2 compute units, 32 KiB L1
  const std::optional<WorkloadShape> s = rank_shape_of_canonical(kStemConv);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->m, 112 * 112);  // batch x OH x OW
  EXPECT_EQ(s->n, 32);
  EXPECT_EQ(s->k, 27);  // 3 x 3 x 3
  EXPECT_EQ(s->stride_h, 2);
  EXPECT_EQ(s->elements, 32 * 112 * 112);
  const std::map<std::string, int64_t> p = {{"block_m", 256}, {"block_n", 32}, {"block_k", 16},
                                            {"thread_m", 8},  {"thread_n", 8}, {"vec", 2}};
  const RankFeatures x = rank_features("conv_implicit_gemm", p, *s, pocl, 100.0);
  // 49 x 1 work-groups over 2 units: 25 waves, the last half full: 49 / 50.
  EXPECT_NEAR(x.at("fill"), 0.98, 1e-12);
  EXPECT_NEAR(x.at("lgroups"), std::log2(49.0), 1e-12);
  EXPECT_NEAR(x.at("padk"), std::log2(32.0 / 27), 1e-12);  // K 27 in 2 tiles of 16
  EXPECT_NEAR(x.at("padm"), std::log2(12544.0 / 12544), 1e-12);
  // (256 + 32) x (16 + 4) x 4 bytes of tiles + 128 work-items x 64 accumulators x 4 bytes.
  EXPECT_NEAR(x.at("lfoot_l1"), std::log2((23040.0 + 32768) / 32768), 1e-12);
  EXPECT_EQ(x.at("vec_gather"), 1.0);  // 3x3 stride 2: A is gathered
  EXPECT_EQ(x.at("lbm"), 8.0);
  EXPECT_EQ(x.at("lbn"), 5.0);
  EXPECT_NEAR(x.at("lest"), std::log(100.0), 1e-12);
  EXPECT_EQ(x.size(), 19u + 1);  // no products of pairs (docs/estimator.md)
}

std::string tiled_key(int64_t block_k, int64_t block_m) {
  return "gemm_tiled/fp32/block_k=" + std::to_string(block_k) + ",block_m=" + std::to_string(block_m);
}

// `workloads` gemm workloads of 9 variants each: ln measured = ln estimate + 0.5 log2 block_k
// - 0.3 log2 block_m + Gumbel noise, so that P(i slower than j) is exactly the fit's logistic.
std::vector<RankSample> synthetic(int workloads, unsigned seed = 11) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  std::vector<RankSample> out;
  for (int w = 0; w < workloads; ++w)
    for (int64_t bk : {8, 16, 32})
      for (int64_t bm : {32, 64, 128}) {
        const double est = 10.0 * (1 + w % 7) * (1 + (bk + bm) % 5);
        const double gumbel = -std::log(-std::log(u(rng)));
        const double meas = est * std::exp(0.5 * std::log2(bk) - 0.3 * std::log2(bm) + gumbel);
        out.push_back({"w" + std::to_string(w), ClusterKind::gemm, tiled_key(bk, bm), WorkloadShape{}, est, meas});
      }
  return out;
}

std::map<std::string, double> weights(const FittedRankVector& f) {
  std::map<std::string, double> out;
  for (size_t i = 0; i < f.vector.names.size(); ++i) out[f.vector.names[i]] = f.vector.weights[i];
  return out;
}

TEST(CalibrationRankFit, RecoversKnownWeightsFromPairs) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  const std::vector<FittedRankVector> fit = fit_rank_vectors(catalog.require("pocl-cpu"), synthetic(400));
  ASSERT_EQ(fit.size(), 1u);
  EXPECT_EQ(fit[0].group, Calibration::ParamGroup("pocl-cpu", ClusterKind::gemm, MathUnit::fp32, "gemm_tiled"));
  EXPECT_EQ(fit[0].workloads, 400);
  const auto w = weights(fit[0]);
  EXPECT_NEAR(w.at("lblock_k"), 0.5, 0.05);
  EXPECT_NEAR(w.at("lblock_m"), -0.3, 0.05);
  EXPECT_NEAR(w.at("lest"), 0.0, 0.05);  // the estimate's own order is already the offset
  // The means are the features' over the fit's results: log2 of 8, 16, 32 average 4.
  const auto& names = fit[0].vector.names;
  const size_t bk = std::find(names.begin(), names.end(), "lblock_k") - names.begin();
  ASSERT_LT(bk, names.size());
  EXPECT_NEAR(fit[0].vector.means[bk], 4.0, 1e-12);
}

// Two runs of the same workloads, the second on a device 10x slower: every pair across the
// runs says "the second run's result is slower" whatever its features. Pairs within one run
// only, the weights are recovered as from one run; across runs they would shrink towards 0.
TEST(CalibrationRankFit, PairsJoinResultsOfOneRunOnly) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  std::vector<RankSample> both = synthetic(200, 11);
  for (RankSample& s : both) s.run = 1;
  for (RankSample s : synthetic(200, 12)) {
    s.run = 2, s.measured_us *= 10;
    both.push_back(s);
  }
  const std::vector<FittedRankVector> fit = fit_rank_vectors(catalog.require("pocl-cpu"), both);
  ASSERT_EQ(fit.size(), 1u);
  EXPECT_EQ(fit[0].pairs, 2 * 200 * (9 * 8 / 2));  // not 200 x (18 x 17 / 2)
  EXPECT_EQ(fit[0].workloads, 200);
  EXPECT_EQ(fit[0].samples, 2 * 200 * 9);
  const auto w = weights(fit[0]);
  EXPECT_NEAR(w.at("lblock_k"), 0.5, 0.05);
  EXPECT_NEAR(w.at("lblock_m"), -0.3, 0.05);
}

TEST(CalibrationRankFit, ATemplateWithoutEnoughWorkloadsGetsNoVector) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& pocl = catalog.require("pocl-cpu");
  EXPECT_TRUE(fit_rank_vectors(pocl, synthetic(2)).empty());  // 18 results, but 2 workloads
  EXPECT_EQ(fit_rank_vectors(pocl, synthetic(3)).size(), 1u);
  std::vector<RankSample> single = synthetic(10);  // one result per workload: no pairs
  single.erase(std::remove_if(single.begin(), single.end(),
                              [](const RankSample& s) { return s.variant_key != tiled_key(16, 64); }),
               single.end());
  EXPECT_TRUE(fit_rank_vectors(pocl, single).empty());
}

TEST(CalibrationRankFit, AScoreIsTheWeightedSumOfTheFeaturesAboutTheirMeans) {
  RankVector v;
  v.names = {"lbk", "lest"};
  v.weights = {2.0, 0.3};
  v.means = {4.0, std::log(100.0)};
  RankFeatures x = {{"lbk", 4.0}, {"lest", std::log(100.0)}};
  EXPECT_DOUBLE_EQ(v.log_score(x), 0.0);  // at the means
  x["lbk"] = 5;
  x["lest"] = std::log(200.0);
  EXPECT_NEAR(v.log_score(x), 2.0 + 0.3 * std::log(2.0), 1e-12);  // unclamped
  x.erase("lbk");                                                 // a feature it lacks counts 0
  EXPECT_NEAR(v.log_score(x), -8.0 + 0.3 * std::log(2.0), 1e-12);
}

// A template's rank vector orders its variants (prune's rank_seconds) as the weights say, and
// leaves their estimates alone: the per-kind factor only, its per-parameter factors replaced.
// Pruned to the top 4, the smallest block_k come first, though the model alone ranks them last.
TEST(CalibrationRankFit, AVectorReordersAWorkloadsVariantsAndLeavesTheirEstimates) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& h100 = catalog.require("h100");
  const Workload w = testing::matmul_2d(1024, 1024, 1024);
  const WorkloadShape s = analyze_workload(w);
  const std::vector<Variant> variants = enumerate_variants(s, h100, SpaceOptions{{"fp32"}});
  ASSERT_FALSE(variants.empty());
  const std::string tmpl = variants.front().template_name;
  Calibration c;
  c.set("h100", ClusterKind::gemm, 2.0);
  RankVector r;
  r.names = {"lblock_k"};
  r.weights = {8.0};  // each doubling of block_k ranks exp(8) slower
  r.means = {4.0};
  c.rank_vectors[{"h100", ClusterKind::gemm, MathUnit::fp32, tmpl}] = r;
  std::vector<ScoredVariant> scored;
  int seen = 0;
  for (const Variant& v : variants) {
    const Estimate plain = estimate(s, v, h100);
    const Estimate calibrated = estimate(s, v, h100, c);
    if (!std::isfinite(plain.seconds)) continue;
    ASSERT_NEAR(calibrated.seconds / plain.seconds, 2.0, 1e-12) << v.key();
    const double want = v.template_name == tmpl ? 8.0 * (std::log2(v.param("block_k")) - 4.0) : 0.0;
    ASSERT_NEAR(calibrated.rank_log, want, 1e-9) << v.key();
    ASSERT_NEAR(rank_seconds(calibrated), calibrated.seconds * std::exp(want), 1e-9 * rank_seconds(calibrated));
    seen += v.template_name == tmpl && v.param("block_k") != 16 ? 1 : 0;
    scored.push_back({v, calibrated});
  }
  EXPECT_GT(seen, 0);
  int64_t smallest = INT64_MAX;
  for (const ScoredVariant& sv : scored)
    if (sv.variant.template_name == tmpl) smallest = std::min(smallest, sv.variant.param("block_k"));
  PruneOptions o;
  o.within_factor = 1e9;  // the cut is the estimates'; every variant passes it here
  o.top_k = 4;
  const std::vector<ScoredVariant> kept = prune(scored, o);
  ASSERT_EQ(kept.size(), 4u);
  for (const ScoredVariant& k : kept) EXPECT_EQ(k.variant.param("block_k"), smallest) << k.variant.key();
  o.within_factor = 1.0;  // only the fastest estimate passes, whatever its rank
  double fastest = INFINITY;
  for (const ScoredVariant& sv : scored) fastest = std::min(fastest, sv.estimate.seconds);
  ASSERT_GT(kept.front().estimate.seconds, fastest);  // the rank's first is not the fastest estimate
  for (const ScoredVariant& k : prune(scored, o)) EXPECT_EQ(k.estimate.seconds, fastest) << k.variant.key();
}

}  // namespace
}  // namespace dc
