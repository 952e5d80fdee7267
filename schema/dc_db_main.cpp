// dc-db's entry point: global options, command dispatch, and the error conventions.
#include <iostream>

#include <spdlog/spdlog.h>

#include "dc_db.h"
#include "ir/cli_guard.h"
#include "ir/error.h"
#include "ir/log.h"
#include "ir/parse_subcommand.h"
#include "migrate.h"

namespace dc::dcdb {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = R"(usage: dc-db --db PATH COMMAND [options]

Questions to a dc tuning database (SQLite; docs/tuning-db.md). Reads never block a tune
that is writing the same DB. Results are real-GPU ones unless --emulated is given:
emulated times never stand in for real ones.

commands:
  summary                            counts per table, GPU type and status
  models                             tuned models with their workloads and coverage
  workloads [--model M] [--gpu G]    workloads, their variants and results
  best --gpu G [--model M]           the fastest variant per workload on G
  compare --gpus a100,h100 [--model M]
                                     best time per workload side by side, with ratios
  estimator-error --gpu G            estimated vs measured, per cluster kind
  calibration --gpu G                the estimator's factors a tune fits from the DB
  runs                               tuning runs with their plans' totals
  stale [--gpu G]                    measurements of a source the variant no longer has
  implausible [--gpu G]              results below their variant's floor, by worker
  health [--gpu G] [--worker W]      the devices' health after timing (NVML), by worker
  export --format csv|json [--out F] every measurement with its provenance
  export --format sqlite --out F     the records as a tuning DB file of their own, to import
  import FILE                        merge another tuning DB (or an export) into this one
  report --out report.html           one self-contained HTML page with plots
  migrate                            bring an older DB to this dc's schema version

Run `dc-db COMMAND --help` for a command's options.

global options:
  --db PATH     the tuning DB (required)
  --version     print the version and the schema version
  -h, --help    this text
)";

}  // namespace

std::optional<po::variables_map> parse_options(const std::vector<std::string>& args,
                                               const po::options_description& desc,
                                               std::string* positional) {
  return parse_subcommand(args, desc, "positional", positional);
}

std::optional<std::string> option_text(const po::variables_map& vm, const char* name) {
  if (!vm.count(name)) return std::nullopt;
  return vm[name].as<std::string>();
}

int run(int argc, char** argv) {
  return run_guarded([&]() -> int {
    init_logging("warn");
    std::string db;
    std::string command;
    std::vector<std::string> args;
    // --db may come before or after the command; everything else after it is the command's.
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--db") {
        DC_USER_CHECK(i + 1 < argc, "--db needs a path");
        db = argv[++i];
      } else if (a.rfind("--db=", 0) == 0) {
        db = a.substr(5);
      } else if (!command.empty()) {
        args.push_back(a);
      } else if (a == "-h" || a == "--help") {
        std::cout << kUsage;
        return kExitOk;
      } else if (a == "--version") {
        std::cout << "dc-db " << DC_VERSION << " (tuning DB schema version " << schema_version()
                  << ")\n";
        return kExitOk;
      } else if (!a.empty() && a[0] == '-') {
        throw_user_error("unknown option '", a, "' before the command (see --help)");
      } else {
        command = a;
      }
    }
    if (command.empty()) {
      std::cerr << kUsage;
      return kExitUserError;
    }
    const bool wants_help =
        std::find(args.begin(), args.end(), "--help") != args.end() ||
        std::find(args.begin(), args.end(), "-h") != args.end();
    DC_USER_CHECK(!db.empty() || wants_help, "no tuning DB given: dc-db --db PATH ", command);
    if (command == "summary") return cmd_summary(db, args);
    if (command == "models") return cmd_models(db, args);
    if (command == "workloads") return cmd_workloads(db, args);
    if (command == "best") return cmd_best(db, args);
    if (command == "compare") return cmd_compare(db, args);
    if (command == "estimator-error") return cmd_estimator_error(db, args);
    if (command == "calibration") return cmd_calibration(db, args);
    if (command == "runs") return cmd_runs(db, args);
    if (command == "export") return cmd_export(db, args);
    if (command == "import") return cmd_import(db, args);
    if (command == "report") return cmd_report(db, args);
    if (command == "migrate") return cmd_migrate(db, args);
    if (command == "stale") return cmd_stale(db, args);
    if (command == "implausible") return cmd_implausible(db, args);
    if (command == "health") return cmd_health(db, args);
    throw_user_error("unknown command '", command,
                     "' (commands: summary, models, workloads, best, compare, estimator-error, "
                     "calibration, runs, stale, implausible, health, export, import, report, migrate; see --help)");
  });
}

}  // namespace dc::dcdb

int main(int argc, char** argv) { return dc::dcdb::run(argc, argv); }
