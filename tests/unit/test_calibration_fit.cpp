// The estimator's calibration fitted from the tuning DB: the fit itself on synthetic ratios
// (estimator/calibration_fit.h), TuningDb::estimator_ratios on both implementations, and the
// tune's calibrate stage with the in-process farm (factors found, config wins, the option
// off, no compounding over tunes, real and emulated results never mixed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include <sys/wait.h>

#include "calibration_fit.h"
#include "calibration_rank_fit.h"
#include "estimator.h"
#include "farm_inprocess.h"
#include "farm_testing.h"
#include "estimator_testing.h"
#include "gpu/gpu_catalog.h"
#include "ir/error.h"
#include "model_loader.h"
#include "tune.h"
#include "tune_config.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

using testing::test_gpu;
using testing::test_measurement;
using testing::test_variant;
using testing::test_worker;
using testing::test_workload;

std::vector<double> lognormal(double center, double sigma, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> d(std::log(center), sigma);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(d(rng));
  return out;
}

const FittedFactor& of(const std::vector<FittedFactor>& fit, ClusterKind kind) {
  const auto it = std::find_if(fit.begin(), fit.end(), [&](const FittedFactor& f) { return f.kind == kind; });
  if (it == fit.end()) throw std::runtime_error(std::string("no fit for ") + cluster_kind_name(kind));
  return *it;
}

// ---------------------------------------------------------------- the fit

TEST(CalibrationFit, RecoversKnownFactorsPerKind) {
  const auto fit = fit_calibration({{ClusterKind::conv, lognormal(1.5, 0.2, 60, 1)},
                                    {ClusterKind::gemm, lognormal(0.7, 0.2, 40, 2)}});
  ASSERT_EQ(fit.size(), 2u);
  EXPECT_EQ(of(fit, ClusterKind::conv).samples, 60);
  EXPECT_TRUE(of(fit, ClusterKind::conv).used);
  EXPECT_NEAR(of(fit, ClusterKind::conv).factor, 1.5, 1.5 * 0.08);
  EXPECT_NEAR(of(fit, ClusterKind::gemm).factor, 0.7, 0.7 * 0.08);
  EXPECT_FALSE(of(fit, ClusterKind::gemm).clamped);
  // Exact ratios give the exact factor.
  EXPECT_DOUBLE_EQ(fit_calibration({{ClusterKind::conv, std::vector<double>(8, 2.0)}})[0].factor, 2.0);
}

TEST(CalibrationFit, KindsWithTooFewResultsGetNoFactor) {
  const auto fit = fit_calibration({{ClusterKind::reduction, std::vector<double>(7, 3.0)},
                                    {ClusterKind::conv, std::vector<double>(8, 3.0)},
                                    {ClusterKind::gemm, {}}});
  ASSERT_EQ(fit.size(), 2u);  // gemm has no results at all: not listed
  EXPECT_FALSE(of(fit, ClusterKind::reduction).used);
  EXPECT_EQ(of(fit, ClusterKind::reduction).samples, 7);
  EXPECT_EQ(of(fit, ClusterKind::reduction).factor, 1.0);
  EXPECT_TRUE(of(fit, ClusterKind::conv).used);
  Calibration c;
  EXPECT_EQ(apply_fit("h100", fit, {}, c), 1);
  EXPECT_EQ(c.factor("h100", ClusterKind::reduction), 1.0);
  EXPECT_DOUBLE_EQ(c.factor("h100", ClusterKind::conv), 3.0);
  // The threshold is an option.
  CalibrationFitOptions o;
  o.min_samples = 7;
  EXPECT_TRUE(of(fit_calibration({{ClusterKind::reduction, std::vector<double>(7, 3.0)}}, o),
                 ClusterKind::reduction).used);
}

TEST(CalibrationFit, OutliersDoNotMoveItAndExtremeFitsAreClamped) {
  std::vector<double> r(20, 1.2);
  for (int i = 0; i < 5; ++i) r.push_back(1000);  // a geometric mean would say x4.9
  EXPECT_DOUBLE_EQ(fit_calibration({{ClusterKind::gemm, r}})[0].factor, 1.2);

  const auto fit = fit_calibration({{ClusterKind::conv, std::vector<double>(10, 50.0)},
                                    {ClusterKind::gemm, std::vector<double>(10, 0.01)}});
  EXPECT_EQ(of(fit, ClusterKind::conv).factor, 10.0);
  EXPECT_TRUE(of(fit, ClusterKind::conv).clamped);
  EXPECT_EQ(of(fit, ClusterKind::gemm).factor, 0.1);
  EXPECT_TRUE(of(fit, ClusterKind::gemm).clamped);
}

TEST(CalibrationFit, UnusableRatiosAreIgnored) {
  std::vector<double> r(8, 2.0);
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), 0.0, -1.0}) r.push_back(bad);
  const auto fit = fit_calibration({{ClusterKind::attention, r}});
  ASSERT_EQ(fit.size(), 1u);
  EXPECT_EQ(fit[0].samples, 8);
  EXPECT_DOUBLE_EQ(fit[0].factor, 2.0);
  EXPECT_TRUE(fit_calibration({{ClusterKind::attention, {std::nan(""), 0.0}}}).empty());
}

TEST(CalibrationFit, ExplicitFactorsWinAndTheLineSaysWhatWasFitted) {
  const auto fit = fit_calibration({{ClusterKind::conv, std::vector<double>(9, 1.5)},
                                    {ClusterKind::gemm, std::vector<double>(12, 0.5)},
                                    {ClusterKind::reduction, std::vector<double>(3, 2.0)}});
  Calibration keep;
  keep.set("h100", ClusterKind::conv, 1.2);
  Calibration c = keep;
  EXPECT_EQ(apply_fit("h100", fit, keep, c), 1);
  EXPECT_DOUBLE_EQ(c.factor("h100", ClusterKind::conv), 1.2);
  EXPECT_DOUBLE_EQ(c.factor("h100", ClusterKind::gemm), 0.5);
  EXPECT_EQ(c.factor("a100", ClusterKind::gemm), 1.0);  // another GPU type is untouched
  EXPECT_EQ(describe_fit(fit), "gemm x0.50 (12), conv x1.50 (9), reduction: 3 too few, uncalibrated");
  EXPECT_EQ(describe_fit({}), "no results with an estimate");
}

// A sample found in today's table takes today's estimate and keeps its measured time (ratio x
// recorded estimate); one not found, or without an estimate, keeps what was recorded.
TEST(CalibrationFit, SamplesOfTodaysTableAreComparedWithTodaysEstimates) {
  std::vector<EstimatorSample> samples(3);
  samples[0] = {"w1", ClusterKind::gemm, "gemm_tiled/fp32/block_m=64", 2.0, 50.0, 1};    // measured 100 us
  samples[1] = {"w1", ClusterKind::gemm, "gemm_tiled/fp32/block_m=128", 3.0, 10.0, 1};   // not in the table
  samples[2] = {"w2", ClusterKind::gemm, "gemm_tiled/fp32/block_m=64", 1.5, 0.0, 1};     // no estimate
  const EstimateTable today = {{{"w1", "gemm_tiled/fp32/block_m=64"}, 25.0},
                               {{"w2", "gemm_tiled/fp32/block_m=64"}, 40.0}};
  EXPECT_EQ(compare_with_todays_estimates(samples, today), 1u);
  EXPECT_DOUBLE_EQ(samples[0].estimate_us, 25.0);
  EXPECT_DOUBLE_EQ(samples[0].ratio, 4.0);
  EXPECT_DOUBLE_EQ(samples[1].estimate_us, 10.0);
  EXPECT_DOUBLE_EQ(samples[1].ratio, 3.0);
  EXPECT_DOUBLE_EQ(samples[2].ratio, 1.5);
}

TEST(CalibrationFit, BadOptionsAreUserErrors) {
  CalibrationFitOptions o;
  o.min_samples = 0;
  EXPECT_THROW(fit_calibration(CalibrationRatios{}, o), UserError);
  o = {};
  o.min_factor = 2;
  o.max_factor = 1;
  EXPECT_THROW(fit_calibration(CalibrationRatios{}, o), UserError);
}

TEST(CalibrationFit, ConfigKeyTurnsTheDbFitOff) {
  PlanOptions plan;
  bool from_db = true;
  parse_tune_config("calibration_from_db: false\n", "t.yaml", &plan, &from_db);
  EXPECT_FALSE(from_db);
  parse_tune_config("calibration_from_db: true\n", "t.yaml", &plan, &from_db);
  EXPECT_TRUE(from_db);
  parse_tune_config("calibration_from_db: false\n", "plan.yaml", &plan);  // plan: accepted
  EXPECT_THROW(parse_tune_config("calibration_from_db: sometimes\n", "t.yaml", &plan, &from_db),
               UserError);
}

// Each math unit's factor comes from its own results: fp32 results twice their estimate,
// fp16/bf16 half of it; tf32 with too few results runs uncalibrated (never the fp32 factor:
// CUDA-core results say nothing about tensor cores), and the log line says so. A fit that
// pooled the units would give neither 2 nor 0.5.
TEST(CalibrationFit, EachMathUnitHasItsOwnFactorAndTooFewRunUncalibrated) {
  const CalibrationRatios ratios = {{{ClusterKind::gemm, MathUnit::fp32}, lognormal(2.0, 0.1, 30, 1)},
                                    {{ClusterKind::gemm, MathUnit::fp16_bf16}, lognormal(0.5, 0.1, 30, 2)},
                                    {{ClusterKind::gemm, MathUnit::tf32}, std::vector<double>(5, 9.0)},
                                    {{ClusterKind::conv, MathUnit::tf32}, lognormal(1.3, 0.1, 12, 3)}};
  const auto fit = fit_calibration(ratios);
  ASSERT_EQ(fit.size(), 4u);
  Calibration c;
  EXPECT_EQ(apply_fit("a100", fit, {}, c), 3);
  EXPECT_NEAR(c.factor("a100", ClusterKind::gemm), 2.0, 0.1);
  EXPECT_NEAR(c.factor("a100", ClusterKind::gemm, MathUnit::fp16_bf16), 0.5, 0.03);
  // tf32 gemm: 5 results, too few: uncalibrated, neither 9 nor the fp32 factor.
  EXPECT_EQ(c.factor("a100", ClusterKind::gemm, MathUnit::tf32), 1.0);
  // conv has a tf32 factor and no fp32 one: fp32 and fp16/bf16 stay uncalibrated.
  EXPECT_NEAR(c.factor("a100", ClusterKind::conv, MathUnit::tf32), 1.3, 0.1);
  EXPECT_EQ(c.factor("a100", ClusterKind::conv), 1.0);
  EXPECT_EQ(c.factor("a100", ClusterKind::conv, MathUnit::fp16_bf16), 1.0);
  const std::string line = describe_fit(fit);
  EXPECT_NE(line.find("gemm x1.93 (30)"), std::string::npos) << line;
  EXPECT_NE(line.find("gemm fp16/bf16 x0.50 (30)"), std::string::npos) << line;
  EXPECT_NE(line.find("gemm tf32: 5 too few, uncalibrated"), std::string::npos) << line;
  EXPECT_NE(line.find("conv tf32 x1.27 (12)"), std::string::npos) << line;
}

// A factor the config sets for a kind (its fp32 unit) wins over that unit's fit only, one it
// sets for another unit over that unit's fit only: no factor crosses units.
TEST(CalibrationFit, ConfigFactorsWinPerKindAndPerUnit) {
  const auto fit = fit_calibration(CalibrationRatios{
      {{ClusterKind::gemm, MathUnit::fp32}, std::vector<double>(9, 2.0)},
      {{ClusterKind::gemm, MathUnit::fp16_bf16}, std::vector<double>(9, 0.5)},
      {{ClusterKind::conv, MathUnit::fp32}, std::vector<double>(9, 3.0)},
      {{ClusterKind::conv, MathUnit::tf32}, std::vector<double>(9, 0.25)}});
  Calibration keep;
  keep.set("h100", ClusterKind::gemm, 1.5);
  keep.set("h100", ClusterKind::conv, 0.8, MathUnit::tf32);
  Calibration c = keep;
  EXPECT_EQ(apply_fit("h100", fit, keep, c), 2);  // conv fp32, gemm fp16/bf16
  EXPECT_DOUBLE_EQ(c.factor("h100", ClusterKind::gemm), 1.5);
  EXPECT_DOUBLE_EQ(c.factor("h100", ClusterKind::gemm, MathUnit::fp16_bf16), 0.5);
  EXPECT_DOUBLE_EQ(c.factor("h100", ClusterKind::conv), 3.0);
  EXPECT_DOUBLE_EQ(c.factor("h100", ClusterKind::conv, MathUnit::tf32), 0.8);
}

// The estimate of a variant takes its math unit's factor.
TEST(CalibrationFit, EstimatesTakeTheFactorOfTheirMathUnit) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& h100 = catalog.require("h100");
  const WorkloadShape s = analyze_workload(testing::matmul_2d(1024, 1024, 1024));
  Calibration c;
  c.set("h100", ClusterKind::gemm, 2.0);
  c.set("h100", ClusterKind::gemm, 0.5, MathUnit::fp16_bf16);
  int seen_fp32 = 0, seen_fp16 = 0, seen_tf32 = 0;
  for (const Variant& v : enumerate_variants(s, h100, SpaceOptions{{"fp32", "tf32", "fp16"}})) {
    const double plain = estimate(s, v, h100).seconds;
    if (!std::isfinite(plain)) continue;  // unfit on the GPU
    const double ratio = estimate(s, v, h100, c).seconds / plain;
    // tf32: no factor of its own, so none at all (never the fp32 unit's)
    const double want = v.precision == "fp16" ? 0.5 : v.precision == "tf32" ? 1.0 : 2.0;
    ASSERT_NEAR(ratio, want, 1e-12) << v.key();
    (v.precision == "fp32" ? seen_fp32 : v.precision == "fp16" ? seen_fp16 : seen_tf32)++;
  }
  EXPECT_GT(seen_fp32, 0);
  EXPECT_GT(seen_fp16, 0);
  EXPECT_GT(seen_tf32, 0);
}

// ---------------------------------------------------------------- the DB query, both DBs

class EstimatorRatiosTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    db_ = GetParam() == "memory" ? make_memory_db() : open_tuning_db(dir_.file("t.db"));
    db_->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
    db_->commit_gpu_type(test_gpu("a100", "ampere", 8, 0));
    for (const auto& w : {real_, emu_, a100_}) db_->commit_worker(w);
    db_->commit_workload(test_workload("w1", ClusterKind::gemm));
    db_->commit_workload(test_workload("w2", ClusterKind::conv));
    for (const char* w : {"w1", "w2"})
      for (int64_t bm : {32, 64}) db_->commit_variant(w, test_variant(bm), "hash");
  }
  // An ok result with the given median and estimate.
  void add(const std::string& w, int64_t bm, const WorkerInfo& worker, double median,
           double estimate, JobStatus status = JobStatus::ok) {
    Measurement m = test_measurement(w, test_variant(bm), worker, median, ++finished_, status);
    m.estimate_us = estimate;
    ASSERT_TRUE(db_->commit_measurement(m));
  }
  static std::vector<double> sorted(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  testing::TempDir dir_;
  std::unique_ptr<TuningDb> db_;
  WorkerInfo real_ = test_worker("node1", "h100", false);
  WorkerInfo emu_ = test_worker("laptop", "h100", true);
  WorkerInfo a100_ = test_worker("node2", "a100", false);
  int64_t finished_ = 1000;
};

TEST_P(EstimatorRatiosTest, OkResultsWithAnEstimateOfOneGpuTypeAndSourceByKind) {
  add("w1", 32, real_, 2, 4);
  add("w1", 64, real_, 6, 4);
  add("w1", 32, real_, 4, 4);               // a variant measured twice counts twice
  add("w2", 32, real_, 8, 4);
  add("w1", 64, emu_, 40, 4);               // emulated: never in a real fit
  add("w2", 64, a100_, 12, 4);              // another GPU type
  add("w1", 32, real_, 0, 4, JobStatus::timeout);  // not ok
  add("w2", 64, real_, 5, 0);               // no estimate

  constexpr MathUnit fp32 = MathUnit::fp32;
  const auto real = db_->estimator_ratios("h100", TimingSource::real);
  ASSERT_EQ(real.size(), 2u);
  EXPECT_EQ(sorted(real.at({ClusterKind::gemm, fp32})), (std::vector<double>{0.5, 1.0, 1.5}));
  EXPECT_EQ(real.at({ClusterKind::conv, fp32}), std::vector<double>{2.0});

  const auto emulated = db_->estimator_ratios("h100", TimingSource::emulated);
  ASSERT_EQ(emulated.size(), 1u);
  EXPECT_EQ(emulated.at({ClusterKind::gemm, fp32}), std::vector<double>{10.0});

  EXPECT_EQ(db_->estimator_ratios("a100", TimingSource::real).at({ClusterKind::conv, fp32}),
            std::vector<double>{3.0});
  EXPECT_TRUE(db_->estimator_ratios("a100", TimingSource::emulated).empty());
  EXPECT_TRUE(db_->estimator_ratios("v100", TimingSource::real).empty());
}

// Results of tensor-core variants go to their math unit (fp16 and bf16 share one), never to
// the fp32 ratios of the same kind.
TEST_P(EstimatorRatiosTest, RatiosAreKeptApartPerMathUnit) {
  for (const char* path : {"tf32", "fp16", "bf16"}) {
    Variant v = test_variant(128);
    v.precision = path;
    db_->commit_variant("w1", v, "hash");
    Measurement m = test_measurement("w1", v, real_, path == std::string("tf32") ? 3 : 1, ++finished_);
    m.estimate_us = 4;
    ASSERT_TRUE(db_->commit_measurement(m));
  }
  add("w1", 32, real_, 8, 4);
  const auto real = db_->estimator_ratios("h100", TimingSource::real);
  ASSERT_EQ(real.size(), 3u);
  EXPECT_EQ(real.at({ClusterKind::gemm, MathUnit::fp32}), std::vector<double>{2.0});
  EXPECT_EQ(real.at({ClusterKind::gemm, MathUnit::tf32}), std::vector<double>{0.75});
  EXPECT_EQ(real.at({ClusterKind::gemm, MathUnit::fp16_bf16}), (std::vector<double>{0.25, 0.25}));
}

INSTANTIATE_TEST_SUITE_P(Impl, EstimatorRatiosTest, ::testing::Values("memory", "sqlite"),
                         [](const auto& p) { return p.param; });

// dc-db calibration: the same fit, from the command line.
std::pair<int, std::string> run_dc_db(const std::string& args) {
  const std::string cmd = std::string(DC_BIN_DIR) + "/dc-db " + args + " 2>&1";
  std::string text;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) text.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

TEST(DcDbCalibration, PrintsTheFittedFactorPerKindWithItsCount) {
  testing::TempDir dir;
  const std::string path = dir.file("t.db");
  {
    auto db = open_tuning_db(path);
    db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
    const WorkerInfo real = test_worker("node1", "h100", false);
    const WorkerInfo emu = test_worker("laptop", "h100", true);
    db->commit_worker(real);
    db->commit_worker(emu);
    db->commit_workload(test_workload("w1", ClusterKind::conv));
    db->commit_workload(test_workload("w2", ClusterKind::gemm));
    int64_t t = 0;
    for (int64_t bm = 1; bm <= 9; ++bm) {
      db->commit_variant("w1", test_variant(bm), "h");
      db->commit_measurement(test_measurement("w1", test_variant(bm), real, 6.0, ++t));  // 6/4
      db->commit_measurement(test_measurement("w1", test_variant(bm), emu, 2.0, ++t));   // 2/4
    }
    db->commit_variant("w2", test_variant(1), "h");
    db->commit_measurement(test_measurement("w2", test_variant(1), real, 2.0, ++t));
    // Tensor-core results: 8 fp16/bf16 conv (1/4), 2 tf32 gemm, apart from the fp32 rows.
    for (int64_t bm = 1; bm <= 8; ++bm) {
      Variant v = test_variant(bm);
      v.precision = bm % 2 ? "fp16" : "bf16";
      db->commit_variant("w1", v, "h");
      db->commit_measurement(test_measurement("w1", v, real, 1.0, ++t));
    }
    for (int64_t bm = 1; bm <= 2; ++bm) {
      Variant v = test_variant(bm);
      v.precision = "tf32";
      db->commit_variant("w2", v, "h");
      db->commit_measurement(test_measurement("w2", v, real, 40.0, ++t));
    }
  }
  auto [rc, text] = run_dc_db("--db " + path + " calibration --gpu h100");
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("calibration for h100 (real results)"), std::string::npos) << text;
  EXPECT_NE(text.find("conv  fp32             9   1.500"), std::string::npos) << text;
  EXPECT_NE(text.find("conv  fp16/bf16        8   0.250"), std::string::npos) << text;
  EXPECT_NE(text.find("gemm  fp32             1       -  too few (a tune needs 8): uncalibrated\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gemm  tf32             2       -  too few (a tune needs 8): uncalibrated"),
            std::string::npos) << text;
  // One result per block_m value: too few for a per-parameter factor.
  EXPECT_NE(text.find("per-parameter factors: none (a value needs 8 results in 3 workloads"), std::string::npos) << text;
  std::tie(rc, text) = run_dc_db("--db " + path + " calibration --gpu h100 --emulated");
  EXPECT_NE(text.find("conv  fp32        9   0.500"), std::string::npos) << text;
  EXPECT_EQ(text.find("gemm"), std::string::npos) << text;
  std::tie(rc, text) = run_dc_db("--db " + path + " calibration --gpu a100");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(text.find("error: no GPU type 'a100' in the tuning DB (GPU types: h100)"), std::string::npos) << text;
}

// ---------------------------------------------------------------- the tune's calibrate stage

const GpuCatalog& catalog() {
  static const GpuCatalog c = GpuCatalog::builtin();
  return c;
}

const std::string kModel = std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx";

TuneOptions options() {
  TuneOptions o;
  o.gpus = {&catalog().require("h100")};
  o.emulated = true;  // the in-process farm's devices
  o.check_winners = false;
  o.seed_k = 0;
  o.worker_wait = std::chrono::milliseconds(2000);
  // Eight variants per workload: enough results per kind for a fit (kinds_with(.., 8)), a
  // quarter of the compiles of the default 32 (each one a real NVRTC compile).
  o.plan.prune.top_k = 8;
  return o;
}

using Key = std::pair<std::string, std::string>;  // workload signature, variant key

// The uncalibrated estimate of every variant a tune of the model keeps, in microseconds.
std::map<Key, double> model_estimates_us() {
  const TuneOptions o = options();
  const ModelPlan plan = plan_by_estimate(
      cli::load_model(load_onnx(kModel), o.import, true).simplified, o.gpus, PlanOptions{});
  std::map<Key, double> out;
  for (size_t wi = 0; wi < plan.workload_set.workloads.size(); ++wi)
    for (const auto& sv : plan.gpus[0].workloads[wi].kept)
      out[{plan.workload_set.workloads[wi].signature, sv.variant.key()}] = sv.estimate.seconds * 1e6;
  return out;
}

// A GPU on which every kernel takes exactly k x the model's uncalibrated estimate, whatever
// estimate the job carries.
std::unique_ptr<Farm> gpu_slower_by(double k) {
  static const std::map<Key, double> estimates = model_estimates_us();
  InProcessFarmOptions f;
  f.gpu_types = {"h100"};
  f.workers_per_type = 2;
  f.cache_dir = testing::shared_compile_cache();
  f.timing = [k](const FarmJob& job) {
    const auto it = estimates.find({job.workload, job.variant_kernel.variant_key});
    if (it == estimates.end()) return FakeOutcome{JobStatus::runtime_fault, {}, "unexpected job"};
    return FakeOutcome{JobStatus::ok, {k * it->second}, ""};
  };
  return make_inprocess_farm(std::move(f));
}

// Kinds of the model's workloads with at least `n` kept variants (what a fit can use).
std::set<ClusterKind> kinds_with(const TuneResult& r, size_t n) {
  std::map<ClusterKind, size_t> count;
  for (size_t wi = 0; wi < r.plan.workload_set.workloads.size(); ++wi)
    count[r.plan.workload_set.workloads[wi].kind] += r.plan.gpus[0].workloads[wi].kept.size();
  std::set<ClusterKind> out;
  for (const auto& [kind, c] : count)
    if (c >= n) out.insert(kind);
  return out;
}

// second's estimates / first's, per workload kind (the same for every variant of a kind).
std::map<ClusterKind, double> estimate_ratios(const TuneResult& first, const TuneResult& second) {
  std::map<ClusterKind, double> out;
  const auto& ws = first.plan.workload_set.workloads;
  for (size_t wi = 0; wi < ws.size(); ++wi) {
    const auto& a = first.plan.gpus[0].workloads[wi].kept;
    const auto& b = second.plan.gpus[0].workloads[wi].kept;
    EXPECT_EQ(a.size(), b.size());
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      const double ratio = b[i].estimate.seconds / a[i].estimate.seconds;
      const auto [it, fresh] = out.emplace(ws[wi].kind, ratio);
      if (!fresh) {
        EXPECT_NEAR(it->second, ratio, 1e-9) << cluster_kind_name(ws[wi].kind);
      }
    }
  }
  return out;
}

// A real copy of every result in the DB, from worker "node1": `edit` sets its measured time
// (and may change what else it records) before it is committed.
void commit_real_copies(TuningDb& db, const std::function<void(Measurement&)>& edit) {
  const WorkerInfo real = test_worker("node1", "h100", false);
  db.commit_worker(real);
  for (Measurement m : db.query({})) {
    m.worker = real.name;
    m.emulated = false;
    edit(m);
    summarize_samples(m);
    ASSERT_TRUE(db.commit_measurement(m));
  }
}

// block_k of a variant key, 0 without one.
int64_t block_k_of(const std::string& variant_key) {
  const std::optional<VariantKeyParts> k = parse_variant_key(variant_key);
  EXPECT_TRUE(k) << variant_key;
  if (!k) return 0;
  const auto bk = k->params.find("block_k");
  return bk == k->params.end() ? 0 : bk->second;
}

TEST(TuneCalibration, SecondTuneScalesEstimatesByTheMeasuredFactor) {
  constexpr double k = 1.6;
  auto db = make_memory_db();
  TuneOptions o = options();
  const TuneResult first = tune(kModel, *gpu_slower_by(k), *db, o);
  EXPECT_TRUE(first.calibration.factors.empty());  // an empty DB fits nothing
  const std::set<ClusterKind> fitted = kinds_with(first, 8);
  ASSERT_FALSE(fitted.empty());

  o.retune = true;  // measure again: the new results must not compound the factor
  const TuneResult second = tune(kModel, *gpu_slower_by(k), *db, o);
  for (const auto& [kind, ratio] : estimate_ratios(first, second)) {
    const double want = fitted.count(kind) ? k : 1.0;
    EXPECT_NEAR(ratio, want, 1e-6) << cluster_kind_name(kind);
    EXPECT_NEAR(second.calibration.factor("h100", kind), want, 1e-9) << cluster_kind_name(kind);
  }
  ASSERT_EQ(second.gpus[0].calibration_fit.size(), kinds_with(first, 1).size());
  // Results store the uncalibrated estimate: the same for the same variant in both runs.
  std::map<Key, std::set<double>> stored;
  for (const Measurement& m : db->query({}))
    stored[{m.workload, m.variant_key}].insert(std::round(m.estimate_us * 1e6));
  for (const auto& [key, values] : stored) EXPECT_EQ(values.size(), 1u) << key.second;
  // The run records the factors it used.
  const auto runs = db->runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_NE(runs[0].info.options_json.find("\"calibration\":{\"h100\":{}}"), std::string::npos)
      << runs[0].info.options_json;
  EXPECT_NE(runs[1].info.options_json.find(std::string("\"calibration\":{\"h100\":{\"") +
                                      cluster_kind_name(*fitted.begin()) + "\":1.6"),
            std::string::npos)
      << runs[1].info.options_json;

  o.retune = false;
  const TuneResult third = tune(kModel, *gpu_slower_by(k), *db, o);
  for (ClusterKind kind : fitted) EXPECT_NEAR(third.calibration.factor("h100", kind), k, 1e-9);
}

TEST(TuneCalibration, OffOrSetByTheConfigTheDbFitIsNotUsed) {
  constexpr double k = 2.5;
  auto db = make_memory_db();
  TuneOptions o = options();
  const TuneResult first = tune(kModel, *gpu_slower_by(k), *db, o);
  const std::set<ClusterKind> fitted = kinds_with(first, 8);
  ASSERT_GE(fitted.size(), 1u);

  o.calibration_from_db = false;
  const TuneResult off = tune(kModel, *gpu_slower_by(k), *db, o);
  EXPECT_TRUE(off.calibration.factors.empty());
  EXPECT_TRUE(off.gpus[0].calibration_fit.empty());
  for (const auto& [kind, ratio] : estimate_ratios(first, off)) EXPECT_DOUBLE_EQ(ratio, 1.0);

  o.calibration_from_db = true;
  const ClusterKind pinned = *fitted.begin();
  o.plan.calibration.set("h100", pinned, 0.5);
  const TuneResult config = tune(kModel, *gpu_slower_by(k), *db, o);
  for (const auto& [kind, ratio] : estimate_ratios(first, config))
    EXPECT_NEAR(ratio, kind == pinned ? 0.5 : (fitted.count(kind) ? k : 1.0), 1e-6)
        << cluster_kind_name(kind);
}

TEST(TuneCalibration, RealAndEmulatedResultsAreNeverMixed) {
  constexpr double k = 1.5;
  auto db = make_memory_db();
  TuneOptions o = options();
  const TuneResult first = tune(kModel, *gpu_slower_by(k), *db, o);  // emulated results, x1.5
  const std::set<ClusterKind> fitted = kinds_with(first, 8);
  ASSERT_FALSE(fitted.empty());
  // Real results of the same variants, 4x their estimate.
  commit_real_copies(*db, [](Measurement& m) { m.samples_us = {4 * m.estimate_us}; });

  const TuneResult emulated = tune(kModel, *gpu_slower_by(k), *db, o);
  o.emulated = false;  // a real tune (its in-process workers turn out emulated: no matter)
  const TuneResult real_tune = tune(kModel, *gpu_slower_by(k), *db, o);
  for (ClusterKind kind : fitted) {
    EXPECT_NEAR(emulated.calibration.factor("h100", kind), k, 1e-9) << cluster_kind_name(kind);
    EXPECT_NEAR(real_tune.calibration.factor("h100", kind), 4.0, 1e-9) << cluster_kind_name(kind);
  }
}


// Real results measured at 4x today's estimates but recorded with estimates twice today's, as
// an older model would have made them: the tune compares them with today's estimates of the
// same variants and fits 4, where the recorded estimates would give 2.
TEST(TuneCalibration, ResultsOfTheModelsWorkloadsAreComparedWithTodaysEstimates) {
  auto db = make_memory_db();
  TuneOptions o = options();
  const TuneResult first = tune(kModel, *gpu_slower_by(1.0), *db, o);
  const std::set<ClusterKind> fitted = kinds_with(first, 8);
  ASSERT_FALSE(fitted.empty());
  commit_real_copies(*db, [](Measurement& m) {
    m.samples_us = {4 * m.estimate_us};
    m.estimate_us *= 2;
  });
  o.emulated = false;
  const TuneResult real_tune = tune(kModel, *gpu_slower_by(1.0), *db, o);
  for (ClusterKind kind : fitted)
    EXPECT_NEAR(real_tune.calibration.factor("h100", kind), 4.0, 1e-9) << cluster_kind_name(kind);
}

// The model tuned once into db (emulated), then real copies of its results whose block_k 8
// variants ran 1.6x their estimate and the others at it.
void tune_with_block_k_8_slow(TuningDb& db) {
  tune(kModel, *gpu_slower_by(1.0), db, options());
  commit_real_copies(db, [](Measurement& m) {
    m.samples_us = {m.estimate_us * (block_k_of(m.variant_key) == 8 ? 1.6 : 1.0)};
  });
}

// The same model tuned again after its results fitted per-parameter factors that reorder its
// variants (block_k 8 measured 1.6x its estimate): the calibrated ranking keeps variants the
// first tune did not measure, but every workload already has as many results as the tune
// keeps, so nothing is measured (issue 30: a second tune measures nothing) and the lookup
// counts them as settled; --retune measures the kept set again.
TEST(TuneCalibration, ASecondTuneMeasuresNothingThoughItsCalibrationReordersTheVariants) {
  auto db = make_memory_db();
  TuneOptions o = options();
  tune_with_block_k_8_slow(*db);
  o.emulated = false;
  const size_t rows = db->query({}).size();
  const TuneResult again = tune(kModel, *gpu_slower_by(1.0), *db, o);
  ASSERT_FALSE(again.calibration.param_factors.empty());
  EXPECT_GT(again.gpus[0].variants_settled, 0);  // the factors did reorder the kept sets
  EXPECT_EQ(again.gpus[0].jobs, 0);
  EXPECT_EQ(db->query({}).size(), rows);
  o.retune = true;
  const TuneResult retuned = tune(kModel, *gpu_slower_by(1.0), *db, o);
  EXPECT_EQ(retuned.gpus[0].variants_settled, 0);
  EXPECT_GT(retuned.gpus[0].jobs, 0);
}

// The tune enumerates the model's variants once: the calibrate stage compares the DB with
// their uncalibrated estimates, the estimate stage scores them with the calibration. Its
// plan is plan_by_estimate's with the same calibration, estimate for estimate, with
// per-parameter factors and with ranking vectors (block_k 8 measured 1.6x its estimate).
TEST(TuneCalibration, TheTunesPlanIsPlanByEstimateWithItsCalibration) {
  auto db = make_memory_db();
  TuneOptions o = options();
  tune_with_block_k_8_slow(*db);
  o.emulated = false;
  const Graph g = cli::load_model(load_onnx(kModel), o.import, true).simplified;
  for (const bool rank : {false, true}) {
    SCOPED_TRACE(rank ? "ranking vectors" : "per-parameter factors");
    o.calibration_rank = rank;
    const TuneResult r = tune(kModel, *gpu_slower_by(1.0), *db, o);
    ASSERT_FALSE(rank ? r.calibration.rank_vectors.empty() : r.calibration.param_factors.empty());
    PlanOptions p = o.plan;
    p.calibration = r.calibration;
    const ModelPlan want = plan_by_estimate(g, o.gpus, p);
    ASSERT_EQ(r.plan.workload_set.workloads.size(), want.workload_set.workloads.size());
    ASSERT_EQ(r.plan.gpus.size(), 1u);
    int ranked = 0;
    for (size_t wi = 0; wi < want.workload_set.workloads.size(); ++wi) {
      ASSERT_EQ(r.plan.workload_set.workloads[wi].signature, want.workload_set.workloads[wi].signature);
      const WorkloadEstimate& got = r.plan.gpus[0].workloads[wi];
      const WorkloadEstimate& w = want.gpus[0].workloads[wi];
      EXPECT_EQ(got.variants_total, w.variants_total);
      ASSERT_EQ(got.kept.size(), w.kept.size()) << want.workload_set.workloads[wi].signature;
      for (size_t i = 0; i < w.kept.size(); ++i) {
        EXPECT_EQ(got.kept[i].variant.key(), w.kept[i].variant.key());
        EXPECT_EQ(got.kept[i].estimate.seconds, w.kept[i].estimate.seconds) << w.kept[i].variant.key();
        EXPECT_EQ(got.kept[i].estimate.rank_log, w.kept[i].estimate.rank_log) << w.kept[i].variant.key();
        ranked += w.kept[i].estimate.rank_log != 0;
      }
    }
    EXPECT_EQ(ranked > 0, rank);
    EXPECT_EQ(r.plan.gpus[0].cover.chosen, want.gpus[0].cover.chosen);
    EXPECT_EQ(r.plan.gpus[0].cover.total_cost, want.gpus[0].cover.total_cost);
  }
}

// Real results whose block_k 8 variants ran 1.6x their estimate (the others at it): a real
// tune fits per-parameter factors that price block_k 8 up; with --rank-calibration,
// conv_implicit_gemm gets a pairwise ranking vector in their place that ranks block_k 8
// slower; an emulated tune of the same DB fits none (its own results are emulated), and
// --no-param-calibration turns both off.
TEST(TuneCalibration, RealResultsFitPerParameterFactorsThatPriceTheSlowValueUp) {
  auto db = make_memory_db();
  TuneOptions o = options();
  const TuneResult first = tune(kModel, *gpu_slower_by(1.0), *db, o);
  std::map<std::string, std::set<int64_t>> block_ks;  // template -> values measured
  commit_real_copies(*db, [&](Measurement& m) {
    const int64_t bk = block_k_of(m.variant_key);
    if (bk != 0) block_ks[parse_variant_key(m.variant_key)->template_name].insert(bk);
    m.samples_us = {m.estimate_us * (bk == 8 ? 1.6 : 1.0)};
  });
  ASSERT_TRUE(block_ks.count("conv_implicit_gemm") && block_ks["conv_implicit_gemm"].count(8) &&
              block_ks["conv_implicit_gemm"].size() >= 2);

  const TuneResult emulated = tune(kModel, *gpu_slower_by(1.0), *db, o);
  EXPECT_TRUE(emulated.calibration.param_factors.empty());
  o.emulated = false;  // a real tune (its in-process workers turn out emulated: no matter)
  const TuneResult real_tune = tune(kModel, *gpu_slower_by(1.0), *db, o);
  const Calibration& c = real_tune.calibration;
  int compared = 0;
  for (const auto& [group, params] : c.param_factors) {
    const auto bk = params.find("block_k");
    if (std::get<3>(group) != "conv_implicit_gemm" || bk == params.end() || !bk->second.count(8)) continue;
    for (const auto& [value, factor] : bk->second) {
      if (value == 8) continue;
      // 1.6 shrunk by the ridge term (16 results against 128): above 1, never beyond 1.6
      EXPECT_GT(bk->second.at(8) / factor, 1.03) << value;
      EXPECT_LE(bk->second.at(8) / factor, 1.6 + 1e-9) << value;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
  EXPECT_NE(db->runs().back().info.options_json.find(" conv_implicit_gemm block_k=8\":"), std::string::npos)
      << db->runs().back().info.options_json;
  EXPECT_TRUE(c.rank_vectors.empty());  // --rank-calibration is off by default

  o.calibration_rank = true;
  const Calibration ranked = tune(kModel, *gpu_slower_by(1.0), *db, o).calibration;
  const Calibration::ParamGroup conv = {"h100", ClusterKind::conv, MathUnit::fp32, "conv_implicit_gemm"};
  ASSERT_TRUE(ranked.rank_vectors.count(conv));
  EXPECT_FALSE(ranked.param_factors.count(conv));
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& h100 = catalog.require("h100");
  std::map<bool, std::vector<double>> scores;  // block_k == 8 -> ranking scores
  for (const Measurement& m : db->query({})) {
    const std::optional<VariantKeyParts> k = parse_variant_key(m.variant_key);
    const std::optional<WorkloadRecord> w = db->find_workload(m.workload);
    if (m.emulated || !k || k->template_name != "conv_implicit_gemm" || !w || w->kind != ClusterKind::conv) continue;
    std::optional<WorkloadShape> shape = rank_shape_of_canonical(w->canonical);
    ASSERT_TRUE(shape) << w->canonical;
    shape->kind = ClusterKind::conv;
    scores[k->params.at("block_k") == 8].push_back(ranked.rank_log(h100, *shape, m.variant_key, m.estimate_us));
  }
  const auto mean = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); };
  ASSERT_FALSE(scores[true].empty() || scores[false].empty());
  EXPECT_GT(mean(scores[true]) - mean(scores[false]), std::log(1.2));
  EXPECT_NE(db->runs().back().info.options_json.find(" conv_implicit_gemm rank lbk\":"), std::string::npos)
      << db->runs().back().info.options_json;

  o.calibration_params = false;
  const Calibration off = tune(kModel, *gpu_slower_by(1.0), *db, o).calibration;
  EXPECT_TRUE(off.param_factors.empty());
  EXPECT_TRUE(off.rank_vectors.empty());
}

}  // namespace
}  // namespace dc
