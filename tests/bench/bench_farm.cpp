// Coordinator dispatch overhead: jobs per second through a FarmBroker on loopback TCP with
// W in-process workers (FarmClient threads) whose jobs take no time, so that everything
// measured is protocol, serialization and dispatch. Goal (issue 5): >= 5,000 jobs/s with 16
// workers. Results: docs/farm.md, "Benchmark".
//
//   bench_farm [--jobs N] [--workers W] [--credits C] [--source-bytes B]
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "farm_broker.h"
#include "farm_client.h"

namespace {

int arg(int argc, char** argv, const char* name, int dflt) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return dflt;
}

dc::FarmJob make_job(int i, const std::string& source) {
  dc::FarmJob j;
  j.job_id = "w/" + std::to_string(i) + "/h100";
  j.gpu_type = "h100";
  j.workload = "bench";
  j.variant.template_name = "bench";
  j.variant.variant_key = "v" + std::to_string(i);
  j.variant.source = source;
  dc::KernelBuffer b;
  b.name = "t0";
  b.shape = {1024};
  j.variant.buffers = {b};
  dc::Launch l;
  l.kernel = "k";
  l.args = {0};
  j.variant.launches = {l};
  j.reference = j.variant;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = arg(argc, argv, "--jobs", 50000);
  const int workers = arg(argc, argv, "--workers", 16);
  const int credits = arg(argc, argv, "--credits", 2);
  const int source_bytes = arg(argc, argv, "--source-bytes", 2000);
  spdlog::set_level(spdlog::level::warn);

  dc::FarmBroker broker;
  std::vector<std::unique_ptr<dc::FarmClient>> clients;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    dc::farm::GpuInventory g;
    g.set_gpu_type("h100");
    g.set_emulated(true);
    dc::FarmClientOptions o;
    o.endpoint = broker.endpoint();
    o.worker_id = "bench-" + std::to_string(w);
    o.credits = credits;
    dc::JobRunner zero_time = [](const dc::farm::Job&) {
      dc::farm::Result r;
      r.set_status("ok");
      r.add_samples_us(1.0);
      r.set_emulated(true);
      return r;
    };
    clients.push_back(std::make_unique<dc::FarmClient>(o, std::vector{g}, std::vector{zero_time}));
    dc::FarmClient* c = clients.back().get();
    threads.emplace_back([c] { c->run(); });
  }
  while (broker.status().workers_per_gpu_type["h100"] < workers)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));

  const std::string source(static_cast<size_t>(source_bytes), 'x');
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < jobs; ++i) broker.submit(make_job(i, source));
  std::set<std::string> seen;
  int duplicates = 0, failures = 0;
  while (static_cast<int>(seen.size()) < jobs) {
    for (const dc::Measurement& m : broker.collect(std::chrono::milliseconds(1000))) {
      if (!seen.insert(m.variant_key).second) ++duplicates;
      if (m.status != dc::JobStatus::ok) ++failures;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("jobs %d, workers %d, credits %d, source %d bytes: %.3f s, %.0f jobs/s (duplicates %d, failures %d)\n",
              jobs, workers, credits, source_bytes, seconds, jobs / seconds, duplicates, failures);
  for (auto& c : clients) c->stop();
  for (auto& t : threads) t.join();
  broker.shutdown();
  return duplicates == 0 && failures == 0 ? 0 : 1;
}
