// dc-db export and import: measurements out as CSV or JSON (to read), or as a tuning DB file
// of their own (`--format sqlite`: to move them to another service's DB with `import`);
// other DBs in with provenance.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "dc_db.h"
#include "ir/error.h"
#include "ir/json_writer.h"
#include "merge.h"
#include "migrate.h"
#include "records.h"

namespace dc::dcdb {

namespace po = boost::program_options;

namespace {

// Export columns: name, and whether the value is text (else a number).
struct Column {
  const char* name;
  bool text;
};
constexpr Column kColumns[] = {
    {"id", false},          {"workload", true},        {"kind", true},
    {"variant", true},      {"template", true},        {"precision", true},
    {"gpu_type", true},     {"source", true},          {"worker", true},
    {"host", true},         {"device", true},          {"status", true},
    {"error", true},        {"median_us", false},      {"min_us", false},
    {"spread", false},      {"n_samples", false},      {"max_rel_error", false},
    {"registers", false},   {"spill_bytes", false},    {"smem_bytes", false},
    {"compile_seconds", false}, {"estimate_us", false}, {"source_hash", true},
    {"nvrtc_version", true}, {"driver_version", true}, {"attempts", false},
    {"finished_ms", false}, {"finished", true},        {"imported_from", true},
};
constexpr const char* kExportSql =
    "SELECT m.id, v.workload, w.kind, v.key, v.template, v.precision, m.gpu_type, "
    "CASE m.emulated WHEN 1 THEN 'emulated' ELSE 'real' END, wk.name, wk.host, wk.device, "
    "m.status, m.error, m.median_us, m.min_us, m.spread, m.n_samples, m.max_rel_error, "
    "m.registers, m.spill_bytes, m.smem_bytes, m.compile_seconds, m.estimate_us, m.source_hash, "
    "m.nvrtc_version, m.driver_version, m.attempts, m.finished_ms, "
    "strftime('%Y-%m-%dT%H:%M:%fZ', m.finished_ms / 1000.0, 'unixepoch'), "
    "ifnull(i.source_path, ''), m.samples_json "
    "FROM measurements m JOIN variants v ON v.id = m.variant_id "
    "JOIN workloads w ON w.signature = v.workload JOIN workers wk ON wk.id = m.worker_id "
    "LEFT JOIN imports i ON i.id = m.import_id "
    "WHERE (?1 IS NULL OR m.gpu_type = ?1) ORDER BY m.finished_ms, m.id";
constexpr int kSamplesColumn = 30;

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// `export --format sqlite --out FILE`: a new tuning DB of the current schema that holds
// this DB's records (all of them, or the measurements, plans and busy times of one GPU
// type), made by the same merge as `import` (merge.h), so that `import FILE` on another DB
// brings exactly them in. Written beside FILE and renamed into place when complete.
int export_sqlite(const std::string& db, const std::string& out, const std::string& gpu) {
  namespace fs = std::filesystem;
  std::error_code ec;
  DC_USER_CHECK(!fs::exists(out, ec), "export --format sqlite: '", out,
                "' exists; the export is a new file (remove it, or choose another name)");
  DC_USER_CHECK(fs::is_regular_file(db, ec), "cannot export '", db, "': no such file");
  const std::string partial = out + ".partial-" + std::to_string(::getpid());
  fs::remove(partial, ec);
  MergeStats s;
  try {
    sqlite::Connection conn = open_tuning_connection(partial, /*read_only=*/false);
    s = merge_tuning_db(conn, db);
    if (!gpu.empty()) {
      sqlite::Transaction tx(conn);
      for (const char* table : {"run_gpu_busy", "plans", "measurements"})
        conn.query(std::string("DELETE FROM ") + table + " WHERE gpu_type <> ?").bind(1, gpu).run();
      s.measurements = conn.scalar_int("SELECT count(*) FROM measurements");
      conn.query("UPDATE imports SET measurements_added = ?").bind(1, s.measurements).run();
      tx.commit();
    }
    // The file's one `imports` row names where its records came from; `import` keeps its own.
    conn.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    conn.exec("PRAGMA journal_mode = DELETE");  // one self-contained file, no -wal beside it
  } catch (...) {
    fs::remove(partial, ec);
    fs::remove(partial + "-wal", ec);
    fs::remove(partial + "-shm", ec);
    throw;
  }
  fs::rename(partial, out, ec);
  DC_USER_CHECK(!ec, "cannot rename the export to '", out, "': ", ec.message());
  fs::remove(partial + "-wal", ec);
  fs::remove(partial + "-shm", ec);
  std::cerr << fmt::format("wrote {} measurements ({} variants, {} workloads, {} runs, {} plans) to {}; "
                           "bring them into another DB with: dc-db --db OTHER.db import {}\n",
                           s.measurements, s.variants, s.workloads, s.runs, s.plans, out, out);
  return kExitOk;
}

}  // namespace

int cmd_export(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc(
      "dc-db export: every measurement with its provenance (JSON adds every sample); with\n"
      "--format sqlite, a tuning DB file of its own that `dc-db import` brings into another DB\n"
      "(moving results between services)");
  desc.add_options()("help,h", "this text")("format", po::value<std::string>()->required(),
                                            "csv, json, or sqlite (needs --out: a new file)")(
      "out", po::value<std::string>(), "write here instead of stdout")(
      "gpu", po::value<std::string>(), "only this GPU type");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  const std::string format = (*vm)["format"].as<std::string>();
  DC_USER_CHECK(format == "csv" || format == "json" || format == "sqlite", "bad --format '", format,
                "': expected csv, json or sqlite");
  if (format == "sqlite") {
    DC_USER_CHECK(vm->count("out"), "export --format sqlite needs --out FILE (a new tuning DB file)");
    return export_sqlite(db, (*vm)["out"].as<std::string>(), option_text(*vm, "gpu").value_or(""));
  }
  sqlite::Connection conn = open_for_reading(db);
  std::ofstream file;
  if (vm->count("out")) {
    const std::string out = (*vm)["out"].as<std::string>();
    file.open(out, std::ios::binary);
    DC_USER_CHECK(file, "cannot write '", out, "'");
  }
  std::ostream& os = file.is_open() ? static_cast<std::ostream&>(file) : std::cout;
  sqlite::Query q = conn.query(kExportSql);
  q.bind(1, option_text(*vm, "gpu"));
  const int n = static_cast<int>(std::size(kColumns));
  size_t rows = 0;
  if (format == "csv") {
    for (int c = 0; c < n; ++c) os << (c ? "," : "") << kColumns[c].name;
    os << "\n";
    while (q.step()) {
      for (int c = 0; c < n; ++c) os << (c ? "," : "") << csv_field(q.text(c));
      os << "\n";
      ++rows;
    }
  } else {
    JsonWriter j(os);
    j.begin_array();
    while (q.step()) {
      j.begin_object();
      for (int c = 0; c < n; ++c) {
        if (kColumns[c].text) j.field(kColumns[c].name, q.text(c));
        else if (q.is_null(c)) j.key(kColumns[c].name).value("");
        else j.field(kColumns[c].name, q.real(c));
      }
      j.key("samples_us").begin_array();
      for (double s : samples_from_json(q.text(kSamplesColumn))) j.value(s);
      j.end_array().end_object();
      ++rows;
    }
    j.end_array();
    os << "\n";
  }
  os.flush();
  DC_USER_CHECK(os, "error writing the export (disk full?)");
  if (file.is_open())
    std::cerr << fmt::format("wrote {} measurements to {}\n", rows, (*vm)["out"].as<std::string>());
  return kExitOk;
}

int cmd_import(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc(
      "dc-db import FILE: merge another tuning DB (another service's, or an `export --format\n"
      "sqlite` file) into this one (created if missing), keeping provenance; records already\n"
      "here are not duplicated; a damaged or foreign file is refused before anything is written");
  desc.add_options()("help,h", "this text");
  std::string from;
  const auto vm = parse_options(args, desc, &from);
  if (!vm) return kExitOk;
  DC_USER_CHECK(!from.empty(), "import needs the FILE to import: dc-db --db ", db, " import FILE");
  sqlite::Connection conn = open_tuning_connection(db, /*read_only=*/false);
  const MergeStats s = merge_tuning_db(conn, from);
  std::cout << fmt::format(
      "imported {} into {} (import #{}): {} measurements, {} variants, {} workloads, {} models, "
      "{} GPU types, {} workers, {} runs, {} plans added\n",
      from, db, s.import_id, s.measurements, s.variants, s.workloads, s.models, s.gpu_types,
      s.workers, s.runs, s.plans);
  return kExitOk;
}

}  // namespace dc::dcdb
