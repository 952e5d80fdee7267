// The tuning DB: what only the SQLite implementation has (durability, batches, read-only
// opens, disk full, the content stamp, killed writers). The interface suite that both
// implementations pass: test_tuning_db.cpp.
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

TEST(SqliteTuningDb, InMemoryDatabaseWorks) {
  auto db = open_tuning_db(":memory:");
  fill(*db, 7);
  EXPECT_EQ(db->query({}).size(), 7u);
  EXPECT_EQ(db->top_k("w1", "h100", TimingSource::real, 1).at(0).median_us, 1);
}

TEST(SqliteTuningDb, ManyCommitsPersistAndPassIntegrityCheck) {
  testing::TempDir dir;
  const std::string path = dir.file("many.db");
  {
    auto db = open_tuning_db(path);
    fill(*db, 1000);
    fill(*db, 1000);  // everything again: no duplicates
    EXPECT_EQ(db->query({}).size(), 1000u);
  }
  auto db = open_tuning_db(path, true);
  EXPECT_EQ(db->query({}).size(), 1000u);
  const auto top = db->top_k("w1", "h100", TimingSource::real, 1);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].median_us, 1);
  sqlite::Connection conn(path, true);
  EXPECT_EQ(integrity(conn), "ok");
  EXPECT_FALSE(conn.query("PRAGMA foreign_key_check").step());
}

// The stamp a cache of the DB's rows is kept by (the farm service's fitted calibration): the
// same while nothing changes, and new after a write of this connection, a commit of another
// connection to the same file, and a rolled-back batch.
TEST(SqliteTuningDb, TheContentStampMovesWithEveryChangeOfTheRows) {
  EXPECT_FALSE(make_memory_db()->content_stamp().has_value());  // cannot tell: never cached
  testing::TempDir dir;
  const std::string path = dir.file("stamp.db");
  auto db = open_tuning_db(path);
  fill(*db, 3);
  const auto first = db->content_stamp();
  ASSERT_TRUE(first.has_value());
  db->query({});
  db->estimator_samples("h100", TimingSource::real, "");
  EXPECT_EQ(db->content_stamp(), first);  // reads change nothing

  const WorkerInfo w = test_worker("node1", "h100", false);
  EXPECT_TRUE(db->commit_measurement(test_measurement("w1", test_variant(16), w, 5, 100)));
  const auto own = db->content_stamp();
  EXPECT_NE(own, first);

  {
    auto other = open_tuning_db(path);
    EXPECT_TRUE(other->commit_measurement(test_measurement("w1", test_variant(32), w, 6, 101)));
  }
  const auto others = db->content_stamp();
  EXPECT_NE(others, own);

  std::optional<DbContentStamp> inside;
  {
    auto undone = db->begin_batch();
    EXPECT_TRUE(db->commit_measurement(test_measurement("w1", test_variant(64), w, 7, 102)));
    inside = db->content_stamp();  // the batch's own row, visible to this connection
    EXPECT_NE(inside, others);
  }
  EXPECT_EQ(db->query({}).size(), 5u);
  EXPECT_NE(db->content_stamp(), inside);  // the row is gone again: a cache made inside is stale
}

// The farm service's batch (one transaction a loop turn): other connections see its rows
// only once it commits, and a batch dropped uncommitted leaves nothing behind.
TEST(SqliteTuningDb, ABatchIsOneTransactionOthersSeeOnlyOnCommit) {
  testing::TempDir dir;
  const std::string path = dir.file("batch.db");
  auto db = open_tuning_db(path);
  fill(*db, 0);
  const WorkerInfo node1 = test_worker("node1", "h100", false);
  {
    auto batch = db->begin_batch();
    for (int i = 0; i < 3; ++i) db->commit_measurement(test_measurement("w1", test_variant(16 << i), node1, 2, 10 + i));
    EXPECT_EQ(db->query({}).size(), 3u);  // its own thread reads its writes
    EXPECT_EQ(open_tuning_db(path, true)->query({}).size(), 0u);
    batch->commit();
  }
  EXPECT_EQ(open_tuning_db(path, true)->query({}).size(), 3u);
  {
    auto batch = db->begin_batch();
    db->commit_measurement(test_measurement("w1", test_variant(128), node1, 2, 20));
  }  // dropped: rolled back
  EXPECT_EQ(db->query({}).size(), 3u);
  db->commit_measurement(test_measurement("w1", test_variant(256), node1, 2, 21));  // writable after it
  EXPECT_EQ(open_tuning_db(path, true)->query({}).size(), 4u);
  sqlite::Connection conn(path, true);
  EXPECT_EQ(integrity(conn), "ok");
}

// A write that fails or rolls itself back inside a batch undoes only itself (a savepoint):
// the batch's other rows still commit.
TEST(SqliteTuningDb, AFailedWriteInsideABatchUndoesOnlyItself) {
  testing::TempDir dir;
  const std::string path = dir.file("batch.db");
  auto db = open_tuning_db(path);
  fill(*db, 0);
  const WorkerInfo node1 = test_worker("node1", "h100", false);
  auto batch = db->begin_batch();
  EXPECT_TRUE(db->commit_first_measurement(test_measurement("w1", test_variant(16), node1, 2, 10)));
  // Another result for the same variant: commit_first_measurement's own rollback.
  EXPECT_FALSE(db->commit_first_measurement(test_measurement("w1", test_variant(16), node1, 3, 11)));
  EXPECT_THROW(db->commit_measurement(test_measurement("w1", test_variant(512), node1, 2, 12)), InternalError);
  EXPECT_TRUE(db->commit_measurement(test_measurement("w1", test_variant(32), node1, 4, 13)));
  batch->commit();
  batch.reset();
  const auto rows = open_tuning_db(path, true)->query({});
  ASSERT_EQ(rows.size(), 2u);
  std::set<std::string> keys;
  for (const Measurement& m : rows) keys.insert(m.variant_key);
  EXPECT_EQ(keys, (std::set<std::string>{test_variant(16).key(), test_variant(32).key()}));
  sqlite::Connection conn(path, true);
  EXPECT_EQ(integrity(conn), "ok");
}

// Inside a batch, a write of one statement takes no savepoint (sqlite::Transaction's
// Nested::plain): a statement that fails, here on the workloads' CHECK of the kind, undoes
// itself, and the rows written before and after it in the batch commit.
TEST(SqliteTuningDb, AFailedStatementInsideABatchUndoesOnlyItself) {
  testing::TempDir dir;
  const std::string path = dir.file("batch.db");
  auto db = open_tuning_db(path);
  auto workload = [](const std::string& sig, ClusterKind kind) {
    WorkloadRecord w;
    w.signature = sig;
    w.kind = kind;
    w.canonical = "canonical " + sig;
    return w;
  };
  auto batch = db->begin_batch();
  db->commit_workload(workload("before", ClusterKind::gemm));
  // A kind the schema does not allow (cluster_kind_name gives "?"): the insert fails.
  EXPECT_THROW(db->commit_workload(workload("bad", static_cast<ClusterKind>(99))), InternalError);
  db->commit_workload(workload("after", ClusterKind::conv));
  batch->commit();
  batch.reset();
  sqlite::Connection conn(path, true);
  sqlite::Query q = conn.query("SELECT signature, kind FROM workloads ORDER BY signature");
  std::map<std::string, std::string> kinds;
  while (q.step()) kinds[q.text(0)] = q.text(1);
  EXPECT_EQ(kinds, (std::map<std::string, std::string>{{"after", "conv"}, {"before", "gemm"}}));
  EXPECT_EQ(integrity(conn), "ok");
}

// The measurement insert keeps the row ids it looked up by name (SqliteDb's IdCache). A
// rolled-back batch takes its rows with it, and SQLite gives their ids to the next rows: an
// id kept from inside it would file a measurement under another variant.
TEST(SqliteTuningDb, RowIdsKeptByTheInsertDoNotOutliveARollback) {
  testing::TempDir dir;
  const std::string path = dir.file("ids.db");
  auto db = open_tuning_db(path);
  fill(*db, 0);
  const WorkerInfo node1 = test_worker("node1", "h100", false);
  {
    auto batch = db->begin_batch();
    db->commit_variant("w1", test_variant(512), "h");
    db->commit_measurement(test_measurement("w1", test_variant(512), node1, 2, 10));
  }  // rolled back: variant 512 and its measurement are gone
  db->commit_variant("w1", test_variant(1024), "h");  // takes the id 512 had
  db->commit_variant("w1", test_variant(512), "h");   // a new id
  db->commit_measurement(test_measurement("w1", test_variant(512), node1, 3, 11));
  MeasurementQuery q;
  q.variant_key = test_variant(512).key();
  const auto rows = db->query(q);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].median_us, 3);
  q.variant_key = test_variant(1024).key();
  EXPECT_TRUE(db->query(q).empty()) << "a measurement filed under the variant that took the old id";
}

// A variant this connection inserted needs no look-up before its first result (the farm
// service's every job, IdCache::unmeasured), as long as nobody measured it since: this
// connection's own result, or another connection's commit (PRAGMA data_version), whether
// before a single write or before a batch.
TEST(SqliteTuningDb, AFirstResultIsRefusedAfterAnyConnectionsResultOfAVariantInsertedHere) {
  testing::TempDir dir;
  const std::string path = dir.file("first.db");
  auto a = open_tuning_db(path);
  fill(*a, 0);  // a inserts variants 16 to 256
  const WorkerInfo node1 = test_worker("node1", "h100", false);
  EXPECT_TRUE(a->commit_first_measurement(test_measurement("w1", test_variant(32), node1, 4, 12)));
  EXPECT_FALSE(a->commit_first_measurement(test_measurement("w1", test_variant(32), node1, 5, 13)))
      << "this connection's own result came first";
  auto b = open_tuning_db(path);
  EXPECT_TRUE(b->commit_first_measurement(test_measurement("w1", test_variant(16), node1, 2, 10)));
  EXPECT_FALSE(a->commit_first_measurement(test_measurement("w1", test_variant(16), node1, 3, 11)))
      << "another connection's result came first";
  EXPECT_TRUE(a->commit_variant("w1", test_variant(512), "h"));
  EXPECT_TRUE(b->commit_first_measurement(test_measurement("w1", test_variant(512), node1, 6, 14)));
  {
    auto batch = a->begin_batch();
    EXPECT_FALSE(a->commit_first_measurement(test_measurement("w1", test_variant(512), node1, 7, 15)))
        << "another connection's result came first, before the batch";
    EXPECT_TRUE(a->commit_first_measurement(test_measurement("w1", test_variant(64), node1, 8, 16)));
    batch->commit();
  }
  std::map<std::string, double> medians;
  for (const Measurement& m : open_tuning_db(path, true)->query({})) medians[m.variant_key] += m.median_us;
  EXPECT_EQ(medians, (std::map<std::string, double>{{test_variant(16).key(), 2}, {test_variant(32).key(), 4},
                                                    {test_variant(512).key(), 6}, {test_variant(64).key(), 8}}));
}

// A worker's row may change (commit_worker updates it): the insert reads it again.
TEST(SqliteTuningDb, AWorkerRecordedAgainIsReadAgainByTheInsert) {
  testing::TempDir dir;
  auto db = open_tuning_db(dir.file("worker.db"));
  fill(*db, 0);
  WorkerInfo node1 = test_worker("node1", "h100", false);
  EXPECT_TRUE(db->commit_measurement(test_measurement("w1", test_variant(16), node1, 2, 10)));
  node1.emulated = true;  // the same name, now an emulated device
  db->commit_worker(node1);
  EXPECT_TRUE(db->commit_measurement(test_measurement("w1", test_variant(32), node1, 2, 11)));
  node1.emulated = false;  // disagrees with the row now: a caller's bug, still caught
  EXPECT_THROW(db->commit_measurement(test_measurement("w1", test_variant(64), node1, 2, 12)), InternalError);
}

TEST(SqliteTuningDb, ReadOnlyOpenRefusesWritesClearly) {
  testing::TempDir dir;
  const std::string path = dir.file("ro.db");
  { fill(*open_tuning_db(path), 5); }
  auto db = open_tuning_db(path, /*read_only=*/true);
  EXPECT_EQ(db->query({}).size(), 5u);
  try {
    db->commit_measurement(test_measurement("w1", test_variant(16), test_worker("node1", "h100", false), 3, 99));
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
  }
  // SQLite's own refusal maps to the same kind of error.
  sqlite::Connection conn(path, true);
  try {
    conn.exec("DELETE FROM measurements");
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
  }
  EXPECT_EQ(integrity(conn), "ok");
  EXPECT_EQ(open_tuning_db(path, true)->query({}).size(), 5u);
}

TEST(SqliteTuningDb, ReadOnlyOpenOfAnOldDbAsksForAMigration) {
  testing::TempDir dir;
  const std::string path = dir.file("old.db");
  std::ofstream(path).close();
  try {
    open_tuning_db(path, true);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("migrate"), std::string::npos) << e.what();
  }
}

TEST(SqliteTuningDb, WriteProtectedFileIsRefusedAtOpen) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores file permissions";
  testing::TempDir dir;
  const std::string path = dir.file("prot.db");
  { fill(*open_tuning_db(path), 2); }
  std::filesystem::permissions(path, std::filesystem::perms::owner_read);
  EXPECT_THROW(open_tuning_db(path), UserError);
  EXPECT_EQ(open_tuning_db(path, true)->query({}).size(), 2u);
}

TEST(SqliteTuningDb, FullDiskIsAUserErrorAndRollsBack) {
  testing::TempDir dir;
  const std::string path = dir.file("full.db");
  sqlite::Connection conn = open_tuning_connection(path, false);
  conn.exec("CREATE TABLE filler(x BLOB)");
  // A DB that may not grow stands in for a full disk: SQLite reports SQLITE_FULL.
  conn.exec("PRAGMA max_page_count = " + std::to_string(conn.scalar_int("PRAGMA page_count")));
  try {
    sqlite::Transaction tx(conn);
    conn.exec("INSERT INTO filler VALUES (randomblob(1000000))");
    tx.commit();
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("disk full"), std::string::npos) << e.what();
  }
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM filler"), 0);
  EXPECT_EQ(integrity(conn), "ok");
}

TEST(SqliteTuningDb, TransactionRollsBackUnlessCommitted) {
  testing::TempDir dir;
  sqlite::Connection conn(dir.file("tx.db"), false);
  conn.exec("CREATE TABLE t(x)");
  {
    sqlite::Transaction tx(conn);
    conn.exec("INSERT INTO t VALUES (1)");
  }
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM t"), 0);
  {
    sqlite::Transaction tx(conn);
    conn.exec("INSERT INTO t VALUES (2)");
    tx.commit();
  }
  EXPECT_EQ(conn.scalar_int("SELECT sum(x) FROM t"), 2);
}

TEST(SqliteTuningDb, ReaderSeesCommitsWhileAWriterIsOpen) {
  testing::TempDir dir;
  const std::string path = dir.file("rw.db");
  auto writer = open_tuning_db(path);
  fill(*writer, 3);
  auto reader = open_tuning_db(path, true);
  EXPECT_EQ(reader->query({}).size(), 3u);
  writer->commit_measurement(test_measurement("w1", test_variant(16), test_worker("node1", "h100", false), 1, 500));
  EXPECT_EQ(reader->query({}).size(), 4u);
}

TEST(SqliteTuningDb, KilledWriterLosesNothingCommittedAndResumesWithoutDuplicates) {
  testing::TempDir dir;
  const std::string path = dir.file("killed.db");
  { fill(*open_tuning_db(path), 0); }
  const WorkerInfo w = test_worker("node1", "h100", false);
  auto job = [&](int i) { return test_measurement("w1", test_variant(16 << (i % 5)), w, 1 + i, i + 1); };
  constexpr int kJobs = 100000;  // far more than it gets through before the kill
  int acks[2];
  ASSERT_EQ(::pipe(acks), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a tune: commit results as they arrive, say so after each commit
    ::close(acks[0]);
    auto db = open_tuning_db(path);
    for (int i = 0; i < kJobs; ++i) {
      db->commit_measurement(job(i));
      if (::write(acks[1], "x", 1) != 1) ::_exit(3);
    }
    ::_exit(0);
  }
  ::close(acks[1]);
  int acked = 0;
  char c;
  while (acked < 300 && ::read(acks[0], &c, 1) == 1) ++acked;
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(acks[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer finished before the kill";
  ASSERT_EQ(acked, 300);

  auto db = open_tuning_db(path);
  const size_t kept = db->query({}).size();
  EXPECT_GE(kept, 300u);  // every acknowledged commit survived
  EXPECT_LT(kept, static_cast<size_t>(kJobs));
  // Resume: the same jobs again measure (commit) only what is missing.
  size_t added = 0;
  for (int i = 0; i < 1000; ++i) added += db->commit_measurement(job(i));
  EXPECT_EQ(added, 1000 - std::min<size_t>(kept, 1000));
  EXPECT_EQ(db->query({}).size(), std::max<size_t>(kept, 1000));
  sqlite::Connection conn(path, true);
  EXPECT_EQ(integrity(conn), "ok");
}

// ---------------------------------------------------------------- records

// samples_json is written without a stream (round 8 of docs/bench/farm-service.md): the same
// text as JsonWriter's (the shortest that round-trips, null for what is not finite), read back exactly.

}  // namespace
}  // namespace dc
