// The farm of `tune --farm tcp://HOST:PORT`: a client of the farm service
// (farm_service.h) behind the Farm interface, so the tune pipeline runs unchanged. A thread
// owns the DEALER socket: it says ClientHello, sends each submitted job (with what the
// service's DB records of it), heartbeats, and hands Outcomes to collect(). status() is the
// service's last ClientStatus (its workers per GPU type). shutdown() says ClientBye: the
// service cancels what is still queued for this tune.
// Losing the service (silent for `liveness` heartbeats, or "unknown client": it restarted)
// is not the end: the client says ClientHello again with its tune id, on a fresh socket,
// until reconnect_timeout. The same service resumes the tune (within its grace period); a
// restarted one starts a new tune. Either way every job without an outcome is submitted
// again: the service answers what it recorded from its DB, joins what it still has, and
// measures the rest. Not reached within reconnect_timeout: a UserError from collect().
// estimator_ratios() asks the service's DB for what the calibrate stage fits (docs/farm.md,
// "Calibration through the service").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "farm.h"

namespace dc {

struct RemoteFarmOptions {
  std::string endpoint;            // tcp://HOST:PORT of `dc-coordinator serve`
  std::string model;               // for the service's status
  std::vector<std::string> gpu_types;
  int priority = 1;                // the tune's weight in the fair share, 1..100
  std::string client_id;           // "" = host/pid
  std::chrono::milliseconds connect_timeout{10000};
  // How long to keep trying to reach a service that was lost (0: give up at once).
  std::chrono::milliseconds reconnect_timeout{60000};
  // CURVE: the service's public key and this client's key pair (Z85); all or none.
  std::string server_public_key;
  std::string client_public_key;
  std::string client_secret_key;
};

// Jobs by how the service answered them.
struct RemoteFarmCounts {
  int64_t measured = 0;   // for this tune
  int64_t joined = 0;     // measured once for this tune and another
  int64_t from_db = 0;    // from the service's DB
  int64_t reconnects = 0; // the service was lost and reached again
  int64_t resubmitted = 0;  // jobs sent again after a reconnect
};

class RemoteFarm final : public Farm {
 public:
  // Connects and waits for the Welcome: UserError when refused or not answered in time.
  explicit RemoteFarm(RemoteFarmOptions options);
  ~RemoteFarm() override;  // shutdown()
  RemoteFarm(const RemoteFarm&) = delete;
  RemoteFarm& operator=(const RemoteFarm&) = delete;

  uint64_t tune_id() const;
  void submit(FarmJob job) override;
  std::vector<Measurement> collect(std::chrono::milliseconds timeout) override;
  FarmStatus status() const override;
  void shutdown() override;
  void mark_implausible(const Measurement& m, const std::string& why) override;  // to the service's DB
  // The service's DB's ratios (a RatiosRequest, waited for up to connect_timeout +
  // reconnect_timeout; sent again after a reconnect), with its per-parameter factors and, where
  // `rank_vectors` asks, its ranking vectors. UserError when the service does not answer, is
  // lost, could not read its DB, or answers with invalid ratios, factors or vectors.
  std::optional<Ratios> estimator_ratios(const std::string& gpu_type, bool emulated, const std::string& storage,
                                         bool rank_vectors) override;
  RemoteFarmCounts counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dc
