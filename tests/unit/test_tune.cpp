// The tuning pipeline (coordinator/tune.h) with the in-process farm (the production
// JobExecutor on threads) and the in-memory or
// SQLite tuning DB: one result per job, every result committed, reuse across runs and
// models, --retune, selection on hand-controlled times, failures excluded, fallbacks,
// resume after a crash or an interrupt. The progress line: test_progress.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "estimator.h"
#include "estimator_testing.h"
#include "farm_inprocess.h"
#include "farm_testing.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "ir/index_bounds.h"
#include "model_loader.h"
#include "nvrtc.h"
#include "plan_build.h"
#include "plausibility.h"
#include "pass_testing.h"
#include "progress.h"
#include "sqlite.h"
#include "tune.h"
#include "tune_report.h"
#include "tune_stages.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

using JobSet = std::set<std::tuple<std::string, std::string, std::string>>;  // workload, key, gpu

const GpuCatalog& catalog() {
  static const GpuCatalog c = GpuCatalog::builtin();
  return c;
}

std::string example(const std::string& name) {
  return std::string(DC_SOURCE_DIR) + "/examples/" + name + "/model.onnx";
}

TuneOptions options(const std::vector<std::string>& gpus) {
  TuneOptions o;
  for (const auto& g : gpus) o.gpus.push_back(&catalog().require(g));
  o.emulated = true;
  o.check_winners = false;
  o.seed_k = 0;
  // Four variants per workload and GPU type, as examples/tune-quick.yaml: what these tests
  // check (jobs, results, selection, reuse) needs several, not 32, and each one is a real
  // NVRTC compile (the suite's time on 2 cores; tests that need other counts set their own).
  o.plan.prune.top_k = 4;
  o.worker_wait = std::chrono::milliseconds(2000);
  // One result per variant, as these tests count them: the finalists' second measurement on
  // the other worker is test_tune_cross_check.cpp's.
  o.cross_check = false;
  return o;
}

// The in-process farm: the production executor (NVRTC, emulated timing model) on threads,
// with one compile cache for the whole test binary. `timing` decides the winners where a
// test needs to.
InProcessFarmOptions farm_options(const std::vector<std::string>& gpus, FakeTiming timing = {},
                                  int workers = 2) {
  InProcessFarmOptions f;
  f.gpu_types = gpus;
  f.workers_per_type = workers;
  f.timing = std::move(timing);
  f.cache_dir = testing::shared_compile_cache();
  return f;
}

// What the estimator keeps, computed outside the pipeline: the jobs a cold tune must send.
struct Expected {
  Graph graph;
  ModelPlan plan;
  JobSet jobs;
};

Expected expected_for(const Graph& g, const TuneOptions& o) {
  Expected e;
  e.graph = g;
  e.plan = plan_by_estimate(g, o.gpus, o.plan);
  for (size_t gi = 0; gi < e.plan.gpus.size(); ++gi)
    for (size_t wi = 0; wi < e.plan.workload_set.workloads.size(); ++wi) {
      for (const auto& sv : e.plan.gpus[gi].workloads[wi].kept)
        e.jobs.emplace(e.plan.workload_set.workloads[wi].signature, sv.variant.key(),
                       o.gpus[gi]->name);
      if (o.measure_reference)  // the baseline, once per workload and GPU type
        e.jobs.emplace(e.plan.workload_set.workloads[wi].signature, reference_variant().key(),
                       o.gpus[gi]->name);
    }
  return e;
}

Expected expected_for(const std::string& path, const TuneOptions& o) {
  return expected_for(cli::load_model(load_onnx(path), o.import, true).simplified, o);
}

// Jobs that measure a variant (not a workload's reference kernel, the baseline).
int64_t variant_jobs(const JobSet& jobs) {
  int64_t n = 0;
  for (const auto& j : jobs) n += is_reference_key(std::get<1>(j)) ? 0 : 1;
  return n;
}

JobSet rows(const TuningDb& db, std::optional<JobStatus> status = std::nullopt) {
  MeasurementQuery q;
  q.status = status;
  JobSet out;
  for (const auto& m : db.query(q)) out.emplace(m.workload, m.variant_key, m.gpu_type);
  return out;
}

size_t row_count(const TuningDb& db) { return db.query(MeasurementQuery{}).size(); }

uint64_t fnv(const std::string& s) { return std::stoull(fnv1a_hex(s), nullptr, 16); }

// A hand-controlled time: a base per workload plus a small per-variant offset below 0.1 us.
double offset_us(const std::string& key) { return static_cast<double>(fnv(key) % 97) * 0.001; }

FakeOutcome ok_time(double us) { return FakeOutcome{JobStatus::ok, {us}, ""}; }

// The kept variants of a workload on the first GPU, fastest first under offset_us.
std::vector<std::string> keys_by_offset(const Expected& e, size_t wi) {
  std::vector<std::string> keys;
  for (const auto& sv : e.plan.gpus[0].workloads[wi].kept) keys.push_back(sv.variant.key());
  std::sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
    return std::make_pair(offset_us(a), a) < std::make_pair(offset_us(b), b);
  });
  return keys;
}

// The run deadline grows with the workload's floor on the device: a 2048^3 GEMM on PoCL's
// CPU device (floor ~0.11 s) gets 1000 floors, on an H100 the configured 30 s.
TEST(TuneGenerate, RunDeadlineGrowsWithTheWorkloadsFloor) {
  using std::chrono::milliseconds;
  const Workload big = testing::matmul_2d(2048, 2048, 2048);
  const GpuSpec& cpu = catalog().require("pocl-cpu");
  const GpuSpec& h100 = catalog().require("h100");
  const auto on_cpu = tune_stage::run_deadline(big, cpu, milliseconds(30000));
  EXPECT_NEAR(static_cast<double>(on_cpu.count()), 1000 * 1000 * floor_seconds(big, cpu), 1.0);
  EXPECT_GT(on_cpu, milliseconds(60000));
  EXPECT_EQ(tune_stage::run_deadline(big, h100, milliseconds(30000)), milliseconds(30000));
  EXPECT_EQ(tune_stage::run_deadline(testing::matmul_2d(64, 64, 64), cpu, milliseconds(30000)), milliseconds(30000));
}

// PoCL's CPU device is timed with hot caches: an elementwise kernel over 768 KiB ran at 16 GB/s
// from the LLC and was called implausible against the 12 GB/s DRAM figure. Work that fits in
// the LLC has no DRAM floor there; larger work, and every GPU, keep it.
TEST(Plausibility, HotCacheCpuDeviceHasNoDramFloorForWorkInItsLastLevelCache) {
  const GpuSpec& cpu = catalog().require("pocl-cpu");
  const GpuSpec& h100 = catalog().require("h100");
  const Workload small = testing::add_1d(64 * 1024);  // 768 KiB
  EXPECT_NEAR(plausibility_floor_us(small, cpu, "fp32"), 1e6 * static_cast<double>(small.flops) / peak_flops(cpu, "fp32"), 1e-9);
  EXPECT_NEAR(plausibility_floor_us(small, h100, "fp32"), 1e6 * floor_seconds(small, h100), 1e-9);
  const Workload big = testing::add_1d(16 << 20);  // 192 MiB, above the 32 MiB LLC
  EXPECT_NEAR(plausibility_floor_us(big, cpu, "fp32"), 1e6 * floor_seconds(big, cpu), 1e-6);
  EXPECT_GT(plausibility_floor_us(big, cpu, "fp32"), 1e4);
}

TEST(Tune, EveryJobYieldsOneResultAndEveryResultIsCommitted) {
  const TuneOptions o = options({"h100"});
  const Expected e = expected_for(example("tiny_cnn"), o);
  ASSERT_GT(e.jobs.size(), 100u);
  auto db = make_memory_db();
  auto farm = make_inprocess_farm(farm_options({"h100"}));
  const TuneResult r = tune(example("tiny_cnn"), *farm, *db, o);

  EXPECT_EQ(r.model_name, "tiny_cnn");
  EXPECT_EQ(r.jobs, static_cast<int64_t>(e.jobs.size()));
  EXPECT_EQ(r.results, r.jobs);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(rows(*db), e.jobs);                // exactly the kept variants ...
  EXPECT_EQ(row_count(*db), e.jobs.size());    // ... each once
  ASSERT_EQ(r.gpus.size(), 1u);
  const GpuTuneResult& g = r.gpus[0];
  EXPECT_EQ(g.by_status.at(JobStatus::ok), r.jobs);
  EXPECT_EQ(g.ok_variants, variant_jobs(e.jobs));
  EXPECT_LT(g.ok_variants, r.jobs);  // one reference kernel per workload besides
  EXPECT_TRUE(r.complete());
  // Every node is covered exactly once by the chosen clusters.
  std::vector<int> covered(r.graph.nodes.size(), 0);
  for (const auto& c : g.choices)
    for (size_t n : r.plan.candidates[c.candidate].nodes) ++covered[n];
  EXPECT_EQ(covered, std::vector<int>(r.graph.nodes.size(), 1));
  EXPECT_EQ(g.reference_fallbacks, 0);
  // The run and its plan are in the DB.
  const auto runs = db->runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, RunStatus::ok);
  const auto plans = db->plans(runs[0].id);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].choices.size(), g.choices.size());
  EXPECT_DOUBLE_EQ(plans[0].measured_total_us, g.measured_total_us);
  EXPECT_EQ(plans[0].source, TimingSource::emulated);
}

TEST(Tune, SecondTuneWithTheSameDbMeasuresNothing) {
  const TuneOptions o = options({"h100"});
  auto db = make_memory_db();
  const TuneResult first = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  const size_t n = row_count(*db);
  const TuneResult second = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  EXPECT_EQ(second.jobs, 0);
  EXPECT_EQ(second.results, 0);
  // Every planned variant reused (the reference kernels, one per workload, are not variants).
  EXPECT_EQ(second.gpus[0].variants_reused,
            first.jobs - static_cast<int64_t>(first.plan.workload_set.workloads.size()));
  EXPECT_EQ(row_count(*db), n);
  // The same selection, from the DB alone.
  ASSERT_EQ(second.gpus[0].choices.size(), first.gpus[0].choices.size());
  for (size_t i = 0; i < first.gpus[0].choices.size(); ++i)
    EXPECT_EQ(second.gpus[0].choices[i].variant_key, first.gpus[0].choices[i].variant_key);
  EXPECT_DOUBLE_EQ(second.gpus[0].measured_total_us, first.gpus[0].measured_total_us);
}

TEST(Tune, RetuneMeasuresEverythingAgain) {
  TuneOptions o = options({"h100"});
  auto db = make_memory_db();
  const TuneResult first = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  o.retune = true;
  const TuneResult second = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  EXPECT_EQ(second.jobs, first.jobs);
  EXPECT_EQ(second.gpus[0].variants_reused, 0);
  EXPECT_EQ(row_count(*db), 2 * static_cast<size_t>(first.jobs));
}

// x -> Relu -> Sigmoid [-> Tanh] -> y: the longer chain contains every workload of the
// shorter one (same shapes) plus those with Tanh.
Graph chain(bool with_tanh) {
  Graph g;
  g.name = with_tanh ? "chain3" : "chain2";
  g.opset = 17;
  testing::add_input(g, "x", {8, 256});
  testing::add_node(g, "Relu", {"x"}, {"r"});
  testing::add_node(g, "Sigmoid", {"r"}, {with_tanh ? "s" : "y"});
  if (with_tanh) testing::add_node(g, "Tanh", {"s"}, {"y"});
  g.outputs = {"y"};
  return testing::with_types(g);
}

TEST(Tune, SecondModelMeasuresOnlyItsNewWorkloads) {
  TuneOptions o = options({"h100"});
  const Expected a = expected_for(chain(false), o);
  const Expected b = expected_for(chain(true), o);
  JobSet shared, fresh;
  for (const auto& j : b.jobs) (a.jobs.count(j) ? shared : fresh).insert(j);
  ASSERT_FALSE(shared.empty()) << "the test needs workloads common to both models";
  ASSERT_FALSE(fresh.empty());

  auto db = make_memory_db();
  o.model_name = "chain2";
  o.model_sha256 = std::string(64, 'a');
  const TuneResult ra = tune_graph(a.graph, *make_inprocess_farm(farm_options({"h100"})), *db, o);
  EXPECT_EQ(ra.jobs, static_cast<int64_t>(a.jobs.size()));
  o.model_name = "chain3";
  o.model_sha256 = std::string(64, 'b');
  const TuneResult rb = tune_graph(b.graph, *make_inprocess_farm(farm_options({"h100"})), *db, o);
  EXPECT_EQ(rb.jobs, static_cast<int64_t>(fresh.size()));
  EXPECT_EQ(rb.gpus[0].variants_reused, variant_jobs(shared));
  JobSet all = a.jobs;
  all.insert(b.jobs.begin(), b.jobs.end());
  EXPECT_EQ(rows(*db), all);
  EXPECT_EQ(row_count(*db), all.size());
}

// Base times per cluster pattern (10 us + 1 us per node, with a few made slow), so that the
// best cover of tiny_cnn is known: every conv+relu fused, the residual conv alone with
// add+relu fused into the depthwise conv+relu that reads it (conv+add+relu and conv+add are
// slow), pools unfused from their relus.
double tiny_cnn_base_us(const std::string& pattern, size_t nodes) {
  if (pattern == "conv+add+relu") return 100;
  if (pattern == "conv+add") return 15;
  if (pattern == "relu+maxpool" || pattern == "relu+averagepool") return 20;
  return 10 + static_cast<double>(nodes);
}

TEST(Tune, SelectionPicksTheKnownBestCoverForHandControlledTimes) {
  const TuneOptions o = options({"h100"});
  const Expected e = expected_for(example("tiny_cnn"), o);
  std::map<std::string, double> base;  // by workload signature
  for (size_t c = 0; c < e.plan.candidates.size(); ++c)
    base[e.plan.workload_set.workloads[e.plan.workload_set.candidate_workload[c]].signature] =
        tiny_cnn_base_us(e.plan.candidates[c].pattern, e.plan.candidates[c].nodes.size());
  auto timing = [&](const FarmJob& j) { return ok_time(base.at(j.workload) + offset_us(j.variant_kernel.variant_key)); };
  auto db = make_memory_db();
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"}, timing)), *db, o);
  const GpuTuneResult& g = r.gpus[0];

  std::multiset<std::string> patterns;
  double want_total = 0;
  for (const auto& c : g.choices) {
    patterns.insert(r.plan.candidates[c.candidate].pattern);
    const std::string best = keys_by_offset(e, c.workload).front();
    EXPECT_EQ(c.variant_key, best);
    EXPECT_DOUBLE_EQ(c.measured_us, base.at(r.plan.workload_set.workloads[c.workload].signature) + offset_us(best));
    want_total += offset_us(best);
  }
  // The residual's add+relu is computed by the depthwise conv+relu after it, as that conv's X
  // (candidates rule 3's cone for Convs): one 14 us kernel where add+relu and conv+relu
  // would take 24.
  const std::multiset<std::string> want = {"conv+relu", "conv+relu", "conv+relu", "conv",
                                           "add+relu+conv+relu", "maxpool", "averagepool",
                                           "globalaveragepool", "flatten", "gemm"};
  EXPECT_EQ(patterns, want);
  // 3 x 12 (conv+relu) + 11 (conv) + 14 (add+relu+conv+relu) + 5 x 11 (single nodes) = 116 us.
  EXPECT_NEAR(g.measured_total_us, 116 + want_total, 1e-9);
  EXPECT_TRUE(g.cover.exact);
}

TEST(Tune, ReferenceKernelIsMeasuredOncePerWorkloadAndNeverChosen) {
  TuneOptions o = options({"h100"});
  const Expected e = expected_for(example("tiny_cnn"), o);
  // The reference kernel the fastest of all: still never chosen, never a seed.
  auto timing = [](const FarmJob& j) { return ok_time(is_reference_key(j.variant_kernel.variant_key) ? 0.5 : 5.0); };
  auto db = make_memory_db();
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"}, timing)), *db, o);
  const auto& workloads = r.plan.workload_set.workloads;
  for (const auto& w : workloads) {
    MeasurementQuery q;
    q.workload = w.signature;
    q.variant_key = reference_variant().key();
    const auto ref = db->query(q);
    ASSERT_EQ(ref.size(), 1u) << w.signature;
    EXPECT_EQ(ref[0].estimate_us, 0);  // no estimate: never in the calibration fit
    for (const auto& m : db->top_k(w.signature, "h100", TimingSource::emulated, 100))
      EXPECT_FALSE(is_reference_key(m.variant_key));
  }
  for (const auto& c : r.gpus[0].choices) {
    EXPECT_FALSE(c.reference);
    EXPECT_FALSE(is_reference_key(c.variant_key));
    EXPECT_DOUBLE_EQ(c.measured_us, 5.0);
  }
  // With measure_reference off, no reference kernel is sent.
  o.measure_reference = false;
  auto db2 = make_memory_db();
  const TuneResult r2 = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db2, o);
  EXPECT_EQ(r2.jobs, variant_jobs(e.jobs));
  EXPECT_EQ(r.jobs, r2.jobs + static_cast<int64_t>(workloads.size()));
}

TEST(Tune, FailedVariantsAreRecordedAndExcludedFromSelection) {
  const TuneOptions o = options({"h100"});
  const Expected e = expected_for(example("tiny_cnn"), o);
  // The gemm workload: its fastest variant fails to compile, the next computes wrong
  // results, so the third fastest must win.
  size_t gemm = e.plan.workload_set.workloads.size();
  for (size_t w = 0; w < e.plan.workload_set.workloads.size(); ++w)
    if (e.plan.workload_set.workloads[w].kind == ClusterKind::gemm) gemm = w;
  ASSERT_LT(gemm, e.plan.workload_set.workloads.size());
  const auto keys = keys_by_offset(e, gemm);
  ASSERT_GE(keys.size(), 3u);
  const std::string gemm_sig = e.plan.workload_set.workloads[gemm].signature;
  auto timing = [&](const FarmJob& j) {
    if (j.workload == gemm_sig && j.variant_kernel.variant_key == keys[0])
      return FakeOutcome{JobStatus::compile_error, {}, "error: too many resources"};
    if (j.workload == gemm_sig && j.variant_kernel.variant_key == keys[1])
      return FakeOutcome{JobStatus::wrong_result, {}, "relative L2 error 0.3"};
    return ok_time(10 + offset_us(j.variant_kernel.variant_key));
  };
  auto db = make_memory_db();
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"}, timing)), *db, o);
  const GpuTuneResult& g = r.gpus[0];
  EXPECT_EQ(r.results, r.jobs);
  EXPECT_EQ(g.by_status.at(JobStatus::compile_error), 1);
  EXPECT_EQ(g.by_status.at(JobStatus::wrong_result), 1);
  EXPECT_EQ(g.by_status.at(JobStatus::ok), r.jobs - 2);
  EXPECT_EQ(g.failed_variants.at(JobStatus::compile_error), 1);
  EXPECT_EQ(g.failed_variants.at(JobStatus::wrong_result), 1);
  EXPECT_EQ(g.ok_variants, r.jobs - 2 - static_cast<int64_t>(r.plan.workload_set.workloads.size()));
  EXPECT_EQ(rows(*db, JobStatus::compile_error), (JobSet{{gemm_sig, keys[0], "h100"}}));
  EXPECT_EQ(rows(*db, JobStatus::wrong_result), (JobSet{{gemm_sig, keys[1], "h100"}}));
  EXPECT_EQ(g.best_key[gemm], keys[2]);
  bool chosen = false;
  for (const auto& c : g.choices)
    if (c.workload == gemm) {
      chosen = true;
      EXPECT_EQ(c.variant_key, keys[2]);
    }
  EXPECT_TRUE(chosen);
}

TEST(Tune, GpuTypeWithoutResultsMakesTheTuneIncomplete) {
  const TuneOptions o = options({"h100", "a100"});
  auto timing = [](const FarmJob& j) {
    if (j.gpu_type == "a100") return FakeOutcome{JobStatus::compile_error, {}, "unsupported arch"};
    return ok_time(5);
  };
  auto db = make_memory_db();
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100", "a100"}, timing)), *db, o);
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_TRUE(r.gpus[0].has_results());
  EXPECT_FALSE(r.gpus[1].has_results());
  EXPECT_GT(r.gpus[1].results, 0);
  EXPECT_TRUE(r.gpus[1].choices.empty() || r.gpus[1].reference_fallbacks ==
                                                 static_cast<int>(r.gpus[1].choices.size()));
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(db->runs().at(0).status, RunStatus::failed);
  // Only the GPU type with results gets a plan.
  const auto plans = db->plans(r.run_id);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].gpu_type, "h100");
}

TEST(Tune, ResumesAfterACrashWithoutLossOrDuplicates) {
  testing::TempDir dir;
  const std::string path = dir.file("tune.db");
  const TuneOptions o = options({"h100"});
  const Expected e = expected_for(example("tiny_cnn"), o);
  constexpr int64_t kBeforeCrash = 100;
  JobSet before;
  {
    auto db = open_tuning_db(path);
    InProcessFarmOptions f = farm_options({"h100"});
    f.throw_after_results = kBeforeCrash;
    auto farm = make_inprocess_farm(f);
    EXPECT_THROW(tune(example("tiny_cnn"), *farm, *db, o), std::runtime_error);
    EXPECT_EQ(row_count(*db), static_cast<size_t>(kBeforeCrash));
    EXPECT_EQ(db->runs().at(0).status, RunStatus::failed);
    before = rows(*db);
  }
  auto db = open_tuning_db(path);
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  EXPECT_EQ(r.jobs, static_cast<int64_t>(e.jobs.size()) - kBeforeCrash);
  EXPECT_EQ(r.gpus[0].variants_reused, variant_jobs(before));  // reference kernels are not variants
  EXPECT_EQ(rows(*db), e.jobs);
  EXPECT_EQ(row_count(*db), e.jobs.size());
  sqlite::Connection conn(path, true);
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM measurements"), static_cast<int64_t>(e.jobs.size()));
  // The GPU busy fraction the summary printed is the one stored (migration 0005): one row
  // per device that sent results; the crashed run recorded none. (The in-process farm's
  // threads report no run phase, so the figures are 0 here; DcDb.ModelsWorkloadsRuns and
  // TuningDbTest.GpuBusyRecords* check non-zero ones.)
  const GpuTuneResult& g = r.gpus[0];
  ASSERT_EQ(db->runs().size(), 2u);
  EXPECT_TRUE(db->gpu_busy(db->runs()[0].id).empty());
  const auto busy = db->gpu_busy(db->runs()[1].id);
  ASSERT_EQ(busy.size(), g.device_busy_seconds.size());
  ASSERT_GE(busy.size(), 1u);
  for (const auto& b : busy) {
    EXPECT_EQ(b.busy_seconds, g.device_busy_seconds.at(b.worker));
    EXPECT_EQ(b.measure_seconds, g.measure_seconds);
    EXPECT_GT(b.measure_seconds, 0);
  }
  EXPECT_DOUBLE_EQ(gpu_busy_fraction(busy), g.gpu_busy_fraction());
  sqlite::Query stored = conn.query("SELECT busy_fraction FROM run_gpu_busy_fraction WHERE run_id = ?");
  stored.bind(1, db->runs()[1].id);
  ASSERT_TRUE(stored.step());
  EXPECT_DOUBLE_EQ(stored.real(0), g.gpu_busy_fraction());
  const std::string summary = tune_gpu_summary(r, g);
  const std::string line = fmt::format("GPU busy   {:.1f}% of the measure stage", 100 * stored.real(0));
  if (g.gpu_busy_fraction() > 0) {
    EXPECT_NE(summary.find(line), std::string::npos) << summary;
  }
  sqlite::Query q = conn.query("PRAGMA integrity_check");
  ASSERT_TRUE(q.step());
  EXPECT_EQ(q.text(0), "ok");
}

TEST(Tune, APlantedInternalErrorIsNeverOk) {
  // Every job of one variant ends in internal_error (a test fault of the emulated devices):
  // the tune must not say ok, and the summary, the totals and the run in the DB say how many
  // jobs and workloads were affected.
  TuneOptions o = options({"h100"});
  o.plan.prune.top_k = 2;  // a short tune
  const Expected e = expected_for(example("tiny_cnn"), o);
  std::string victim;  // a variant key of the first workload with kept variants
  for (size_t wi = 0; victim.empty() && wi < e.plan.workload_set.workloads.size(); ++wi)
    if (!e.plan.gpus[0].workloads[wi].kept.empty()) victim = e.plan.gpus[0].workloads[wi].kept.front().variant.key();
  ASSERT_FALSE(victim.empty());
  InProcessFarmOptions f = farm_options({"h100"});
  f.faults.internal_error_on = victim;
  auto db = make_memory_db();
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(f), *db, o);
  const GpuTuneResult& g = r.gpus[0];
  EXPECT_TRUE(g.has_results());  // the other variants were measured ...
  EXPECT_FALSE(r.complete());    // ... but the tune is not ok
  int64_t victims = 0;           // the variant key may recur in other workloads
  for (const auto& j : e.jobs) victims += std::get<1>(j) == victim;
  EXPECT_EQ(r.internal_error_jobs(), victims);
  EXPECT_EQ(r.internal_error_workloads(), victims);
  EXPECT_NE(tune_gpu_summary(r, g).find(fmt::format("INTERNAL ERRORS  {} jobs of {} workloads", victims, victims)),
            std::string::npos) << tune_gpu_summary(r, g);
  EXPECT_NE(tune_totals(r).find(fmt::format("INTERNAL ERRORS: {} jobs, {} workloads", victims, victims)),
            std::string::npos) << tune_totals(r);
  ASSERT_EQ(db->runs().size(), 1u);
  EXPECT_EQ(db->runs()[0].status, RunStatus::failed);
  EXPECT_EQ(db->runs()[0].internal_error_jobs, victims);
  EXPECT_EQ(db->runs()[0].internal_error_workloads, victims);
  // Never recorded: a later tune without the fault measures them.
  EXPECT_EQ(row_count(*db), e.jobs.size() - static_cast<size_t>(victims));
}

TEST(Tune, AStaleSourceHashIsMeasuredAgain) {
  // A result answers only for the source that ran: after a row's source_hash changes (as a
  // template change would make it differ from the source generated today), the next tune
  // measures that variant again and selection never uses the stale row.
  testing::TempDir dir;
  const std::string path = dir.file("tune.db");
  TuneOptions o = options({"h100"});
  o.plan.prune.top_k = 2;  // three tunes: keep them short
  {
    auto db = open_tuning_db(path);
    tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  }
  int64_t row = 0;
  std::string workload, key;
  {
    sqlite::Connection conn(path, false);
    sqlite::Query q = conn.query(
        "SELECT m.id, v.workload, v.key FROM measurements m JOIN variants v ON v.id = m.variant_id "
        "WHERE m.status = 'ok' AND v.template <> 'reference' ORDER BY m.id LIMIT 1");
    ASSERT_TRUE(q.step());
    row = q.int64(0);
    workload = q.text(1);
    key = q.text(2);
    q.run();
    conn.query("UPDATE measurements SET source_hash = 'ffffffffffffffff' WHERE id = ?").bind(1, row).run();
  }
  auto db = open_tuning_db(path);
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  EXPECT_EQ(r.jobs, 1);  // that variant alone, measured again
  EXPECT_EQ(r.results, 1);
  MeasurementQuery mq;
  mq.workload = workload;
  mq.variant_key = key;
  const auto again = db->query(mq);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].source_hash, "ffffffffffffffff");
  EXPECT_NE(again[1].source_hash, again[0].source_hash);
  // The current source's row is the one selection may use.
  mq.current_source_only = true;
  const auto current = db->query(mq);
  ASSERT_EQ(current.size(), 1u);
  EXPECT_EQ(current[0].source_hash, again[1].source_hash);
  // A third tune reuses everything.
  EXPECT_EQ(tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o).jobs, 0);
}

TEST(Tune, AnFp16TuneAfterAnFp32TuneAppliesNoFp32Factor) {
  // The quickstart's order: an fp32 tune, then an fp16 tune on the same DB. The fp32 results
  // fit factors (the test checks they would move estimates), but none may be applied to the
  // fp16 plan: its estimate equals the uncalibrated `plan --precision fp16` estimate until
  // fp16 results exist.
  auto db = make_memory_db();
  TuneOptions o32 = options({"h100"});
  o32.measure_reference = false;
  o32.plan.prune.top_k = 6;  // enough results per kind to fit a factor (8), short tunes
  tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o32);
  int fp32_factors = 0;
  for (const FittedFactor& f : fit_calibration(db->estimator_ratios("h100", TimingSource::emulated)))
    fp32_factors += f.used && std::abs(f.factor - 1) > 0.01;
  ASSERT_GT(fp32_factors, 0) << "the fp32 tune fitted no factor: the test would prove nothing";

  TuneOptions o16 = o32;
  o16.plan.precision = Precision::fp16;
  o16.plan.space.precisions = math_paths(Precision::fp16);
  const Graph g16 = cli::load_model(load_onnx(example("tiny_cnn")), o16.import, true, Precision::fp16).simplified;
  const double uncalibrated_us = plan_by_estimate(g16, o16.gpus, o16.plan).gpus[0].cover.total_cost * 1e6;
  const TuneResult r16 = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o16);
  EXPECT_TRUE(r16.calibration.factors.empty());
  EXPECT_TRUE(r16.calibration.unit_factors.empty());
  EXPECT_NEAR(r16.gpus[0].estimate_cover_us, uncalibrated_us, 1e-9 * uncalibrated_us);
  // Its own results count for the next fp16 tune.
  EXPECT_FALSE(db->estimator_ratios("h100", TimingSource::emulated, "f16").empty());
}

// ids i64 [2, 8] -> Gather(embedding [50, 32]) -> MatMul([32, 16]) -> y: token ids read as
// indices of a weight, as every language model starts.
Graph embedding_model() {
  Graph g;
  g.name = "embedding";
  g.opset = 17;
  testing::add_input(g, "ids", {2, 8}, DType::i64);
  testing::add_initializer(g, "emb", testing::random_tensor({50, 32}, 3));
  testing::add_initializer(g, "w", testing::random_tensor({32, 16}, 4));
  testing::add_node(g, "Gather", {"emb", "ids"}, {"e"}, testing::attrs({{"axis", int64_t{0}}}));
  testing::add_node(g, "MatMul", {"e", "w"}, {"y"});
  g.tensors["e"] = {DType::f32, {2, 8, 32}};
  g.tensors["y"] = {DType::f32, {2, 8, 16}};
  g.outputs = {"y"};
  return g;
}

TEST(Tune, AnEmbeddingGatherIsMeasuredAndChecked) {
  // The worker draws the token ids from the index bound the job carries: no internal error
  // (it once rebuilt a graph it could not type), and the Gather's workload gets an ok,
  // host-emulator-checked result.
  TuneOptions o = options({"h100"});
  o.check_winners = true;
  o.model_name = "embedding";
  o.model_sha256 = std::string(64, 'e');
  auto db = make_memory_db();
  const TuneResult r = tune_graph(embedding_model(), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  const GpuTuneResult& g = r.gpus[0];
  EXPECT_EQ(r.internal_error_jobs(), 0);
  EXPECT_EQ(g.by_status.count(JobStatus::internal_error), 0u);
  EXPECT_TRUE(r.complete());
  const auto& ws = r.plan.workload_set.workloads;
  int gathers = 0;
  for (size_t wi = 0; wi < ws.size(); ++wi) {
    if (ws[wi].canonical.find("Gather") == std::string::npos) continue;
    ++gathers;
    EXPECT_GT(g.best_us[wi], 0) << ws[wi].canonical;
    EXPECT_EQ(input_index_bounds(ws[wi].graph).size(), ws[wi].graph.inputs.size());
  }
  EXPECT_GT(gathers, 0);
  bool checked_gather = false;
  for (const ClusterChoice& c : g.choices)
    checked_gather |= c.checked && ws[c.workload].canonical.find("Gather") != std::string::npos;
  EXPECT_TRUE(checked_gather) << tune_gpu_summary(r, g);
}

TEST(Tune, AWorkerReportingTimesTenTimesTooFastNeverWins) {
  // x [4096, 4096] -> Relu: bandwidth bound, every variant within a few times of its floor
  // (128 MB over 3.35 TB/s). One of two workers reports every time 10x too fast (a test
  // fault): below the floor, so its results are implausible, never selected, and it is named.
  Graph g;
  g.name = "relu_big";
  g.opset = 17;
  testing::add_input(g, "x", {4096, 4096});
  testing::add_node(g, "Relu", {"x"}, {"y"});
  g.tensors["y"] = {DType::f32, {4096, 4096}};
  g.outputs = {"y"};
  TuneOptions o = options({"h100"});
  o.model_name = "relu_big";
  o.model_sha256 = std::string(64, 'r');
  InProcessFarmOptions f = farm_options({"h100"});
  f.faults.time_factor = 0.1;
  f.faulty_worker = 1;
  f.job_delay = std::chrono::milliseconds(20);  // both workers get jobs
  const std::string liar = "inprocess/h100-1", honest = "inprocess/h100-0";
  auto db = make_memory_db();
  const TuneResult r = tune_graph(g, *make_inprocess_farm(f), *db, o);
  const GpuTuneResult& gr = r.gpus[0];
  ASSERT_EQ(gr.implausible_by_worker.size(), 1u) << tune_gpu_summary(r, gr);
  EXPECT_EQ(gr.implausible_by_worker.begin()->first, liar);
  EXPECT_GT(gr.implausible_by_worker.begin()->second, 0);
  EXPECT_NE(tune_gpu_summary(r, gr).find("IMPLAUSIBLE  worker " + liar), std::string::npos);
  MeasurementQuery q;
  q.status = JobStatus::implausible;
  const auto implausible = db->query(q);
  EXPECT_EQ(static_cast<int64_t>(implausible.size()), gr.implausible_by_worker.at(liar));
  for (const Measurement& m : implausible) {
    EXPECT_EQ(m.worker, liar);
    EXPECT_NE(m.error.find("below the variant's floor"), std::string::npos) << m.error;
  }
  // The winner's time is the honest worker's.
  ASSERT_EQ(gr.choices.size(), 1u);
  ASSERT_FALSE(gr.choices[0].reference);
  MeasurementQuery w;
  w.variant_key = gr.choices[0].variant_key;
  w.status = JobStatus::ok;
  const auto winner = db->query(w);
  ASSERT_FALSE(winner.empty());
  for (const Measurement& m : winner) EXPECT_EQ(m.worker, honest);
  // Not final: nothing about the variant, so a later tune (on honest workers) measures it.
  InProcessFarmOptions fixed = farm_options({"h100"});
  EXPECT_EQ(tune_graph(g, *make_inprocess_farm(fixed), *db, o).jobs, static_cast<int64_t>(implausible.size()));
}

TEST(Tune, StopKeepsWhatArrivedAndARerunMeasuresTheRest) {
  TuneOptions o = options({"h100"});
  const Expected e = expected_for(example("tiny_cnn"), o);
  std::atomic<bool> stop{false};
  std::atomic<int> seen{0};
  o.stop = &stop;
  auto timing = [&](const FarmJob&) {
    if (++seen == 50) stop.store(true);
    return ok_time(3);
  };
  auto db = make_memory_db();
  InProcessFarmOptions f = farm_options({"h100"}, timing);
  f.job_delay = std::chrono::milliseconds(1);
  const TuneResult first = tune(example("tiny_cnn"), *make_inprocess_farm(f), *db, o);
  EXPECT_TRUE(first.interrupted);
  EXPECT_GE(first.results, 49);
  EXPECT_LT(first.results, first.jobs);
  EXPECT_EQ(row_count(*db), static_cast<size_t>(first.results));
  EXPECT_EQ(db->runs().at(0).status, RunStatus::interrupted);

  stop.store(false);
  o.stop = nullptr;
  const TuneResult second = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  EXPECT_FALSE(second.interrupted);
  EXPECT_EQ(second.jobs, static_cast<int64_t>(e.jobs.size()) - first.results);
  EXPECT_EQ(rows(*db), e.jobs);
  EXPECT_EQ(row_count(*db), e.jobs.size());
}

TEST(Tune, WinnerFailingTheEmulatorCheckIsReplacedByTheNextBest) {
  TuneOptions o = options({"h100"});
  o.check_winners = true;
  const Expected e = expected_for(example("tiny_cnn"), o);
  size_t gemm = 0;
  for (size_t w = 0; w < e.plan.workload_set.workloads.size(); ++w)
    if (e.plan.workload_set.workloads[w].kind == ClusterKind::gemm) gemm = w;
  const auto keys = keys_by_offset(e, gemm);
  const std::string gemm_sig = e.plan.workload_set.workloads[gemm].signature;
  std::atomic<int> checks{0};
  auto timing = [&](const FarmJob& j) {
    if (j.check_on_emulator) {
      ++checks;
      if (j.workload == gemm_sig && j.variant_kernel.variant_key == keys[0])
        return FakeOutcome{JobStatus::wrong_result, {}, "emulator: output differs"};
    }
    return ok_time(10 + offset_us(j.variant_kernel.variant_key));
  };
  auto db = make_memory_db();
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"}, timing)), *db, o);
  const GpuTuneResult& g = r.gpus[0];
  EXPECT_EQ(g.checks_failed, 1);
  EXPECT_EQ(g.best_key[gemm], keys[1]);
  std::set<std::pair<size_t, std::string>> winners;
  for (const auto& c : g.choices) {
    EXPECT_TRUE(c.checked) << c.variant_key;
    winners.emplace(c.workload, c.variant_key);
  }
  // One check per distinct winner, plus the one that failed.
  EXPECT_EQ(checks.load(), static_cast<int>(winners.size()) + 1);
  EXPECT_EQ(r.results, r.jobs);

  // A second tune trusts the checks in the DB: nothing is sent at all.
  checks = 0;
  const TuneResult again = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"}, timing)), *db, o);
  EXPECT_EQ(again.jobs, 0);
  EXPECT_EQ(checks.load(), 0);
  for (const auto& c : again.gpus[0].choices) EXPECT_TRUE(c.checked);
}

TEST(Tune, NewGpuTypeIsSeededFromAnotherGpuTypesResults) {
  TuneOptions o = options({"h100"});
  auto db = make_memory_db();
  tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  o = options({"a100"});
  o.seed_k = 4;
  const Expected e = expected_for(example("tiny_cnn"), o);
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"a100"})), *db, o);
  const GpuTuneResult& g = r.gpus[0];
  // h100 (hopper) is the only GPU type with results: every workload is seeded from another family.
  EXPECT_EQ(g.seed_levels.at(SeedLevel::other_family),
            static_cast<int>(e.plan.workload_set.workloads.size()));
  EXPECT_GT(g.variants_seeded, 0);
  EXPECT_EQ(r.jobs, static_cast<int64_t>(e.jobs.size()) + g.variants_seeded);
  // Seeds are variants that the estimator did not keep for a100.
  JobSet a100;
  for (const auto& j : rows(*db))
    if (std::get<2>(j) == "a100") a100.insert(j);
  EXPECT_EQ(a100.size(), e.jobs.size() + static_cast<size_t>(g.variants_seeded));
}

// A winner measured by an earlier, wider run is not among this run's kept variants: the plan
// rebuilds it from its key (Variant::from_key, without enumerating) and runs that kernel,
// whose regenerated source has the hash of the measured one, not the reference kernel.
TEST(Tune, PlanRebuildsAnEarlierRunsWinnerFromItsKey) {
  auto db = make_memory_db();
  TuneOptions o = options({"h100"});
  o.plan.prune.top_k = 4;
  tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  o.plan.prune.top_k = 1;
  const TuneResult r = tune(example("tiny_cnn"), *make_inprocess_farm(farm_options({"h100"})), *db, o);
  const GpuTuneResult& g = r.gpus[0];
  std::map<size_t, std::string> earlier;  // candidate -> key of a winner this run did not keep
  int references = 0;
  for (const ClusterChoice& c : g.choices) {
    references += c.reference ? 1 : 0;
    if (c.reference) continue;
    bool kept = false;
    for (const auto& sv : r.plan.gpus[0].workloads[c.workload].kept) kept = kept || sv.variant.key() == c.variant_key;
    if (!kept) earlier[c.candidate] = c.variant_key;
  }
  ASSERT_FALSE(earlier.empty()) << "every winner was kept by the second run: the test checks nothing";
  const ExecPlan p = build_tuned_plan(r, g);
  EXPECT_LE(p.reference_steps, references);  // no fallback to the reference kernel
  int rebuilt = 0;
  for (const auto& step : p.steps)
    for (const auto& [cand, key] : earlier)
      if (step.variant_key == key) {
        EXPECT_FALSE(step.reference) << key;
        EXPECT_GT(step.measured_us, 0) << key;
        ++rebuilt;
      }
  EXPECT_GE(rebuilt, static_cast<int>(earlier.size()));

  // A measured source this build no longer writes: that step runs the reference kernel.
  TuneResult changed = r;
  const auto& [cand, key] = *earlier.begin();
  for (ClusterChoice& c : changed.gpus[0].choices)
    if (c.candidate == cand) c.source_hash = "0123456789abcdef";
  const ExecPlan q = build_tuned_plan(changed, changed.gpus[0]);
  EXPECT_EQ(q.reference_steps, p.reference_steps + 1);
  auto steps_of = [&](const ExecPlan& plan) {
    return std::count_if(plan.steps.begin(), plan.steps.end(), [&](const auto& st) { return st.variant_key == key; });
  };
  EXPECT_EQ(steps_of(q), steps_of(p) - 1);
}

// Selection on hand-made DB contents: fallbacks to sub-clusters and to the reference kernel.
TEST(SelectMeasured, FallsBackToSubClustersThenToTheReferenceKernel) {
  const TuneOptions o = options({"h100"});
  const Expected e = expected_for(chain(false), o);
  const auto& ws = e.plan.workload_set.workloads;
  ASSERT_EQ(e.plan.candidates.size(), 3u);  // relu, sigmoid, relu+sigmoid
  std::map<std::string, size_t> by_pattern;  // pattern -> workload index
  for (size_t c = 0; c < 3; ++c) by_pattern[e.plan.candidates[c].pattern] = e.plan.workload_set.candidate_workload[c];
  ASSERT_EQ(by_pattern.size(), 3u);

  auto db = make_memory_db();
  const GpuSpec& h100 = catalog().require("h100");
  db->commit_gpu_type(h100);
  const int64_t model = db->commit_model("chain2", std::string(64, 'c'));
  std::vector<std::pair<WorkloadRecord, int>> records;
  for (const auto& w : ws) records.emplace_back(workload_record(w), 1);
  db->commit_model_workloads(model, records);
  const WorkerInfo worker = testing::test_worker("node", "h100", true, nvrtc_version());
  db->commit_worker(worker);
  int64_t clock = 1;
  auto measure = [&](const std::string& pattern, double us, JobStatus st = JobStatus::ok) {
    const size_t wi = by_pattern.at(pattern);
    const Variant& v = e.plan.gpus[0].workloads[wi].kept.front().variant;
    db->commit_variant(ws[wi].signature, v, "src-" + v.key());  // the hash test_measurement records
    db->commit_measurement(testing::test_measurement(ws[wi].signature, v, worker, us, clock++, st));
  };
  GpuTuneResult g;
  g.gpu = &h100;
  g.source = TimingSource::emulated;

  measure("relu", 5);
  select_measured(e.plan, *db, "", g);
  ASSERT_EQ(g.choices.size(), 2u);
  EXPECT_EQ(e.plan.candidates[g.choices[0].candidate].pattern, "relu");
  EXPECT_FALSE(g.choices[0].reference);
  EXPECT_TRUE(g.choices[1].reference);  // sigmoid: nothing measured
  EXPECT_EQ(g.reference_fallbacks, 1);
  EXPECT_EQ(g.unmeasured_clusters, 1);  // relu+sigmoid
  EXPECT_DOUBLE_EQ(g.measured_total_us, 5);
  EXPECT_TRUE(g.has_results());

  measure("relu+sigmoid", 7);
  select_measured(e.plan, *db, "", g);
  ASSERT_EQ(g.choices.size(), 1u);
  EXPECT_EQ(e.plan.candidates[g.choices[0].candidate].pattern, "relu+sigmoid");
  EXPECT_DOUBLE_EQ(g.measured_total_us, 7);
  EXPECT_EQ(g.reference_fallbacks, 0);

  measure("sigmoid", 1);  // relu + sigmoid = 6 < 7
  select_measured(e.plan, *db, "", g);
  EXPECT_EQ(g.choices.size(), 2u);
  EXPECT_DOUBLE_EQ(g.measured_total_us, 6);

  measure("sigmoid", 1, JobStatus::runtime_fault);  // the same variant faults once: excluded
  select_measured(e.plan, *db, "", g);
  ASSERT_EQ(g.choices.size(), 1u);
  EXPECT_DOUBLE_EQ(g.measured_total_us, 7);
  EXPECT_EQ(g.failed_variants.at(JobStatus::runtime_fault), 1);

  // Results of another source never answer: a real selection sees nothing.
  g.source = TimingSource::real;
  select_measured(e.plan, *db, "", g);
  EXPECT_FALSE(g.has_results());
  EXPECT_EQ(g.reference_fallbacks, 2);
}

}  // namespace
}  // namespace dc
