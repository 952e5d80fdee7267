// A measurement farm on this machine: a FarmBroker on a loopback port plus N dc-worker
// processes it spawns (the dc-worker next to the running executable), for the machine's
// GPUs or for emulated ones. `tune` without --bind uses it:
//
//   LocalFarmOptions o;
//   o.emulate = true; o.gpu_types = {"h100", "a100"}; o.workers = 2;   // 2 per type
//   auto farm = make_local_farm(o);
//   farm->wait_for_workers(std::chrono::seconds(30));
//   farm->submit(job); ... farm->collect(...) ...; farm->shutdown();
//
// shutdown() (and the destructor) stops the workers with SIGTERM — they finish and report
// the job in hand — then SIGKILL after a grace period, and reaps every one of them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "farm_broker.h"

namespace dc {

struct LocalFarmOptions {
  bool emulate = false;
  // Emulated: the canonical GPU types to emulate, `workers` processes for each.
  std::vector<std::string> gpu_types;
  // Emulated: workers per GPU type (0 = 1). Real: ignored (see devices).
  int workers = 0;
  // Real: one worker per listed CUDA ordinal; empty = one worker serving every usable GPU.
  std::vector<int> devices;
  // Real OpenCL devices: one worker per listed OpenCL index (dc-worker --opencl N); when
  // given, `devices` empty means no CUDA worker.
  std::vector<int> opencl_devices;
  int credits = 0;                     // per device; 0 = dc-worker's default (1 + builders' share)
  int builders = -1;                   // dc-worker --builders; -1 = its default (cores)
  std::string cache_dir;               // dc-worker --cache; "" = its default
  std::string worker_binary;           // "" = dc-worker in the directory of /proc/self/exe
  std::string worker_log_level = "warn";
  std::chrono::milliseconds stop_grace{3000};  // SIGTERM to SIGKILL
  FarmBrokerOptions broker;            // endpoint must stay loopback (default tcp://127.0.0.1:*)
};

class LocalFarm final : public Farm {
 public:
  // Starts the broker and the workers. UserError when dc-worker cannot be found, the
  // options make no worker, or the endpoint is not loopback.
  explicit LocalFarm(LocalFarmOptions options);
  ~LocalFarm() override;
  LocalFarm(const LocalFarm&) = delete;
  LocalFarm& operator=(const LocalFarm&) = delete;

  void submit(FarmJob job) override;
  std::vector<Measurement> collect(std::chrono::milliseconds timeout) override;
  FarmStatus status() const override;
  void shutdown() override;

  // Waits until every spawned worker's devices have joined (emulated: workers x types; real:
  // at least one device per worker), or until `timeout`. Returns the devices joined. A
  // worker that exits meanwhile is logged with its exit status; if all of them have, a
  // UserError says so (e.g. "no GPU to serve").
  int wait_for_workers(std::chrono::milliseconds timeout);

  FarmBroker& broker() { return *broker_; }
  // The worker processes still running (for tests: kill one).
  std::vector<pid_t> worker_pids() const;

 private:
  struct Worker {
    pid_t pid = 0;
    std::string label;  // "h100 #1", "devices 0"
    int devices = 1;
  };
  pid_t spawn(const std::vector<std::string>& argv);
  void reap_exited();

  LocalFarmOptions options_;
  std::unique_ptr<FarmBroker> broker_;
  std::vector<Worker> workers_;
  std::vector<std::string> exits_;  // how exited workers ended
  bool shut_down_ = false;
};

std::unique_ptr<LocalFarm> make_local_farm(LocalFarmOptions options);

// The dc-worker next to the running executable (UserError if there is none).
std::string default_worker_binary();

}  // namespace dc
