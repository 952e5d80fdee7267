// The tuning DB under concurrency and faults (docs/tuning-db.md, "Idempotence, crash safety,
// concurrency"): the first result of a variant wins when two tunes share a DB, and a DB
// locked by another writer is waited for up to the busy timeout, then a UserError that
// names the lock. The full-disk and two-process cases run the real command:
// tests/cli/check_db_faults.py.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "ir/error.h"
#include "sqlite.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

using namespace std::chrono_literals;
using testing::test_gpu;
using testing::test_measurement;
using testing::test_variant;
using testing::test_worker;
using testing::test_workload;

class FirstResultWins : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    db_ = GetParam() == "memory" ? make_memory_db() : open_tuning_db(dir_.file("t.db"));
    db_->commit_gpu_type(h100_);
    db_->commit_gpu_type(a100_);
    for (const WorkerInfo& w : {node1_, node2_, emu_, old_toolchain_, a100_worker_}) db_->commit_worker(w);
    db_->commit_workload(test_workload("w1"));
    for (int64_t bm : {32, 64}) db_->commit_variant("w1", test_variant(bm), "hash");
  }

  testing::TempDir dir_;
  std::unique_ptr<TuningDb> db_;
  GpuSpec h100_ = test_gpu("h100", "hopper", 9, 0);
  GpuSpec a100_ = test_gpu("a100", "ampere", 8, 0);
  WorkerInfo node1_ = test_worker("node1", "h100", false);
  WorkerInfo node2_ = test_worker("node2", "h100", false);
  WorkerInfo emu_ = test_worker("laptop", "h100", true);
  WorkerInfo old_toolchain_ = test_worker("node3", "h100", false, "11.8");
  WorkerInfo a100_worker_ = test_worker("node4", "a100", false);
};

TEST_P(FirstResultWins, ASecondTunesResultForTheSameVariantIsNotAdded) {
  const Variant v32 = test_variant(32), v64 = test_variant(64);
  EXPECT_TRUE(db_->commit_first_measurement(test_measurement("w1", v32, node1_, 10, 1000)));
  // Another tune's worker measured the same variant on the same GPU type: not added.
  EXPECT_FALSE(db_->commit_first_measurement(test_measurement("w1", v32, node2_, 7, 1001)));
  EXPECT_FALSE(db_->commit_first_measurement(
      test_measurement("w1", v32, node2_, 7, 1002, JobStatus::compile_error)));
  // Other source, toolchain major and GPU type are other results.
  EXPECT_TRUE(db_->commit_first_measurement(test_measurement("w1", v32, emu_, 9, 1003)));
  EXPECT_TRUE(db_->commit_first_measurement(test_measurement("w1", v32, old_toolchain_, 9, 1004)));
  EXPECT_TRUE(db_->commit_first_measurement(test_measurement("w1", v32, a100_worker_, 9, 1005)));
  // worker_lost says nothing about the variant: always added, and no first result.
  EXPECT_TRUE(db_->commit_first_measurement(test_measurement("w1", v64, node1_, 0, 1006, JobStatus::worker_lost)));
  EXPECT_TRUE(db_->commit_first_measurement(test_measurement("w1", v64, node1_, 0, 1007, JobStatus::worker_lost)));
  EXPECT_TRUE(db_->commit_first_measurement(test_measurement("w1", v64, node2_, 12, 1008)));
  EXPECT_FALSE(db_->commit_first_measurement(test_measurement("w1", v64, node1_, 11, 1009)));
  // commit_measurement (--retune, winner checks) adds a second result as ever.
  EXPECT_TRUE(db_->commit_measurement(test_measurement("w1", v32, node2_, 8, 1010)));

  MeasurementQuery q;
  q.gpu_type = "h100";
  q.source = TimingSource::real;
  const auto got = db_->query(q);
  ASSERT_EQ(got.size(), 6u);  // v32: node1, node3, node2 (commit_measurement); v64: 2 lost, node2
  EXPECT_EQ(got[0].worker, node1_.name);
  EXPECT_EQ(got[0].median_us, 10);
}

INSTANTIATE_TEST_SUITE_P(BothImplementations, FirstResultWins, ::testing::Values("memory", "sqlite"));

// Restores the process-wide busy timeout.
struct BusyTimeout {
  explicit BusyTimeout(std::chrono::milliseconds t) { sqlite::set_busy_timeout(t); }
  ~BusyTimeout() { sqlite::set_busy_timeout(sqlite::kDefaultBusyTimeout); }
};

TEST(SqliteTuningDb, ALockHeldPastTheBusyTimeoutIsAUserErrorNamingIt) {
  const BusyTimeout timeout(300ms);  // for connections opened from here on
  testing::TempDir dir;
  const std::string path = dir.file("locked.db");
  auto db = open_tuning_db(path);
  db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
  // Another writer (its own connection, as another process would have) holds the lock.
  sqlite::Connection other(path, /*read_only=*/false);
  other.exec("BEGIN EXCLUSIVE");
  // Readers need no write lock (WAL): dc-db and a tune's lookups go on.
  EXPECT_EQ(open_tuning_db(path, /*read_only=*/true)->gpu_types().size(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    db->commit_gpu_type(test_gpu("a100", "ampere", 8, 0));
    FAIL() << "a write under another writer's lock succeeded";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("locked.db' is locked by another writer: waited 0.3 s"), std::string::npos) << what;
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 5s);
  // Released: the same connection writes again.
  other.exec("ROLLBACK");
  db->commit_gpu_type(test_gpu("a100", "ampere", 8, 0));
  EXPECT_EQ(db->gpu_types().size(), 2u);
}

TEST(SqliteTuningDb, BusyTimeoutIsNamedInTheError) {
  const BusyTimeout timeout(2500ms);
  EXPECT_EQ(sqlite::busy_timeout(), 2500ms);
  try {
    sqlite::throw_sqlite_error(5 /*SQLITE_BUSY*/, "database is locked", "committing", "x.db");
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("waited 2.5 s (the busy timeout; tune --db-timeout SECONDS)"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dc
