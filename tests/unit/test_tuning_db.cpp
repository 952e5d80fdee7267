// The tuning DB: one interface suite run against both implementations (in memory, SQLite).
// What only the SQLite one has (durability, read-only, disk full): test_tuning_db_sqlite.cpp;
// schema migrations: test_tuning_db_migrations.cpp; merging DBs: test_tuning_db_merge.cpp;
// the SHA-256 of model files: test_sha256.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/error.h"
#include "ir/json_writer.h"
#include "migrate.h"
#include "records.h"
#include "reuse.h"
#include "sqlite.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

using testing::fill;
using testing::integrity;
using testing::test_gpu;
using testing::test_measurement;
using testing::test_variant;
using testing::test_worker;
using testing::test_workload;

// ---------------------------------------------------------------- both implementations

class TuningDbTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    db_ = GetParam() == "memory" ? make_memory_db() : open_tuning_db(dir_.file("t.db"));
    db_->commit_gpu_type(h100_);
    db_->commit_gpu_type(a100_);
    db_->commit_worker(real_);
    db_->commit_worker(emu_);
    db_->commit_worker(a100_worker_);
    db_->commit_workload(test_workload("w1"));
    for (int64_t bm : {32, 64, 128, 256}) db_->commit_variant("w1", test_variant(bm), "hash");
  }

  testing::TempDir dir_;
  std::unique_ptr<TuningDb> db_;
  GpuSpec h100_ = test_gpu("h100", "hopper", 9, 0);
  GpuSpec a100_ = test_gpu("a100", "ampere", 8, 0);
  WorkerInfo real_ = test_worker("node1", "h100", false);
  WorkerInfo emu_ = test_worker("laptop", "h100", true);
  WorkerInfo a100_worker_ = test_worker("node2", "a100", false, "11.8");
};

// commit_variant says whether the variant is new to the DB (the farm service then skips its
// lookup: no measurement can name it yet); committed again it is not new, and a new source
// hash replaces the old one.
TEST_P(TuningDbTest, CommitVariantSaysWhetherTheVariantIsNew) {
  EXPECT_TRUE(db_->commit_variant("w1", test_variant(512), "h1"));
  EXPECT_FALSE(db_->commit_variant("w1", test_variant(512), "h1"));
  EXPECT_FALSE(db_->commit_variant("w1", test_variant(32), "hash"));  // from SetUp
  EXPECT_FALSE(db_->commit_variant("w1", test_variant(512), "h2"));
  Measurement m = test_measurement("w1", test_variant(512), real_, 5, 1'700'000'000'000);
  m.source_hash = "h2";
  db_->commit_measurement(m);
  MeasurementQuery q;
  q.variant_key = test_variant(512).key();
  q.current_source_only = true;  // the variant's source hash is now h2
  ASSERT_EQ(db_->query(q).size(), 1u);
  EXPECT_EQ(db_->query(q)[0].source_hash, "h2");
}

TEST_P(TuningDbTest, MeasurementRoundTripsEveryField) {
  Measurement m = test_measurement("w1", test_variant(64), real_, 0, 1'700'000'000'123);
  m.samples_us = {0.1, 12.25, 1e-7, 123456.789012345};  // exact round trip, not 6 digits
  m.median_us = 6.175;
  m.min_us = 1e-7;
  m.spread = 0.3;
  m.max_rel_error = 2.5e-6;
  m.registers = 96;
  m.spill_bytes = 8;
  m.smem_bytes = 49152;
  m.compile_seconds = 0.75;
  m.estimate_us = 5.5;
  m.attempts = 2;
  m.error = "";
  ASSERT_TRUE(db_->commit_measurement(m));
  const auto got = db_->query({});
  ASSERT_EQ(got.size(), 1u);
  const Measurement& g = got[0];
  EXPECT_EQ(g.workload, "w1");
  EXPECT_EQ(g.variant_key, "gemm_tiled/fp32/block_m=64,block_n=64");
  EXPECT_EQ(g.source_hash, m.source_hash);
  EXPECT_EQ(g.gpu_type, "h100");
  EXPECT_EQ(g.worker, "node1/0");
  EXPECT_EQ(g.status, JobStatus::ok);
  EXPECT_EQ(g.samples_us, m.samples_us);
  EXPECT_EQ(g.median_us, 6.175);
  EXPECT_EQ(g.min_us, 1e-7);
  EXPECT_EQ(g.spread, 0.3);
  EXPECT_EQ(g.max_rel_error, 2.5e-6);
  EXPECT_EQ(g.registers, 96);
  EXPECT_EQ(g.spill_bytes, 8);
  EXPECT_EQ(g.smem_bytes, 49152);
  EXPECT_EQ(g.compile_seconds, 0.75);
  EXPECT_EQ(g.estimate_us, 5.5);
  EXPECT_EQ(g.nvrtc_version, "12.4");
  EXPECT_EQ(g.driver_version, "550.54");
  EXPECT_FALSE(g.emulated);
  EXPECT_EQ(g.attempts, 2);
  EXPECT_EQ(g.finished_unix_ms, 1'700'000'000'123);
}

TEST_P(TuningDbTest, EveryStatusOfTheTaxonomyIsAccepted) {
  // The SQL CHECK constraint must list exactly the C++ taxonomy.
  const JobStatus all[] = {JobStatus::ok,           JobStatus::compile_error,
                           JobStatus::launch_error, JobStatus::runtime_fault,
                           JobStatus::wrong_result, JobStatus::timeout,
                           JobStatus::worker_lost,  JobStatus::unsupported};
  int64_t t = 1000;
  for (JobStatus s : all) {
    Measurement m = test_measurement("w1", test_variant(32), real_, 5, ++t, s);
    if (s == JobStatus::wrong_result) m.max_rel_error = std::numeric_limits<double>::quiet_NaN();
    ASSERT_TRUE(db_->commit_measurement(m)) << job_status_name(s);
  }
  const auto got = db_->query({});
  ASSERT_EQ(got.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(got[i].status, all[i]);
  EXPECT_EQ(got[1].error, "failed: compile_error");
  EXPECT_TRUE(std::isinf(got[4].max_rel_error));  // NaN error = unbounded, stored as inf
}

TEST_P(TuningDbTest, SameJobCommittedTwiceIsOneRow) {
  const Measurement m = test_measurement("w1", test_variant(32), real_, 10, 5000);
  EXPECT_TRUE(db_->commit_measurement(m));
  EXPECT_FALSE(db_->commit_measurement(m));
  Measurement again = m;
  again.median_us = 99;  // a resend after a reconnect: same job, first one wins
  EXPECT_FALSE(db_->commit_measurement(again));
  Measurement later = m;
  later.finished_unix_ms = 6000;  // a re-measurement (--retune) is a new row
  EXPECT_TRUE(db_->commit_measurement(later));
  const auto got = db_->query({});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].median_us, 10);
}

TEST_P(TuningDbTest, TopKIsOnePerVariantByMedian) {
  db_->commit_measurement(test_measurement("w1", test_variant(32), real_, 10, 1));
  db_->commit_measurement(test_measurement("w1", test_variant(32), real_, 8, 2));  // its best
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 9, 3));
  db_->commit_measurement(test_measurement("w1", test_variant(128), real_, 12, 4));
  db_->commit_measurement(
      test_measurement("w1", test_variant(256), real_, 1, 5, JobStatus::wrong_result));
  db_->commit_measurement(test_measurement("w1", test_variant(256), a100_worker_, 2, 6));

  const auto top2 = db_->top_k("w1", "h100", TimingSource::real, 2);
  ASSERT_EQ(top2.size(), 2u);
  EXPECT_EQ(top2[0].variant_key, test_variant(32).key());
  EXPECT_EQ(top2[0].median_us, 8);
  EXPECT_EQ(top2[1].variant_key, test_variant(64).key());
  const auto all = db_->top_k("w1", "h100", TimingSource::real, 10);
  ASSERT_EQ(all.size(), 3u);  // the failed variant and the a100 result are not h100 answers
  EXPECT_EQ(all[2].median_us, 12);
  EXPECT_TRUE(db_->top_k("w1", "h100", TimingSource::real, 0).empty());
  EXPECT_TRUE(db_->top_k("nope", "h100", TimingSource::real, 5).empty());
}

TEST_P(TuningDbTest, TopKTiesGoByKey) {
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 7, 1));
  db_->commit_measurement(test_measurement("w1", test_variant(128), real_, 7, 2));
  const auto top = db_->top_k("w1", "h100", TimingSource::real, 5);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].variant_key, test_variant(128).key());  // "block_m=128" < "block_m=64"
}

// The one definition of "best variant" (TuningDb::best_variants): a winner that failed a
// check is never the best, the reference kernel never is, worker_lost says nothing, and
// one toolchain major's results count (the newest when the query names none).
TEST_P(TuningDbTest, BestVariantDropsFailedWinnersTheReferenceAndOtherToolchains) {
  db_->commit_variant("w1", reference_variant(), "ref");
  const WorkerInfo old_toolchain = test_worker("node3", "h100", false, "11.8");
  db_->commit_worker(old_toolchain);
  // 32: fastest ok time, then its check says wrong_result: excluded.
  db_->commit_measurement(test_measurement("w1", test_variant(32), real_, 2, 1));
  db_->commit_measurement(test_measurement("w1", test_variant(32), real_, 0, 2, JobStatus::wrong_result));
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 9, 3));
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 7, 4));  // its best
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 0, 5, JobStatus::worker_lost));
  db_->commit_measurement(test_measurement("w1", reference_variant(), real_, 1, 6));
  db_->commit_measurement(test_measurement("w1", test_variant(128), old_toolchain, 3, 7));
  db_->commit_measurement(test_measurement("w1", test_variant(256), emu_, 1, 8));

  BestVariantQuery q;
  q.gpu_type = "h100";
  const auto best = db_->best_variants(q);  // newest toolchain: 12
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].workload, "w1");
  EXPECT_EQ(best[0].variant_key, test_variant(64).key());
  EXPECT_EQ(best[0].median_us, 7);
  EXPECT_EQ(best[0].results, 2);      // the lost worker's result is not one
  EXPECT_EQ(best[0].ok_variants, 1);  // 64; not 32 (failed), the reference or 128 (11.x)
  EXPECT_EQ(best[0].failed_variants, (std::map<JobStatus, int>{{JobStatus::wrong_result, 1}}));

  q.nvrtc_major = "11";  // the old toolchain's results alone
  const auto old = db_->best_variants(q);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].variant_key, test_variant(128).key());
  EXPECT_EQ(old[0].median_us, 3);

  q.nvrtc_major = "";
  q.source = TimingSource::emulated;
  const auto emulated = db_->best_variants(q);
  ASSERT_EQ(emulated.size(), 1u);
  EXPECT_EQ(emulated[0].variant_key, test_variant(256).key());

  q.source = TimingSource::real;
  q.math_paths = {"fp16"};  // no fp16 variant: the workload has none that qualifies
  const auto fp16 = db_->best_variants(q);
  EXPECT_TRUE(fp16.empty() || !fp16[0].has_best());
  q.math_paths = {};
  q.workload = "nope";
  EXPECT_TRUE(db_->best_variants(q).empty());
}

// The device's health after timing is stored with the measurement (migration 0008): a
// sample's figures round-trip exactly (ECC unknown stays unknown); a device without health
// data keeps its note and no figure.
TEST_P(TuningDbTest, HealthFiguresAreStoredWithTheMeasurement) {
  Measurement sampled = test_measurement("w1", test_variant(32), real_, 2, 1);
  sampled.health.sampled = true;
  sampled.health.sm_clock_mhz = 1755;
  sampled.health.max_sm_clock_mhz = 1980;
  sampled.health.temperature_c = 61;
  sampled.health.clock_event_reasons = 0x1;
  sampled.health.ecc_known = true;
  sampled.health.ecc_uncorrected = 0;
  Measurement no_ecc = test_measurement("w1", test_variant(64), real_, 3, 2);
  no_ecc.health = sampled.health;
  no_ecc.health.ecc_known = false;
  no_ecc.health.temperature_c = 83;
  Measurement none = test_measurement("w1", test_variant(128), real_, 4, 3);
  none.health.note = "emulated device: its times are modelled";
  for (const Measurement& m : {sampled, no_ecc, none}) ASSERT_TRUE(db_->commit_measurement(m));
  std::map<std::string, DeviceHealthFigures> got;
  for (const Measurement& m : db_->query({})) got[m.variant_key] = m.health;
  const DeviceHealthFigures& a = got.at(test_variant(32).key());
  EXPECT_TRUE(a.sampled);
  EXPECT_EQ(a.sm_clock_mhz, 1755);
  EXPECT_EQ(a.max_sm_clock_mhz, 1980);
  EXPECT_EQ(a.temperature_c, 61);
  EXPECT_EQ(a.clock_event_reasons, 0x1u);
  EXPECT_TRUE(a.ecc_known);
  EXPECT_EQ(describe_health(a), "SM 1755 of 1980 MHz, 61 C, clock event reasons 0x1, 0 uncorrected ECC errors");
  const DeviceHealthFigures& b = got.at(test_variant(64).key());
  EXPECT_FALSE(b.ecc_known);
  EXPECT_EQ(b.temperature_c, 83);
  const DeviceHealthFigures& c = got.at(test_variant(128).key());
  EXPECT_FALSE(c.sampled);
  EXPECT_EQ(c.sm_clock_mhz, 0);
  EXPECT_EQ(describe_health(c), "no health data (emulated device: its times are modelled)");
}

// A quarantined worker's figure (docs/tune.md): its ok row becomes implausible, which says
// nothing about the variant, so best_variants and has_measurement skip it.
TEST_P(TuningDbTest, AResultMarkedImplausibleAnswersForNothing) {
  const Measurement fast = test_measurement("w1", test_variant(32), real_, 2, 1);
  db_->commit_measurement(fast);
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 5, 2));
  BestVariantQuery q;
  q.gpu_type = "h100";
  ASSERT_EQ(db_->best_variants(q).at(0).variant_key, test_variant(32).key());
  EXPECT_EQ(db_->best_variants(q).at(0).ranked,
            (std::vector<std::string>{test_variant(32).key(), test_variant(64).key()}));
  EXPECT_TRUE(db_->mark_implausible(fast, "quarantined: out of line"));
  EXPECT_FALSE(db_->mark_implausible(fast, "again")) << "only an ok row is marked";
  Measurement other = fast;
  other.finished_unix_ms += 1000;
  EXPECT_FALSE(db_->mark_implausible(other, "no such row"));
  const auto best = db_->best_variants(q);
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].variant_key, test_variant(64).key());
  EXPECT_EQ(best[0].ranked, std::vector<std::string>{test_variant(64).key()});
  EXPECT_FALSE(db_->has_measurement("w1", test_variant(32).key(), "h100", TimingSource::real, ""));
  MeasurementQuery mq;
  mq.status = JobStatus::implausible;
  const auto marked = db_->query(mq);
  ASSERT_EQ(marked.size(), 1u);
  EXPECT_EQ(marked[0].error, "quarantined: out of line");
  EXPECT_EQ(marked[0].median_us, fast.median_us);
}

TEST_P(TuningDbTest, EmulatedNeverAnswersForReal) {
  db_->commit_measurement(test_measurement("w1", test_variant(32), emu_, 1, 1));
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 20, 2));
  const auto real = db_->top_k("w1", "h100", TimingSource::real, 10);
  ASSERT_EQ(real.size(), 1u);
  EXPECT_EQ(real[0].median_us, 20);
  EXPECT_FALSE(real[0].emulated);
  EXPECT_FALSE(db_->has_measurement("w1", test_variant(32).key(), "h100", TimingSource::real, ""));
  EXPECT_TRUE(db_->has_measurement("w1", test_variant(32).key(), "h100", TimingSource::emulated, ""));
  EXPECT_EQ(db_->measured_variants("w1", "h100", TimingSource::real, ""),
            std::set<std::string>{test_variant(64).key()});
  const auto emulated = db_->top_k("w1", "h100", TimingSource::emulated, 10);
  ASSERT_EQ(emulated.size(), 1u);
  EXPECT_TRUE(emulated[0].emulated);
  MeasurementQuery q;
  q.source = TimingSource::real;
  EXPECT_EQ(db_->query(q).size(), 1u);
  q.source = TimingSource::emulated;
  EXPECT_EQ(db_->query(q).size(), 1u);
  EXPECT_EQ(db_->query({}).size(), 2u);  // unset source: both, for exports
}

TEST_P(TuningDbTest, HasMeasurementCountsFinalResultsOfTheSameToolchainMajor) {
  const std::string k32 = test_variant(32).key(), k64 = test_variant(64).key();
  const std::string k128 = test_variant(128).key();
  db_->commit_measurement(test_measurement("w1", test_variant(32), real_, 0, 1, JobStatus::compile_error));
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 0, 2, JobStatus::worker_lost));
  db_->commit_measurement(test_measurement("w1", test_variant(128), a100_worker_, 5, 3));
  // A compile error is a result: not compiled again with the same toolchain.
  EXPECT_TRUE(db_->has_measurement("w1", k32, "h100", TimingSource::real, "12"));
  EXPECT_FALSE(db_->has_measurement("w1", k32, "h100", TimingSource::real, "13"));
  EXPECT_TRUE(db_->has_measurement("w1", k32, "h100", TimingSource::real, ""));
  // A lost worker says nothing about the variant: measure it again.
  EXPECT_FALSE(db_->has_measurement("w1", k64, "h100", TimingSource::real, "12"));
  // Another GPU type's result is not this one's.
  EXPECT_FALSE(db_->has_measurement("w1", k128, "h100", TimingSource::real, ""));
  EXPECT_TRUE(db_->has_measurement("w1", k128, "a100", TimingSource::real, "11"));
  EXPECT_EQ(db_->measured_variants("w1", "h100", TimingSource::real, "12"), std::set<std::string>{k32});
  EXPECT_EQ(db_->measured_variants("w1", "a100", TimingSource::real, "12"), std::set<std::string>{});
}

TEST_P(TuningDbTest, QueryFiltersAndOrders) {
  db_->commit_measurement(test_measurement("w1", test_variant(32), real_, 3, 30));
  db_->commit_measurement(test_measurement("w1", test_variant(64), real_, 1, 10));
  db_->commit_measurement(test_measurement("w1", test_variant(64), a100_worker_, 2, 20));
  db_->commit_measurement(
      test_measurement("w1", test_variant(128), real_, 0, 40, JobStatus::timeout));
  const auto all = db_->query({});
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].finished_unix_ms, 10);  // by finished time, not commit order
  EXPECT_EQ(all[3].finished_unix_ms, 40);
  MeasurementQuery q;
  q.gpu_type = "h100";
  EXPECT_EQ(db_->query(q).size(), 3u);
  q.status = JobStatus::ok;
  EXPECT_EQ(db_->query(q).size(), 2u);
  q.variant_key = test_variant(64).key();
  ASSERT_EQ(db_->query(q).size(), 1u);
  EXPECT_EQ(db_->query(q)[0].median_us, 1);
  MeasurementQuery by_worker;
  by_worker.worker = "node2/0";
  ASSERT_EQ(db_->query(by_worker).size(), 1u);
  EXPECT_EQ(db_->query(by_worker)[0].gpu_type, "a100");
  MeasurementQuery limited;
  limited.limit = 2;
  ASSERT_EQ(db_->query(limited).size(), 2u);
  EXPECT_EQ(db_->query(limited)[1].finished_unix_ms, 20);
  MeasurementQuery other;
  other.workload = "w2";
  EXPECT_TRUE(db_->query(other).empty());
}

TEST_P(TuningDbTest, DanglingReferencesAreCallerBugs) {
  Measurement m = test_measurement("w1", test_variant(512), real_, 1, 1);  // no such variant
  EXPECT_THROW(db_->commit_measurement(m), InternalError);
  m = test_measurement("w1", test_variant(32), test_worker("ghost", "h100", false), 1, 1);
  EXPECT_THROW(db_->commit_measurement(m), InternalError);
  m = test_measurement("w1", test_variant(32), real_, 1, 1);
  m.gpu_type = "t4";
  EXPECT_THROW(db_->commit_measurement(m), InternalError);
  m = test_measurement("w1", test_variant(32), real_, 1, 1);
  m.emulated = true;  // the worker is real
  EXPECT_THROW(db_->commit_measurement(m), InternalError);
  m = test_measurement("w1", test_variant(32), real_, 1, 0);  // no finished time
  EXPECT_THROW(db_->commit_measurement(m), InternalError);
  EXPECT_THROW(db_->commit_variant("w9", test_variant(32), "h"), InternalError);
  EXPECT_THROW(db_->commit_worker(test_worker("n", "t4", false)), InternalError);
  EXPECT_THROW(db_->begin_run({42, {"h100"}, "{}", "host"}), InternalError);
  EXPECT_THROW(db_->end_run(42, RunStatus::ok), InternalError);
  EXPECT_TRUE(db_->query({}).empty());  // nothing half-committed
}

TEST_P(TuningDbTest, ModelsAndTheirWorkloads) {
  const std::string sha1(64, 'a'), sha2(64, 'b');
  const int64_t m1 = db_->commit_model("resnet50", sha1);
  EXPECT_EQ(db_->commit_model("resnet50", sha1), m1);
  const int64_t m2 = db_->commit_model("resnet50", sha2);  // another file: another model
  EXPECT_NE(m1, m2);
  db_->commit_model_workloads(m1, {{test_workload("w1"), 3}, {test_workload("w2", ClusterKind::conv), 1}});
  db_->commit_model_workloads(m1, {{test_workload("w2", ClusterKind::conv), 4}});  // replaces
  db_->commit_model_workloads(m2, {{test_workload("w3"), 1}});
  using Rows = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(db_->model_workloads(m1), (Rows{{"w1", 3}, {"w2", 4}}));
  EXPECT_EQ(db_->model_workloads(m2), (Rows{{"w3", 1}}));
  const auto w2 = db_->find_workload("w2");
  ASSERT_TRUE(w2);
  EXPECT_EQ(w2->kind, ClusterKind::conv);
  EXPECT_EQ(w2->canonical, "kind gemm\nw2\n");
  EXPECT_EQ(w2->flops, 2'000'000);
  EXPECT_EQ(w2->bytes, 48'000);
  EXPECT_FALSE(db_->find_workload("w9"));
  EXPECT_THROW(db_->commit_model_workloads(99, {{test_workload("w1"), 1}}), InternalError);
}

TEST_P(TuningDbTest, RunsAndPlans) {
  const int64_t model = db_->commit_model("bert", std::string(64, 'c'));
  const int64_t run = db_->begin_run({model, {"h100", "a100"}, R"({"retune":false})", "coord"});
  auto runs = db_->runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, run);
  EXPECT_EQ(runs[0].status, RunStatus::running);
  EXPECT_EQ(runs[0].info.gpu_types, (std::vector<std::string>{"h100", "a100"}));
  EXPECT_EQ(runs[0].info.options_json, R"({"retune":false})");
  EXPECT_EQ(runs[0].info.host, "coord");
  EXPECT_EQ(runs[0].uid.size(), 32u);
  EXPECT_EQ(runs[0].ended_ms, 0);

  PlanRecord p;
  p.run_id = run;
  p.gpu_type = "h100";
  p.source = TimingSource::emulated;
  p.choices = {{"c0", "w1", test_variant(32).key(), 4.5, 5.25}, {"c1", "w2", "ref", 1, 2}};
  p.estimated_total_us = 5.5;
  p.measured_total_us = 7.25;
  db_->commit_plan(p);
  p.measured_total_us = 7.0;  // the same run's plan again: replaced
  db_->commit_plan(p);
  db_->end_run(run, RunStatus::ok);

  runs = db_->runs();
  EXPECT_EQ(runs[0].status, RunStatus::ok);
  EXPECT_GE(runs[0].ended_ms, runs[0].started_ms);
  const auto plans = db_->plans(run);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].source, TimingSource::emulated);
  EXPECT_EQ(plans[0].measured_total_us, 7.0);
  EXPECT_EQ(plans[0].estimated_total_us, 5.5);
  ASSERT_EQ(plans[0].choices.size(), 2u);
  EXPECT_EQ(plans[0].choices[0].cluster, "c0");
  EXPECT_EQ(plans[0].choices[0].variant_key, test_variant(32).key());
  EXPECT_EQ(plans[0].choices[0].estimated_us, 4.5);
  EXPECT_EQ(plans[0].choices[0].measured_us, 5.25);
  EXPECT_EQ(plans[0].choices[1].workload, "w2");
  EXPECT_TRUE(db_->plans(run + 1).empty());
}

TEST_P(TuningDbTest, SeedsComeFromTheNearestMeasuredGpuType) {
  db_->commit_gpu_type(test_gpu("a10", "ampere", 8, 6));
  db_->commit_gpu_type(test_gpu("t4", "turing", 7, 5));
  const WorkerInfo t4 = test_worker("node3", "t4", false);
  db_->commit_worker(t4);
  db_->commit_measurement(test_measurement("w1", test_variant(64), a100_worker_, 6, 1));
  db_->commit_measurement(test_measurement("w1", test_variant(32), a100_worker_, 5, 2));
  db_->commit_measurement(test_measurement("w1", test_variant(128), t4, 9, 3));

  const Seeds own = seed_variants(*db_, "w1", a100_, TimingSource::real, 1);
  EXPECT_EQ(own.level, SeedLevel::exact);
  ASSERT_EQ(own.best.size(), 1u);
  EXPECT_EQ(own.best[0].variant_key, test_variant(32).key());

  const Seeds a10 = seed_variants(*db_, "w1", test_gpu("a10", "ampere", 8, 6), TimingSource::real, 5);
  EXPECT_EQ(a10.level, SeedLevel::same_family);
  EXPECT_EQ(a10.from_gpu, "a100");
  EXPECT_EQ(a10.best.size(), 2u);

  // No hopper results: the closest compute capability of another family (8.0 vs 7.5).
  const Seeds h100 = seed_variants(*db_, "w1", h100_, TimingSource::real, 5);
  EXPECT_EQ(h100.level, SeedLevel::other_family);
  EXPECT_EQ(h100.from_gpu, "a100");
  EXPECT_EQ(seed_level_name(h100.level), "other family");

  const Seeds none = seed_variants(*db_, "w2", h100_, TimingSource::real, 5);
  EXPECT_EQ(none.level, SeedLevel::estimator_only);
  EXPECT_TRUE(none.best.empty());
  // Emulated results seed only emulated tunes.
  db_->commit_measurement(test_measurement("w1", test_variant(32), emu_, 1, 4));
  EXPECT_EQ(seed_variants(*db_, "w1", h100_, TimingSource::real, 5).level, SeedLevel::other_family);
  EXPECT_EQ(seed_variants(*db_, "w1", h100_, TimingSource::emulated, 5).level, SeedLevel::exact);
}

TEST_P(TuningDbTest, ConcurrentCommitsAllLand) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        db_->commit_measurement(test_measurement("w1", test_variant(32), real_, i + 1, t * 1000 + i + 1));
        db_->has_measurement("w1", test_variant(32).key(), "h100", TimingSource::real, "12");
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(db_->query({}).size(), 200u);
}

TEST_P(TuningDbTest, GpuBusyRecordsRoundTripAndGiveTheFraction) {
  const int64_t model = db_->commit_model("bert", std::string(64, 'c'));
  const int64_t run = db_->begin_run({model, {"h100", "a100"}, "{}", "coord"});
  EXPECT_TRUE(db_->gpu_busy(run).empty());
  db_->commit_gpu_busy({{run, "h100", real_.name, 6, 8}, {run, "h100", emu_.name, 3, 8},
                        {run, "a100", a100_worker_.name, 2, 8}});
  db_->commit_gpu_busy({{run, "h100", emu_.name, 4, 8}});  // the same device again: replaced
  const auto busy = db_->gpu_busy(run);
  ASSERT_EQ(busy.size(), 3u);  // by GPU type, then worker
  EXPECT_EQ(busy[0].gpu_type, "a100");
  EXPECT_EQ(busy[1].worker, emu_.name);
  EXPECT_EQ(busy[1].busy_seconds, 4);
  EXPECT_EQ(busy[2].worker, real_.name);
  EXPECT_EQ(busy[2].measure_seconds, 8);
  // (6 + 4) s busy over 8 s x 2 devices.
  EXPECT_DOUBLE_EQ(gpu_busy_fraction({busy[1], busy[2]}), 0.625);
  EXPECT_DOUBLE_EQ(gpu_busy_fraction({busy[0]}), 0.25);
  EXPECT_EQ(gpu_busy_fraction({}), 0);
  EXPECT_THROW(db_->commit_gpu_busy({{run, "h100", "nobody", 1, 8}}), InternalError);
  EXPECT_THROW(db_->commit_gpu_busy({{run, "h100", real_.name, 1, 0}}), InternalError);
  EXPECT_EQ(db_->gpu_busy(run).size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(Impl, TuningDbTest, ::testing::Values("memory", "sqlite"),
                         [](const auto& p) { return p.param; });

TEST(TuningDbRecords, SamplesJsonIsJsonWritersTextAndRoundTrips) {
  const std::vector<double> samples = {1, 0, 0.1, 12345.678, 1e-300, 1e21, 3.0000000000000004, 2.5e-7};
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_array();
  for (double v : samples) j.value(v);
  j.end_array();
  EXPECT_EQ(samples_to_json(samples), os.str());
  EXPECT_EQ(samples_to_json(samples), "[1,0,0.1,12345.678,1e-300,1e+21,3.0000000000000004,2.5e-07]");
  EXPECT_EQ(samples_from_json(samples_to_json(samples)), samples);
  EXPECT_EQ(samples_to_json({}), "[]");
  EXPECT_EQ(samples_to_json({std::nan(""), 2, std::numeric_limits<double>::infinity()}), "[null,2,null]");
}

TEST(TuningDbRecords, ToolchainMajor) {
  EXPECT_EQ(toolchain_major("12.4.131"), "12");
  EXPECT_EQ(toolchain_major("11"), "11");
  EXPECT_EQ(toolchain_major(""), "");
}

}  // namespace
}  // namespace dc

namespace dc {
namespace {

// is_final_status is the one definition of "a verdict on the variant"; the DB's queries take
// its complement from it. Every status is named, and a final one is never in the list.
TEST(JobStatuses, TheDbsNotFinalListIsIsFinalStatusesComplement) {
  EXPECT_EQ(not_final_statuses_sql(), "('worker_lost', 'internal_error', 'implausible', 'unhealthy')");
  for (JobStatus s : {JobStatus::ok, JobStatus::compile_error, JobStatus::launch_error, JobStatus::runtime_fault,
                      JobStatus::wrong_result, JobStatus::timeout, JobStatus::worker_lost, JobStatus::unsupported,
                      JobStatus::internal_error, JobStatus::implausible, JobStatus::unhealthy}) {
    const std::string quoted = "'" + std::string(job_status_name(s)) + "'";
    EXPECT_EQ(not_final_statuses_sql().find(quoted) != std::string::npos, !is_final_status(s)) << quoted;
    EXPECT_EQ(parse_job_status(job_status_name(s)), s);
  }
}

}  // namespace
}  // namespace dc
