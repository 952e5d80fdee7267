// Finalists measured twice (coordinator/tune_cross_check.cpp, docs/tune.md): with two
// emulated workers the two best variants of each workload are measured again on the other
// worker; a worker lying by 2x is named and quarantined and the selection's times are the
// honest worker's; with one worker nothing is measured again and the tune says so once.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "farm_inprocess.h"
#include "farm_testing.h"
#include "gpu/gpu_catalog.h"
#include "pass_testing.h"
#include "plan_estimate.h"
#include "plausibility.h"
#include "tune.h"
#include "tune_report.h"
#include "tune_stages.h"
#include "tuning_db.h"

namespace dc {
namespace {

const GpuCatalog& catalog() {
  static const GpuCatalog c = GpuCatalog::builtin();
  return c;
}

// x [8, 256] -> Relu -> Sigmoid -> Tanh: three small workloads (the chain and its parts),
// whose times are mostly launch cost, far above their floors: a 2x lie is not implausible.
Graph chain() {
  Graph g;
  g.name = "chain3";
  g.opset = 17;
  testing::add_input(g, "x", {8, 256});
  testing::add_node(g, "Relu", {"x"}, {"r"});
  testing::add_node(g, "Sigmoid", {"r"}, {"s"});
  testing::add_node(g, "Tanh", {"s"}, {"y"});
  g.outputs = {"y"};
  return testing::with_types(g);
}

TuneOptions options(std::ostream* console) {
  TuneOptions o;
  o.gpus = {&catalog().require("h100")};
  o.emulated = true;
  o.check_winners = false;
  o.seed_k = 0;
  o.plan.prune.top_k = 4;
  o.worker_wait = std::chrono::milliseconds(2000);
  o.model_name = "chain3";
  o.model_sha256 = std::string(64, 'c');
  o.console = console;
  return o;
}

InProcessFarmOptions farm_options(int workers) {
  InProcessFarmOptions f;
  f.gpu_types = {"h100"};
  f.workers_per_type = workers;
  f.cache_dir = testing::shared_compile_cache();
  f.job_delay = std::chrono::milliseconds(20);  // both workers get first measurements
  return f;
}

const std::string kWorker0 = "inprocess/h100-0", kWorker1 = "inprocess/h100-1";

// A result a worker reported as timed: ok, or ok until its worker was quarantined.
bool timed(const Measurement& m) {
  return m.status == JobStatus::ok ||
         (m.status == JobStatus::implausible && m.error.find("quarantined") != std::string::npos);
}

// Per variant key of the workload: the workers of its timed results.
std::map<std::string, std::multiset<std::string>> ok_workers(const TuningDb& db, const std::string& workload) {
  MeasurementQuery q;
  q.workload = workload;
  std::map<std::string, std::multiset<std::string>> out;
  for (const Measurement& m : db.query(q))
    if (timed(m) && !is_reference_key(m.variant_key)) out[m.variant_key].insert(m.worker);
  return out;
}

// The two best variants of the workload by the selection's ranking, without `exclude`.
std::vector<std::string> finalists(const TuningDb& db, const std::string& workload,
                                   const std::set<std::string>& exclude = {}) {
  BestVariantQuery q;
  q.gpu_type = "h100";
  q.source = TimingSource::emulated;
  q.workload = workload;
  q.exclude_workers = exclude;
  const auto best = db.best_variants(q);
  if (best.empty()) return {};
  std::vector<std::string> out(best[0].ranked.begin(), best[0].ranked.begin() + std::min<size_t>(2, best[0].ranked.size()));
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(TuneCrossCheck, TheNoiseModelIsTenPercentOrThreeMads) {
  auto m = [](double median, double mad) {
    Measurement r;
    r.median_us = median;
    r.mad_us = mad;
    return r;
  };
  EXPECT_TRUE(tune_stage::medians_agree(m(100, 0.5), m(109, 0.5)));
  EXPECT_FALSE(tune_stage::medians_agree(m(100, 0.5), m(111, 0.5)));
  EXPECT_TRUE(tune_stage::medians_agree(m(111, 0.5), m(100, 0.5)) == tune_stage::medians_agree(m(100, 0.5), m(111, 0.5)));
  // A noisy result (MAD 6% of its median) widens the band to 18%.
  EXPECT_TRUE(tune_stage::medians_agree(m(100, 6), m(117, 0.5)));
  EXPECT_FALSE(tune_stage::medians_agree(m(100, 6), m(119, 0.5)));
  // A 2x lie is far outside either.
  EXPECT_FALSE(tune_stage::medians_agree(m(100, 3), m(50, 1.5)));
}

TEST(TuneCrossCheck, TwoHonestWorkersMeasureEachFinalistAndNobodyIsQuarantined) {
  std::ostringstream console;
  const TuneOptions o = options(&console);
  auto db = make_memory_db();
  const TuneResult r = tune_graph(chain(), *make_inprocess_farm(farm_options(2)), *db, o);
  ASSERT_EQ(r.gpus.size(), 1u);
  const GpuTuneResult& gr = r.gpus[0];
  const std::string summary = tune_gpu_summary(r, gr);
  EXPECT_TRUE(gr.has_results()) << summary;
  EXPECT_TRUE(gr.cross_check.done) << summary;
  EXPECT_TRUE(gr.quarantined.empty()) << summary;
  EXPECT_EQ(gr.cross_check.disagreed, 0) << summary;
  EXPECT_EQ(summary.find("QUARANTINED"), std::string::npos) << summary;
  // Every workload's two best variants have an ok result from each worker; a variant has
  // two results only when the cross-check measured it again (a finalist of some round).
  int64_t both = 0, finalists_seen = 0;
  for (const Workload& w : r.plan.workload_set.workloads) {
    const auto workers = ok_workers(*db, w.signature);
    const auto top = finalists(*db, w.signature);
    ASSERT_FALSE(top.empty()) << w.signature;
    for (const std::string& key : top) {
      ++finalists_seen;
      EXPECT_EQ(std::set<std::string>(workers.at(key).begin(), workers.at(key).end()),
                (std::set<std::string>{kWorker0, kWorker1})) << key;
    }
    for (const auto& [key, by] : workers) {
      EXPECT_LE(by.size(), 2u) << key;
      if (by.size() == 2) {
        EXPECT_NE(*by.begin(), *by.rbegin()) << key << ": measured again by the same worker";
        ++both;
      }
    }
  }
  EXPECT_GE(both, finalists_seen);
  EXPECT_EQ(gr.cross_check.remeasured, both) << summary;
  EXPECT_EQ(gr.cross_check.agreed, both) << summary;
  EXPECT_NE(summary.find(fmt::format("cross-check  {} finalists compared on two workers ({} measured again for it): "
                                     "{} agree, 0 disagreed", both, both, both)), std::string::npos) << summary;
  // A second tune measures nothing: what this DB holds was cross-checked when measured.
  EXPECT_EQ(tune_graph(chain(), *make_inprocess_farm(farm_options(2)), *db, o).jobs, 0);
}

TEST(TuneCrossCheck, AWorkerLyingByTwoIsNamedAndQuarantinedAndTheHonestTimesAreSelected) {
  std::ostringstream console;
  TuneOptions o = options(&console);
  o.plan.prune.top_k = 8;  // the liar measures more than the finalists: the rest moves too
  InProcessFarmOptions f = farm_options(2);
  f.faults.time_factor = 0.5;  // reports every time 2x too fast: it would win every workload
  f.faulty_worker = 1;
  const std::string liar = kWorker1, honest = kWorker0;
  auto db = open_tuning_db(":memory:");  // SQLite, the product's DB: mark_implausible is SQL
  const TuneResult r = tune_graph(chain(), *make_inprocess_farm(f), *db, o);
  const GpuTuneResult& gr = r.gpus[0];
  const std::string summary = tune_gpu_summary(r, gr);
  ASSERT_TRUE(gr.has_results()) << summary;
  // Named and quarantined: the liar, not the honest worker.
  ASSERT_EQ(gr.quarantined.size(), 1u) << summary << console.str();
  EXPECT_EQ(gr.quarantined.begin()->first, liar);
  EXPECT_GT(gr.cross_check.disagreed, 0) << summary;
  EXPECT_NE(summary.find("QUARANTINED  worker " + liar), std::string::npos) << summary;
  EXPECT_NE(console.str().find("QUARANTINED worker " + liar), std::string::npos) << console.str();
  EXPECT_EQ(console.str().find("QUARANTINED worker " + honest), std::string::npos) << console.str();
  // Its results are measured again elsewhere: every variant it measured has an honest result
  // too, so no new job went to it after the quarantine.
  EXPECT_GT(gr.cross_check.moved, 0) << summary;
  for (const Workload& w : r.plan.workload_set.workloads)
    for (const auto& [key, by] : ok_workers(*db, w.signature))
      EXPECT_GT(by.count(honest), 0u) << key << " measured by " << *by.begin() << " only";
  // Every selected time is the honest worker's (the least median of its results).
  ASSERT_FALSE(gr.choices.empty());
  for (const ClusterChoice& c : gr.choices) {
    ASSERT_FALSE(c.reference) << summary;
    MeasurementQuery q;
    q.workload = r.plan.workload_set.workloads[c.workload].signature;
    q.variant_key = c.variant_key;
    q.status = JobStatus::ok;
    double honest_best = 0;
    for (const Measurement& m : db->query(q))
      if (m.worker == honest && (honest_best == 0 || m.median_us < honest_best)) honest_best = m.median_us;
    EXPECT_GT(honest_best, 0) << c.variant_key;
    EXPECT_DOUBLE_EQ(c.measured_us, honest_best) << c.variant_key << "\n" << summary;
  }
  // Its results of this run are marked implausible in the DB, so a later tune does not
  // select them either; none of its results is ok any more.
  EXPECT_GT(gr.cross_check.marked, 0);
  MeasurementQuery by_liar;
  by_liar.worker = liar;
  int64_t marked = 0;
  for (const Measurement& m : db->query(by_liar)) {
    EXPECT_NE(m.status, JobStatus::ok) << m.variant_key;
    if (m.status == JobStatus::implausible && m.error.find("quarantined by tune's cross-check") != std::string::npos)
      ++marked;
  }
  EXPECT_EQ(marked, gr.cross_check.marked);
  // Without the quarantine the liar's times would have won: the checks above can fail.
  for (const Workload& w : r.plan.workload_set.workloads) {
    MeasurementQuery q;
    q.workload = w.signature;
    bool liar_best = false;
    double least = 0;
    for (const Measurement& m : db->query(q))
      if (timed(m) && !is_reference_key(m.variant_key) && (least == 0 || m.median_us < least)) {
        least = m.median_us;
        liar_best = m.worker == liar;
      }
    EXPECT_TRUE(liar_best) << w.signature << ": the least time reported is the liar's";
  }
}

TEST(TuneCrossCheck, OneWorkerMeasuresNothingAgainAndSaysSoOnce) {
  std::ostringstream console;
  const TuneOptions o = options(&console);
  auto db = make_memory_db();
  const TuneResult r = tune_graph(chain(), *make_inprocess_farm(farm_options(1)), *db, o);
  const GpuTuneResult& gr = r.gpus[0];
  const std::string summary = tune_gpu_summary(r, gr);
  ASSERT_TRUE(gr.has_results()) << summary;
  EXPECT_FALSE(gr.cross_check.done);
  EXPECT_EQ(gr.cross_check.remeasured, 0);
  EXPECT_TRUE(gr.quarantined.empty());
  // One result per job: nothing was measured twice.
  EXPECT_EQ(static_cast<int64_t>(db->query(MeasurementQuery{}).size()), r.jobs);
  for (const Workload& w : r.plan.workload_set.workloads)
    for (const auto& [key, by] : ok_workers(*db, w.signature)) EXPECT_EQ(by.size(), 1u) << key;
  EXPECT_EQ(count(console.str(), "has one worker: finalists are measured once"), 1u) << console.str();
  EXPECT_EQ(count(summary, "cross-check  one worker"), 1u) << summary;
  // Its sentinel is steady: the tune is ok.
  EXPECT_EQ(gr.drift.medians.size(), 1u) << summary;
  EXPECT_TRUE(gr.drift.drifted.empty()) << summary;
  EXPECT_TRUE(r.complete()) << summary;
}


// ---- Drift over a tune (coordinator/tune_drift.cpp): each worker's sentinel, timed before
// and after the measure stage.

TEST(TuneDrift, TheTestDriftGrowsLinearlyToItsFactor) {
  EmulatedFaults f;
  f.drift_factor = 2;
  f.drift_jobs = 4;
  EXPECT_DOUBLE_EQ(f.factor(0), 1.0);
  EXPECT_DOUBLE_EQ(f.factor(2), 1.5);
  EXPECT_DOUBLE_EQ(f.factor(4), 2.0);
  EXPECT_DOUBLE_EQ(f.factor(40), 2.0);
  f.time_factor = 0.5;
  EXPECT_DOUBLE_EQ(f.factor(4), 1.0);
}

TEST(TuneDrift, SentinelsWithinTheTimerResolutionAgreeWhateverTheirRatio) {
  Measurement a, b;
  a.median_us = 0.481;
  a.mad_us = 0.02;
  b.median_us = 0.942;  // x1.96, 0.46 us apart: PoCL's sentinel in a quiet CI run
  b.mad_us = 0.03;
  EXPECT_FALSE(tune_stage::medians_agree(a, b));
  EXPECT_TRUE(tune_stage::sentinels_agree(a, b));
  b.median_us = a.median_us + tune_stage::kDriftTimerUs + 0.01;  // beyond the resolution and the ratio
  EXPECT_FALSE(tune_stage::sentinels_agree(a, b));
  a.median_us = 2.242;  // a GPU's 2.2 us sentinel doubling is drift
  a.mad_us = 0.0095;
  b.median_us = 4.484;
  b.mad_us = 0.019;
  EXPECT_FALSE(tune_stage::sentinels_agree(a, b));
  b.median_us = 2.3;  // within 10 %
  EXPECT_TRUE(tune_stage::sentinels_agree(a, b));
}

// Independent MatMuls of n x n by n x n for each n, and a Relu: workloads of growing floors.
Graph matmuls(const std::vector<int64_t>& sizes) {
  Graph g;
  g.name = "matmuls";
  g.opset = 17;
  testing::add_input(g, "x", {8, 256});
  testing::add_node(g, "Relu", {"x"}, {"r"});
  g.outputs = {"r"};
  for (int64_t n : sizes) {
    const std::string a = fmt::format("a{}", n), b = fmt::format("b{}", n), y = fmt::format("y{}", n);
    testing::add_input(g, a, {n, n});
    testing::add_input(g, b, {n, n});
    testing::add_node(g, "MatMul", {a, b}, {y});
    g.outputs.push_back(y);
  }
  return testing::with_types(g);
}

// The sentinel is the least floor at or above kSentinelFloorUs (10 us), not the least floor:
// MobileNetV2's least on PoCL was a 4.2 us kernel, whose launch jitter alone read x1.30.
TEST(TuneDrift, TheSentinelIsTheCheapestWorkloadLongEnoughToTime) {
  const GpuSpec& gpu = catalog().require("pocl-cpu");
  const std::string precision = reference_variant().precision;
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{64, 128, 256}, std::vector<int64_t>{32, 64}}) {
    const ModelPlan plan = plan_by_estimate(matmuls(sizes), {&gpu}, PlanOptions{});
    const auto& ws = plan.workload_set.workloads;
    ASSERT_EQ(ws.size(), sizes.size() + 1);
    std::vector<double> floors;
    for (const Workload& w : ws) floors.push_back(plausibility_floor_us(w, gpu, precision));
    const size_t least = static_cast<size_t>(std::min_element(floors.begin(), floors.end()) - floors.begin());
    const size_t greatest = static_cast<size_t>(std::max_element(floors.begin(), floors.end()) - floors.begin());
    std::optional<size_t> timed;
    for (size_t i = 0; i < floors.size(); ++i)
      if (floors[i] >= tune_stage::kSentinelFloorUs && (!timed || floors[i] < floors[*timed])) timed = i;
    const size_t chosen = tune_stage::sentinel_workload(plan, gpu);
    if (sizes.size() == 3) {
      // 64^3 below 10 us, 128^3 and 256^3 above it.
      ASSERT_TRUE(timed.has_value()) << floors[greatest];
      ASSERT_NE(*timed, greatest) << "two workloads reach the floor";
      EXPECT_EQ(chosen, *timed) << floors[chosen] << " us";
    } else {
      ASSERT_FALSE(timed.has_value()) << "no workload reaches " << tune_stage::kSentinelFloorUs << " us";
      EXPECT_EQ(chosen, greatest) << floors[chosen] << " us";
    }
    EXPECT_NE(chosen, least) << floors[least] << " us is too short to time";
  }
}

// A sentinel's rows in the DB: its reference kernel's results (the measure stage's one only:
// sentinels are not recorded).
size_t reference_rows(const TuningDb& db, const std::string& workload) {
  MeasurementQuery q;
  q.workload = workload;
  size_t n = 0;
  for (const Measurement& m : db.query(q)) n += is_reference_key(m.variant_key);
  return n;
}

TEST(TuneDrift, TwoSteadyWorkersTimeTheirSentinelTwiceAndNobodyIsQuarantined) {
  std::ostringstream console;
  const TuneOptions o = options(&console);
  auto db = make_memory_db();
  const TuneResult r = tune_graph(chain(), *make_inprocess_farm(farm_options(2)), *db, o);
  const GpuTuneResult& gr = r.gpus[0];
  const std::string summary = tune_gpu_summary(r, gr);
  ASSERT_FALSE(gr.drift.sentinel.empty()) << summary;
  ASSERT_EQ(gr.drift.medians.size(), 2u) << summary;
  for (const auto& [worker, m] : gr.drift.medians) {
    EXPECT_GT(m.first, 0) << worker;
    EXPECT_DOUBLE_EQ(m.first, m.second) << worker << ": an emulated device times the same job alike";
  }
  EXPECT_TRUE(gr.drift.drifted.empty()) << summary;
  EXPECT_TRUE(gr.drift.unchecked.empty()) << summary;
  EXPECT_FALSE(gr.drift.untrusted);
  EXPECT_TRUE(gr.quarantined.empty()) << summary;
  EXPECT_TRUE(r.complete()) << summary;
  // Three first sentinels (the third comes back from a worker that has one: nobody else is
  // there) and one last sentinel per worker.
  EXPECT_EQ(gr.drift.jobs, 5);
  EXPECT_NE(summary.find("drift      sentinel (the reference kernel of " + gr.drift.sentinel +
                         ") timed before and after the measure stage by 2 worker(s): 2 steady"),
            std::string::npos) << summary;
  EXPECT_EQ(reference_rows(*db, gr.drift.sentinel), 1u) << "sentinels are not recorded";
  EXPECT_EQ(static_cast<int64_t>(db->query(MeasurementQuery{}).size()), r.jobs) << "nor counted as jobs";
}

TEST(TuneDrift, AWorkerDriftingByTwoIsNamedQuarantinedAndItsResultsAreMeasuredElsewhere) {
  std::ostringstream console;
  TuneOptions o = options(&console);
  o.plan.prune.top_k = 8;
  InProcessFarmOptions f = farm_options(2);
  f.faults.drift_factor = 2;  // its times grow to 2x over its first 4 jobs, then stay there
  f.faults.drift_jobs = 4;
  f.faulty_worker = 1;
  const std::string drifter = kWorker1, steady = kWorker0;
  auto db = open_tuning_db(":memory:");
  const TuneResult r = tune_graph(chain(), *make_inprocess_farm(f), *db, o);
  const GpuTuneResult& gr = r.gpus[0];
  const std::string summary = tune_gpu_summary(r, gr);
  ASSERT_TRUE(gr.has_results()) << summary;
  // Named: its sentinel doubled; the steady worker's did not.
  ASSERT_EQ(gr.drift.drifted.size(), 1u) << summary << console.str();
  EXPECT_EQ(gr.drift.drifted.begin()->first, drifter);
  ASSERT_EQ(gr.drift.medians.count(drifter), 1u);
  EXPECT_NEAR(gr.drift.medians.at(drifter).second / gr.drift.medians.at(drifter).first, 2.0, 1e-6);
  EXPECT_DOUBLE_EQ(gr.drift.medians.at(steady).second, gr.drift.medians.at(steady).first);
  EXPECT_FALSE(gr.drift.untrusted);
  EXPECT_TRUE(r.complete()) << summary;
  // Quarantined by the drift check (not the cross-check), loudly, by name.
  ASSERT_EQ(gr.quarantined.size(), 1u) << summary;
  EXPECT_EQ(gr.quarantined.begin()->first, drifter);
  EXPECT_EQ(gr.quarantined.begin()->second.rfind("drifted over the tune", 0), 0u) << gr.quarantined.begin()->second;
  EXPECT_NE(console.str().find("QUARANTINED worker " + drifter), std::string::npos) << console.str();
  EXPECT_NE(summary.find("DRIFT      worker " + drifter), std::string::npos) << summary;
  EXPECT_EQ(summary.find("DRIFT      worker " + steady), std::string::npos) << summary;
  // Its results are measured elsewhere, and none of its results of the run stays ok.
  EXPECT_GT(gr.drift.moved, 0) << summary;
  EXPECT_GT(gr.drift.marked, 0) << summary;
  for (const Workload& w : r.plan.workload_set.workloads)
    for (const auto& [key, by] : ok_workers(*db, w.signature))
      EXPECT_GT(by.count(steady), 0u) << key << " measured by " << *by.begin() << " only";
  MeasurementQuery by_drifter;
  by_drifter.worker = drifter;
  int64_t marked = 0;
  for (const Measurement& m : db->query(by_drifter)) {
    EXPECT_NE(m.status, JobStatus::ok) << m.variant_key;
    marked += m.error.find("quarantined by tune's drift check") != std::string::npos;
  }
  EXPECT_EQ(marked, gr.drift.marked);
  for (const ClusterChoice& c : gr.choices) EXPECT_FALSE(c.reference) << summary;
}

// The one worker times 2 first sentinels, then the measure stage's jobs, then its last
// sentinel: a spike of `jobs` jobs from the last sentinel on (a passing disturbance, or one
// that lasts through the re-timings).
TuneResult tune_with_spike_at_last_sentinel(int64_t jobs, std::ostringstream& console) {
  std::ostringstream clean_console;
  auto clean_db = open_tuning_db(":memory:");
  const TuneResult clean = tune_graph(chain(), *make_inprocess_farm(farm_options(1)), *clean_db, options(&clean_console));
  EXPECT_TRUE(clean.gpus[0].drift.drifted.empty());
  InProcessFarmOptions f = farm_options(1);
  f.faults.spike_factor = 6;
  f.faults.spike_from = 2 + clean.jobs;
  f.faults.spike_jobs = jobs;
  auto db = open_tuning_db(":memory:");
  return tune_graph(chain(), *make_inprocess_farm(f), *db, options(&console));
}

TEST(TuneDrift, ASpikeAtTheLastSentinelIsTimedAgainAndTheWorkerIsSteady) {
  std::ostringstream console;
  const TuneResult r = tune_with_spike_at_last_sentinel(1, console);
  const GpuTuneResult& gr = r.gpus[0];
  const std::string summary = tune_gpu_summary(r, gr);
  EXPECT_TRUE(gr.drift.drifted.empty()) << summary << console.str();
  EXPECT_FALSE(gr.drift.untrusted);
  EXPECT_TRUE(r.complete()) << summary;
  EXPECT_EQ(gr.drift.jobs, 4) << "2 first sentinels, the last, and one re-timing that agreed";
  ASSERT_EQ(gr.drift.medians.count(kWorker0), 1u);
  EXPECT_DOUBLE_EQ(gr.drift.medians.at(kWorker0).second, gr.drift.medians.at(kWorker0).first);
}

TEST(TuneDrift, ASpikeThroughEveryRetimingIsDrift) {
  std::ostringstream console;
  const TuneResult r = tune_with_spike_at_last_sentinel(1 + tune_stage::kDriftConfirmations, console);
  const GpuTuneResult& gr = r.gpus[0];
  const std::string summary = tune_gpu_summary(r, gr);
  ASSERT_EQ(gr.drift.drifted.size(), 1u) << summary << console.str();
  EXPECT_NE(gr.drift.drifted.at(kWorker0).find("when timed again"), std::string::npos) << gr.drift.drifted.at(kWorker0);
  EXPECT_TRUE(gr.drift.untrusted);
  EXPECT_FALSE(r.complete()) << summary;
  EXPECT_EQ(gr.drift.jobs, 3 + tune_stage::kDriftConfirmations);
  EXPECT_NEAR(gr.drift.medians.at(kWorker0).second / gr.drift.medians.at(kWorker0).first, 6.0, 1e-6);
}

TEST(TuneDrift, TheOnlyWorkerDriftingIsReportedAndItsResultsAreNotTrusted) {
  std::ostringstream console;
  const TuneOptions o = options(&console);
  InProcessFarmOptions f = farm_options(1);
  f.faults.drift_factor = 2;
  f.faults.drift_jobs = 4;
  auto db = open_tuning_db(":memory:");
  const TuneResult r = tune_graph(chain(), *make_inprocess_farm(f), *db, o);
  const GpuTuneResult& gr = r.gpus[0];
  const std::string summary = tune_gpu_summary(r, gr);
  ASSERT_EQ(gr.drift.drifted.size(), 1u) << summary << console.str();
  EXPECT_EQ(gr.drift.drifted.begin()->first, kWorker0);
  // Nowhere to measure again: not quarantined (it is the only worker), but its figures of
  // this run answer for nothing and the tune is not ok.
  EXPECT_TRUE(gr.drift.untrusted);
  EXPECT_TRUE(gr.quarantined.empty());
  EXPECT_EQ(gr.drift.moved, 0);
  EXPECT_FALSE(r.complete()) << summary;
  EXPECT_FALSE(gr.has_results()) << summary;
  EXPECT_NE(summary.find("NOT TRUSTED"), std::string::npos) << summary;
  EXPECT_NE(console.str().find("DRIFT: worker " + kWorker0 + " (h100), no steady worker left"), std::string::npos)
      << console.str();
  int64_t ok = 0, marked = 0;
  for (const Measurement& m : db->query(MeasurementQuery{})) {
    ok += m.status == JobStatus::ok;
    marked += m.status == JobStatus::implausible && m.error.find("drifted over the tune") != std::string::npos;
  }
  EXPECT_EQ(ok, 0);
  EXPECT_EQ(marked, gr.drift.marked);
  EXPECT_GT(marked, 0);
  // A later tune on a steady worker measures them again (implausible is not final).
  std::ostringstream again;
  const TuneResult r2 = tune_graph(chain(), *make_inprocess_farm(farm_options(1)), *db, options(&again));
  EXPECT_GE(r2.jobs, marked);
  EXPECT_TRUE(r2.complete()) << tune_gpu_summary(r2, r2.gpus[0]);
}

}  // namespace
}  // namespace dc
