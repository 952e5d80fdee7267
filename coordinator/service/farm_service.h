// The farm as a shared service (`dc-coordinator serve`, docs/farm.md "The farm as a
// service"): one long-lived FarmBroker that workers join as always, and that tunes
// (`tune --farm`, remote_farm.h) reach as clients over the same socket. The service owns
// the tuning DB and its state lives in this one class:
//
//  - tunes: one per client connection (ClientHello), with its priority, GPU types and the
//    jobs it waits for; a client that says ClientBye or goes silent for `liveness`
//    heartbeats is gone: its queued jobs are cancelled, its jobs already handed to the
//    broker finish and are recorded;
//  - groups: identical jobs (same generated-source hash, GPU type, NVRTC major, source and
//    check) of any tunes are one group, measured once; its result goes to every waiter;
//  - per GPU type, a weighted fair share (fair_share.h) chooses which tune's job goes to
//    the broker next; the broker holds only a small window per device, so the choice is
//    made when a device is about to need work, not when jobs arrive;
//  - a job whose result the DB already holds (same source hash, GPU type, source, NVRTC
//    major) is answered from it at once (unless the tune asked to measure again).
// Every result from a worker is committed to the DB once, as it arrives.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "farm_broker.h"
#include "service_view.h"
#include "tuning_db.h"

namespace dc {

struct FarmServiceOptions {
  FarmBrokerOptions broker;     // endpoint and keys; serve_clients is set by the service
  // Jobs handed to the broker per device of a GPU type: enough to keep the device and its
  // builders busy, few enough that fair share decides (default 2).
  int window_per_device = 2;
  std::chrono::milliseconds client_heartbeat{1000};
  int client_liveness = 3;      // heartbeat intervals of silence that end a client
  // A client silent for `liveness` heartbeats is kept this long (its queued jobs too) for it
  // to reconnect and resume; then it is ended. 0: ended at once.
  std::chrono::milliseconds client_grace{10000};
  // Called from run()'s thread every view_interval with what the service is doing
  // (`serve --metrics` renders /metrics and / from it). Empty: never.
  std::function<void(const ServiceView&)> on_view;
  std::chrono::milliseconds view_interval{500};
};

class FarmService {
 public:
  // Binds (UserError as FarmBroker). The DB must outlive the service.
  FarmService(FarmServiceOptions options, TuningDb& db);
  ~FarmService();
  FarmService(const FarmService&) = delete;
  FarmService& operator=(const FarmService&) = delete;

  const std::string& endpoint() const;
  const std::string& public_key() const;
  // Serves until `stop` is set (checked every 100 ms), then disconnects everyone.
  void run(const std::atomic<bool>& stop);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dc
