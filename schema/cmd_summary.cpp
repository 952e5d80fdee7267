// dc-db summary, models, runs, migrate: what the DB holds.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "dc_db.h"
#include "ir/error.h"
#include "ir/precision.h"
#include "migrate.h"

namespace dc::dcdb {

namespace po = boost::program_options;

namespace {

po::options_description help_only(const char* title) {
  po::options_description desc(title);
  desc.add_options()("help,h", "this text");
  return desc;
}

int64_t count(sqlite::Connection& conn, const std::string& sql) { return conn.scalar_int(sql); }

}  // namespace

int cmd_summary(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc("dc-db summary: counts per table, GPU type and status");
  desc.add_options()("help,h", "this text")(
      "precision", po::value<std::string>(), "results per GPU type of this precision only: its "
      "storage type's workloads, its math paths' variants");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  std::string storage, math;
  if (vm->count("precision")) {
    const Precision p = parse_precision((*vm)["precision"].as<std::string>());
    storage = dtype_name(storage_dtype(p));
    math = precision_name(p);
  }
  sqlite::Connection conn = open_for_reading(db);
  std::cout << fmt::format("tuning DB {} (schema version {})\n", db,
                           conn.scalar_int("PRAGMA user_version"));
  std::string gpus;
  {
    sqlite::Query q = conn.query("SELECT name FROM gpu_types ORDER BY name");
    while (q.step()) gpus += (gpus.empty() ? "" : ", ") + q.text(0);
  }
  std::cout << fmt::format("  gpu types     {}{}\n", count(conn, "SELECT count(*) FROM gpu_types"),
                           gpus.empty() ? "" : " (" + gpus + ")");
  std::cout << fmt::format("  workers       {} ({} real, {} emulated)\n",
                           count(conn, "SELECT count(*) FROM workers"),
                           count(conn, "SELECT count(*) FROM workers WHERE emulated = 0"),
                           count(conn, "SELECT count(*) FROM workers WHERE emulated = 1"));
  for (const auto& [label, table] :
       {std::pair{"models", "models"}, {"workloads", "workloads"}, {"variants", "variants"}})
    std::cout << fmt::format("  {:<13} {}\n", label,
                             count(conn, std::string("SELECT count(*) FROM ") + table));
  std::cout << fmt::format("  measurements  {} ({} real, {} emulated)\n",
                           count(conn, "SELECT count(*) FROM measurements"),
                           count(conn, "SELECT count(*) FROM measurements WHERE emulated = 0"),
                           count(conn, "SELECT count(*) FROM measurements WHERE emulated = 1"));
  {
    std::string by;
    sqlite::Query q = conn.query("SELECT storage, count(*) FROM workload_storage GROUP BY 1 ORDER BY 1");
    while (q.step()) by += fmt::format("{}{} {}", by.empty() ? "" : ", ", q.int64(1), q.text(0));
    if (!by.empty()) std::cout << fmt::format("  {:<13} {}\n", "  by storage", by);
  }
  std::cout << fmt::format("  tuning runs   {}\n", count(conn, "SELECT count(*) FROM tuning_runs"));
  {
    std::string by;
    sqlite::Query q = conn.query("SELECT precision, count(*) FROM tuning_runs GROUP BY 1 ORDER BY 1");
    while (q.step()) by += fmt::format("{}{} {}", by.empty() ? "" : ", ", q.int64(1), q.text(0));
    if (!by.empty()) std::cout << fmt::format("  {:<13} {}\n", "  by precision", by);
  }
  std::cout << fmt::format("  plans         {}\n", count(conn, "SELECT count(*) FROM plans"));
  std::cout << fmt::format("  imports       {}\n", count(conn, "SELECT count(*) FROM imports"));

  // Per GPU type and source: results, failures by class, coverage, freshness.
  struct Row {
    int64_t total = 0, ok = 0, workloads = 0, last = 0;
    std::map<std::string, int64_t> failures;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;
  {
    sqlite::Query q = conn.query(
        "SELECT m.gpu_type, CASE m.emulated WHEN 1 THEN 'emulated' ELSE 'real' END, m.status, "
        "count(*), max(m.finished_ms) FROM measurements m JOIN variants v ON v.id = m.variant_id "
        "JOIN workload_storage s ON s.signature = v.workload WHERE ?1 = '' OR (s.storage = ?1 "
        "AND v.precision IN (?2, 'fp32')) GROUP BY 1, 2, 3");
    q.bind_all(storage, math);
    while (q.step()) {
      Row& r = rows[{q.text(0), q.text(1)}];
      r.total += q.int64(3);
      r.last = std::max(r.last, q.int64(4));
      if (q.text(2) == "ok") r.ok = q.int64(3);
      else r.failures[q.text(2)] = q.int64(3);
    }
  }
  {
    // Workloads with a best variant (TuningDb::best_variants), of the storage type's
    // workloads and its math paths when a precision is given.
    std::set<std::string> of_storage;
    sqlite::Query q = conn.query("SELECT signature FROM workload_storage WHERE storage = ?");
    q.bind(1, storage);
    while (q.step()) of_storage.insert(q.text(0));
    const auto tdb = open_db_for_reading(db);
    const std::vector<std::string> paths =
        storage.empty() ? std::vector<std::string>{} : std::vector<std::string>{math, "fp32"};
    for (auto& [key, r] : rows)
      for (const auto& [sig, b] : best_by_workload(*tdb, key.first, key.second == "emulated", "", paths))
        if (storage.empty() || of_storage.count(sig)) ++r.workloads;
  }
  if (rows.empty()) {
    std::cout << "\nno measurements yet\n";
    return kExitOk;
  }
  Table t({"gpu type", "source", ">results", ">ok", ">workloads ok", "failures", "last result"});
  for (const auto& [key, r] : rows) {
    std::string failures;
    for (const auto& [status, n] : r.failures)
      failures += fmt::format("{}{} {}", failures.empty() ? "" : ", ", status, n);
    t.add({key.first, key.second, std::to_string(r.total), std::to_string(r.ok),
           std::to_string(r.workloads), failures.empty() ? "-" : failures, format_time(r.last)});
  }
  std::cout << (storage.empty() ? "\n" : fmt::format("\nprecision {}: {} workloads, math {}/fp32\n",
                                                      math, storage, math));
  t.print(std::cout);
  return kExitOk;
}

int cmd_models(const std::string& db, const std::vector<std::string>& args) {
  if (!parse_options(args, help_only("dc-db models: tuned models with their coverage")))
    return kExitOk;
  sqlite::Connection conn = open_for_reading(db);
  Table t({">id", "model", "sha256", ">workloads", ">instances", "measured (workloads ok per GPU type)",
           "first seen"});
  std::vector<std::vector<std::string>> rows;
  sqlite::Query q = conn.query(
      "SELECT mo.id, mo.name, mo.sha256, count(mw.workload), ifnull(sum(mw.count), 0), "
      "mo.first_seen_ms FROM models mo LEFT JOIN model_workloads mw ON mw.model_id = mo.id "
      "GROUP BY mo.id ORDER BY mo.name, mo.id");
  while (q.step())
    rows.push_back({std::to_string(q.int64(0)), q.text(1), q.text(2).substr(0, 12),
                    std::to_string(q.int64(3)), std::to_string(q.int64(4)), "",
                    format_time(q.int64(5))});
  // Workloads with a best variant (TuningDb::best_variants) per GPU type and source.
  std::vector<std::tuple<std::string, bool, std::map<std::string, WorkloadBest>>> bests;
  {
    const auto tdb = open_db_for_reading(db);
    for (const GpuTypeRecord& g : tdb->gpu_types())
      for (bool emulated : {true, false})  // "emulated" before "real", as before
        bests.emplace_back(g.name, emulated, best_by_workload(*tdb, g.name, emulated));
  }
  for (auto& r : rows) {
    sqlite::Query c = conn.query("SELECT workload FROM model_workloads WHERE model_id = ?");
    c.bind(1, static_cast<int64_t>(std::stoll(r[0])));
    std::vector<std::string> workloads;
    while (c.step()) workloads.push_back(c.text(0));
    std::string cov;
    for (const auto& [gpu, emulated, best] : bests) {
      const auto measured = std::count_if(workloads.begin(), workloads.end(),
                                          [&](const std::string& w) { return best.count(w) > 0; });
      if (measured > 0)
        cov += fmt::format("{}{} {} {}/{}", cov.empty() ? "" : ", ", gpu,
                           emulated ? "(emulated)" : "(real)", measured, r[3]);
    }
    r[5] = cov.empty() ? "-" : cov;
    t.add(r);
  }
  if (t.empty()) {
    std::cout << "no models in " << db << "\n";
    return kExitOk;
  }
  t.print(std::cout);
  return kExitOk;
}

namespace {

// A run's status as `dc-db runs` shows it: with the jobs and workloads that ended in
// internal_error (a dc bug) when there were any.
std::string run_status_text(const std::string& status, int64_t ie_jobs, int64_t ie_workloads) {
  std::string s = status == "running" ? "running (or killed)" : status;
  if (ie_jobs > 0) s += fmt::format(" ({} internal_error jobs, {} workloads)", ie_jobs, ie_workloads);
  return s;
}

}  // namespace

int cmd_runs(const std::string& db, const std::vector<std::string>& args) {
  if (!parse_options(args, help_only("dc-db runs: tuning runs with their plans"))) return kExitOk;
  sqlite::Connection conn = open_for_reading(db);
  Table t({">id", "model", "precision", "gpu types", "host", "started", ">duration", "status", "plans",
           "GPU busy"});
  std::vector<std::vector<std::string>> rows;
  {
    sqlite::Query q = conn.query(
        "SELECT r.id, mo.name, (SELECT group_concat(value, ',') FROM json_each(r.gpu_types_json)), "
        "r.host, r.started_ms, ifnull(r.ended_ms, 0), r.status, r.precision, "
        "r.internal_error_jobs, r.internal_error_workloads "
        "FROM tuning_runs r JOIN models mo ON mo.id = r.model_id ORDER BY r.id");
    while (q.step()) {
      const int64_t started = q.int64(4), ended = q.int64(5);
      rows.push_back({std::to_string(q.int64(0)), q.text(1), q.text(7), q.text(2), q.text(3),
                      format_time(started),
                      ended ? fmt::format("{:.1f} s", (ended - started) / 1000.0) : "-",
                      run_status_text(q.text(6), q.int64(8), q.int64(9)), "", ""});
    }
  }
  for (auto& r : rows) {
    sqlite::Query p = conn.query(
        "SELECT gpu_type, emulated, measured_total_us, estimated_total_us FROM plans "
        "WHERE run_id = ? ORDER BY gpu_type");
    p.bind(1, static_cast<int64_t>(std::stoll(r[0])));
    std::string plans;
    while (p.step())
      plans += fmt::format("{}{}{}: {} (est. {})", plans.empty() ? "" : "; ", p.text(0),
                           p.int64(1) ? " emulated" : "", format_us(p.real(2)),
                           format_us(p.real(3)));
    r[8] = plans.empty() ? "-" : plans;
    // The tune summary's "GPU busy" figure, as stored (migration 0005).
    sqlite::Query b = conn.query(
        "SELECT gpu_type, busy_fraction, devices FROM run_gpu_busy_fraction WHERE run_id = ? "
        "ORDER BY gpu_type");
    b.bind(1, static_cast<int64_t>(std::stoll(r[0])));
    std::string busy;
    while (b.step())
      busy += fmt::format("{}{}: {:.1f}% over {} device(s)", busy.empty() ? "" : "; ", b.text(0),
                          100 * b.real(1), b.int64(2));
    r[9] = busy.empty() ? "-" : busy;
    t.add(r);
  }
  if (t.empty()) {
    std::cout << "no tuning runs in " << db << "\n";
    return kExitOk;
  }
  t.print(std::cout);
  return kExitOk;
}

int cmd_migrate(const std::string& db, const std::vector<std::string>& args) {
  if (!parse_options(args, help_only("dc-db migrate: bring the DB to this dc's schema version")))
    return kExitOk;
  std::error_code ec;
  DC_USER_CHECK(std::filesystem::is_regular_file(db, ec), "no tuning DB '", db,
                "' to migrate: no such file");
  const int64_t before = sqlite::Connection(db, /*read_only=*/true).scalar_int("PRAGMA user_version");
  open_tuning_connection(db, /*read_only=*/false);
  std::cout << fmt::format("{}: schema version {} -> {}\n", db, before, schema_version());
  return kExitOk;
}

}  // namespace dc::dcdb
