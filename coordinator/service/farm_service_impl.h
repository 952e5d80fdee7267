// The farm service's state and loop (FarmService::Impl), shared by its files:
// farm_service.cpp (clients, jobs, results, the loop) and farm_service_view.cpp (the
// status view, the status request, device busy time). Private to coordinator/service.
#pragma once

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client_codec.h"
#include "db_writer.h"
#include "fair_share.h"
#include "farm_codec.h"
#include "gpu/gpu_catalog.h"
#include "ir/host.h"
#include "ir/workload.h"
#include "farm_service.h"
#include "ir/error.h"
#include "variant.h"

namespace dc {
namespace farm_service_detail {

using Clock = std::chrono::steady_clock;

inline constexpr int kMaxPriority = 100;
inline constexpr size_t kMaxName = 200;
inline constexpr int kMaxAvoidWorkers = 256;  // a job's avoid_workers: a tune's quarantined workers and one more

// A job that avoids workers (a finalist measured again elsewhere) joins only a group that
// avoids the same ones: another tune's group may be on the very worker it avoids.
inline std::string avoid_key(const std::set<std::string>& avoid) {
  std::string out;
  for (const std::string& w : avoid) out += w + ",";
  return out;
}

// Parts joined with '|' (a group key, a resend key): per job, so without str_cat's stream.
inline std::string key_of(std::initializer_list<std::string_view> parts) {
  size_t n = parts.size();
  for (std::string_view p : parts) n += p.size();
  std::string out;
  out.reserve(n);
  bool first = true;
  for (std::string_view p : parts) {
    if (!first) out += '|';
    first = false;
    out.append(p);
  }
  return out;
}

inline std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, kMaxName)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// host/pid/start time: another after a restart, even where the pid is the same (a container).
inline std::string default_service_id() {
  return str_cat(host_and_pid(), "/", farm::unix_ms_now());
}

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The client messages one turn of the loop handles before it sends heartbeats and
// dispatches again: a burst of Submits is served in slices, not in one block that
// leaves every client unanswered for seconds (docs/bench/farm-service.md).
inline constexpr auto kTurnSlice = std::chrono::milliseconds(20);
// How long the DB writer keeps a transaction open while rows keep coming (one commit per
// kBatchAge under load), and how long it waits for more once none comes before it commits.
inline constexpr auto kBatchAge = std::chrono::milliseconds(10);
inline constexpr auto kWriterIdle = std::chrono::microseconds(500);
// How often the loop looks for the writer's answers while it owes some and nothing else comes.
inline constexpr auto kWriterPoll = std::chrono::milliseconds(1);
// The DB works the writer may owe before the loop takes no more client messages (results it
// still takes): every reply, heartbeats too, waits for the works posted before it, so a burst
// of Submits faster than the writer must not put seconds of work ahead of them (about 40 µs a
// work: some 160 ms).
inline constexpr uint64_t kMaxWriterBacklog = 4096;

// Job latency buckets, seconds: emulated jobs take milliseconds, real ones seconds to minutes.
inline const std::vector<double> kLatencyBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

}  // namespace farm_service_detail

using namespace farm_service_detail;

struct FarmService::Impl {
  // One client: a tune.
  struct Tune {
    uint64_t id = 0;
    std::string identity;
    std::string peer;            // its CURVE key ("" without CURVE): only it may resume the tune
    std::string client_id, host, model;
    std::vector<std::string> gpu_types;
    int priority = 1;
    Clock::time_point started;
    Clock::time_point last_seen;
    Clock::time_point next_status;
    bool connected = true;       // false: silent, kept until detached_at + grace
    Clock::time_point detached_at;
    std::set<uint64_t> groups;  // it waits for
    // Outcomes sent lately (and all of them while it is silent), by resend_key: a client
    // that reconnects resubmits what it has no outcome for, and these are sent again. Only
    // a tune that resumed looks here (another tune's later round may reuse a job id).
    // Hashed: a key begins with the job id, and the job ids of a tune share long prefixes
    // (a tree's comparisons were 1 % of the service's CPU).
    std::unordered_map<std::string, std::pair<Clock::time_point, farm::Envelope>> recent;
    // The same, oldest first: expiry looks at the front only (a walk of the whole map on
    // every turn was the loop's largest cost at thousands of jobs a second).
    std::deque<std::pair<Clock::time_point, std::string>> recent_order;
    int resumes = 0;
    int64_t submitted = 0, done = 0, measured = 0, from_db = 0, joined = 0;
    int64_t queued = 0;  // its waits on groups no device has yet
  };
  // One tune's wait for a group's result, under its own names.
  struct Waiter {
    uint64_t tune = 0;
    std::string job_id, workload, variant_key;
    bool reuse = true;
    std::string resend_key;  // job id, source hash, check, reuse: the same job submitted again
  };
  // Identical jobs: measured once.
  struct Group {
    std::string key;
    std::string gpu_type;
    std::string workload, variant_key;  // as the first tune submitted it, for the record
    FarmJob job;                 // until dispatched: then it moves to the broker
    std::vector<Waiter> waiters;
    bool dispatched = false;
    uint64_t dispatched_by = 0;  // the tune whose share paid for it
    Clock::time_point dispatched_at;
  };
  struct WorkerTally {
    int64_t done = 0, failed = 0;
  };
  struct DeviceTally {
    Clock::time_point joined;
    double busy_seconds = 0;
  };

  FarmServiceOptions options;
  TuningDb& db;
  FarmBroker broker;
  const GpuCatalog catalog = GpuCatalog::builtin();
  std::string service_id = default_service_id();

  std::map<uint64_t, Tune> tunes;
  std::map<std::string, uint64_t> tune_of_identity;
  std::map<uint64_t, Group> groups;
  std::unordered_map<std::string, uint64_t> group_of_key;  // looked up and erased per job: hashed
  std::map<std::string, int64_t> in_broker;  // per GPU type: handed over, no result yet
  std::map<std::string, int64_t> queued_groups;  // per GPU type: groups no device has yet
  // Client messages taken from the broker, not handled yet (run() handles a time slice of
  // them per turn).
  std::deque<FarmBroker::ClientMessage> pending;
  int front_jobs_done = 0;  // of pending.front() when it is a SubmitBatch: a turn may end inside one
  // Replies, each held until the DB work posted before it is committed: an outcome never
  // reaches a tune before its measurement (or the row it was read from) is durable.
  struct Reply {
    uint64_t after = 0;  // the number of the last DB work posted before it
    std::string identity;
    farm::Envelope envelope;
  };
  std::deque<Reply> outbox;
  uint64_t db_committed = 0;  // DB works committed, as the writer last said
  // The results of groups whose rows the writer may not have committed yet, by group key,
  // with the number of their DB work: a job posted for its DB look-up while its group was
  // in flight joins the group's result here if the group finished meanwhile (join_written).
  // Forgotten once committed, oldest first.
  std::unordered_map<std::string, std::pair<uint64_t, Measurement>> being_written;
  std::deque<std::pair<uint64_t, std::string>> being_written_order;
  FairShare share;
  uint64_t next_tune = 1, next_group = 1;
  // The DB writer's thread alone, from here to ratios_fitted (the works of `writer` use them).
  // What the DB already has (rows the service committed or found): caches that spare a
  // repeated upsert. Workloads and variants come with every job, so those two are emptied
  // when they reach kRecordedCacheMax: a long-lived service's memory stays flat (it grew by
  // one entry per job, docs/bench/farm-service.md), at the cost of an upsert now and then.
  static constexpr size_t kRecordedCacheMax = 1 << 14;
  std::set<std::string> gpu_types_recorded, workloads_recorded, workers_recorded;
  std::set<std::pair<std::string, std::string>> variants_recorded;
  // The calibrate stage's answers by (GPU type, emulated, storage, ranking vectors asked) while
  // the DB's rows stay as they were: the per-parameter fit reads every result of the GPU type,
  // and each tune asks once per GPU type. Emptied past kRatiosCacheMax keys (storage is the
  // client's).
  struct CachedRatios {
    DbContentStamp stamp;
    farm::RatiosReply reply;
  };
  static constexpr size_t kRatiosCacheMax = 64;
  std::map<std::tuple<std::string, bool, std::string, bool>, CachedRatios> ratios_cache;
  int64_t ratios_fitted = 0;  // answers computed, not taken from ratios_cache (tests read it)
  // The loop's thread from here on.
  std::string hash_scratch;  // a Submit's variant source, to hash
  std::map<std::string, WorkerTally> tally;  // by worker id (before the device suffix)
  std::map<std::string, DeviceTally> device_tally;  // by "worker id/device index"
  int64_t measured = 0, answered_from_db = 0, joined = 0, cancelled = 0;
  int64_t answered_measured = 0;  // outcomes of origin MEASURED (measured counts results)
  int64_t tunes_started = 0, tunes_resumed = 0;
  std::map<std::string, int64_t> results_by_status, recorded_by_status;
  ServiceView::Histogram latency = [] {
    ServiceView::Histogram h;
    h.bounds = kLatencyBounds;
    h.counts.assign(kLatencyBounds.size() + 1, 0);
    return h;
  }();
  const Clock::time_point started = Clock::now();
  Clock::time_point next_view = Clock::now();
  // Last: destroyed first, after it has run and committed everything posted (its works use
  // the members above).
  DbWriter writer{db, kBatchAge, kWriterIdle};

  Impl(FarmServiceOptions o, TuningDb& d)
      : options(std::move(o)), db(d), broker([&] {
          options.broker.serve_clients = true;
          return options.broker;
        }()) {}

  void send(const std::string& identity, farm::Envelope e) {
    outbox.push_back({writer.posted(), identity, std::move(e)});
  }
  // Sends the replies whose DB work is committed.
  void flush();
  void refuse(const std::string& identity, const std::string& reason) {
    spdlog::warn("service: refused a client: {}", reason);
    farm::Envelope e = farm::make_envelope();
    e.mutable_refused()->set_reason(reason);
    send(identity, std::move(e));
  }

  void take_client_messages();
  void serve_turn(std::vector<Measurement> results);
  // What the writer finished: the rest of each work's job on this thread, then what is committed.
  void take_db_done();
  bool writer_behind() const { return writer.posted() - db_committed >= kMaxWriterBacklog; }
  // Handles the message, or the next job of a SubmitBatch; true when the message is done.
  bool on_client(FarmBroker::ClientMessage& m);
  void on_hello(const std::string& identity, const std::string& peer, const farm::ClientHello& h);
  bool resume(const std::string& identity, const std::string& peer, const farm::ClientHello& h);
  void detach(Tune& t);
  void reattach(Tune& t);
  void on_submit(Tune& t, farm::TuneJob& j);
  // The job once its rows are written and looked up (`known`: the DB's answer): answered,
  // joined or queued. `number`: its DB work's.
  void place(uint64_t tune, const Waiter& w, FarmJob job, std::optional<Measurement> known, uint64_t number);
  bool join_written(Tune& t, const Waiter& w, const std::string& key, uint64_t number);
  // The ratios reply of a request, from the DB (the writer's thread).
  farm::Envelope ratios_reply(const farm::RatiosRequest& r);
  void on_mark_implausible(const Tune& t, const farm::MarkImplausible& mk);
  void on_status_request(const std::string& identity, const farm::StatusRequest& r);
  void on_ratios_request(const std::string& identity, const farm::RatiosRequest& r);
  // The ratios and the per-parameter fit of the request's GPU type, source and storage, from the DB.
  void fill_ratios(const farm::RatiosRequest& r, farm::RatiosReply* reply);
  void end_tune(uint64_t id, const std::string& why);
  void on_result(Measurement m);
  // Posts the rows of a group's result, under every name it answers for.
  void post_record(const Group& g, const Measurement& m, const std::string& worker_id);
  void post_record_rows(std::set<std::pair<std::string, std::string>> names, bool fresh, const Measurement& m,
                        const std::string& worker_id);
  // The writer's thread: the result's rows; how many were added.
  int record_result(const std::set<std::pair<std::string, std::string>>& names, bool fresh, const Measurement& m,
                    const std::string& worker_id);
  void deliver(Tune& t, const Waiter& w, const Measurement& m, farm::Origin origin);
  // The writer's thread: the job's rows, then, unless the variant is new, the DB's answer.
  std::optional<Measurement> look_up(const FarmJob& job);
  // Records the job's GPU type, workload and variant rows; true when the variant is new to the DB.
  bool record_rows(const FarmJob& job, const std::string& source_hash);
  std::optional<Measurement> from_db(const FarmJob& job, const std::string& source_hash);
  void tick();
  void pump();
  void observe_devices(const FarmStatus& st);
  ServiceView view();
  farm::Envelope client_status(const FarmStatus& st) const;
};

}  // namespace dc
