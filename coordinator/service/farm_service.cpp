#include "farm_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "client_codec.h"
#include "fair_share.h"
#include "farm_codec.h"
#include "gpu/gpu_catalog.h"
#include "ir/host.h"
#include "ir/workload.h"
#include "variant.h"

namespace dc {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxPriority = 100;
constexpr size_t kMaxName = 200;

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, kMaxName)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// host/pid/start time: another after a restart, even where the pid is the same (a container).
std::string default_service_id() {
  return str_cat(host_and_pid(), "/", farm::unix_ms_now());
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The client messages one turn of the loop handles before it sends heartbeats and
// dispatches again: a burst of Submits is served in slices, not in one block that
// leaves every client unanswered for seconds (docs/bench/farm-service.md).
constexpr auto kTurnSlice = std::chrono::milliseconds(20);

// Job latency buckets, seconds: emulated jobs take milliseconds, real ones seconds to minutes.
const std::vector<double> kLatencyBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

}  // namespace

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
    std::map<std::string, std::pair<Clock::time_point, farm::Envelope>> recent;
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
  std::map<std::string, uint64_t> group_of_key;
  std::map<std::string, int64_t> in_broker;  // per GPU type: handed over, no result yet
  std::map<std::string, int64_t> queued_groups;  // per GPU type: groups no device has yet
  // Client messages taken from the broker, not handled yet (run() handles a time slice of
  // them per turn), and replies held until the turn's DB batch is committed: an outcome
  // never reaches a tune before its measurement is durable.
  std::deque<FarmBroker::ClientMessage> pending;
  std::vector<std::pair<std::string, farm::Envelope>> outbox;
  FairShare share;
  uint64_t next_tune = 1, next_group = 1;
  // What the DB already has (rows the service committed or found): caches that spare a
  // repeated upsert. Workloads and variants come with every job, so those two are emptied
  // when they reach kRecordedCacheMax: a long-lived service's memory stays flat (it grew by
  // one entry per job, docs/bench/farm-service.md), at the cost of an upsert now and then.
  static constexpr size_t kRecordedCacheMax = 1 << 14;
  std::set<std::string> gpu_types_recorded, workloads_recorded, workers_recorded;
  std::set<std::pair<std::string, std::string>> variants_recorded;
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

  Impl(FarmServiceOptions o, TuningDb& d)
      : options(std::move(o)), db(d), broker([&] {
          options.broker.serve_clients = true;
          return options.broker;
        }()) {}

  void send(const std::string& identity, farm::Envelope e) { outbox.emplace_back(identity, std::move(e)); }
  void flush() { broker.send_to_clients(std::exchange(outbox, {})); }
  void refuse(const std::string& identity, const std::string& reason) {
    spdlog::warn("service: refused a client: {}", reason);
    farm::Envelope e = farm::make_envelope();
    e.mutable_refused()->set_reason(reason);
    send(identity, std::move(e));
  }

  void take_client_messages();
  void serve_turn(std::vector<Measurement> results);
  void on_client(FarmBroker::ClientMessage& m);
  void on_hello(const std::string& identity, const std::string& peer, const farm::ClientHello& h);
  bool resume(const std::string& identity, const std::string& peer, const farm::ClientHello& h);
  void detach(Tune& t);
  void reattach(Tune& t);
  void on_submit(Tune& t, farm::TuneJob& j);
  void on_status_request(const std::string& identity, const farm::StatusRequest& r);
  void end_tune(uint64_t id, const std::string& why);
  void on_result(Measurement m);
  void record_result(const Group& g, const Measurement& m, const std::string& worker_id);
  void deliver(Tune& t, const Waiter& w, const Measurement& m, farm::Origin origin);
  void record_rows(const FarmJob& job, const std::string& source_hash);
  std::optional<Measurement> from_db(const FarmJob& job, const std::string& source_hash);
  void tick();
  void pump();
  void observe_devices(const FarmStatus& st);
  ServiceView view();
  farm::Envelope client_status(const FarmStatus& st) const;
};

// Client messages as the broker has them. A tune is heard now, even where its messages wait
// for a later turn: a client behind its own burst of Submits is not silent.
void FarmService::Impl::take_client_messages() {
  const auto now = Clock::now();
  for (FarmBroker::ClientMessage& m : broker.take_client_messages()) {
    if (const auto it = tune_of_identity.find(m.identity); it != tune_of_identity.end())
      tunes.at(it->second).last_seen = now;
    pending.push_back(std::move(m));
  }
}

// One turn: client messages for at most kTurnSlice, then every result, as one DB batch
// (one commit instead of one per row); the replies go out once it is committed.
void FarmService::Impl::serve_turn(std::vector<Measurement> results) {
  if (pending.empty() && results.empty()) return;  // a turn of heartbeats only: no transaction
  std::unique_ptr<TuningDb::Batch> batch;
  try {
    batch = db.begin_batch();
  } catch (const UserError& e) {
    spdlog::error("service: the DB refused a batch; each row goes in its own transaction: {}", e.what());
  }
  const auto until = Clock::now() + kTurnSlice;
  for (size_t n = 1; !pending.empty(); ++n) {
    FarmBroker::ClientMessage m = std::move(pending.front());
    pending.pop_front();
    try {
      on_client(m);
    } catch (const UserError& e) {
      // The DB refused (busy past its timeout, disk full): logged, the service goes on.
      spdlog::error("service: while handling a {}: {}", farm::body_name(m.envelope), e.what());
    }
    if (n % 16 == 0 && Clock::now() >= until) break;
  }
  for (Measurement& m : results) {
    try {
      on_result(std::move(m));
    } catch (const UserError& e) {
      spdlog::error("service: while recording a result: {}", e.what());
    }
  }
  try {
    if (batch) batch->commit();
  } catch (const UserError& e) {
    spdlog::error("service: the DB could not commit this turn's rows (the tunes still get their outcomes): {}",
                  e.what());
  }
  batch.reset();
  flush();
}

void FarmService::Impl::on_client(FarmBroker::ClientMessage& m) {
  farm::Envelope& e = m.envelope;
  if (!farm::version_ok(e)) {
    spdlog::warn("service: dropped a {} of transport version {} (this service speaks {})", farm::body_name(e),
                 e.protocol_version(), farm::kProtocolVersion);
    return;
  }
  switch (e.body_case()) {
    case farm::Envelope::kClientHello: return on_hello(m.identity, m.peer, e.client_hello());
    case farm::Envelope::kStatusRequest: return on_status_request(m.identity, e.status_request());
    default: break;
  }
  const auto it = tune_of_identity.find(m.identity);
  if (it == tune_of_identity.end()) {
    // A client the service does not know (it restarted, or declared the client gone).
    if (e.body_case() != farm::Envelope::kClientBye) {
      farm::Envelope r = farm::make_envelope();
      r.mutable_refused()->set_reason("unknown client: say ClientHello first");
      r.mutable_refused()->set_unknown_client(true);
      send(m.identity, std::move(r));
    }
    return;
  }
  Tune& t = tunes.at(it->second);
  t.last_seen = Clock::now();
  if (!t.connected) {
    // Silent past its liveness, heard again before its grace ran out: back.
    reattach(t);
    spdlog::info("service: tune {} is heard again", t.id);
  }
  switch (e.body_case()) {
    case farm::Envelope::kSubmit: on_submit(t, *e.mutable_submit()->mutable_job()); break;
    case farm::Envelope::kClientHeartbeat: break;
    case farm::Envelope::kClientBye: end_tune(t.id, "client said bye (" + printable(e.client_bye().reason()) + ")"); break;
    default:
      spdlog::warn("service: tune {} sent a {}, which clients do not send; dropped", t.id, farm::body_name(e));
  }
}

// A tune whose client fell silent: kept, but its share serves nothing until it is back (a
// client that was killed should not spend the devices its grace period long).
void FarmService::Impl::detach(Tune& t) {
  t.connected = false;
  t.detached_at = Clock::now();
  share.remove_tune(t.id);
}

// Back: its share again, with what it still waits for that no device has yet.
void FarmService::Impl::reattach(Tune& t) {
  t.connected = true;
  share.add_tune(t.id, t.priority);
  for (uint64_t gid : t.groups)
    if (const auto it = groups.find(gid); it != groups.end() && !it->second.dispatched)
      share.push(it->second.gpu_type, t.id, gid);
}

// A Hello that names a tune of this service (same service id), from the same key: the
// tune goes on under the new identity, with everything it waits for.
bool FarmService::Impl::resume(const std::string& identity, const std::string& peer, const farm::ClientHello& h) {
  if (h.resume_tune_id() == 0 || h.resume_service_id() != service_id) return false;
  const auto it = tunes.find(h.resume_tune_id());
  if (it == tunes.end() || it->second.peer != peer) return false;
  Tune& t = it->second;
  if (t.identity != identity) {
    tune_of_identity.erase(t.identity);
    if (const auto old = tune_of_identity.find(identity); old != tune_of_identity.end())
      end_tune(old->second, "the client resumed another tune");
    t.identity = identity;
    tune_of_identity[identity] = t.id;
  }
  const bool was_connected = t.connected;
  if (!was_connected) reattach(t);
  t.last_seen = t.next_status = Clock::now();
  ++t.resumes;
  ++tunes_resumed;
  spdlog::info("service: tune {} ({}) resumed{}: {} job(s) waiting", t.id, t.model,
               was_connected ? "" : " within its grace period", t.groups.size());
  farm::Envelope w = farm::make_envelope();
  farm::ClientWelcome* cw = w.mutable_client_welcome();
  cw->set_tune_id(t.id);
  cw->set_heartbeat_ms(static_cast<uint32_t>(options.client_heartbeat.count()));
  cw->set_liveness(static_cast<uint32_t>(options.client_liveness));
  cw->set_service_id(service_id);
  cw->set_resumed(true);
  send(identity, std::move(w));
  return true;
}

void FarmService::Impl::on_hello(const std::string& identity, const std::string& peer, const farm::ClientHello& h) {
  if (h.client_protocol_version() != farm::kClientProtocolVersion)
    return refuse(identity, str_cat("client protocol version ", h.client_protocol_version(),
                                    " is not supported (this service speaks ", farm::kClientProtocolVersion, ")"));
  if (h.gpu_types_size() == 0) return refuse(identity, "a tune must name at least one GPU type");
  if (h.priority() < 1 || h.priority() > kMaxPriority)
    return refuse(identity, str_cat("priority ", h.priority(), " (1 to ", kMaxPriority, ")"));
  for (const std::string& g : h.gpu_types())
    if (catalog.find(g) == nullptr) return refuse(identity, "unknown GPU type '" + printable(g) + "'");
  if (resume(identity, peer, h)) return;
  if (const auto old = tune_of_identity.find(identity); old != tune_of_identity.end())
    end_tune(old->second, "the client said hello again");
  Tune t;
  t.id = next_tune++;
  t.identity = identity;
  t.peer = peer;
  t.client_id = printable(h.client_id());
  t.host = printable(h.host());
  t.model = printable(h.model());
  t.gpu_types.assign(h.gpu_types().begin(), h.gpu_types().end());
  t.priority = h.priority();
  t.started = t.last_seen = t.next_status = Clock::now();
  ++tunes_started;
  share.add_tune(t.id, t.priority);
  spdlog::info("service: tune {} joined: model {} on {} from {} ({}), priority {}", t.id, t.model,
               fmt::format("{}", fmt::join(t.gpu_types, ",")), t.host, t.client_id, t.priority);
  farm::Envelope w = farm::make_envelope();
  farm::ClientWelcome* cw = w.mutable_client_welcome();
  cw->set_tune_id(t.id);
  cw->set_heartbeat_ms(static_cast<uint32_t>(options.client_heartbeat.count()));
  cw->set_liveness(static_cast<uint32_t>(options.client_liveness));
  cw->set_service_id(service_id);
  send(identity, std::move(w));
  tune_of_identity[identity] = t.id;
  tunes.emplace(t.id, std::move(t));
}

// The rows a measurement of the job needs: its GPU type, workload and variant.
void FarmService::Impl::record_rows(const FarmJob& job, const std::string& source_hash) {
  if (gpu_types_recorded.insert(job.gpu_type).second) db.commit_gpu_type(*catalog.find(job.gpu_type));
  const FarmJob::ServiceInfo& si = job.service;
  if (workloads_recorded.size() >= kRecordedCacheMax) workloads_recorded.clear();
  if (variants_recorded.size() >= kRecordedCacheMax) variants_recorded.clear();
  if (workloads_recorded.insert(job.workload).second) {
    WorkloadRecord w;
    w.signature = job.workload;
    w.kind = parse_cluster_kind(si.workload_kind).value_or(ClusterKind::opaque);
    w.canonical = si.workload_canonical;
    w.flops = job.flops;
    w.bytes = job.bytes;
    w.base_signature = si.workload_base_signature;
    db.commit_workload(w);
  }
  if (variants_recorded.insert({job.workload, job.variant.variant_key}).second) {
    Variant v;
    v.template_name = si.variant_template;
    v.precision = si.variant_precision;
    v.params = si.variant_params;
    db.commit_variant(job.workload, v, source_hash);
  }
}

std::optional<Measurement> FarmService::Impl::from_db(const FarmJob& job, const std::string& source_hash) {
  MeasurementQuery q;
  q.workload = job.workload;
  q.variant_key = job.variant.variant_key;
  q.gpu_type = job.gpu_type;
  q.source = source_of(job.service.emulated);
  for (Measurement& m : db.query(q)) {
    if (!is_final_status(m.status) || m.source_hash != source_hash) continue;
    if (!job.service.nvrtc_major.empty() && toolchain_major(m.nvrtc_version) != job.service.nvrtc_major) continue;
    return std::move(m);
  }
  return std::nullopt;
}

// `tj` is consumed: its kernels' sources move into the job.
void FarmService::Impl::on_submit(Tune& t, farm::TuneJob& tj) {
  farm::Job& wj = *tj.mutable_job();
  FarmJob job;
  try {
    if (std::find(t.gpu_types.begin(), t.gpu_types.end(), wj.gpu_type()) == t.gpu_types.end())
      throw farm::ProtocolError(str_cat("a job for GPU type '", printable(wj.gpu_type()), "', which the tune did not name"));
    if (wj.workload().empty() || wj.job_id().empty()) throw farm::ProtocolError("a job without workload or job id");
    job.job_id = wj.job_id();
    job.gpu_type = wj.gpu_type();
    job.workload = wj.workload();
    job.precision = wj.precision();
    job.variant = farm::from_proto(std::move(*wj.mutable_variant()));
    job.reference = farm::from_proto(std::move(*wj.mutable_reference()));
    job.seed = wj.seed();
    job.tolerance.rtol = wj.rtol();
    job.tolerance.atol = wj.atol();
    job.check_on_emulator = wj.check_on_emulator();
    job.estimate_us = wj.estimate_us();
    job.flops = wj.flops();
    job.bytes = wj.bytes();
    job.index_bounds.assign(wj.index_bounds().begin(), wj.index_bounds().end());
    job.compile_deadline = std::chrono::milliseconds(wj.compile_deadline_ms());
    job.run_deadline = std::chrono::milliseconds(wj.run_deadline_ms());
    FarmJob::ServiceInfo& si = job.service;
    si.workload_kind = tj.workload().kind();
    si.workload_canonical = tj.workload().canonical();
    si.workload_base_signature = tj.workload().base_signature();
    si.variant_template = tj.variant().template_name();
    si.variant_precision = tj.variant().precision();
    si.variant_params.insert(tj.variant().params().begin(), tj.variant().params().end());
    si.emulated = tj.emulated();
    si.nvrtc_major = tj.nvrtc_major();
    si.reuse = tj.reuse();
    Variant v;
    v.template_name = si.variant_template;
    v.precision = si.variant_precision;
    v.params = si.variant_params;
    if (v.key() != job.variant.variant_key)
      throw farm::ProtocolError(str_cat("the variant's parameters make the key '", printable(v.key()),
                                        "', not the job's '", printable(job.variant.variant_key), "'"));
    if (tj.workload().signature() != job.workload)
      throw farm::ProtocolError("the workload record does not belong to the job's workload");
  } catch (const farm::ProtocolError& e) {
    spdlog::warn("service: tune {} submitted an invalid job; dropped: {}", t.id, e.what());
    return;
  }
  const std::string hash = fnv1a_hex(job.variant.source);
  Waiter w{t.id, job.job_id, job.workload, job.variant.variant_key, job.service.reuse,
           str_cat(job.job_id, "|", hash, "|", job.check_on_emulator ? "check" : "", "|", job.service.reuse ? "" : "fresh")};
  if (t.resumes > 0) {
    if (const auto sent = t.recent.find(w.resend_key); sent != t.recent.end()) {
      // A resubmit after a reconnect of a job whose outcome was sent already: sent again.
      send(t.identity, sent->second.second);
      return;
    }
  }
  ++t.submitted;
  spdlog::debug("service: tune {} submitted {}", t.id, job.job_id);
  std::optional<Measurement> known;
  try {
    record_rows(job, hash);
    if (job.service.reuse) known = from_db(job, hash);
  } catch (const UserError& e) {
    // The DB refused (busy past its timeout): measured instead of answered.
    spdlog::error("service: DB lookup for {} failed; it is measured: {}", job.variant.variant_key, e.what());
  }
  if (known) {
    ++answered_from_db;
    ++t.from_db;
    deliver(t, w, *known, farm::DATABASE);
    return;
  }
  const std::string key = str_cat(hash, "|", job.gpu_type, "|", job.service.nvrtc_major, "|",
                                  job.service.emulated ? "emulated" : "real", "|",
                                  job.check_on_emulator ? "check" : "");
  uint64_t gid = 0;
  if (const auto it = group_of_key.find(key); it != group_of_key.end()) {
    gid = it->second;
    Group& g = groups.at(gid);
    // A tune waits for a job once: a resend joins its own wait.
    for (const Waiter& other : g.waiters)
      if (other.tune == t.id && other.job_id == w.job_id) {
        --t.submitted;
        return;
      }
    g.waiters.push_back(w);
    if (!g.dispatched && t.groups.count(gid) == 0) ++t.queued;
  } else {
    gid = next_group++;
    Group g;
    g.key = key;
    g.gpu_type = job.gpu_type;
    g.workload = job.workload;
    g.variant_key = job.variant.variant_key;
    ++queued_groups[g.gpu_type];
    ++t.queued;
    g.job = std::move(job);
    g.job.job_id = str_cat("g", gid);  // the broker's name for it; results come back by it
    g.waiters.push_back(w);
    group_of_key[key] = gid;
    groups.emplace(gid, std::move(g));
  }
  t.groups.insert(gid);
  // Still waiting for a device: this tune's share may also pick it.
  if (!groups.at(gid).dispatched) share.push(groups.at(gid).gpu_type, t.id, gid);
}

void FarmService::Impl::deliver(Tune& t, const Waiter& w, const Measurement& m, farm::Origin origin) {
  farm::Envelope e = farm::make_envelope();
  farm::Outcome* o = e.mutable_outcome();
  o->set_job_id(w.job_id);
  o->set_origin(origin);
  Measurement mine = m;
  mine.workload = w.workload;
  mine.variant_key = w.variant_key;
  *o->mutable_record() = farm::to_record(mine);
  ++t.done;
  // Kept a while: a client that reconnects gets it again when it resubmits the job. A tune
  // that is silent gets it then.
  if (t.connected) send(t.identity, e);
  const auto now = Clock::now();
  t.recent[w.resend_key] = {now, std::move(e)};
  t.recent_order.emplace_back(now, w.resend_key);
}

void FarmService::Impl::record_result(const Group& g, const Measurement& m, const std::string& worker_id) {
  if (workers_recorded.insert(m.worker).second) {
    WorkerInfo wi;
    wi.name = m.worker;
    wi.host = m.host.empty() ? worker_id : m.host;
    wi.device = !m.device.empty() ? m.device : (m.emulated ? "emulated " + m.gpu_type : m.gpu_type);
    wi.gpu_type = m.gpu_type;
    wi.driver_version = m.driver_version;
    wi.nvrtc_version = m.nvrtc_version;
    wi.emulated = m.emulated;
    db.commit_worker(wi);
  }
  const bool fresh = std::any_of(g.waiters.begin(), g.waiters.end(), [](const Waiter& w) { return !w.reuse; });
  std::set<std::pair<std::string, std::string>> names;
  names.insert({g.workload, g.variant_key});
  for (const Waiter& w : g.waiters) names.insert({w.workload, w.variant_key});
  for (const auto& [workload, key] : names) {
    Measurement r = m;
    r.workload = workload;
    r.variant_key = key;
    if (fresh ? db.commit_measurement(r) : db.commit_first_measurement(r))
      ++recorded_by_status[std::string(job_status_name(m.status))];
    else
      spdlog::info("service: {} {} on {}: already recorded; not added again", workload, key, m.gpu_type);
  }
}

void FarmService::Impl::on_result(Measurement m) {
  const uint64_t gid = m.job_id.size() > 1 && m.job_id[0] == 'g' ? std::stoull(m.job_id.substr(1)) : 0;
  const auto it = groups.find(gid);
  DC_INTERNAL_CHECK(it != groups.end(), "service: a result for job '", m.job_id, "', which no group holds");
  Group g = std::move(it->second);
  groups.erase(it);
  group_of_key.erase(g.key);
  --in_broker[g.gpu_type];
  ++measured;
  const std::string worker_id = m.worker.substr(0, m.worker.rfind('/'));
  ++tally[worker_id].done;
  if (m.status != JobStatus::ok) ++tally[worker_id].failed;
  ++results_by_status[std::string(job_status_name(m.status))];
  if (const auto d = device_tally.find(m.worker); d != device_tally.end() && std::isfinite(m.run_seconds))
    d->second.busy_seconds += std::max(0.0, m.run_seconds);
  const double waited = seconds(Clock::now() - g.dispatched_at);
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(latency.bounds.begin(), latency.bounds.end(), waited) - latency.bounds.begin());
  ++latency.counts[bucket];
  latency.sum += waited;
  ++latency.count;
  // Recorded once per (workload, variant) it answers for, whoever still waits: measured work
  // is never thrown away. internal_error (a dc bug) and unhealthy (the device refused to time)
  // measured nothing.
  try {
    if (is_recorded_status(m.status)) record_result(g, m, worker_id);
  } catch (const UserError& e) {
    // The DB refused (busy past its timeout, disk full): logged; the tunes still get it.
    spdlog::error("service: could not record the result of {}: {}", g.variant_key, e.what());
  }
  for (const Waiter& w : g.waiters) {
    const auto t = tunes.find(w.tune);
    if (t == tunes.end()) continue;
    t->second.groups.erase(gid);
    const bool own = w.tune == g.dispatched_by;
    if (own) ++answered_measured;
    else {
      ++joined;
      ++t->second.joined;
    }
    deliver(t->second, w, m, own ? farm::MEASURED : farm::JOINED);
  }
}

void FarmService::Impl::end_tune(uint64_t id, const std::string& why) {
  const auto it = tunes.find(id);
  if (it == tunes.end()) return;
  Tune& t = it->second;
  int64_t dropped = 0;
  for (uint64_t gid : t.groups) {
    const auto git = groups.find(gid);
    if (git == groups.end()) continue;
    Group& g = git->second;
    g.waiters.erase(std::remove_if(g.waiters.begin(), g.waiters.end(), [&](const Waiter& w) { return w.tune == id; }),
                    g.waiters.end());
    if (!g.dispatched && g.waiters.empty()) {
      // Queued for this tune alone: cancelled. One on a worker finishes and is recorded.
      --queued_groups[g.gpu_type];
      group_of_key.erase(g.key);
      groups.erase(git);
      ++dropped;
    }
  }
  cancelled += dropped;
  share.remove_tune(id);
  spdlog::info("service: tune {} ({}) ended: {}; {} of {} job(s) answered, {} queued job(s) cancelled", id, t.model,
               why, t.done, t.submitted, dropped);
  tune_of_identity.erase(t.identity);
  tunes.erase(it);
}

void FarmService::Impl::pump() {
  const FarmStatus st = broker.status();
  observe_devices(st);
  std::vector<FarmJob> handed;
  for (const auto& [type, devices] : st.workers_per_gpu_type) {
    if (queued_groups[type] == 0) continue;
    const int64_t window = int64_t{devices} * options.window_per_device;
    while (in_broker[type] < window) {
      const auto pick = share.pick(type, [&](uint64_t gid) {
        const auto it = groups.find(gid);
        return it != groups.end() && !it->second.dispatched;
      });
      if (!pick) break;
      Group& g = groups.at(pick->item);
      g.dispatched = true;
      g.dispatched_by = pick->tune;
      g.dispatched_at = Clock::now();
      ++tunes.at(pick->tune).measured;
      ++in_broker[type];
      --queued_groups[type];
      std::set<uint64_t> waiting;  // a tune may wait on one group under two job ids
      for (const Waiter& w : g.waiters) waiting.insert(w.tune);
      for (uint64_t id : waiting)
        if (const auto t = tunes.find(id); t != tunes.end()) --t->second.queued;
      spdlog::info("service: dispatch {} of tune {} ({} waiting)", g.job.job_id, pick->tune, g.waiters.size());
      handed.push_back(std::move(g.job));
    }
  }
  broker.submit_all(std::move(handed));
}

farm::Envelope FarmService::Impl::client_status(const FarmStatus& st) const {
  farm::Envelope e = farm::make_envelope();
  farm::ClientStatus* cs = e.mutable_client_status();
  for (const auto& [type, n] : st.workers_per_gpu_type) (*cs->mutable_workers_per_gpu_type())[type] = n;
  for (const auto& [type, n] : st.emulated_workers_per_gpu_type)
    (*cs->mutable_emulated_workers_per_gpu_type())[type] = n;
  return e;
}

void FarmService::Impl::tick() {
  const auto now = Clock::now();
  const auto silence = options.client_heartbeat * options.client_liveness;
  // Outcomes are kept for a resend while a lost one could still be asked for again: the
  // client's silence to notice the loss, and a heartbeat more.
  const auto keep = silence + options.client_heartbeat;
  std::vector<std::pair<uint64_t, std::string>> gone;
  std::optional<farm::Envelope> status;
  for (auto& [id, t] : tunes) {
    if (t.connected && now - t.last_seen > silence) {
      if (options.client_grace.count() == 0) {
        gone.emplace_back(id, str_cat("client silent for more than ",
                                      std::chrono::duration_cast<std::chrono::milliseconds>(silence).count(), " ms"));
        continue;
      }
      detach(t);
      spdlog::info("service: tune {} ({}) silent for more than {} ms: its jobs are kept (not dispatched) {} ms "
                   "for it to reconnect",
                   id, t.model, std::chrono::duration_cast<std::chrono::milliseconds>(silence).count(),
                   options.client_grace.count());
    }
    if (!t.connected) {
      if (now - t.detached_at > options.client_grace)
        gone.emplace_back(id, str_cat("client silent, and not back within the grace period of ",
                                      options.client_grace.count(), " ms"));
      continue;
    }
    while (!t.recent_order.empty() && now - t.recent_order.front().first > keep) {
      // Gone unless the same job's outcome was sent again since (a later entry).
      const auto it = t.recent.find(t.recent_order.front().second);
      if (it != t.recent.end() && it->second.first == t.recent_order.front().first) t.recent.erase(it);
      t.recent_order.pop_front();
    }
    if (now >= t.next_status) {
      if (!status) status = client_status(broker.status());
      send(t.identity, *status);
      t.next_status = now + options.client_heartbeat;
    }
  }
  for (const auto& [id, why] : gone) end_tune(id, why);
}

// Devices as the broker has them now: a new one starts its busy tally, one that left loses
// it (a long-lived service sees workers come and go; its memory stays flat).
void FarmService::Impl::observe_devices(const FarmStatus& st) {
  const auto now = Clock::now();
  std::set<std::string> present;
  for (const FarmWorkerState& w : st.workers)
    for (int32_t index : w.device_indexes) {
      const std::string key = str_cat(w.worker_id, "/", index);
      device_tally.try_emplace(key, DeviceTally{now, 0});
      present.insert(key);
    }
  if (present.size() == device_tally.size()) return;
  for (auto it = device_tally.begin(); it != device_tally.end();)
    it = present.count(it->first) ? std::next(it) : device_tally.erase(it);
}

ServiceView FarmService::Impl::view() {
  const auto now = Clock::now();
  const FarmStatus st = broker.status();
  observe_devices(st);
  ServiceView v;
  v.service_id = service_id;
  v.uptime_seconds = seconds(now - started);
  for (const FarmWorkerState& w : st.workers) {
    ServiceView::Worker vw;
    vw.worker_id = w.worker_id;
    vw.host = w.host;
    vw.gpu_types = w.gpu_types;
    vw.state = w.leases > 0 ? "busy" : "idle";
    vw.leases = w.leases;
    if (const auto it = tally.find(w.worker_id); it != tally.end()) {
      vw.jobs_done = it->second.done;
      vw.jobs_failed = it->second.failed;
    }
    double busy = 0;
    for (size_t i = 0; i < w.device_indexes.size(); ++i) {
      ServiceView::Device d;
      d.worker_id = w.worker_id;
      d.index = w.device_indexes[i];
      d.gpu_type = i < w.gpu_types.size() ? w.gpu_types[i] : "";
      d.leases = i < w.device_leases.size() ? w.device_leases[i] : 0;
      const DeviceTally& dt = device_tally.at(str_cat(w.worker_id, "/", d.index));
      d.busy_seconds = dt.busy_seconds;
      d.joined_seconds = seconds(now - dt.joined);
      d.busy_fraction = d.joined_seconds > 0 ? std::min(1.0, d.busy_seconds / d.joined_seconds) : 0.0;
      busy += d.busy_fraction;
      v.devices.push_back(std::move(d));
    }
    vw.busy_fraction = w.device_indexes.empty() ? 0.0 : busy / static_cast<double>(w.device_indexes.size());
    v.workers.push_back(std::move(vw));
  }
  for (const auto& [id, t] : tunes) {
    ServiceView::Tune vt;
    vt.id = id;
    vt.client_host = t.host;
    vt.model = t.model;
    vt.gpu_types = t.gpu_types;
    vt.priority = t.priority;
    vt.submitted = t.submitted;
    vt.done = t.done;
    vt.queued = t.queued;
    vt.measured = t.measured;
    vt.from_db = t.from_db;
    vt.joined = t.joined;
    vt.elapsed_seconds = seconds(now - t.started);
    if (t.done > 0) vt.eta_seconds = static_cast<double>(t.submitted - t.done) * vt.elapsed_seconds / static_cast<double>(t.done);
    vt.connected = t.connected;
    v.tunes.push_back(std::move(vt));
  }
  std::set<std::string> types;
  for (const auto& [type, n] : st.workers_per_gpu_type) types.insert(type);
  for (const auto& [type, n] : queued_groups)
    if (n > 0) types.insert(type);
  for (const auto& [type, n] : in_broker)
    if (n > 0) types.insert(type);
  for (const std::string& type : types) {
    ServiceView::Queue q;
    q.gpu_type = type;
    q.queued = queued_groups.count(type) ? queued_groups.at(type) : 0;
    q.in_flight = in_broker.count(type) ? in_broker.at(type) : 0;
    const auto d = st.workers_per_gpu_type.find(type);
    q.devices = d == st.workers_per_gpu_type.end() ? 0 : d->second;
    v.queues.push_back(std::move(q));
  }
  v.results_by_status = results_by_status;
  v.recorded_by_status = recorded_by_status;
  v.measured = measured;
  v.answered_measured = answered_measured;
  v.answered_from_db = answered_from_db;
  v.joined = joined;
  v.cancelled = cancelled;
  v.tunes_started = tunes_started;
  v.tunes_resumed = tunes_resumed;
  v.latency = latency;
  return v;
}

void FarmService::Impl::on_status_request(const std::string& identity, const farm::StatusRequest& r) {
  if (r.client_protocol_version() != farm::kClientProtocolVersion)
    return refuse(identity, str_cat("client protocol version ", r.client_protocol_version(),
                                    " is not supported (this service speaks ", farm::kClientProtocolVersion, ")"));
  const ServiceView sv = view();
  farm::Envelope e = farm::make_envelope();
  farm::StatusReply* s = e.mutable_status_reply();
  s->set_client_protocol_version(farm::kClientProtocolVersion);
  s->set_service_id(service_id);
  for (const ServiceView::Worker& w : sv.workers) {
    farm::WorkerView* v = s->add_workers();
    v->set_worker_id(w.worker_id);
    v->set_host(w.host);
    for (const std::string& g : w.gpu_types) v->add_gpu_types(g);
    v->set_state(w.state);
    v->set_leases(w.leases);
    v->set_jobs_done(w.jobs_done);
    v->set_jobs_failed(w.jobs_failed);
    v->set_busy_fraction(w.busy_fraction);
  }
  for (const ServiceView::Tune& t : sv.tunes) {
    farm::TuneView* v = s->add_tunes();
    v->set_tune_id(t.id);
    v->set_client_host(t.client_host);
    v->set_model(t.model);
    for (const std::string& g : t.gpu_types) v->add_gpu_types(g);
    v->set_priority(t.priority);
    v->set_submitted(t.submitted);
    v->set_done(t.done);
    v->set_queued(t.queued);
    v->set_measured(t.measured);
    v->set_from_db(t.from_db);
    v->set_joined(t.joined);
    v->set_elapsed_seconds(t.elapsed_seconds);
    v->set_eta_seconds(t.eta_seconds);
    v->set_connected(t.connected);
  }
  for (const ServiceView::Queue& q : sv.queues) {
    farm::QueueView* v = s->add_queues();
    v->set_gpu_type(q.gpu_type);
    v->set_queued(q.queued);
    v->set_in_flight(q.in_flight);
    v->set_devices(q.devices);
  }
  s->set_jobs_measured(measured);
  s->set_jobs_answered_from_db(answered_from_db);
  s->set_jobs_joined(joined);
  s->set_jobs_cancelled(cancelled);
  send(identity, std::move(e));
}

FarmService::FarmService(FarmServiceOptions options, TuningDb& db)
    : impl_(std::make_unique<Impl>(std::move(options), db)) {
  DC_USER_CHECK(impl_->options.window_per_device >= 1, "the service's window per device must be at least 1");
  DC_USER_CHECK(impl_->options.client_heartbeat.count() >= 10, "client heartbeat of at least 10 ms");
  DC_USER_CHECK(impl_->options.client_liveness >= 1, "client liveness of at least 1");
}

FarmService::~FarmService() { impl_->broker.shutdown(); }

const std::string& FarmService::endpoint() const { return impl_->broker.endpoint(); }
const std::string& FarmService::public_key() const { return impl_->broker.public_key(); }

void FarmService::run(const std::atomic<bool>& stop) {
  Impl& im = *impl_;
  while (!stop.load()) {
    // No wait while client messages are left from the last turn.
    std::vector<Measurement> results =
        im.broker.collect(im.pending.empty() ? std::chrono::milliseconds(100) : std::chrono::milliseconds(0));
    im.take_client_messages();
    im.serve_turn(std::move(results));
    im.tick();
    im.flush();
    im.pump();
    if (im.options.on_view && Clock::now() >= im.next_view) {
      im.next_view = Clock::now() + im.options.view_interval;
      im.options.on_view(im.view());
    }
  }
  spdlog::info("service: stopping: {} tune(s) connected, {} jobs measured, {} answered from the DB, {} joined, "
               "{} cancelled", im.tunes.size(), im.measured, im.answered_from_db, im.joined, im.cancelled);
  im.broker.shutdown();
}

}  // namespace dc
