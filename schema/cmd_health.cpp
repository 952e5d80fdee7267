// dc-db health: the devices' health after timing, as stored with each measurement (migration
// 0008; docs/tuning-db.md): per worker, how many of its results carry an NVML sample, the SM
// clock range against the maximum, the hottest temperature, every clock event ("throttle")
// reason seen and the most uncorrected ECC errors; results without health data (emulated,
// OpenCL, no NVML; "none recorded" for rows from before dc stored it) are counted by why, never given figures.
#include <algorithm>
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "dc_db.h"

namespace dc::dcdb {

namespace po = boost::program_options;

namespace {

struct WorkerHealth {
  std::string gpu;
  int64_t results = 0, sampled = 0;
  int64_t min_clock = 0, max_clock = 0, max_of_max = 0, hottest = 0;
  uint64_t reasons = 0;
  int64_t ecc = -1;  // -1: no ECC counters in any sample
  std::map<std::string, int64_t> without;  // why no health data -> results
};

void add_sample(WorkerHealth& w, const sqlite::Query& q) {
  const int64_t clock = q.int64(2);
  w.min_clock = w.sampled == 0 ? clock : std::min(w.min_clock, clock);
  w.max_clock = std::max(w.max_clock, clock);
  if (!q.is_null(3)) w.max_of_max = std::max(w.max_of_max, q.int64(3));
  if (!q.is_null(4)) w.hottest = std::max(w.hottest, q.int64(4));
  if (!q.is_null(5)) w.reasons |= static_cast<uint64_t>(q.int64(5));
  if (!q.is_null(6)) w.ecc = std::max(w.ecc, q.int64(6));
  ++w.sampled;
}

}  // namespace

int cmd_health(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc("dc-db health [--gpu G] [--worker W]: the devices' health after timing, per worker");
  desc.add_options()("help,h", "this help")("gpu", po::value<std::string>(), "only this GPU type")(
      "worker", po::value<std::string>(), "only this worker");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  sqlite::Connection conn = open_for_reading(db);
  sqlite::Query q = conn.query(
      "SELECT wk.name, m.gpu_type, m.health_sm_clock_mhz, m.health_max_sm_clock_mhz, m.health_temperature_c, "
      "m.health_clock_event_reasons, m.health_ecc_uncorrected, m.health_note FROM measurements m "
      "JOIN workers wk ON wk.id = m.worker_id WHERE m.n_samples > 0 AND (?1 IS NULL OR m.gpu_type = ?1) "
      "AND (?2 IS NULL OR wk.name = ?2) ORDER BY wk.name, m.id");
  q.bind(1, option_text(*vm, "gpu"));
  q.bind(2, option_text(*vm, "worker"));
  std::map<std::string, WorkerHealth> workers;
  while (q.step()) {
    WorkerHealth& w = workers[q.text(0)];
    w.gpu = q.text(1);
    ++w.results;
    if (!q.is_null(2)) add_sample(w, q);
    else ++w.without[q.is_null(7) ? "none recorded" : q.text(7)];
  }
  if (workers.empty()) {
    std::cout << "no timed measurements in " << db << "\n";
    return kExitOk;
  }
  Table t({"worker", "gpu", ">timed", ">with health", ">SM MHz", ">max C", "clock event reasons", ">ECC"});
  for (const auto& [name, w] : workers) {
    if (w.sampled == 0) {
      t.add({name, w.gpu, std::to_string(w.results), "0", "-", "-", "-", "-"});
      continue;
    }
    t.add({name, w.gpu, std::to_string(w.results), std::to_string(w.sampled),
           fmt::format("{}-{} of {}", w.min_clock, w.max_clock, w.max_of_max), std::to_string(w.hottest),
           fmt::format("{:#x}", w.reasons), w.ecc < 0 ? "no counters" : std::to_string(w.ecc)});
  }
  t.print(std::cout);
  for (const auto& [name, w] : workers)
    for (const auto& [why, n] : w.without)
      std::cout << fmt::format("worker {}: {} results with no health data ({})\n", name, n, why);
  return kExitOk;
}

}  // namespace dc::dcdb
