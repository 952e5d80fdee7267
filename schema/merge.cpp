#include "merge.h"

#include <cctype>
#include <filesystem>
#include <new>

#include <fmt/format.h>
#include <sqlite3.h>

#include "ir/error.h"
#include "migrate.h"
#include "records.h"

namespace dc {

namespace {

// A read-only URI for ATTACH: the path percent-encoded where URIs need it.
std::string readonly_uri(const std::string& path) {
  std::string out = "file:";
  for (unsigned char c : std::filesystem::absolute(path).string()) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out + "?mode=ro";
}

// Statements run in order; each adds the records of one table that `into` lacks, matching
// rows by natural key (ids differ between DBs).
struct Step {
  int64_t MergeStats::*count;
  const char* sql;
};

const Step kSteps[] = {
    {&MergeStats::gpu_types,
     "INSERT INTO main.gpu_types(name, arch, cc_major, cc_minor, spec_json, first_seen_ms) "
     "SELECT name, arch, cc_major, cc_minor, spec_json, first_seen_ms FROM src.gpu_types "
     "WHERE true ON CONFLICT(name) DO NOTHING"},
    {&MergeStats::workers,
     "INSERT INTO main.workers(name, host, device, gpu_type, driver_version, nvrtc_version, "
     "emulated, first_seen_ms, last_seen_ms) SELECT name, host, device, gpu_type, "
     "driver_version, nvrtc_version, emulated, first_seen_ms, last_seen_ms FROM src.workers "
     "WHERE true ON CONFLICT(name) DO NOTHING"},
    {&MergeStats::models,
     "INSERT INTO main.models(name, sha256, first_seen_ms) "
     "SELECT name, sha256, first_seen_ms FROM src.models WHERE true "
     "ON CONFLICT(name, sha256) DO NOTHING"},
    {&MergeStats::workloads,
     "INSERT INTO main.workloads(signature, kind, canonical, flops, bytes, first_seen_ms, "
     "base_signature) SELECT signature, kind, canonical, flops, bytes, first_seen_ms, "
     "base_signature FROM src.workloads "
     "WHERE true ON CONFLICT(signature) DO NOTHING"},
    {nullptr,
     "INSERT INTO main.model_workloads(model_id, workload, count) "
     "SELECT dm.id, smw.workload, smw.count FROM src.model_workloads smw "
     "JOIN src.models sm ON sm.id = smw.model_id "
     "JOIN main.models dm ON dm.name = sm.name AND dm.sha256 = sm.sha256 "
     "WHERE true ON CONFLICT(model_id, workload) DO NOTHING"},
    {&MergeStats::variants,
     "INSERT INTO main.variants(workload, key, template, precision, params_json, source_hash, "
     "first_seen_ms) SELECT workload, key, template, precision, params_json, source_hash, "
     "first_seen_ms FROM src.variants WHERE true ON CONFLICT(workload, key) DO NOTHING"},
    {&MergeStats::measurements,
     "INSERT INTO main.measurements(variant_id, gpu_type, worker_id, status, error, "
     "samples_json, n_samples, median_us, min_us, spread, max_rel_error, registers, "
     "spill_bytes, smem_bytes, compile_seconds, estimate_us, source_hash, nvrtc_version, "
     "nvrtc_major, driver_version, emulated, attempts, finished_ms, recorded_ms, import_id, "
     "p10_us, p90_us, mean_us, mad_us, health_sm_clock_mhz, health_max_sm_clock_mhz, health_temperature_c, "
     "health_clock_event_reasons, health_ecc_uncorrected, health_note) "
     "SELECT dv.id, m.gpu_type, dw.id, m.status, m.error, m.samples_json, m.n_samples, "
     "m.median_us, m.min_us, m.spread, m.max_rel_error, m.registers, m.spill_bytes, "
     "m.smem_bytes, m.compile_seconds, m.estimate_us, m.source_hash, m.nvrtc_version, "
     "m.nvrtc_major, m.driver_version, m.emulated, m.attempts, m.finished_ms, m.recorded_ms, "
     "?1, m.p10_us, m.p90_us, m.mean_us, m.mad_us, m.health_sm_clock_mhz, m.health_max_sm_clock_mhz, "
     "m.health_temperature_c, m.health_clock_event_reasons, m.health_ecc_uncorrected, m.health_note "
     "FROM src.measurements m "
     "JOIN src.variants sv ON sv.id = m.variant_id "
     "JOIN main.variants dv ON dv.workload = sv.workload AND dv.key = sv.key "
     "JOIN src.workers sw ON sw.id = m.worker_id "
     "JOIN main.workers dw ON dw.name = sw.name "
     "WHERE true ORDER BY m.id "
     "ON CONFLICT(variant_id, gpu_type, worker_id, finished_ms) DO NOTHING"},
    {&MergeStats::runs,
     "INSERT INTO main.tuning_runs(uid, model_id, gpu_types_json, options_json, host, "
     "started_ms, ended_ms, status, precision, internal_error_jobs, internal_error_workloads) "
     "SELECT r.uid, dm.id, r.gpu_types_json, r.options_json, r.host, r.started_ms, r.ended_ms, "
     "r.status, r.precision, r.internal_error_jobs, r.internal_error_workloads "
     "FROM src.tuning_runs r "
     "JOIN src.models sm ON sm.id = r.model_id "
     "JOIN main.models dm ON dm.name = sm.name AND dm.sha256 = sm.sha256 "
     "WHERE true ORDER BY r.id ON CONFLICT(uid) DO NOTHING"},
    {&MergeStats::plans,
     "INSERT INTO main.plans(run_id, gpu_type, emulated, choices_json, estimated_total_us, "
     "measured_total_us, created_ms, precision) SELECT dr.id, p.gpu_type, p.emulated, "
     "p.choices_json, p.estimated_total_us, p.measured_total_us, p.created_ms, p.precision "
     "FROM src.plans p "
     "JOIN src.tuning_runs sr ON sr.id = p.run_id "
     "JOIN main.tuning_runs dr ON dr.uid = sr.uid "
     "WHERE true ORDER BY p.id ON CONFLICT(run_id, gpu_type) DO NOTHING"},
    {nullptr,
     "INSERT INTO main.run_gpu_busy(run_id, gpu_type, worker_id, busy_seconds, "
     "measure_seconds) SELECT dr.id, b.gpu_type, dw.id, b.busy_seconds, b.measure_seconds "
     "FROM src.run_gpu_busy b "
     "JOIN src.tuning_runs sr ON sr.id = b.run_id "
     "JOIN main.tuning_runs dr ON dr.uid = sr.uid "
     "JOIN src.workers sw ON sw.id = b.worker_id "
     "JOIN main.workers dw ON dw.name = sw.name "
     "WHERE true ORDER BY b.rowid ON CONFLICT(run_id, gpu_type, worker_id) DO NOTHING"},
};

// A file that a crash, a disk fault or a hand edit left inconsistent is the user's to repair:
// refused before anything is written (its rows would break this DB's constraints, which
// would otherwise surface as an internal error halfway through the merge). integrity_check,
// not quick_check: an index that disagrees with its table (which quick_check does not look
// at) lets foreign_key_check find parents that the merge's table scans do not copy (a
// fuzz_db_import finding: a model workload's workload missing from the merged rows).
void check_consistent(sqlite::Connection& into, const std::string& from_path) {
  sqlite::Query quick = into.query("PRAGMA src.integrity_check(1)");
  const std::string verdict = quick.step() ? quick.text(0) : "no answer";
  DC_USER_CHECK(verdict == "ok", "cannot import '", from_path, "': it is damaged (", verdict,
                "); check it with: sqlite3 ", from_path, " 'PRAGMA integrity_check'");
  sqlite::Query fk = into.query("PRAGMA src.foreign_key_check");
  if (fk.step())
    throw_user_error("cannot import '", from_path, "': its table ", fk.text(0), " has rows that refer to ",
                     "missing rows of ", fk.text(2), "; check it with: sqlite3 ", from_path,
                     " 'PRAGMA foreign_key_check'");
}

// The merge reads the file's tables by column: each table of this DB must be in the file,
// defined by the same CREATE TABLE text (the same migrations write the same text; the
// tables are STRICT, so equal definitions mean equal columns, types and constraints).
// A file whose version number is current but whose tables were edited or damaged is
// refused before anything is written (a fuzz_db_import finding: a column renamed by one
// byte failed the merge's INSERT as an internal error). Indexes and views of its own are
// no concern of the merge.
void check_same_tables(sqlite::Connection& into, const std::string& from_path) {
  sqlite::Query q = into.query(
      "SELECT m.name, s.sql IS NULL FROM main.sqlite_schema m "
      "LEFT JOIN src.sqlite_schema s ON s.type = 'table' AND s.name = m.name "
      "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
      "AND s.sql IS NOT m.sql ORDER BY m.name LIMIT 1");
  if (!q.step()) return;
  const std::string table = q.text(0);
  const std::string what = q.int64(1) ? "is missing" : "is not defined as schema version " +
                                                          std::to_string(schema_version()) + " defines it";
  throw_user_error("cannot import '", from_path, "': its table ", table, " ", what,
                   " (edited or damaged); check it with: sqlite3 ", from_path, " '.schema ", table, "'");
}

// Called when a merge INSERT failed: a row of the file that breaks its own table's CHECK,
// NOT NULL or STRICT type constraint is the file's fault (the tables are the same:
// check_same_tables), so a UserError. SQLite does not load the CHECK constraints of a
// read-only database, so integrity_check above passes such a row (a fuzz_db_import finding:
// a tuning run of precision 'fp64' was an InternalError).
void refuse_a_row_that_breaks_its_table(sqlite::Connection& into, const std::string& from_path) {
  const int code = sqlite3_extended_errcode(into.handle());
  if (code == SQLITE_CONSTRAINT_CHECK || code == SQLITE_CONSTRAINT_NOTNULL ||
      code == SQLITE_CONSTRAINT_DATATYPE)
    throw_user_error("cannot import '", from_path, "': a row breaks its table's constraints (",
                     sqlite3_errmsg(into.handle()), "); check it with: sqlite3 ", from_path,
                     " 'PRAGMA integrity_check'");
}

// Called from a catch block when a statement over the attached file failed: SQLite reports
// a damaged page as SQLITE_CORRUPT (or NOTADB) of the connection, which the SQLite layer
// words as this DB's fault ("tuning DB 'into' is corrupt"); this DB was opened and checked
// before the file was attached, so it is the file's (a damaged export: DcDb.ExportSqlite...).
// Anything else is rethrown as it is.
[[noreturn]] void blame_a_damaged_file(sqlite::Connection& into, const std::string& from_path) {
  const int code = sqlite3_errcode(into.handle());
  if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)
    throw_user_error("cannot import '", from_path, "': it is damaged (", sqlite3_errmsg(into.handle()),
                     "); nothing was written; check it with: sqlite3 ", from_path, " 'PRAGMA integrity_check'");
  throw;
}

}  // namespace

MergeStats merge_tuning_db(sqlite::Connection& into, const std::string& from_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  DC_USER_CHECK(fs::is_regular_file(from_path, ec), "cannot import '", from_path,
                "': no such file");
  DC_USER_CHECK(!fs::equivalent(from_path, into.path(), ec), "cannot import '", from_path,
                "' into itself");
  DC_USER_CHECK(!into.read_only(), "tuning DB '", into.path(), "' is read-only: cannot import");
  try {
    into.query("ATTACH DATABASE ? AS src").bind(1, readonly_uri(from_path)).run();
  } catch (const InternalError& e) {
    // The SQL is fixed: what SQLite refuses here is the file (e.g. a UTF-16 database: a
    // fuzz_db_import finding).
    throw_user_error("cannot import '", from_path, "': SQLite cannot attach it (", e.what(), ")");
  } catch (const UserError&) {
    // SQLITE_CORRUPT attaching a truncated file (DcDb.ExportSqlite...), worded as this DB's.
    blame_a_damaged_file(into, from_path);
  } catch (const std::bad_alloc&) {
    // SQLITE_NOMEM attaching a small file: a damaged schema record asks for more memory
    // than SQLite allocates at once (a fuzz_db_import finding).
    throw_user_error("cannot import '", from_path, "': SQLite ran out of memory attaching it ",
                     "(a damaged file asks for too much); check it with: sqlite3 ", from_path,
                     " 'PRAGMA integrity_check'");
  }
  MergeStats stats;
  try {
    int64_t app = 0, version = 0;
    try {
      app = into.scalar_int("PRAGMA src.application_id");
      version = into.scalar_int("PRAGMA src.user_version");
    } catch (const UserError&) {
      blame_a_damaged_file(into, from_path);
    }
    DC_USER_CHECK(app == kTuningDbApplicationId, "cannot import '", from_path,
                  "': not a dc tuning DB");
    DC_USER_CHECK(version <= schema_version(), "cannot import '", from_path,
                  "': its schema version ", version, " is newer than this dc's (",
                  schema_version(), "); import it with the dc that wrote it");
    DC_USER_CHECK(version == schema_version(), "cannot import '", from_path,
                  "': its schema version ", version, " is older than this dc's (",
                  schema_version(), "); migrate it first: dc-db --db ", from_path, " migrate");
    try {
      check_same_tables(into, from_path);  // first: foreign_key_check needs the same tables
      check_consistent(into, from_path);
    } catch (const UserError&) {
      blame_a_damaged_file(into, from_path);
    }
    sqlite::Transaction tx(into);
    into.query(
            "INSERT INTO imports(source_path, source_user_version, imported_ms) VALUES (?, ?, ?)")
        .bind_all(fs::absolute(from_path).string(), version, now_unix_ms())
        .run();
    stats.import_id = into.last_insert_rowid();
    for (const Step& s : kSteps) {
      sqlite::Query q = into.query(s.sql);
      if (s.count == &MergeStats::measurements) q.bind(1, stats.import_id);
      try {
        q.run();
      } catch (const InternalError&) {
        refuse_a_row_that_breaks_its_table(into, from_path);
        throw;
      } catch (const UserError&) {
        blame_a_damaged_file(into, from_path);
      }
      if (s.count) stats.*s.count = into.changes();
    }
    into.query("UPDATE imports SET measurements_added = ? WHERE id = ?")
        .bind_all(stats.measurements, stats.import_id)
        .run();
    tx.commit();
  } catch (...) {
    into.exec("DETACH DATABASE src");
    throw;
  }
  into.exec("DETACH DATABASE src");
  return stats;
}

}  // namespace dc
