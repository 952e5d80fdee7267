// Helpers shared by dc-db's commands: opening for reading, tables, times.
#include <ctime>
#include <iostream>

#include <fmt/format.h>

#include "dc_db.h"
#include "ir/error.h"
#include "migrate.h"

namespace dc::dcdb {

sqlite::Connection open_for_reading(const std::string& db) {
  return open_tuning_connection(db, /*read_only=*/true);
}

std::unique_ptr<TuningDb> open_db_for_reading(const std::string& db) {
  return open_tuning_db(db, /*read_only=*/true);
}

std::map<std::string, WorkloadBest> best_by_workload(const TuningDb& db, const std::string& gpu,
                                                     bool emulated, const std::string& nvrtc_major,
                                                     const std::vector<std::string>& math_paths) {
  BestVariantQuery q;
  q.gpu_type = gpu;
  q.source = source_of(emulated);
  q.nvrtc_major = nvrtc_major;
  q.math_paths = math_paths;
  q.current_source_only = true;  // as tune selects: stale results answer for nothing (dc-db stale lists them)
  std::map<std::string, WorkloadBest> out;
  for (WorkloadBest& b : db.best_variants(q))
    if (b.has_best()) out.emplace(b.workload, std::move(b));
  return out;
}

std::string format_time(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string format_us(double us) {
  auto digits = [](double v, const char* unit) {
    if (v < 10) return fmt::format("{:.3f} {}", v, unit);
    if (v < 100) return fmt::format("{:.2f} {}", v, unit);
    return fmt::format("{:.1f} {}", v, unit);
  };
  if (us < 1000) return digits(us, "us");
  if (us < 1e6) return digits(us / 1e3, "ms");
  return digits(us / 1e6, "s");
}

void Table::print(std::ostream& os) const {
  // A header starting with '>' marks a right-aligned (numeric) column.
  const size_t n = header_.size();
  std::vector<size_t> width(n, 0);
  std::vector<bool> right(n, false);
  std::vector<std::string> head(n);
  for (size_t c = 0; c < n; ++c) {
    right[c] = !header_[c].empty() && header_[c][0] == '>';
    head[c] = right[c] ? header_[c].substr(1) : header_[c];
    width[c] = head[c].size();
  }
  for (const auto& r : rows_)
    for (size_t c = 0; c < n && c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < n; ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(width[c] - cell.size(), ' ');
      if (c) out += "  ";
      out += right[c] ? pad + cell : (c + 1 == n ? cell : cell + pad);
    }
    os << out << "\n";
  };
  line(head);
  for (const auto& r : rows_) line(r);
}

int64_t find_model(sqlite::Connection& conn, const std::string& name) {
  {
    sqlite::Query q =
        conn.query("SELECT id FROM models WHERE name = ? ORDER BY first_seen_ms DESC, id DESC");
    if (q.bind(1, name).step()) return q.int64(0);
  }
  std::string known;
  sqlite::Query q = conn.query("SELECT DISTINCT name FROM models ORDER BY name");
  while (q.step()) known += (known.empty() ? "" : ", ") + q.text(0);
  throw_user_error("no model '", name, "' in the tuning DB (models: ",
                   known.empty() ? "none" : known, ")");
}

void note_other_source(sqlite::Connection& conn, const std::string& gpu, bool emulated) {
  sqlite::Query q = conn.query(
      "SELECT count(*) FROM measurements WHERE gpu_type = ? AND emulated = ? AND status = 'ok'");
  q.bind_all(gpu, !emulated).step();
  const int64_t other = q.int64(0);
  if (other == 0) return;
  std::cerr << fmt::format("note: no {} results for {}, but {} {} ones{}\n", source_arg(emulated),
                           gpu, other, source_arg(!emulated),
                           emulated ? " (drop --emulated to see them)"
                                    : " (--emulated shows them; they are modelled, not measured)");
}

}  // namespace dc::dcdb
