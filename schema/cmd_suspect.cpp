// dc-db stale and implausible: the measurements that answer for nothing. Stale: the source
// they measured is not the variant's current source (variants.source_hash, which every tune
// refreshes with the hash of the source its generator writes). Implausible: the time was
// more than 20% below the variant's floor, with the worker that reported it. Tunes measure
// such variants again and selection never uses these rows (docs/tune.md, "Checks").
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "dc_db.h"

namespace dc::dcdb {

namespace po = boost::program_options;

int cmd_stale(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc("dc-db stale [--gpu G]: measurements of a source that is not the variant's current one");
  desc.add_options()("help,h", "this help")("gpu", po::value<std::string>(), "only this GPU type");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  sqlite::Connection conn = open_for_reading(db);
  sqlite::Query q = conn.query(
      "SELECT m.id, v.workload, v.key, m.gpu_type, m.status, m.median_us, m.source_hash, v.source_hash, "
      "m.finished_ms FROM measurements m JOIN variants v ON v.id = m.variant_id "
      "WHERE m.source_hash <> v.source_hash AND (?1 IS NULL OR m.gpu_type = ?1) ORDER BY m.id");
  q.bind(1, option_text(*vm, "gpu"));
  Table t({">id", "workload", "variant", "gpu", "status", ">median", "measured source", "current source", "finished"});
  int64_t n = 0;
  while (q.step()) {
    ++n;
    t.add({std::to_string(q.int64(0)), q.text(1), q.text(2), q.text(3), q.text(4),
           q.text(4) == "ok" ? format_us(q.real(5)) : "-", q.text(6), q.text(7), format_time(q.int64(8))});
  }
  if (t.empty()) {
    std::cout << "no stale measurements in " << db << "\n";
    return kExitOk;
  }
  t.print(std::cout);
  std::cout << fmt::format("{} stale measurements: the next tune measures these variants again\n", n);
  return kExitOk;
}

int cmd_implausible(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc("dc-db implausible [--gpu G]: results below their variant's floor, by worker");
  desc.add_options()("help,h", "this help")("gpu", po::value<std::string>(), "only this GPU type");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  sqlite::Connection conn = open_for_reading(db);
  sqlite::Query q = conn.query(
      "SELECT m.id, wk.name, m.gpu_type, v.workload, v.key, m.median_us, m.error, m.finished_ms "
      "FROM measurements m JOIN variants v ON v.id = m.variant_id JOIN workers wk ON wk.id = m.worker_id "
      "WHERE m.status = 'implausible' AND (?1 IS NULL OR m.gpu_type = ?1) ORDER BY wk.name, m.id");
  q.bind(1, option_text(*vm, "gpu"));
  Table t({">id", "worker", "gpu", "workload", "variant", ">median", "finished", "why"});
  std::map<std::string, int64_t> by_worker;
  while (q.step()) {
    ++by_worker[q.text(1)];
    t.add({std::to_string(q.int64(0)), q.text(1), q.text(2), q.text(3), q.text(4), format_us(q.real(5)),
           format_time(q.int64(7)), q.text(6)});
  }
  if (t.empty()) {
    std::cout << "no implausible measurements in " << db << "\n";
    return kExitOk;
  }
  t.print(std::cout);
  for (const auto& [worker, n] : by_worker)
    std::cout << fmt::format("worker {}: {} implausible results (check that worker)\n", worker, n);
  return kExitOk;
}

}  // namespace dc::dcdb
