#include "sqlite.h"

#include <sqlite3.h>

#include <atomic>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "ir/error.h"

namespace dc::sqlite {

namespace {
std::atomic<int64_t> g_busy_timeout_ms{kDefaultBusyTimeout.count()};
}  // namespace

void set_busy_timeout(std::chrono::milliseconds timeout) {
  DC_INTERNAL_CHECK(timeout.count() >= 0 && timeout.count() <= std::numeric_limits<int>::max(), "busy timeout out of range: ",
                    timeout.count(), " ms");
  g_busy_timeout_ms.store(timeout.count());
}
std::chrono::milliseconds busy_timeout() { return std::chrono::milliseconds(g_busy_timeout_ms.load()); }

void DbCloser::operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
void StmtFinalizer::operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }

void throw_sqlite_error(int rc, std::string_view message, std::string_view doing,
                        const std::string& path, std::chrono::milliseconds waited) {
  const std::string db = "tuning DB '" + path + "'";
  switch (rc & 0xff) {
    case SQLITE_FULL:
      throw_user_error(db, ": disk full while ", doing, " (", message,
                       "); the transaction was rolled back, nothing half-written: free space "
                       "and rerun");
    case SQLITE_READONLY:
      throw_user_error(db, " is read-only (", message, ") while ", doing,
                       "; check the file's permissions or open it for writing");
    case SQLITE_CANTOPEN:
      throw_user_error("cannot open ", db, ": ", message,
                       " (does the file or its directory exist and is it accessible?)");
    case SQLITE_NOTADB:
      throw_user_error(db, " is not a SQLite database (", message, ")");
    case SQLITE_CORRUPT:
      throw_user_error(db, " is corrupt (", message, "); restore it or start a new one");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw_user_error(db, " is locked by another writer: waited ",
                       fmt::format("{:g}", static_cast<double>(waited.count()) / 1000.0),
                       " s (the busy timeout; tune --db-timeout SECONDS) while ", doing, " (", message,
                       "); rerun when the other process has finished");
    case SQLITE_IOERR:
    case SQLITE_PERM:
    case SQLITE_AUTH:
    case SQLITE_PROTOCOL:
      throw_user_error(db, ": I/O error while ", doing, " (", message, ")");
    case SQLITE_NOMEM:
      throw std::bad_alloc();
    default:
      throw_internal_error(db, ": ", doing, " failed with SQLite code ", rc, ": ", message);
  }
}

Connection::Connection(const std::string& path, bool read_only) : path_(path), busy_timeout_(busy_timeout()) {
  sqlite3* raw = nullptr;
  const int flags = (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                    SQLITE_OPEN_URI;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  db_.reset(raw);  // closed even when the open failed
  if (rc != SQLITE_OK) {
    const std::string msg = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    throw_sqlite_error(rc, msg, "opening it", path_, busy_timeout_);
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, static_cast<int>(busy_timeout_.count()));
  exec("PRAGMA foreign_keys = ON");
}

void Connection::fail(int rc, std::string_view doing) const {
  throw_sqlite_error(rc, sqlite3_errmsg(db_.get()), doing, path_, busy_timeout_);
}

void Connection::exec(const std::string& script) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_.get(), script.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw_sqlite_error(rc, msg, "running '" + script.substr(0, 60) + "'", path_, busy_timeout_);
  }
}

void Connection::exec_waiting_for_locks(const std::string& script) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db_.get(), script.c_str(), nullptr, nullptr, &err);
    const std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    if (rc == SQLITE_OK) return;
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() - start >= busy_timeout_)
      throw_sqlite_error(rc, msg, "running '" + script.substr(0, 60) + "'", path_, busy_timeout_);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Query Connection::query(std::string_view sql) { return Query(*this, prepared(sql)); }

Query Connection::query(std::string_view sql, sqlite3_stmt** kept) {
  if (*kept == nullptr) *kept = prepared(sql);
  return Query(*this, *kept);
}

sqlite3_stmt* Connection::prepared(std::string_view sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    std::unique_ptr<sqlite3_stmt, StmtFinalizer> stmt(raw);
    if (rc != SQLITE_OK) fail(rc, "preparing '" + std::string(sql.substr(0, 60)) + "'");
    it = cache_.emplace(std::string(sql), std::move(stmt)).first;
  }
  return it->second.get();
}

int64_t Connection::scalar_int(const std::string& sql) {
  Query q = query(sql);
  DC_INTERNAL_CHECK(q.step(), "no row from ", sql);
  return q.int64(0);
}

int64_t Connection::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_.get()); }
int64_t Connection::changes() const { return sqlite3_changes64(db_.get()); }
int64_t Connection::total_changes() const { return sqlite3_total_changes64(db_.get()); }
bool Connection::read_only() const { return sqlite3_db_readonly(db_.get(), "main") == 1; }

Query::~Query() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

namespace {
void check_bind(Connection& c, int rc) {
  if (rc != SQLITE_OK) c.fail(rc, "binding a parameter");
}
}  // namespace

Query& Query::bind(int index, int64_t v) {
  check_bind(*conn_, sqlite3_bind_int64(stmt_, index, v));
  return *this;
}
Query& Query::bind(int index, double v) {
  check_bind(*conn_, sqlite3_bind_double(stmt_, index, v));
  return *this;
}
Query& Query::bind(int index, std::string_view v) {
  check_bind(*conn_, sqlite3_bind_text64(stmt_, index, v.data(), v.size(), SQLITE_TRANSIENT,
                                         SQLITE_UTF8));
  return *this;
}
Query& Query::bind_null(int index) {
  check_bind(*conn_, sqlite3_bind_null(stmt_, index));
  return *this;
}

bool Query::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const char* sql = sqlite3_sql(stmt_);
  conn_->fail(rc, "running '" + std::string(sql ? sql : "?").substr(0, 60) + "'");
}

void Query::run() {
  while (step()) {
  }
}

int64_t Query::int64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Query::real(int col) const { return sqlite3_column_double(stmt_, col); }
std::string Query::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}
bool Query::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

// Statements prepared once (Connection::query), not parsed again by sqlite3_exec for every
// write: a farm service opens a savepoint per row, thousands a second, and parsing them was
// a tenth of its CPU (docs/bench/farm-service.md).
Transaction::Transaction(Connection& conn, Nested nested)
    : conn_(conn), nested_(sqlite3_get_autocommit(conn.handle()) == 0) {
  plain_ = nested_ && nested == Nested::plain;
  if (plain_) return;
  conn_.query(nested_ ? "SAVEPOINT dc_nested" : "BEGIN IMMEDIATE").run();
  if (nested_) return;
  // Read under the write lock: the count is true for the whole transaction.
  try {
    const int64_t version = conn_.scalar_int("PRAGMA data_version");
    if (version != conn_.data_version_) ++conn_.commits_by_others_;
    conn_.data_version_ = version;
  } catch (...) {
    // No destructor runs for a constructor that throws: the transaction ends here.
    sqlite3_exec(conn_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void Transaction::commit() {
  if (!plain_) conn_.query(nested_ ? "RELEASE dc_nested" : "COMMIT").run();
  done_ = true;
}

Transaction::~Transaction() {
  // A failed COMMIT (disk full) may leave the transaction open: roll it back here. SQLite
  // may also have rolled back by itself already; autocommit mode tells which.
  if (done_) return;
  if (plain_) {
    // Its failed statement undid itself; the outer transaction is gone only where SQLite
    // rolled it all back (I/O error, disk full): then what the batch wrote is gone too.
    if (sqlite3_get_autocommit(conn_.handle()) != 0) ++conn_.rollbacks_;
    return;
  }
  ++conn_.rollbacks_;  // counted either way: what it wrote is gone
  if (sqlite3_get_autocommit(conn_.handle()) != 0) return;
  if (nested_)
    sqlite3_exec(conn_.handle(), "ROLLBACK TO dc_nested; RELEASE dc_nested", nullptr, nullptr, nullptr);
  else
    sqlite3_exec(conn_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

}  // namespace dc::sqlite
