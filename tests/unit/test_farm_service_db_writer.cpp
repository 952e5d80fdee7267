// The farm service's DB writer (coordinator/service/db_writer.h): the loop's thread posts DB
// work, a thread of its own runs it in batches, and take() says what finished and what is
// committed. What the service's outcomes wait for is `committed`: a work it covers must be
// visible to another connection, and its Then must have been handed back no later.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "db_writer.h"
#include "ir/error.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

using namespace std::chrono_literals;
using testing::test_gpu;
using testing::test_measurement;
using testing::test_variant;
using testing::test_worker;
using testing::test_workload;

size_t rows_seen(TuningDb& reader) {
  MeasurementQuery q;
  q.workload = "w1";
  return reader.query(q).size();
}

// Work i adds variant i and its result, and hands back i; seven works are handed over a
// millisecond apart, so that the writer commits many batches. What take() says is committed
// is on disk for another connection, every Then of a committed work is handed back with it
// or before, and the Thens come in post order.
TEST(FarmServiceDbWriter, WhatTakeSaysIsCommittedIsVisibleToAnotherConnectionWithItsThensInOrder) {
  testing::TempDir dir;
  const std::string path = dir.file("writer.db");
  auto db = open_tuning_db(path);
  db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
  db->commit_worker(test_worker("node1", "h100", false));
  db->commit_workload(test_workload("w1"));
  auto reader = open_tuning_db(path, /*read_only=*/true);
  constexpr int kWorks = 600;
  std::vector<int> order;
  int checks = 0, behind = 0, then_late = 0;
  std::set<uint64_t> commits_seen;
  {
    DbWriter writer(*db, 10ms, 500us);
    const auto check = [&] {
      DbWriter::Done d = writer.take();
      for (DbWriter::Then& t : d.then) t();
      ++checks;
      commits_seen.insert(d.committed);
      if (rows_seen(*reader) < d.committed) ++behind;
      if (order.size() < d.committed) ++then_late;
    };
    for (int i = 0; i < kWorks; ++i) {
      writer.post([i, &order](TuningDb& w) -> DbWriter::Then {
        w.commit_variant("w1", test_variant(i + 1), "h");
        w.commit_measurement(test_measurement("w1", test_variant(i + 1), test_worker("node1", "h100", false), 5, i + 1));
        return [i, &order] { order.push_back(i); };
      });
      if (i % 7 == 6) {
        writer.hand_over();
        check();
        std::this_thread::sleep_for(1ms);
      }
    }
    writer.finish();
    check();
    EXPECT_EQ(writer.take().committed, uint64_t{kWorks});
  }
  EXPECT_GT(checks, 80);
  EXPECT_GT(commits_seen.size(), 10u) << "batches committed while the test ran";
  EXPECT_EQ(behind, 0) << "takes that said a work was committed before another connection saw its row";
  EXPECT_EQ(then_late, 0) << "takes that said a work was committed before its Then came back";
  ASSERT_EQ(order.size(), size_t{kWorks});
  for (int i = 0; i < kWorks; ++i) ASSERT_EQ(order[i], i);
  EXPECT_EQ(rows_seen(*reader), size_t{kWorks});
}

// A DB whose batches commit only when the test opens the gate: what the writer says about a
// commit while the gate is shut is decided by it alone, not by timing. Nothing else is used.
class GatedDb final : public TuningDb {
 public:
  void open_gate() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  std::unique_ptr<Batch> begin_batch() override {
    struct GatedBatch final : Batch {
      GatedDb& db;
      explicit GatedBatch(GatedDb& d) : db(d) {}
      void commit() override {
        std::unique_lock<std::mutex> lock(db.mutex_);
        db.opened_.wait(lock, [this] { return db.open_; });
      }
    };
    return std::make_unique<GatedBatch>(*this);
  }
  void commit_gpu_type(const GpuSpec&) override { unused(); }
  void commit_worker(const WorkerInfo&) override { unused(); }
  int64_t commit_model(const std::string&, const std::string&) override { unused(); }
  void commit_workload(const WorkloadRecord&) override { unused(); }
  void commit_model_workloads(int64_t, const std::vector<std::pair<WorkloadRecord, int>>&) override { unused(); }
  bool commit_variant(const std::string&, const Variant&, const std::string&) override { unused(); }
  bool commit_measurement(const Measurement&) override { unused(); }
  bool commit_first_measurement(const Measurement&) override { unused(); }
  bool mark_implausible(const Measurement&, const std::string&) override { unused(); }
  int64_t begin_run(const RunInfo&) override { unused(); }
  void end_run(int64_t, RunStatus) override { unused(); }
  void commit_run_internal_errors(int64_t, int64_t, int64_t) override { unused(); }
  void commit_plan(const PlanRecord&) override { unused(); }
  void commit_gpu_busy(const std::vector<GpuBusyRecord>&) override { unused(); }
  bool has_measurement(const std::string&, const std::string&, const std::string&, TimingSource, const std::string&) const override { unused(); }
  std::set<std::string> measured_variants(const std::string&, const std::string&, TimingSource, const std::string&) const override { unused(); }
  std::map<std::string, std::set<std::string>> measured_source_hashes(const std::string&, const std::string&, TimingSource, const std::string&) const override { unused(); }
  std::vector<Measurement> query(const MeasurementQuery&) const override { unused(); }
  std::vector<EstimatorSample> estimator_samples(const std::string&, TimingSource, const std::string&) const override { unused(); }
  std::optional<WorkloadRecord> find_workload(const std::string&) const override { unused(); }
  std::vector<std::pair<std::string, int>> model_workloads(int64_t) const override { unused(); }
  std::vector<GpuTypeRecord> gpu_types() const override { unused(); }
  std::vector<RunRecord> runs() const override { unused(); }
  std::vector<PlanRecord> plans(int64_t) const override { unused(); }
  std::vector<GpuBusyRecord> gpu_busy(int64_t) const override { unused(); }
 private:
  [[noreturn]] static void unused() { throw std::logic_error("not used by the writer"); }
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

// While a batch's commit has not returned, take() says none of its works is committed, though
// their Thens are back; once it returns, it does.
TEST(FarmServiceDbWriter, NoWorkIsSaidCommittedBeforeItsBatchsCommitReturns) {
  GatedDb db;
  DbWriter writer(db, 10ms, 500us);
  int thens = 0;
  for (int i = 0; i < 3; ++i) writer.post([&thens](TuningDb&) -> DbWriter::Then { return [&thens] { ++thens; }; });
  writer.hand_over();
  uint64_t committed_while_shut = 0;
  for (const auto until = std::chrono::steady_clock::now() + 5s; thens < 3 && std::chrono::steady_clock::now() < until;) {
    DbWriter::Done d = writer.take();
    for (DbWriter::Then& t : d.then) t();
    committed_while_shut = std::max(committed_while_shut, d.committed);
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(thens, 3);
  std::this_thread::sleep_for(50ms);  // past the batch's age: the writer is in its commit
  committed_while_shut = std::max(committed_while_shut, writer.take().committed);
  EXPECT_EQ(committed_while_shut, 0u);
  db.open_gate();
  writer.finish();
  EXPECT_EQ(writer.take().committed, 3u);
}

// A work the DB refuses ends only itself: the next runs, is committed and hands back its
// Then. A broken invariant ends the writer, and the loop's next take() throws it.
TEST(FarmServiceDbWriter, ARefusedWorkEndsOnlyItselfAndABrokenInvariantReachesTheLoop) {
  auto db = make_memory_db();
  int thens = 0;
  {
    DbWriter writer(*db, 10ms, 500us);
    writer.post([](TuningDb&) -> DbWriter::Then { throw UserError("the DB is busy"); });
    writer.post([&thens](TuningDb& w) -> DbWriter::Then {
      w.commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
      return [&thens] { ++thens; };
    });
    writer.finish();
    DbWriter::Done d = writer.take();
    for (DbWriter::Then& t : d.then) t();
    EXPECT_EQ(d.committed, 2u);
    EXPECT_EQ(thens, 1);
    writer.post([](TuningDb&) -> DbWriter::Then { DC_INTERNAL_CHECK(false, "a broken invariant"); return {}; });
    EXPECT_THROW(writer.finish(), InternalError);
    EXPECT_THROW(writer.take(), InternalError);
  }
}

}  // namespace
}  // namespace dc
