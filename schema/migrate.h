// The tuning DB's schema versions: forward migrations (schema/migrations/NNNN_*.sql,
// embedded in the binary at build time) keyed by PRAGMA user_version, and the one way to
// open a tuning DB file so that its version is checked (newer: refused; older: migrated).
#pragma once

#include <span>
#include <string>

#include "sqlite.h"

namespace dc {

struct Migration {
  int version;       // the user_version after it ran: 1, 2, ...
  const char* name;  // file name, for messages
  const char* sql;
};

// The migrations compiled into this binary, in version order.
std::span<const Migration> builtin_migrations();
// The schema version this binary writes: the last builtin migration's.
int schema_version();

// PRAGMA application_id of a dc tuning DB ("dctb"), told apart from other SQLite files.
inline constexpr int64_t kTuningDbApplicationId = 0x64637462;

// Brings the DB from its user_version up to the last of `migrations`, each migration in its
// own transaction with its version bump. UserError for a DB newer than the list or for a
// SQLite file that is not a tuning DB.
void migrate(sqlite::Connection& conn, std::span<const Migration> migrations);

// Opens a tuning DB at the current schema version: read-write opens create the file, set
// WAL and migrate it; read-only ones refuse a DB that would need a migration.
sqlite::Connection open_tuning_connection(const std::string& path, bool read_only);

}  // namespace dc
