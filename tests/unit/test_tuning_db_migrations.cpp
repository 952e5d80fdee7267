// The SQLite tuning DB's schema migrations: an empty file to the latest version, each older
// version forward with its data, the summaries of migration 0007, rollback when one fails,
// concurrent first opens, and files it must refuse (a newer dc's DB, other SQLite files).
// The rest of the DB's tests: test_tuning_db.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/error.h"
#include "merge.h"
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

TEST(SqliteTuningDb, MigratesAnEmptyFileToTheLatestVersion) {
  testing::TempDir dir;
  const std::string path = dir.file("empty.db");
  std::ofstream(path).close();  // an empty file is an empty SQLite DB
  { auto db = open_tuning_db(path); }
  sqlite::Connection conn(path, true);
  EXPECT_EQ(conn.scalar_int("PRAGMA user_version"), schema_version());
  EXPECT_GE(schema_version(), 1);
  EXPECT_EQ(conn.scalar_int("PRAGMA application_id"), kTuningDbApplicationId);
  sqlite::Query mode = conn.query("PRAGMA journal_mode");
  ASSERT_TRUE(mode.step());
  EXPECT_EQ(mode.text(0), "wal");
  for (const char* object : {"gpu_types", "workers", "models", "workloads", "model_workloads",
                             "variants", "measurements", "tuning_runs", "plans", "imports",
                             "model_plans", "estimator_error", "workload_storage"}) {
    sqlite::Query q = conn.query("SELECT count(*) FROM sqlite_schema WHERE name = ?");
    q.bind(1, object).step();
    EXPECT_EQ(q.int64(0), 1) << object;
  }
  // "Best variant" is TuningDb::best_variants alone (migration 0004): no view defines it.
  for (const char* gone : {"best_variants", "best_by_math", "model_totals"}) {
    sqlite::Query q = conn.query("SELECT count(*) FROM sqlite_schema WHERE name = ?");
    q.bind(1, gone).step();
    EXPECT_EQ(q.int64(0), 0) << gone;
  }
}

TEST(SqliteTuningDb, MigratesFromEachOlderVersion) {
  testing::TempDir dir;
  const auto all = builtin_migrations();
  for (size_t v = 0; v < all.size(); ++v) {
    const std::string path = dir.file("v" + std::to_string(v) + ".db");
    {
      sqlite::Connection conn(path, false);
      migrate(conn, all.first(v));
      ASSERT_EQ(conn.scalar_int("PRAGMA user_version"), static_cast<int64_t>(v));
    }
    auto db = open_tuning_db(path);
    fill(*db, 3);
    EXPECT_EQ(db->query({}).size(), 3u) << "from version " << v;
  }
}

// Migration 0005 on a DB of schema version 4 that holds a finished run: the run stays, it
// has no busy records, and records of a new run land in the table and its view.
TEST(SqliteTuningDb, Migration5AddsGpuBusyToAnOldDb) {
  testing::TempDir dir;
  const std::string path = dir.file("v4.db");
  int64_t old_run = 0;
  {
    auto db = open_tuning_db(path);
    fill(*db, 3);
    const int64_t model = db->commit_model("m", std::string(64, 'a'));
    old_run = db->begin_run({model, {"h100"}, "{}", "coord"});
    db->end_run(old_run, RunStatus::ok);
  }
  {  // back to version 4: what a DB written before 0005 holds
    sqlite::Connection conn(path, false);
    // (0006's columns go too; 0007 rebuilds measurements from whatever columns it finds.)
    conn.exec("DROP VIEW run_gpu_busy_fraction; DROP TABLE run_gpu_busy; "
              "ALTER TABLE tuning_runs DROP COLUMN internal_error_jobs; "
              "ALTER TABLE tuning_runs DROP COLUMN internal_error_workloads; PRAGMA user_version = 4");
  }
  EXPECT_THROW(open_tuning_db(path, true), UserError);  // read-only: asks for the migration
  auto db = open_tuning_db(path);
  EXPECT_EQ(sqlite::Connection(path, true).scalar_int("PRAGMA user_version"), schema_version());
  ASSERT_EQ(db->runs().size(), 1u);
  EXPECT_EQ(db->runs()[0].status, RunStatus::ok);
  EXPECT_EQ(db->query({}).size(), 3u);
  EXPECT_TRUE(db->gpu_busy(old_run).empty());
  const int64_t run = db->begin_run({db->runs()[0].info.model_id, {"h100"}, "{}", "coord"});
  db->commit_gpu_busy({{run, "h100", test_worker("node1", "h100", false).name, 1.5, 2}});
  sqlite::Connection conn(path, true);
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM run_gpu_busy_fraction"), 1);
  sqlite::Query q = conn.query("SELECT busy_fraction, devices FROM run_gpu_busy_fraction");
  ASSERT_TRUE(q.step());
  EXPECT_DOUBLE_EQ(q.real(0), 0.75);
  EXPECT_EQ(q.int64(1), 1);
}

// Migration 0007 on a DB of schema version 6 whose rows keep every sample: each row gets the
// summary of all its samples (as summarize_samples computes it) and keeps at most 256 of
// them, evenly spread (thin_samples); a new result is stored the same way; the file stays
// consistent.
TEST(SqliteTuningDb, Migration7StoresSummariesNotEverySample) {
  testing::TempDir dir;
  const std::string path = dir.file("v6.db");
  // 1001 samples, exact in decimal (the JSON of the kept ones round-trips exactly), out of order.
  std::vector<double> many;
  for (int i = 0; i < 1001; ++i) many.push_back(10 + ((i * 37) % 1000) / 16.0 + (i == 500 ? 40 : 0));
  const std::vector<double> few = {3.5, 2.25, 9.0};
  {
    sqlite::Connection conn(path, false);
    migrate(conn, builtin_migrations().first(6));
    conn.exec(
        "INSERT INTO gpu_types VALUES ('h100', 'hopper', 9, 0, '{}', 1);"
        "INSERT INTO workers(id, name, host, device, gpu_type, driver_version, nvrtc_version, emulated, "
        "first_seen_ms, last_seen_ms) VALUES (1, 'n/0', 'n', 'emulated h100', 'h100', 'emulated', '12.4', 1, 1, 1);"
        "INSERT INTO workloads(signature, kind, canonical, flops, bytes, first_seen_ms, base_signature) "
        "VALUES ('w', 'gemm', 'x', 1, 1, 1, 'w');"
        "INSERT INTO variants(id, workload, key, template, precision, params_json, source_hash, first_seen_ms) "
        "VALUES (1, 'w', 'gemm/fp32/a', 'gemm', 'fp32', '{}', 'h', 1), (2, 'w', 'gemm/fp32/b', 'gemm', 'fp32', '{}', 'h', 1),"
        " (3, 'w', 'gemm/fp32/c', 'gemm', 'fp32', '{}', 'h', 1);");
    auto insert = [&](int64_t variant, const std::string& status, const std::vector<double>& samples) {
      Measurement m;
      m.samples_us = samples;
      summarize_samples(m);
      conn.query(
              "INSERT INTO measurements(variant_id, gpu_type, worker_id, status, error, samples_json, n_samples, "
              "median_us, min_us, spread, max_rel_error, registers, spill_bytes, smem_bytes, compile_seconds, "
              "estimate_us, source_hash, nvrtc_version, nvrtc_major, driver_version, emulated, attempts, "
              "finished_ms, recorded_ms) VALUES (?, 'h100', 1, ?, '', ?, ?, ?, ?, ?, 0, 32, 0, 0, 0.1, 5, 'h', "
              "'12.4', '12', 'emulated', 1, 1, ?, ?)")
          .bind_all(variant, status, samples_to_json(samples), static_cast<int64_t>(samples.size()), m.median_us,
                    m.min_us, m.spread, variant, variant)
          .run();
    };
    insert(1, "ok", many);
    insert(2, "ok", few);
    insert(3, "compile_error", {});
  }
  auto db = open_tuning_db(path);
  sqlite::Connection conn(path, true);
  EXPECT_EQ(conn.scalar_int("PRAGMA user_version"), schema_version());
  sqlite::Query check = conn.query("PRAGMA integrity_check");
  ASSERT_TRUE(check.step());
  EXPECT_EQ(check.text(0), "ok");
  check.run();
  EXPECT_FALSE(conn.query("PRAGMA foreign_key_check").step());
  const auto rows = db->query({});
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& [row, samples] : {std::pair{rows[0], many}, std::pair{rows[1], few}}) {
    Measurement want;
    want.samples_us = samples;
    summarize_samples(want);
    EXPECT_EQ(row.n_samples, static_cast<int64_t>(samples.size()));
    EXPECT_EQ(row.samples_us, thin_samples(samples));
    EXPECT_DOUBLE_EQ(row.median_us, want.median_us);
    EXPECT_DOUBLE_EQ(row.min_us, want.min_us);
    EXPECT_DOUBLE_EQ(row.p10_us, want.p10_us);
    EXPECT_DOUBLE_EQ(row.p90_us, want.p90_us);
    EXPECT_NEAR(row.mean_us, want.mean_us, 1e-12 * want.mean_us);
    EXPECT_DOUBLE_EQ(row.mad_us, want.mad_us);
  }
  EXPECT_EQ(rows[0].samples_us.size(), kStoredSamples);
  EXPECT_GT(rows[0].mad_us, 0);
  EXPECT_NE(rows[0].p10_us, rows[0].p90_us);
  EXPECT_EQ(rows[2].n_samples, 0);
  EXPECT_TRUE(rows[2].samples_us.empty());
  // New results are stored the same way, and the new status is accepted.
  Measurement big = rows[1];
  big.variant_key = "gemm/fp32/a";
  big.samples_us.assign(50000, 0);
  for (size_t i = 0; i < big.samples_us.size(); ++i) big.samples_us[i] = 7 + static_cast<double>(i % 97) / 8;
  summarize_samples(big);
  big.finished_unix_ms = 99;
  ASSERT_TRUE(db->commit_measurement(big));
  big.status = JobStatus::implausible;
  big.finished_unix_ms = 100;
  ASSERT_TRUE(db->commit_measurement(big));
  MeasurementQuery q;
  q.variant_key = "gemm/fp32/a";
  const auto stored = db->query(q);
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_EQ(stored[1].n_samples, 50000);
  EXPECT_EQ(stored[1].samples_us.size(), kStoredSamples);
  EXPECT_DOUBLE_EQ(stored[1].p90_us, big.p90_us);
  EXPECT_DOUBLE_EQ(stored[1].mad_us, big.mad_us);
  EXPECT_EQ(stored[2].status, JobStatus::implausible);
  EXPECT_LT(conn.scalar_int("SELECT max(length(samples_json)) FROM measurements"), 8000);
}

// Migration 0008 on a DB of schema version 7: its rows get no health data (NULL figures, "none
// recorded"), never made-up numbers; a new sampled result stores its figures and an
// emulated one NULL figures with its note; the file stays consistent, and an export to a DB
// of its own and an import into a third keep the figures.
TEST(SqliteTuningDb, Migration8StoresHealthFiguresAndOldRowsHaveNone) {
  testing::TempDir dir;
  const std::string path = dir.file("v7.db");
  {
    auto db = open_tuning_db(path);
    fill(*db, 2);
  }
  {  // back to version 7: what a DB written before 0008 holds
    sqlite::Connection conn(path, false);
    for (const char* c : {"health_sm_clock_mhz", "health_max_sm_clock_mhz", "health_temperature_c",
                          "health_clock_event_reasons", "health_ecc_uncorrected", "health_note"})
      conn.exec(std::string("ALTER TABLE measurements DROP COLUMN ") + c);
    conn.exec("PRAGMA user_version = 7");
  }
  auto db = open_tuning_db(path);
  {
    sqlite::Connection conn(path, true);
    EXPECT_EQ(conn.scalar_int("PRAGMA user_version"), schema_version());
    EXPECT_EQ(integrity(conn), "ok");
    EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM measurements WHERE health_sm_clock_mhz IS NULL AND "
                              "health_note IS NULL AND health_temperature_c IS NULL"), 2);
  }
  for (const Measurement& m : db->query({})) {
    EXPECT_FALSE(m.health.sampled);
    EXPECT_EQ(describe_health(m.health), "no health data (none recorded)");
  }
  const WorkerInfo gpu = test_worker("node1", "h100", false), emu = test_worker("node2", "h100", true);
  db->commit_worker(emu);
  Measurement real = test_measurement("w1", test_variant(16), gpu, 3, 100);
  real.health.sampled = true;
  real.health.sm_clock_mhz = 1410;
  real.health.max_sm_clock_mhz = 1980;
  real.health.temperature_c = 45;
  real.health.clock_event_reasons = 0x4;
  real.health.ecc_known = true;
  real.health.ecc_uncorrected = 2;
  Measurement emulated = test_measurement("w1", test_variant(16), emu, 3, 101);
  emulated.health.note = "emulated device: its times are modelled";
  ASSERT_TRUE(db->commit_measurement(real));
  ASSERT_TRUE(db->commit_measurement(emulated));
  sqlite::Connection conn(path, true);
  EXPECT_EQ(integrity(conn), "ok");
  EXPECT_FALSE(conn.query("PRAGMA foreign_key_check").step());
  sqlite::Query q = conn.query(
      "SELECT health_sm_clock_mhz, health_max_sm_clock_mhz, health_temperature_c, health_clock_event_reasons, "
      "health_ecc_uncorrected, health_note FROM measurements WHERE finished_ms = ?");
  ASSERT_TRUE(q.bind_all(int64_t{100}).step());
  EXPECT_EQ(q.int64(0), 1410);
  EXPECT_EQ(q.int64(1), 1980);
  EXPECT_EQ(q.int64(2), 45);
  EXPECT_EQ(q.int64(3), 0x4);
  EXPECT_EQ(q.int64(4), 2);
  q.run();
  sqlite::Query e = conn.query(
      "SELECT health_sm_clock_mhz IS NULL AND health_max_sm_clock_mhz IS NULL AND health_temperature_c IS NULL "
      "AND health_clock_event_reasons IS NULL AND health_ecc_uncorrected IS NULL, health_note "
      "FROM measurements WHERE finished_ms = ?");
  ASSERT_TRUE(e.bind_all(int64_t{101}).step());
  EXPECT_EQ(e.int64(0), 1) << "an emulated row has no figures";
  EXPECT_EQ(e.text(1), "emulated device: its times are modelled");
  e.run();
  // Through a DB of its own and back into a third: the figures travel.
  const std::string third = dir.file("third.db");
  open_tuning_db(third);
  sqlite::Connection into(third, false);
  merge_tuning_db(into, path);
  auto merged = open_tuning_db(third, true);
  MeasurementQuery mq;
  mq.worker = gpu.name;
  bool seen = false;
  for (const Measurement& m : merged->query(mq))
    if (m.finished_unix_ms == 100) {
      seen = true;
      EXPECT_EQ(describe_health(m.health), describe_health(real.health));
    }
  EXPECT_TRUE(seen);
}

// Whether SQLite's program for the measurement insert builds an ephemeral b-tree (what a
// CHECK of a constant IN list of more than two values costs, per row).
bool measurement_insert_builds_a_btree(sqlite::Connection& conn) {
  sqlite::Query q = conn.query(
      "EXPLAIN INSERT INTO measurements(variant_id, gpu_type, worker_id, status, error, samples_json, n_samples, "
      "median_us, min_us, spread, max_rel_error, registers, spill_bytes, smem_bytes, compile_seconds, estimate_us, "
      "source_hash, nvrtc_version, nvrtc_major, driver_version, emulated, attempts, finished_ms, recorded_ms, "
      "p10_us, p90_us, mean_us, mad_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "?, ?, ?, ?, ?, ?)");
  bool ephemeral = false;
  while (q.step()) ephemeral = ephemeral || q.text(1) == "OpenEphemeral";
  return ephemeral;
}

// Every measurement row, column by column, in id order: what a migration must keep.
std::vector<std::string> measurement_rows(sqlite::Connection& conn) {
  std::string columns;
  {
    sqlite::Query c = conn.query("SELECT name FROM pragma_table_info('measurements')");
    while (c.step()) columns += (columns.empty() ? "quote(" : " || '|' || quote(") + c.text(0) + ")";
  }
  sqlite::Query q = conn.query("SELECT " + columns + " FROM measurements ORDER BY id");
  std::vector<std::string> out;
  while (q.step()) out.push_back(q.text(0));
  return out;
}

// Migration 0009 on a DB of schema version 8: the status CHECK becomes equalities joined by
// OR (no ephemeral b-tree per insert, round 7 of docs/bench/farm-service.md) with the same
// allowed values; every row, id and index stays, and the views read the new table.
TEST(SqliteTuningDb, Migration9KeepsEveryRowAndTheStatusesTheCheckAllows) {
  testing::TempDir dir;
  const std::string path = dir.file("v8.db");
  const std::vector<JobStatus> recorded = {JobStatus::ok, JobStatus::compile_error, JobStatus::launch_error,
                                           JobStatus::runtime_fault, JobStatus::wrong_result, JobStatus::timeout,
                                           JobStatus::worker_lost, JobStatus::unsupported, JobStatus::implausible};
  {
    auto db = open_tuning_db(path);
    fill(*db, 3);
    for (size_t i = 0; i < recorded.size(); ++i)
      ASSERT_TRUE(db->commit_measurement(test_measurement("w1", test_variant(32), test_worker("node1", "h100", false),
                                                          2, 100 + static_cast<int64_t>(i), recorded[i])));
  }
  std::vector<std::string> before;
  {  // back to version 8: the table as 0001-0008 define it (its CHECK an IN list), same rows
    const std::string v8 = dir.file("v8-schema.db");
    std::string ddl;
    {
      sqlite::Connection conn(v8, false);
      migrate(conn, builtin_migrations().first(8));
      sqlite::Query q = conn.query("SELECT sql FROM sqlite_schema WHERE name = 'measurements'");
      ASSERT_TRUE(q.step());
      ddl = q.text(0);
      ASSERT_TRUE(measurement_insert_builds_a_btree(conn)) << "version 8's CHECK is an IN list";
    }
    sqlite::Connection conn(path, false);
    conn.exec("PRAGMA foreign_keys = OFF; PRAGMA legacy_alter_table = ON; BEGIN");
    conn.exec("ALTER TABLE measurements RENAME TO m9; DROP INDEX measurements_lookup");
    conn.exec(ddl);
    conn.exec("INSERT INTO measurements SELECT * FROM m9; DROP TABLE m9; "
              "CREATE INDEX measurements_lookup ON measurements(variant_id, gpu_type, emulated, status); "
              "PRAGMA user_version = 8; COMMIT; PRAGMA legacy_alter_table = OFF");
    ASSERT_TRUE(measurement_insert_builds_a_btree(conn));
    before = measurement_rows(conn);
  }
  ASSERT_EQ(before.size(), 3 + recorded.size());
  auto db = open_tuning_db(path);
  sqlite::Connection conn(path, false);
  EXPECT_EQ(conn.scalar_int("PRAGMA user_version"), schema_version());
  EXPECT_EQ(integrity(conn), "ok");
  EXPECT_FALSE(conn.query("PRAGMA foreign_key_check").step());
  EXPECT_EQ(measurement_rows(conn), before);
  EXPECT_FALSE(measurement_insert_builds_a_btree(conn));
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM sqlite_schema WHERE name = 'measurements_lookup'"), 1);
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM ok_measurements"), 4);  // the views read the new table
  // The CHECK allows what it allowed: each recorded status once more, and no other.
  for (size_t i = 0; i < recorded.size(); ++i)
    EXPECT_TRUE(db->commit_measurement(test_measurement("w1", test_variant(64), test_worker("node1", "h100", false), 2,
                                                        200 + static_cast<int64_t>(i), recorded[i])))
        << job_status_name(recorded[i]);
  for (const char* bad : {"internal_error", "unhealthy", "OK", ""}) {
    std::string refused;
    try {
      conn.query("UPDATE measurements SET status = ? WHERE id = 1").bind(1, bad).run();
    } catch (const InternalError& e) {
      refused = e.what();
    }
    EXPECT_NE(refused.find("CHECK constraint failed"), std::string::npos) << "status '" << bad << "': " << refused;
  }
}

TEST(SqliteTuningDb, MigrationsKeepDataAndRollBackWhenOneFails) {
  testing::TempDir dir;
  sqlite::Connection conn(dir.file("m.db"), false);
  const Migration m1{1, "0001_t.sql", "CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (7);"};
  const Migration m2{2, "0002_y.sql", "ALTER TABLE t ADD COLUMN y INTEGER NOT NULL DEFAULT 5;"};
  const Migration bad{3, "0003_bad.sql", "ALTER TABLE t ADD COLUMN z INTEGER; SELEC oops;"};
  const Migration v1[] = {m1};
  const Migration v2[] = {m1, m2};
  const Migration v3[] = {m1, m2, bad};
  migrate(conn, v1);
  conn.exec("INSERT INTO t VALUES (8)");
  migrate(conn, v2);
  EXPECT_EQ(conn.scalar_int("PRAGMA user_version"), 2);
  EXPECT_EQ(conn.scalar_int("SELECT sum(x * y) FROM t"), (7 + 8) * 5);
  EXPECT_THROW(migrate(conn, v3), InternalError);
  EXPECT_EQ(conn.scalar_int("PRAGMA user_version"), 2);
  EXPECT_EQ(conn.scalar_int("SELECT count(*) FROM pragma_table_info('t') WHERE name = 'z'"), 0);
  // And a list that shrank: the DB is newer than the binary.
  EXPECT_THROW(migrate(conn, v1), UserError);
}

// Two tunes starting together on a new DB file both migrate it: the second must wait for the
// first's write lock and find the DB current, not replay migrations over it (which failed on
// migration 0004's dropped views in the fresh-clone CI run of db_faults_two_tunes).
TEST(SqliteTuningDb, ConcurrentOpensOfANewFileMigrateItOnce) {
  testing::TempDir dir;
  for (int round = 0; round < 20; ++round) {
    const std::string path = dir.file("race" + std::to_string(round) + ".db");
    std::atomic<bool> go{false};
    std::atomic<int> failures{0};
    std::string first_error;
    std::mutex error_mutex;
    std::vector<std::thread> openers;
    for (int t = 0; t < 4; ++t)
      openers.emplace_back([&] {
        while (!go.load()) std::this_thread::yield();
        try {
          auto db = open_tuning_db(path);
        } catch (const std::exception& e) {
          ++failures;
          const std::lock_guard<std::mutex> lock(error_mutex);
          if (first_error.empty()) first_error = e.what();
        }
      });
    go = true;
    for (auto& t : openers) t.join();
    ASSERT_EQ(failures.load(), 0) << "round " << round << ": " << first_error;
    sqlite::Connection conn(path, true);
    EXPECT_EQ(conn.scalar_int("PRAGMA user_version"), schema_version());
  }
}

TEST(SqliteTuningDb, RefusesADbFromANewerDc) {
  testing::TempDir dir;
  const std::string path = dir.file("new.db");
  { open_tuning_db(path); }
  sqlite::Connection(path, false).exec("PRAGMA user_version = " +
                                       std::to_string(schema_version() + 1));
  try {
    open_tuning_db(path);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_tuning_db(path, true), UserError);
}

TEST(SqliteTuningDb, RefusesOtherSqliteFilesAndNonDatabases) {
  testing::TempDir dir;
  const std::string other = dir.file("other.db");
  sqlite::Connection(other, false).exec("CREATE TABLE foo(x)");
  EXPECT_THROW(open_tuning_db(other), UserError);
  EXPECT_EQ(sqlite::Connection(other, true).scalar_int("SELECT count(*) FROM sqlite_schema"), 1);
  const std::string text = dir.file("text.db");
  std::ofstream(text) << "this is not a database, just some text that is long enough to matter";
  EXPECT_THROW(open_tuning_db(text), UserError);
  EXPECT_THROW(open_tuning_db(dir.file("missing.db"), true), UserError);
}

}  // namespace
}  // namespace dc
