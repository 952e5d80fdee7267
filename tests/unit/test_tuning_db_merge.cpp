// `dc-db import`: merging another tuning DB into this one (schema/merge.h), with provenance,
// once, and refusing what it cannot merge before writing anything.
#include <gtest/gtest.h>

#include "ir/error.h"
#include "merge.h"
#include "migrate.h"
#include "reuse.h"
#include "sqlite.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

using testing::integrity;
using testing::test_gpu;
using testing::test_measurement;
using testing::test_variant;
using testing::test_worker;
using testing::test_workload;

class TuningDbMerge : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two farms measured the same workload; they share one job (same worker, same time).
    auto a = open_tuning_db(a_path_);
    auto b = open_tuning_db(b_path_);
    for (TuningDb* db : {a.get(), b.get()}) {
      db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
      db->commit_worker(shared_);
      db->commit_workload(test_workload("w1"));
      db->commit_variant("w1", test_variant(32), "h32");
      db->commit_measurement(test_measurement("w1", test_variant(32), shared_, 10, 100));
    }
    b->commit_gpu_type(test_gpu("a100", "ampere", 8, 0));
    b->commit_worker(remote_);
    b->commit_workload(test_workload("w2", ClusterKind::conv));
    b->commit_variant("w1", test_variant(64), "h64");
    b->commit_variant("w2", test_variant(32, "conv_implicit_gemm"), "hc");
    b->commit_measurement(test_measurement("w1", test_variant(64), remote_, 7, 200));
    b->commit_measurement(test_measurement("w2", test_variant(32, "conv_implicit_gemm"), remote_, 3, 300));
    const int64_t model = b->commit_model("resnet50", std::string(64, 'f'));
    b->commit_model_workloads(model, {{test_workload("w1"), 2}, {test_workload("w2", ClusterKind::conv), 1}});
    const int64_t run = b->begin_run({model, {"a100"}, "{}", "farm-b", "fp32"});
    b->commit_plan({run, "a100", TimingSource::real, {{"c0", "w1", test_variant(64).key(), 5, 7}}, 5, 7, "fp32"});
    b->commit_gpu_busy({{run, "a100", remote_.name, 3, 4}});
    b->end_run(run, RunStatus::ok);
  }

  testing::TempDir dir_;
  std::string a_path_ = dir_.file("a.db"), b_path_ = dir_.file("b.db");
  WorkerInfo shared_ = test_worker("node1", "h100", false);
  WorkerInfo remote_ = test_worker("farm-b-node7", "a100", false, "12.2");
};

TEST_F(TuningDbMerge, BringsNewRecordsWithProvenanceOnce) {
  sqlite::Connection conn = open_tuning_connection(a_path_, false);
  const MergeStats s = merge_tuning_db(conn, b_path_);
  EXPECT_EQ(s.measurements, 2);  // the shared job is not duplicated
  EXPECT_EQ(s.variants, 2);
  EXPECT_EQ(s.workloads, 1);
  EXPECT_EQ(s.gpu_types, 1);
  EXPECT_EQ(s.workers, 1);
  EXPECT_EQ(s.models, 1);
  EXPECT_EQ(s.runs, 1);
  EXPECT_EQ(s.plans, 1);
  // Provenance: the remote worker's host and versions, the import row with the source path.
  sqlite::Query q = conn.query(
      "SELECT wk.host, m.nvrtc_version, m.finished_ms, i.source_path, i.measurements_added "
      "FROM measurements m JOIN workers wk ON wk.id = m.worker_id "
      "JOIN imports i ON i.id = m.import_id ORDER BY m.finished_ms");
  ASSERT_TRUE(q.step());
  EXPECT_EQ(q.text(0), "farm-b-node7");
  EXPECT_EQ(q.text(1), "12.2");
  EXPECT_EQ(q.int64(2), 200);
  EXPECT_EQ(q.text(3), std::filesystem::absolute(b_path_).string());
  EXPECT_EQ(q.int64(4), 2);
  ASSERT_TRUE(q.step());
  EXPECT_FALSE(q.step());
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM measurements WHERE import_id IS NULL"), 1);

  const MergeStats again = merge_tuning_db(conn, b_path_);
  EXPECT_EQ(again.measurements + again.variants + again.runs + again.plans + again.models, 0);
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM measurements"), 3);
  EXPECT_EQ(integrity(conn), "ok");
  EXPECT_FALSE(conn.query("PRAGMA foreign_key_check").step());

  // Through the interface: the merged results answer queries like local ones.
  auto db = open_tuning_db(a_path_, true);
  const auto top = db->top_k("w1", "h100", TimingSource::real, 5);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].median_us, 10);
  EXPECT_EQ(db->top_k("w1", "a100", TimingSource::real, 5).size(), 1u);
  // The run's GPU busy record came with it, once.
  const auto busy = db->gpu_busy(db->runs().back().id);
  ASSERT_EQ(busy.size(), 1u);
  EXPECT_EQ(busy[0].worker, remote_.name);
  EXPECT_EQ(busy[0].busy_seconds, 3);
  ASSERT_EQ(db->runs().size(), 1u);
  ASSERT_EQ(db->plans(db->runs()[0].id).size(), 1u);
  EXPECT_EQ(db->plans(db->runs()[0].id)[0].measured_total_us, 7);
  const int64_t model = db->runs()[0].info.model_id;
  EXPECT_EQ(db->model_workloads(model).size(), 2u);
}

TEST_F(TuningDbMerge, RefusesConflictingVersionsItselfAndStrangers) {
  sqlite::Connection conn = open_tuning_connection(a_path_, false);
  sqlite::Connection(b_path_, false).exec("PRAGMA user_version = " +
                                          std::to_string(schema_version() + 1));
  try {
    merge_tuning_db(conn, b_path_);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("schema version"), std::string::npos) << e.what();
  }
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM imports"), 0);
  EXPECT_THROW(merge_tuning_db(conn, a_path_), UserError);
  EXPECT_THROW(merge_tuning_db(conn, dir_.file("missing.db")), UserError);
  const std::string other = dir_.file("other.db");
  sqlite::Connection(other, false).exec("CREATE TABLE foo(x)");
  EXPECT_THROW(merge_tuning_db(conn, other), UserError);
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM measurements"), 1);
}

// fuzz_db_import (docs/bench/fuzz.md): a DB whose measurement refers to a variant it does not
// hold (a changed id) failed the merge's INSERT with a foreign-key error, an InternalError.
TEST_F(TuningDbMerge, RefusesAnInconsistentDbBeforeWritingAnything) {
  {
    sqlite::Connection b(b_path_, false);
    b.exec("PRAGMA foreign_keys = OFF");
    b.exec("UPDATE measurements SET variant_id = 9999 WHERE id = (SELECT max(id) FROM measurements)");
  }
  sqlite::Connection conn = open_tuning_connection(a_path_, false);
  std::string msg;
  try {
    merge_tuning_db(conn, b_path_);
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("its table measurements has rows that refer to missing rows of variants"),
            std::string::npos) << msg;
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM imports"), 0);
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM measurements"), 1);
}

}  // namespace
}  // namespace dc
