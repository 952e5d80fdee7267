// The coordinator's side of the farm protocol as a state machine, without any sockets:
// sessions (one per connected worker), per-GPU-type queues, credits, leases, heartbeats and
// the deadlines that end them. FarmBroker (farm_broker.h) feeds it decoded messages and the
// clock from its poll loop and sends what it asks to send; tests drive it directly.
//
// Invariants (docs/farm.md, "Leases"):
//  - a job is in exactly one place: its type's queue, one lease, or finished;
//  - a job reaches only a device whose canonical GPU type is the job's, and only while that
//    device has credits;
//  - every submitted job finishes exactly once: a valid Result for its current lease, a
//    lease past its deadline (timeout), or max_attempts leases lost to dead, silent or
//    departing workers (worker_lost). Results for any other lease are ignored.
//  - internal_error (a dc bug in a worker) is never final while attempts remain: the job is
//    queued again and goes to another worker when one serves its type; after max_attempts
//    it finishes as internal_error (not a verdict on the variant: never recorded as one).
// Not thread-safe: one thread (the broker's loop) owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "farm.h"
#include "farm.pb.h"

namespace dc {

struct DispatchOptions {
  std::chrono::milliseconds heartbeat{1000};
  int liveness = 3;            // heartbeat intervals of silence that mark a worker dead
  int max_attempts = 3;        // dispatches per job before it is recorded as worker_lost
  int max_credits = 64;        // per device: a worker cannot hoard more jobs than this
  // Extra time a lease gets past the job's compile + run deadlines (transfer, start-up).
  std::chrono::milliseconds deadline_grace{5000};
  std::optional<bool> require_emulated;  // only emulated (true) or only real (false) devices
  std::string coordinator_id;
};

// What the farm refused, ignored or recovered from, for logs and tests.
struct FarmCounters {
  int64_t dropped_frames = 0;      // did not parse, too large, wrong version, unknown body
  int64_t refused_hellos = 0;
  int64_t ignored_results = 0;     // stale, duplicate or from the wrong worker
  int64_t invalid_messages = 0;    // parsed but broke the protocol (bad Result, unknown device)
  int64_t requeued = 0;            // leases lost to a dead, silent or departing worker
  int64_t expired_leases = 0;      // past their deadline: timeout
  int64_t sessions_expired = 0;    // workers declared dead
  int64_t internal_errors = 0;     // results with status internal_error (dc bugs), retried or not
  int64_t unhealthy = 0;           // results with status unhealthy (the device refused to time)
};

class FarmDispatcher {
 public:
  using Clock = std::chrono::steady_clock;
  // Sends one envelope to a worker, by ROUTER routing identity.
  using Send = std::function<void(const std::string& identity, const farm::Envelope& e)>;

  FarmDispatcher(DispatchOptions options, Send send);

  // A job ready for the wire: `wire`, a serialized farm::Job, holds everything but lease_id,
  // attempt and device_index, which each dispatch appends (farm/job_wire.h).
  struct Submission {
    FarmJob meta;  // the kernels are moved out (serialised into `wire`)
    std::string wire;
  };
  static Submission prepare(FarmJob job);

  // submit and on_message only note what arrived; dispatch (or tick) hands out the jobs,
  // once the caller has handled everything that came in at once: the jobs of one pass go to
  // each worker in one JobBatch.
  void submit(Submission s, Clock::time_point now);
  // One decoded envelope from a worker (any protocol version: a foreign Hello is refused).
  // `peer` is who the transport authenticated (the CURVE key), "" without CURVE: a worker
  // id can only take over the session (and leases) of a peer with the same key.
  void on_message(const std::string& identity, const farm::Envelope& e, Clock::time_point now,
                  const std::string& peer = "");
  // Heartbeats, dead workers, expired leases; then dispatch. Cheap when nothing is due.
  void tick(Clock::time_point now);
  // When tick next has work (a heartbeat, a silence limit, a deadline).
  Clock::time_point next_due() const { return next_due_; }
  // Hands queued jobs to devices with credits, one JobBatch per worker (tick calls it too).
  void dispatch(Clock::time_point now);
  // Sends Disconnect to every session (coordinator shutdown); sessions are forgotten.
  void disconnect_all(const std::string& reason);

  std::vector<Measurement> take_results();
  FarmStatus status() const;
  const FarmCounters& counters() const { return counters_; }

 private:
  struct Device {
    int32_t index = 0;
    std::string gpu_type;
    std::string name;  // the device's name, as the worker's inventory reports it
    bool emulated = false;
    int credits = 0;
    int held = 0;  // leases on this device
  };
  struct Session {
    std::string identity;
    std::string worker_id;
    std::string host;
    std::string peer;
    std::vector<Device> devices;
    Clock::time_point last_seen;
    Clock::time_point next_heartbeat;
    std::set<uint64_t> leases;
    Device* device(int32_t index);
  };
  struct JobEntry {
    FarmJob meta;
    std::string wire;  // a serialized farm::Job without the dispatch fields
    std::string source_hash;
    int attempts = 0;      // dispatches so far
    uint64_t lease = 0;    // current lease, 0 when queued
    bool last_emulated = false;
    std::string history;   // why earlier leases were lost
    // Try others first: workers that reported internal_error or unhealthy for it, and those
    // the job's FarmJob::avoid_workers names (a cross-check, a quarantine).
    std::set<std::string> avoid_workers;
  };
  struct Lease {
    uint64_t job = 0;
    std::string identity;
    int32_t device = 0;
    Clock::time_point deadline;
  };

  void on_hello(const std::string& identity, const farm::Envelope& e, Clock::time_point now,
                const std::string& peer);
  void on_ready(Session& s, const farm::Ready& r);
  void on_result(Session& s, const farm::Result& r);
  void refuse(const std::string& identity, const std::string& reason);
  void disconnect(const std::string& identity, const std::string& reason);
  // Ends a session: its leases go back to their queues (or fail), it is forgotten.
  // `keep` lists leases that move to `heir` instead (a reconnected worker still runs them).
  void drop_session(const std::string& identity, const std::string& why,
                    const std::set<uint64_t>& keep = {}, Session* heir = nullptr);
  void release_lease(uint64_t lease_id);  // forget the lease; its device gets its slot back
  // Queues the job again, or after max_attempts finishes it with `final_status`.
  void requeue_or_fail(uint64_t job_id, const std::string& why,
                       JobStatus final_status = JobStatus::worker_lost);
  // The index in `queue` of the first job the session may take, if any: a job avoids the
  // workers that reported internal_error for it while another worker serves its type.
  std::optional<size_t> pick_job(const std::deque<uint64_t>& queue, const Session& s,
                                 const std::set<std::string>& workers_of_type) const;
  void finish(uint64_t job_id, Measurement m);
  Measurement failure(const JobEntry& job, JobStatus status, const std::string& error) const;
  // The jobs one dispatch pass sends a session, as one JobBatch (protocol version 3); each job's
  // bytes are swapped in from its entry, the lease fields appended, and back after the send
  // (cut to their length before).
  struct OutgoingJobs {
    farm::Envelope envelope;
    std::vector<std::pair<JobEntry*, size_t>> entries;
    size_t bytes = 0;  // about what the batch weighs on the wire
  };
  static constexpr size_t kMaxBatchBytes = size_t{1} << 20;  // well below the frame limit
  void send_jobs(const std::string& identity, OutgoingJobs& o);
  void send(const std::string& identity, farm::Envelope e);
  void send_envelope(const std::string& identity, farm::Envelope& e);  // e keeps what it holds

  DispatchOptions options_;
  Send send_;
  std::unordered_map<std::string, Session> sessions_;  // by routing identity
  std::unordered_map<uint64_t, JobEntry> jobs_;        // unfinished jobs by internal id
  std::map<std::string, std::deque<uint64_t>> queues_; // per GPU type, front first
  std::unordered_map<uint64_t, Lease> leases_;
  std::vector<Measurement> results_;
  uint64_t next_job_ = 1;
  uint64_t next_lease_ = 1;
  int64_t done_ = 0;
  bool dirty_ = false;  // something changed that may allow a dispatch
  Clock::time_point next_due_ = Clock::time_point::max();
  FarmCounters counters_;
};

}  // namespace dc
