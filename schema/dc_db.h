// dc-db: offline questions to a tuning DB: `dc-db --db PATH COMMAND [options]`.
// Exit codes as dc-coordinator's (coordinator/cli.h): 0 ok, 2 bad input (one `error: ...`
// line), 3 internal error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "sqlite.h"
#include "tuning_db.h"

namespace dc::dcdb {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUserError = 2;
inline constexpr int kExitInternalError = 3;

int run(int argc, char** argv);

// Subcommands; `args` excludes the program, global options and command name.
int cmd_summary(const std::string& db, const std::vector<std::string>& args);
int cmd_models(const std::string& db, const std::vector<std::string>& args);
int cmd_runs(const std::string& db, const std::vector<std::string>& args);
int cmd_migrate(const std::string& db, const std::vector<std::string>& args);
int cmd_workloads(const std::string& db, const std::vector<std::string>& args);
int cmd_best(const std::string& db, const std::vector<std::string>& args);
int cmd_compare(const std::string& db, const std::vector<std::string>& args);
int cmd_estimator_error(const std::string& db, const std::vector<std::string>& args);
int cmd_calibration(const std::string& db, const std::vector<std::string>& args);
int cmd_export(const std::string& db, const std::vector<std::string>& args);
int cmd_import(const std::string& db, const std::vector<std::string>& args);
int cmd_report(const std::string& db, const std::vector<std::string>& args);
int cmd_stale(const std::string& db, const std::vector<std::string>& args);
int cmd_implausible(const std::string& db, const std::vector<std::string>& args);
int cmd_health(const std::string& db, const std::vector<std::string>& args);

// Parses a command's options (plus up to one positional into *positional, when given).
// nullopt when --help was asked for (and printed).
std::optional<boost::program_options::variables_map> parse_options(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc,
    std::string* positional = nullptr);

// A text option's value, nullopt when it was not given: bound as a query's filter, NULL
// means "any" (sqlite::Query::bind of an optional).
std::optional<std::string> option_text(const boost::program_options::variables_map& vm, const char* name);

// The DB for reading: never written, so that dc-db can read while a tune writes.
sqlite::Connection open_for_reading(const std::string& db);

// The same DB through the TuningDb interface: what the best-variant query needs.
std::unique_ptr<TuningDb> open_db_for_reading(const std::string& db);

// The best variant of every workload that has one on (gpu, source): TuningDb::best_variants,
// the definition tune's selection uses. `nvrtc_major` "" = the newest toolchain in the DB;
// `math_paths` empty = any.
std::map<std::string, WorkloadBest> best_by_workload(const TuningDb& db, const std::string& gpu,
                                                     bool emulated, const std::string& nvrtc_major = "",
                                                     const std::vector<std::string>& math_paths = {});

// "2026-11-21 21:32:12" (UTC) from Unix milliseconds; "-" for 0.
std::string format_time(int64_t unix_ms);
// Microseconds with a unit that keeps 3-4 significant digits: "12.3 us", "4.57 ms".
std::string format_us(double us);

// Columns padded to their widest cell; numbers right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& os) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// The model id for --model NAME (the newest file of that name); UserError listing the
// models when unknown.
int64_t find_model(sqlite::Connection& conn, const std::string& name);

// "--emulated" selects emulated results; the default is real ones.
inline const char* source_arg(bool emulated) { return emulated ? "emulated" : "real"; }
// A note on stderr when a query for one source found nothing but the other has results.
void note_other_source(sqlite::Connection& conn, const std::string& gpu, bool emulated);

}  // namespace dc::dcdb
