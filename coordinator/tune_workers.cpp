// The farm stage: waits (up to worker_wait) for a worker of every requested GPU type and
// decides each type's source. Types without a worker keep their jobs back (and their
// results, if any, come from the DB alone).
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tune_stages.h"

namespace dc::tune_stage {

namespace {

int count_of(const std::map<std::string, int>& m, const std::string& type) {
  const auto it = m.find(type);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

WorkerCensus wait_for_workers(const Farm& farm, const TuneOptions& opts, const StageLog& log) {
  const auto deadline = Clock::now() + opts.worker_wait;
  FarmStatus s = farm.status();
  auto line = [&] {
    std::string text;
    for (const GpuSpec* gpu : opts.gpus) {
      const int ne = count_of(s.emulated_workers_per_gpu_type, gpu->name);
      text += fmt::format("{}{} {}{}", text.empty() ? "" : ", ", gpu->name,
                          count_of(s.workers_per_gpu_type, gpu->name),
                          ne ? fmt::format(" ({} emulated)", ne) : "");
    }
    return "workers: " + text;
  };
  auto all_present = [&] {
    for (const GpuSpec* gpu : opts.gpus)
      if (count_of(s.workers_per_gpu_type, gpu->name) <= 0) return false;
    return true;
  };
  std::string last_line;
  while (!all_present() && Clock::now() < deadline && !(opts.stop && opts.stop->load())) {
    if (const std::string l = line(); l != last_line) {
      log.notice(l + " (waiting)");
      last_line = l;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = farm.status();
  }
  WorkerCensus c;
  for (const GpuSpec* gpu : opts.gpus) {
    const int workers = count_of(s.workers_per_gpu_type, gpu->name);
    const int emulated = count_of(s.emulated_workers_per_gpu_type, gpu->name);
    TimingSource source = source_of(opts.emulated);
    if (!opts.emulated && workers > 0 && emulated == workers) {
      source = TimingSource::emulated;
      log.notice(fmt::format("every {} worker is emulated: its times are modelled, not measured",
                             gpu->name));
    }
    if (workers == 0)
      spdlog::warn("no worker of GPU type {} after {:.0f} s: nothing will be measured on it",
                   gpu->name, std::chrono::duration<double>(opts.worker_wait).count());
    c.workers.push_back(workers);
    c.sources.push_back(source);
  }
  c.line = line();
  return c;
}

}  // namespace dc::tune_stage
