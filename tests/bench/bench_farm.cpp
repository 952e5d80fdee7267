// Coordinator dispatch overhead: jobs per second through the farm's ZeroMQ protocol, with
// in-process workers (FarmClient threads) whose jobs take no time, so that everything
// measured is protocol, serialization, dispatch and (for the service) scheduling and the DB.
//
// Two modes:
//  - a FarmBroker of its own (issue 5; docs/farm.md, "Benchmark"): goal >= 5,000 jobs/s with 16
//    workers.
//      bench_farm [--jobs N] [--workers W] [--credits C] [--source-bytes B]
//  - the load of a farm service (`dc-coordinator serve`, issue 28; docs/bench/farm-service.md,
//    driven by scripts/bench_farm_service.py). Either or both roles in one process:
//      bench_farm --service tcp://HOST:PORT --workers W [--devices D] [--credits C]
//        W zero-time workers of D emulated h100 devices each, until SIGINT/SIGTERM;
//      bench_farm --service tcp://HOST:PORT --tunes T --jobs N [--priorities 1,2,3]
//                 [--outstanding K] [--retune] [--source-bytes B] [--duration S] [--tag X]
//        T concurrent tunes (RemoteFarm clients, as `tune --farm` uses) of N distinct jobs
//        each, priorities cycled from the list, each keeping at most K jobs without an outcome
//        (0, the default: all N submitted at once); --retune sends them as `tune --retune` does
//        (the service does not look them up in its DB); with --duration, each tune that ends is
//        followed by a new one (new jobs) until S seconds have passed. One line per tune ended:
//        "tune K round R priority P: N jobs in S s (measured M, joined J, from the DB D, failed F)".
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "farm_broker.h"
#include "farm_client.h"
#include "ir/clock.h"
#include "remote_farm.h"
#include "variant.h"

namespace {

using Clock = std::chrono::steady_clock;

int arg(int argc, char** argv, const char* name, int dflt) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return dflt;
}

std::string sarg(int argc, char** argv, const char* name, const std::string& dflt) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return dflt;
}

using dc::seconds_since;

dc::FarmJob make_job(int i, const std::string& source) {
  dc::FarmJob j;
  j.job_id = "w/" + std::to_string(i) + "/h100";
  j.gpu_type = "h100";
  j.workload = "bench";
  j.variant_kernel.template_name = "bench";
  j.variant_kernel.variant_key = "v" + std::to_string(i);
  j.variant_kernel.source = source;
  dc::KernelBuffer b;
  b.name = "t0";
  b.shape = {1024};
  j.variant_kernel.buffers = {b};
  dc::Launch l;
  l.kernel = "k";
  l.args = {0};
  j.variant_kernel.launches = {l};
  j.reference = j.variant_kernel;
  return j;
}

// A job as `tune --farm` sends it: what the service's DB records of its workload and variant
// beside the kernels. The source is unique to (workload, i), so the service measures each job
// once and never answers it from its DB or joins it with another tune's.
dc::FarmJob service_job(const std::string& workload, int i, size_t source_bytes, bool reuse) {
  dc::Variant v;
  v.template_name = "bench";
  v.precision = "fp32";
  v.params = {{"i", i}};
  dc::FarmJob j = make_job(i, "");
  j.workload = workload;
  j.variant_kernel.variant_key = v.key();
  j.job_id = workload + "/" + v.key() + "/h100";
  std::string source = "// " + workload + " " + std::to_string(i) + "\n__global__ void k(float* t0) {}\n";
  if (source.size() < source_bytes) source.append(source_bytes - source.size(), ' ');
  j.variant_kernel.source = source;
  j.reference = j.variant_kernel;
  j.service.workload_kind = "opaque";
  j.service.workload_canonical = "canonical " + workload;
  j.service.variant_template = v.template_name;
  j.service.variant_precision = v.precision;
  j.service.variant_params = v.params;
  j.service.emulated = true;
  j.service.nvrtc_major = "13";
  j.service.reuse = reuse;
  return j;
}

dc::JobRunner zero_time_runner() {
  return [](const dc::farm::Job&) {
    dc::farm::Result r;
    r.set_status("ok");
    r.add_samples_us(1.0);
    r.set_emulated(true);
    r.set_nvrtc_version("13.0.48");
    return r;
  };
}

// Zero-time workers of `devices` emulated h100 devices each, connected to `endpoint`.
class Workers {
 public:
  Workers(const std::string& endpoint, int workers, int devices, int credits, const std::string& prefix) {
    for (int w = 0; w < workers; ++w) {
      std::vector<dc::farm::GpuInventory> inventory;
      std::vector<dc::JobRunner> runners;
      for (int d = 0; d < devices; ++d) {
        dc::farm::GpuInventory g;
        g.set_device_index(d);
        g.set_gpu_type("h100");
        g.set_device_name("emulated h100 (zero-time bench)");
        g.set_emulated(true);
        g.set_nvrtc_version("13.0.48");
        inventory.push_back(g);
        runners.push_back(zero_time_runner());
      }
      dc::FarmClientOptions o;
      o.endpoint = endpoint;
      o.worker_id = prefix + std::to_string(w);
      o.credits = credits;
      clients_.push_back(std::make_unique<dc::FarmClient>(o, inventory, runners));
      dc::FarmClient* c = clients_.back().get();
      threads_.emplace_back([c] { c->run(); });
    }
  }
  ~Workers() { stop(); }
  void stop() {
    for (auto& c : clients_) c->stop();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  int64_t jobs_done() const {
    int64_t n = 0;
    for (const auto& c : clients_) n += c->stats().jobs_done;
    return n;
  }

 private:
  std::vector<std::unique_ptr<dc::FarmClient>> clients_;
  std::vector<std::thread> threads_;
};

int broker_bench(int argc, char** argv) {
  const int jobs = arg(argc, argv, "--jobs", 50000);
  const int workers = arg(argc, argv, "--workers", 16);
  const int credits = arg(argc, argv, "--credits", 2);
  const int source_bytes = arg(argc, argv, "--source-bytes", 2000);

  dc::FarmBroker broker;
  Workers pool(broker.endpoint(), workers, 1, credits, "bench-");
  while (broker.status().workers_per_gpu_type["h100"] < workers)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));

  const std::string source(static_cast<size_t>(source_bytes), 'x');
  const auto start = Clock::now();
  for (int i = 0; i < jobs; ++i) broker.submit(make_job(i, source));
  std::set<std::string> seen;
  int duplicates = 0, failures = 0;
  while (static_cast<int>(seen.size()) < jobs) {
    for (const dc::Measurement& m : broker.collect(std::chrono::milliseconds(1000))) {
      if (!seen.insert(m.variant_key).second) ++duplicates;
      if (m.status != dc::JobStatus::ok) ++failures;
    }
  }
  const double seconds = seconds_since(start);
  std::printf("jobs %d, workers %d, credits %d, source %d bytes: %.3f s, %.0f jobs/s (duplicates %d, failures %d)\n",
              jobs, workers, credits, source_bytes, seconds, jobs / seconds, duplicates, failures);
  pool.stop();
  broker.shutdown();
  return duplicates == 0 && failures == 0 ? 0 : 1;
}

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop = true; }

std::vector<int> parse_priorities(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  if (out.empty()) out.push_back(1);
  return out;
}

// One tune: connects, submits `jobs` distinct jobs, collects one outcome per job, says Bye.
// Returns false on a missing, duplicate or failed outcome.
bool run_tune(const std::string& endpoint, const std::string& workload, int priority, int jobs, int outstanding,
              size_t source_bytes, bool reuse, int k, int round) {
  const auto start = Clock::now();
  dc::RemoteFarmOptions o;
  o.endpoint = endpoint;
  o.model = workload;
  o.gpu_types = {"h100"};
  o.priority = priority;
  o.client_id = workload;
  dc::RemoteFarm farm(o);
  // At most `outstanding` jobs without an outcome (0: all at once), topped up as outcomes come.
  const int window = outstanding > 0 ? std::min(outstanding, jobs) : jobs;
  int next = 0;
  for (; next < window; ++next) farm.submit(service_job(workload, next, source_bytes, reuse));
  std::set<std::string> seen;
  int failures = 0, duplicates = 0;
  while (static_cast<int>(seen.size()) < jobs && !g_stop) {
    for (const dc::Measurement& m : farm.collect(std::chrono::milliseconds(500))) {
      if (!seen.insert(m.variant_key).second) ++duplicates;
      if (m.status != dc::JobStatus::ok) ++failures;
      if (next < jobs) farm.submit(service_job(workload, next++, source_bytes, reuse));
    }
  }
  const dc::RemoteFarmCounts c = farm.counts();
  farm.shutdown();
  std::printf("tune %d round %d priority %d: %zu of %d jobs in %.3f s (measured %lld, joined %lld, from the DB %lld, "
              "failed %d, duplicates %d)\n",
              k, round, priority, seen.size(), jobs, seconds_since(start), static_cast<long long>(c.measured),
              static_cast<long long>(c.joined), static_cast<long long>(c.from_db), failures, duplicates);
  std::fflush(stdout);
  return static_cast<int>(seen.size()) == jobs && failures == 0 && duplicates == 0;
}

int service_bench(int argc, char** argv) {
  const std::string endpoint = sarg(argc, argv, "--service", "");
  const int workers = arg(argc, argv, "--workers", 0);
  const int devices = arg(argc, argv, "--devices", 1);
  const int credits = arg(argc, argv, "--credits", 2);
  const int tunes = arg(argc, argv, "--tunes", 0);
  const int jobs = arg(argc, argv, "--jobs", 20000);
  const int source_bytes = arg(argc, argv, "--source-bytes", 2000);
  const int duration = arg(argc, argv, "--duration", 0);
  const int outstanding = arg(argc, argv, "--outstanding", 0);
  bool reuse = true;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--retune") == 0) reuse = false;
  const std::vector<int> priorities = parse_priorities(sarg(argc, argv, "--priorities", "1"));
  const std::string tag = sarg(argc, argv, "--tag", "b" + std::to_string(::getpid()));
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  std::unique_ptr<Workers> pool;
  if (workers > 0) pool = std::make_unique<Workers>(endpoint, workers, devices, credits, tag + "-w");
  if (tunes == 0) {
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pool->stop();
    std::printf("workers: %lld jobs done\n", static_cast<long long>(pool->jobs_done()));
    return 0;
  }

  const auto start = Clock::now();
  std::atomic<bool> ok{true};
  std::atomic<int64_t> total{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < tunes; ++k) {
    threads.emplace_back([&, k] {
      const int priority = priorities[static_cast<size_t>(k) % priorities.size()];
      for (int round = 0; !g_stop; ++round) {
        const std::string workload = tag + "-t" + std::to_string(k) + "-r" + std::to_string(round);
        try {
          if (!run_tune(endpoint, workload, priority, jobs, outstanding, static_cast<size_t>(source_bytes), reuse, k,
                       round)) ok = false;
          total += jobs;
        } catch (const std::exception& e) {
          std::printf("tune %d round %d: %s\n", k, round, e.what());
          ok = false;
          return;
        }
        if (duration <= 0 || seconds_since(start) >= duration) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = seconds_since(start);
  std::printf("tunes %d, jobs %lld: %.3f s, %.0f jobs/s end to end%s\n", tunes, static_cast<long long>(total.load()),
              seconds, static_cast<double>(total.load()) / seconds, ok ? "" : " (FAILED: see above)");
  if (pool) pool->stop();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  return sarg(argc, argv, "--service", "").empty() ? broker_bench(argc, argv) : service_bench(argc, argv);
}
