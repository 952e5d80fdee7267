#include "migrate.h"

#include "ir/error.h"

namespace dc {

int schema_version() {
  const auto all = builtin_migrations();
  return all.empty() ? 0 : all.back().version;
}

void migrate(sqlite::Connection& conn, std::span<const Migration> migrations) {
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  const int64_t version = conn.scalar_int("PRAGMA user_version");
  const int64_t app = conn.scalar_int("PRAGMA application_id");
  DC_USER_CHECK(app == 0 || app == kTuningDbApplicationId, "'", conn.path(),
                "' is a SQLite database of another application (application_id ", app,
                "), not a dc tuning DB");
  DC_USER_CHECK(version <= latest, "tuning DB '", conn.path(), "' has schema version ", version,
                ", newer than this build of dc knows (", latest,
                "): it was written by a newer dc; use that version, or another DB file");
  if (version == latest) return;
  const auto check_is_a_tuning_db = [&](int64_t v) {
    DC_USER_CHECK(v > 0 || conn.scalar_int("SELECT count(*) FROM sqlite_schema") == 0, "'",
                  conn.path(), "' is a SQLite database with tables but no schema version: not a "
                  "dc tuning DB");
  };
  if (conn.read_only()) check_is_a_tuning_db(version);
  DC_USER_CHECK(!conn.read_only(), "tuning DB '", conn.path(), "' has schema version ", version,
                " and needs migrating to ", latest, ", but it is read-only; open it for "
                "writing once (dc-db --db ", conn.path(), " migrate)");
  // Foreign keys are checked once per migration instead of per statement, so that a
  // migration may rebuild a table (the SQLite ALTER TABLE recipe); the pragma is a no-op
  // inside a transaction, hence outside.
  conn.exec("PRAGMA foreign_keys = OFF");
  try {
    // One write transaction for the whole step, and the version read again inside it: two
    // processes opening a new or old DB at once (two tunes) would otherwise both migrate, the
    // second replaying migrations over what the first already did. The second waits for the
    // lock (the busy timeout), then finds the DB current.
    sqlite::Transaction tx(conn);
    const int64_t now = conn.scalar_int("PRAGMA user_version");
    check_is_a_tuning_db(now);
    int expected = 1;
    for (const Migration& m : migrations) {
      DC_INTERNAL_CHECK(m.version == expected, "migration ", m.name, " has version ", m.version,
                        ", expected ", expected);
      ++expected;
      if (m.version <= now) continue;
      conn.exec(m.sql);
      {
        sqlite::Query check = conn.query("PRAGMA foreign_key_check");
        DC_INTERNAL_CHECK(!check.step(), "migration ", m.name, " broke a foreign key in table ",
                          check.text(0));
      }
      conn.exec("PRAGMA user_version = " + std::to_string(m.version));
    }
    conn.exec("PRAGMA application_id = " + std::to_string(kTuningDbApplicationId));
    tx.commit();
  } catch (...) {
    conn.exec("PRAGMA foreign_keys = ON");
    throw;
  }
  conn.exec("PRAGMA foreign_keys = ON");
}

sqlite::Connection open_tuning_connection(const std::string& path, bool read_only) {
  sqlite::Connection conn(path, read_only);
  DC_USER_CHECK(read_only || !conn.read_only(), "tuning DB '", path,
                "' is not writable (file permissions?); fix them, or open it read-only");
  migrate(conn, builtin_migrations());  // first: a foreign SQLite file stays untouched
  if (!read_only) {
    // WAL: readers (dc-db) never block the writer (a tune) nor see half a transaction.
    // synchronous=NORMAL in WAL mode survives a killed process without losing a commit;
    // after a power cut the last commits may be lost but the file stays consistent.
    conn.exec_waiting_for_locks("PRAGMA journal_mode = WAL");
    conn.exec("PRAGMA synchronous = NORMAL");
  }
  return conn;
}

}  // namespace dc
