// The farm service's DB writer (coordinator/service/db_writer.h): the loop's thread posts DB
// work, a thread of its own runs it in batches, and take() says what finished and what is
// committed. What the service's outcomes wait for is `committed`: a work it covers must be
// visible to another connection, and its Then must have been handed back no later.
#include <gtest/gtest.h>

#include <chrono>
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

// Work i adds variant i and its result, and hands back i: what take() says is committed is
// on disk for another connection, every Then of a committed work is handed back with it or
// before, and the Thens come in post order.
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
  {
    DbWriter writer(*db, 10ms, 500us);
    const auto check = [&] {
      DbWriter::Done d = writer.take();
      for (DbWriter::Then& t : d.then) t();
      ++checks;
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
      }
    }
    writer.finish();
    check();
    EXPECT_EQ(writer.take().committed, uint64_t{kWorks});
  }
  EXPECT_GT(checks, 80);
  EXPECT_EQ(behind, 0) << "takes that said a work was committed before another connection saw its row";
  EXPECT_EQ(then_late, 0) << "takes that said a work was committed before its Then came back";
  ASSERT_EQ(order.size(), size_t{kWorks});
  for (int i = 0; i < kWorks; ++i) ASSERT_EQ(order[i], i);
  EXPECT_EQ(rows_seen(*reader), size_t{kWorks});
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
