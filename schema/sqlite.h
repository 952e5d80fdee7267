// A thin RAII layer over the SQLite C API, after SQLiteCpp and Bitcoin Core's wallet DB:
// one owned connection, statements prepared once and cached by their text, a Query handle
// that resets its statement when it goes out of scope, and a Transaction that rolls back
// in its destructor without throwing. Failures that come from the environment (disk full,
// read-only file, locked, not a database) are UserErrors naming the file; anything else
// (bad SQL, misuse) is an InternalError.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

struct sqlite3;
struct sqlite3_stmt;

namespace dc::sqlite {

// How long a connection waits for another writer's lock before SQLITE_BUSY, which is a
// UserError ("is locked by another process for more than N s"). 5 s unless set; it applies
// to connections opened afterwards (`tune --db-timeout SECONDS` sets it).
inline constexpr std::chrono::milliseconds kDefaultBusyTimeout{5000};
void set_busy_timeout(std::chrono::milliseconds timeout);
std::chrono::milliseconds busy_timeout();

struct DbCloser {
  void operator()(sqlite3* db) const noexcept;
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const noexcept;
};

class Connection;

// A cached statement in use: bind parameters (1-based), step through rows, read columns
// (0-based). The destructor resets the statement and clears its bindings for the next use.
class Query {
 public:
  Query(Connection& conn, sqlite3_stmt* stmt) : conn_(&conn), stmt_(stmt) {}
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  ~Query();

  Query& bind(int index, int64_t v);
  Query& bind(int index, int v) { return bind(index, static_cast<int64_t>(v)); }
  Query& bind(int index, bool v) { return bind(index, static_cast<int64_t>(v ? 1 : 0)); }
  Query& bind(int index, double v);
  Query& bind(int index, std::string_view v);
  Query& bind(int index, const std::string& v) { return bind(index, std::string_view(v)); }
  Query& bind(int index, const char* v) { return bind(index, std::string_view(v)); }
  Query& bind_null(int index);
  template <class T>
  Query& bind(int index, const std::optional<T>& v) { return v ? bind(index, *v) : bind_null(index); }
  // Binds each argument in order from parameter 1.
  template <class... Args>
  Query& bind_all(const Args&... args) {
    int i = 0;
    (bind(++i, args), ...);
    return *this;
  }

  bool step();  // true: a row is ready; false: done
  void run();   // steps to the end (statements without results)

  int64_t int64(int col) const;
  double real(int col) const;
  std::string text(int col) const;
  bool is_null(int col) const;

 private:
  Connection* conn_;
  sqlite3_stmt* stmt_;
};

class Connection {
 public:
  // Opens (read-write opens create the file). Extended result codes and foreign keys are
  // on, the busy timeout is busy_timeout(), URI file names accepted. Schema checks are open_tuning_connection's
  // (migrate.h).
  Connection(const std::string& path, bool read_only);

  // Runs SQL without results; `script` may hold many statements.
  void exec(const std::string& script);
  // exec for a statement SQLite may refuse with SQLITE_BUSY without calling the busy handler
  // (it does so where waiting could deadlock, e.g. a journal-mode change while another
  // connection migrates): retried every few milliseconds until the busy timeout has passed.
  void exec_waiting_for_locks(const std::string& script);
  // A statement prepared once per connection and reused ever after. Found by its text
  // without a copy of it: a farm service runs a few of these a job (docs/bench/farm-service.md,
  // round 9).
  Query query(std::string_view sql);
  // The same for a statement on a hot path: `*kept` (the caller's, null at first) remembers it
  // after its first use, so later uses skip the look-up by its text (hashing the measurement
  // insert's 800 characters was 1 % of a farm service's CPU, round 9).
  Query query(std::string_view sql, sqlite3_stmt** kept);
  // First column of the first row as an integer (PRAGMA user_version and the like).
  int64_t scalar_int(const std::string& sql);

  int64_t last_insert_rowid() const;
  int64_t changes() const;  // rows changed by the last statement
  int64_t total_changes() const;  // rows changed by this connection's statements so far
  // Transactions and savepoints rolled back on this connection so far: a cache of row ids
  // read inside one that was undone may name rows that are gone (SqliteDb's id caches).
  uint64_t rollbacks() const { return rollbacks_; }
  // Outer transactions (Transaction) that began after another connection, in this process or
  // another, had committed since this one last looked (PRAGMA data_version): what a cache
  // knows of the file's rows may be out of date since. An outer write transaction holds the
  // write lock (BEGIN IMMEDIATE): nobody else commits until it ends.
  uint64_t commits_by_others() const { return commits_by_others_; }
  bool read_only() const;   // as SQLite sees it: a write-protected file opens read-only
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_.get(); }

  // Throws the error of `rc` with SQLite's message, saying what was being done.
  [[noreturn]] void fail(int rc, std::string_view doing) const;

 private:
  sqlite3_stmt* prepared(std::string_view sql);  // from the cache, or prepared into it

  std::string path_;
  std::chrono::milliseconds busy_timeout_;
  std::unique_ptr<sqlite3, DbCloser> db_;
  // Looked up by string_view (transparent hash and equality): no std::string per query.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::unique_ptr<sqlite3_stmt, StmtFinalizer>, TextHash, std::equal_to<>> cache_;
  uint64_t rollbacks_ = 0;
  uint64_t commits_by_others_ = 0;
  int64_t data_version_ = -1;  // PRAGMA data_version at the last outer transaction's start
  friend class Transaction;
};

// BEGIN IMMEDIATE (the write lock up front: two writers wait instead of deadlocking);
// commit() makes it durable; otherwise the destructor rolls back, never throwing. Inside a
// transaction already open on the connection (a batch, TuningDb::begin_batch) it is a
// SAVEPOINT: commit() releases it into the outer one, and a rollback undoes only its own
// writes. A write of one statement (after any reads) needs no savepoint there: SQLite undoes a
// statement that fails by itself, so `Nested::plain` opens none (a savepoint per row was a
// tenth of the farm service's CPU, docs/bench/farm-service.md, round 5).
class Transaction {
 public:
  enum class Nested { savepoint, plain };
  explicit Transaction(Connection& conn, Nested nested = Nested::savepoint);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  void commit();

 private:
  Connection& conn_;
  bool nested_ = false;
  bool plain_ = false;  // nested, without a savepoint of its own
  bool done_ = false;
};

// The error for result code `rc` (extended codes welcome) on the DB at `path`, opened with
// busy timeout `waited` (named in the message of a lock).
[[noreturn]] void throw_sqlite_error(int rc, std::string_view message, std::string_view doing,
                                     const std::string& path,
                                     std::chrono::milliseconds waited = busy_timeout());

}  // namespace dc::sqlite
