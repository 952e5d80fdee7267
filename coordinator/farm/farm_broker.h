// The measurement farm over ZeroMQ: a ROUTER socket that dc-worker daemons (DEALER) connect
// to, served by a poll loop on its own thread, after the Majordomo and Paranoid Pirate
// patterns of the ZeroMQ guide. The protocol state (sessions, per-GPU-type queues, credits,
// leases, deadlines) is farm_dispatch.h; this class owns the sockets, the thread, the
// security rules and the hand-over of jobs and results between threads. docs/farm.md.
//
//   FarmBrokerOptions o;                      // tcp://127.0.0.1:* (a free loopback port)
//   FarmBroker farm(o);                       // bound and serving when this returns
//   run `dc-worker --connect <farm.endpoint()> --emulate h100` ...
//   farm.submit(job); ... farm.collect(1s) ...
//
// Security: an endpoint reachable from other machines needs CURVE (curve_secret_key plus
// allowed_worker_keys, checked by a ZAP handler in the same loop), or insecure = true,
// which logs a loud warning. Anything else is a UserError at construction.
// Bad input never stops the loop: frames that do not parse, are too large, have another
// protocol version or break the protocol are logged (rate-limited) and dropped. The
// broker's own invariant failures do: the loop ends, and the next submit, collect or
// status throws an InternalError ("farm broker: ...": exit 3 from the CLI).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "farm.h"
#include "farm_codec.h"
#include "farm_dispatch.h"

namespace dc {

struct FarmBrokerOptions {
  // Where workers connect. "*" as the port picks a free one (see FarmBroker::endpoint()).
  std::string endpoint = "tcp://127.0.0.1:*";
  std::chrono::milliseconds heartbeat{1000};
  int liveness = 3;
  int max_attempts = 3;
  int max_credits_per_device = 64;
  std::chrono::milliseconds deadline_grace{5000};
  size_t max_message_bytes = farm::kDefaultMaxMessageBytes;
  std::optional<bool> require_emulated;  // only emulated (true) or only real (false) devices
  std::string coordinator_id;            // "" = host/pid

  // CURVE: the coordinator's secret key (Z85; its public key is derived) and the public keys
  // of the workers allowed in. Both, or neither.
  std::string curve_secret_key;
  std::vector<std::string> allowed_worker_keys;
  // Serve a non-loopback endpoint without CURVE. Workers run the code they are sent: only
  // on a network you trust.
  bool insecure = false;

  // The farm service (coordinator/service/): client messages (farm/client_codec.h) are
  // handed to take_client_messages() instead of being dropped. With CURVE, clients need a
  // key of allowed_client_keys (a list apart from the workers': a worker key cannot submit
  // jobs, a client key cannot join as a worker).
  bool serve_clients = false;
  std::vector<std::string> allowed_client_keys;
};

class FarmBroker final : public Farm {
 public:
  // Binds and starts the loop. UserError for an endpoint that cannot be bound, a
  // non-loopback endpoint without CURVE or insecure, or bad keys.
  explicit FarmBroker(FarmBrokerOptions options = {});
  ~FarmBroker() override;  // shutdown()
  FarmBroker(const FarmBroker&) = delete;
  FarmBroker& operator=(const FarmBroker&) = delete;

  // The bound endpoint, port resolved: "tcp://127.0.0.1:41235".
  const std::string& endpoint() const;
  // The coordinator's CURVE public key (Z85) that workers pin; "" without CURVE.
  const std::string& public_key() const;

  void submit(FarmJob job) override;
  // Many at once: one hand-over and one wake of the loop (the farm service's dispatch).
  void submit_all(std::vector<FarmJob> jobs);
  std::vector<Measurement> collect(std::chrono::milliseconds timeout) override;
  FarmStatus status() const override;
  // Disconnects the workers, stops the loop and joins it; results already received stay
  // collectable. Jobs still queued or leased produce no Measurement. Idempotent.
  void shutdown() override;

  FarmCounters counters() const;

  // The farm service's side (serve_clients): messages of clients as they arrived, and
  // replies to them. `peer` is the client's CURVE key (hex, as ZAP admitted it), "" without
  // CURVE. collect() also wakes when a client message arrives.
  struct ClientMessage {
    std::string identity;
    farm::Envelope envelope;
    std::string peer;
  };
  std::vector<ClientMessage> take_client_messages();
  // Queued and sent by the loop; never blocks (a client gone drops it).
  void send_to_client(const std::string& identity, farm::Envelope e);
  // Many at once, in order: one hand-over and one wake of the loop.
  void send_to_clients(std::vector<std::pair<std::string, farm::Envelope>> messages);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dc
