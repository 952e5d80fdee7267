// The worker's side of the farm protocol (docs/farm.md): a DEALER socket to the
// coordinator's ROUTER, after the ZeroMQ guide's Paranoid Pirate worker. It says Hello with
// its inventory, grants credits per device with Ready, runs the jobs it is sent (one lane
// thread per device, calling that device's JobRunner), returns Results, heartbeats both
// ways, and when the coordinator falls silent (`liveness` missed intervals) or asks it to,
// reconnects with exponential backoff, telling the new session which leases it still holds.
//
// Stopping (stop(), async-signal-safe: call it from a SIGINT/SIGTERM handler): no more
// credits are granted; jobs already received finish, their results are sent, then Bye. A
// second stop() abandons whatever still runs and says Bye at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "farm.pb.h"
#include "farm_codec.h"

namespace dc {

struct FarmClientOptions {
  std::string endpoint;          // tcp://HOST:PORT of the coordinator
  std::string worker_id;         // "" = host/pid
  std::chrono::milliseconds heartbeat{1000};  // until the coordinator's Welcome says otherwise
  int liveness = 3;
  std::chrono::milliseconds reconnect_min{1000};
  std::chrono::milliseconds reconnect_max{32000};
  int credits = 1;               // jobs per device held at once (running or waiting)
  size_t max_message_bytes = farm::kDefaultMaxMessageBytes;
  // CURVE: the coordinator's public key (pinned) and this worker's key pair, all Z85; all
  // three or none.
  std::string server_public_key;
  std::string public_key;
  std::string secret_key;
  // Called on the protocol thread with each job as it arrives, before its device's lane
  // runs it: the builders (builder_pool.h) start compiling it. Must not block.
  std::function<void(const farm::Job&)> on_job_received;
};

// Runs one job on one device and returns its Result (lease_id and job_id may be left
// unset). Called on the device's lane thread, one job at a time; must not throw (a throw
// is reported as runtime_fault).
using JobRunner = std::function<farm::Result(const farm::Job& job)>;

class FarmClient {
 public:
  // One runner per device of `inventory`, in the same order.
  FarmClient(FarmClientOptions options, std::vector<farm::GpuInventory> inventory,
             std::vector<JobRunner> runners);
  ~FarmClient();
  FarmClient(const FarmClient&) = delete;
  FarmClient& operator=(const FarmClient&) = delete;

  enum class Outcome {
    stopped,  // stop() was called and the shutdown finished
    refused,  // the coordinator refused this worker (version, inventory, policy): see refusal()
  };
  // Serves until stopped or refused. UserError for bad options (endpoint, keys).
  Outcome run();
  // Async-signal-safe.
  void stop();
  std::string refusal() const;

  // What happened so far (for logs and tests).
  struct Stats {
    int64_t jobs_done = 0;
    int64_t reconnects = 0;
    int64_t welcomes = 0;
    int64_t dropped_frames = 0;
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dc
