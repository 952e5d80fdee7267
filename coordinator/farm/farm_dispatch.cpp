#include "farm_dispatch.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "farm_codec.h"
#include "farm/job_wire.h"
#include "ir/workload.h"

namespace dc {
namespace {

constexpr int kMaxDevicesPerWorker = 64;
constexpr size_t kMaxNameLength = 128;

// The worker id in a Measurement's worker name: "host/pid/0" -> "host/pid" (on_result).
std::string worker_id_of(const std::string& measurement_worker) {
  const size_t slash = measurement_worker.rfind('/');
  return slash == std::string::npos ? measurement_worker : measurement_worker.substr(0, slash);
}

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, kMaxNameLength))
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

}  // namespace

auto FarmDispatcher::Session::device(int32_t index) -> Device* {
  for (Device& d : devices)
    if (d.index == index) return &d;
  return nullptr;
}

FarmDispatcher::FarmDispatcher(DispatchOptions options, Send send)
    : options_(std::move(options)), send_(std::move(send)) {
  // Lease ids start at a random point: a result a worker kept from another coordinator run
  // cannot match a lease of this one.
  std::random_device rd;
  next_lease_ = ((uint64_t{rd()} << 32) | rd()) >> 2;
  if (next_lease_ == 0) next_lease_ = 1;
}


FarmDispatcher::Submission FarmDispatcher::prepare(FarmJob job) {
  Submission s;
  if (!job.wire_bytes.empty()) {
    // Bytes a tune sent (the farm service): forwarded as they are.
    s.wire = std::move(job.wire_bytes);
    job.wire_bytes.clear();
  } else {
    if (job.variant_source_hash.empty()) job.variant_source_hash = fnv1a_hex(job.variant_kernel.source);
    // The wire copy is the one kept: the sources move into it, out of the bookkeeping copy.
    s.wire = farm::to_proto(static_cast<MeasureJob&&>(std::move(job))).SerializeAsString();
    job.reference = GeneratedKernel{};
    job.variant_kernel.source.clear();
  }
  s.meta = std::move(job);
  return s;
}

void FarmDispatcher::submit(Submission s, Clock::time_point /*now: dispatch is the caller's*/) {
  // The coordinator plans every job for a GPU type: one without could never be dispatched.
  DC_INTERNAL_CHECK(!s.meta.gpu_type.empty(), "job '", s.meta.job_id, "' was submitted without a GPU type");
  const uint64_t id = next_job_++;
  JobEntry& e = jobs_[id];
  DC_INTERNAL_CHECK(!s.meta.variant_source_hash.empty(), "job '", s.meta.job_id, "' was submitted without its source hash");
  e.source_hash = std::move(s.meta.variant_source_hash);
  e.meta = std::move(s.meta);
  e.wire = std::move(s.wire);
  // The tune names workers as this dispatcher's Measurements do ("<worker id>/<device>"):
  // the job avoids those workers (all their devices) as after an internal_error.
  for (const std::string& name : e.meta.avoid_workers) e.avoid_workers.insert(worker_id_of(name));
  queues_[e.meta.gpu_type].push_back(id);
  dirty_ = true;
}

void FarmDispatcher::send(const std::string& identity, farm::Envelope e) { send_envelope(identity, e); }

void FarmDispatcher::send_envelope(const std::string& identity, farm::Envelope& e) {
  e.set_protocol_version(farm::kProtocolVersion);
  send_(identity, e);
  if (auto it = sessions_.find(identity); it != sessions_.end())
    it->second.next_heartbeat = Clock::now() + options_.heartbeat;
}

void FarmDispatcher::refuse(const std::string& identity, const std::string& reason) {
  ++counters_.refused_hellos;
  spdlog::warn("farm: refused a worker: {}", reason);
  farm::Envelope e;
  e.mutable_refused()->set_reason(reason);
  send(identity, std::move(e));
}

void FarmDispatcher::disconnect(const std::string& identity, const std::string& reason) {
  farm::Envelope e;
  e.mutable_disconnect()->set_reason(reason);
  send(identity, std::move(e));
}

void FarmDispatcher::on_message(const std::string& identity, const farm::Envelope& e,
                                Clock::time_point now, const std::string& peer) {
  if (e.body_case() == farm::Envelope::kHello) {
    on_hello(identity, e, now, peer);
    return;
  }
  if (!farm::version_ok(e)) {
    ++counters_.dropped_frames;
    spdlog::warn("farm: dropped a {} of protocol version {} (this coordinator speaks {})",
                 farm::body_name(e), e.protocol_version(), farm::kProtocolVersion);
    return;
  }
  auto it = sessions_.find(identity);
  if (it == sessions_.end()) {
    // A worker we do not know (coordinator restarted, or it was declared dead): it must
    // introduce itself again. A Bye needs no answer; a result is late by definition.
    if (e.body_case() == farm::Envelope::kResult) ++counters_.ignored_results;
    if (e.body_case() == farm::Envelope::kResults) counters_.ignored_results += e.results().results_size();
    if (e.body_case() != farm::Envelope::kBye) disconnect(identity, "unknown session: send Hello");
    return;
  }
  Session& s = it->second;
  s.last_seen = now;
  switch (e.body_case()) {
    case farm::Envelope::kReady: on_ready(s, e.ready()); break;
    case farm::Envelope::kResult: on_result(s, e.result()); break;
    case farm::Envelope::kResults:
      // Results first (each frees its device's slot), then the credits granted again.
      for (const farm::Result& r : e.results().results()) on_result(s, r);
      for (const farm::Ready& r : e.results().ready()) on_ready(s, r);
      break;
    case farm::Envelope::kHeartbeat: break;
    case farm::Envelope::kBye:
      spdlog::info("farm: worker {} left ({})", s.worker_id, printable(e.bye().reason()));
      drop_session(identity, "worker " + s.worker_id + " left");
      break;
    default:
      ++counters_.invalid_messages;
      spdlog::warn("farm: worker {} sent a {}, which workers do not send; dropped", s.worker_id,
                   farm::body_name(e));
  }
}

void FarmDispatcher::on_hello(const std::string& identity, const farm::Envelope& e,
                              Clock::time_point now, const std::string& peer) {
  if (!farm::version_ok(e)) {
    refuse(identity, str_cat("protocol version ", e.protocol_version(), " is not supported (this coordinator speaks ",
                             farm::kProtocolVersion, ")"));
    return;
  }
  const farm::Hello& h = e.hello();
  if (h.gpus_size() == 0) return refuse(identity, "a worker must offer at least one GPU");
  if (h.gpus_size() > kMaxDevicesPerWorker)
    return refuse(identity, str_cat(h.gpus_size(), " GPUs in one worker (at most ", kMaxDevicesPerWorker, ")"));
  Session fresh;
  fresh.identity = identity;
  fresh.worker_id = h.worker_id().empty() ? "anonymous" : printable(h.worker_id());
  fresh.host = printable(h.host());
  fresh.peer = peer;
  fresh.last_seen = now;
  fresh.next_heartbeat = now + options_.heartbeat;
  std::string inventory;
  for (const farm::GpuInventory& g : h.gpus()) {
    if (g.gpu_type().empty() || g.gpu_type().size() > kMaxNameLength)
      return refuse(identity, "a GPU without a valid canonical type");
    if (fresh.device(g.device_index()) != nullptr)
      return refuse(identity, str_cat("device index ", g.device_index(), " offered twice"));
    if (options_.require_emulated && *options_.require_emulated != g.emulated())
      return refuse(identity, *options_.require_emulated
                                  ? "this farm measures on emulated devices only"
                                  : "this farm measures on real GPUs only (emulated device offered)");
    Device d;
    d.index = g.device_index();
    d.gpu_type = g.gpu_type();
    d.name = printable(g.device_name());
    d.emulated = g.emulated();
    fresh.devices.push_back(d);
    inventory += str_cat(inventory.empty() ? "" : ", ", d.index, ":", printable(d.gpu_type),
                         d.emulated ? " (emulated)" : "");
  }
  const std::set<uint64_t> held(h.held_leases().begin(), h.held_leases().end());
  // The same connection saying Hello again, or the same daemon on a new connection after a
  // reconnect: the old session ends, and the leases the worker still holds move over.
  std::vector<std::string> old;
  for (const auto& [id, other] : sessions_)
    if (id == identity || (other.worker_id == fresh.worker_id && other.peer == peer)) old.push_back(id);
  for (const std::string& id : old)
    drop_session(id, "worker " + fresh.worker_id + " reconnected", held, &fresh);
  for (uint64_t l : fresh.leases) leases_[l].identity = identity;
  Session& placed = sessions_[identity] = std::move(fresh);
  next_due_ = std::min(next_due_, placed.next_heartbeat);

  spdlog::info("farm: worker {} ({}) joined with {}{}", placed.worker_id, placed.host, inventory,
               placed.leases.empty() ? "" : str_cat(", still running ", placed.leases.size(), " job(s)"));
  farm::Envelope w;
  w.mutable_welcome()->set_heartbeat_ms(farm::wire_ms(options_.heartbeat));
  w.mutable_welcome()->set_coordinator_id(options_.coordinator_id);
  w.mutable_welcome()->set_liveness(static_cast<uint32_t>(options_.liveness));
  send(identity, std::move(w));
  dirty_ = true;
}

void FarmDispatcher::on_ready(Session& s, const farm::Ready& r) {
  Device* d = s.device(r.device_index());
  if (d == nullptr) {
    ++counters_.invalid_messages;
    spdlog::warn("farm: worker {} sent Ready for device {}, which it did not offer", s.worker_id, r.device_index());
    return;
  }
  const int64_t credits = std::min<int64_t>(int64_t{d->credits} + r.credits(), options_.max_credits);
  d->credits = static_cast<int>(credits);
  dirty_ = true;
}

void FarmDispatcher::on_result(Session& s, const farm::Result& r) {
  auto lit = leases_.find(r.lease_id());
  if (lit == leases_.end() || lit->second.identity != s.identity) {
    // Late (the lease expired or was requeued), duplicated, or not this worker's.
    ++counters_.ignored_results;
    spdlog::debug("farm: ignored a result for lease {} from {} (not held)", r.lease_id(), s.worker_id);
    return;
  }
  if (const std::string why = farm::validate_result(r); !why.empty()) {
    // A broken result is not a measurement: the lease runs on to its deadline.
    ++counters_.invalid_messages;
    spdlog::warn("farm: worker {} sent an invalid result for lease {}: {}", s.worker_id, r.lease_id(), why);
    return;
  }
  const Lease lease = lit->second;
  JobEntry& job = jobs_.at(lease.job);
  // A dc bug in the worker (internal_error) or a device that refused to time (unhealthy):
  // nothing about the variant. Loud, counted, and the job goes to another worker.
  const bool bug = r.status() == job_status_name(JobStatus::internal_error);
  if (bug || r.status() == job_status_name(JobStatus::unhealthy)) {
    ++(bug ? counters_.internal_errors : counters_.unhealthy);
    spdlog::error("farm: *** {} *** worker {} device {} on job {} (attempt {} of {}{}): {}",
                  bug ? "INTERNAL ERROR (a dc bug)" : "UNHEALTHY DEVICE (did not time)", s.worker_id,
                  lease.device, job.meta.job_id, job.attempts, options_.max_attempts,
                  job.attempts < options_.max_attempts ? ", retried on another worker" : ", giving up",
                  printable(r.error()));
    job.avoid_workers.insert(s.worker_id);
    release_lease(r.lease_id());
    requeue_or_fail(lease.job,
                    str_cat(bug ? "internal error on worker " : "device unhealthy on worker ", s.worker_id, ": ",
                            r.error()),
                    bug ? JobStatus::internal_error : JobStatus::unhealthy);
    return;
  }
  const Device* d = s.device(lease.device);
  Measurement m = farm::measurement_from_result(r);
  m.workload = job.meta.workload;
  m.variant_key = job.meta.variant_kernel.variant_key;
  m.source_hash = job.source_hash;
  m.gpu_type = job.meta.gpu_type;
  m.job_id = job.meta.job_id;
  m.worker = s.worker_id + '/' + std::to_string(lease.device);  // per result: no stream
  m.host = s.host;
  if (d != nullptr) m.device = d->name;
  m.estimate_us = job.meta.estimate_us;
  m.attempts = job.attempts;
  // An emulated device's figures stay marked emulated whatever the worker says.
  m.emulated = r.emulated() || (d != nullptr && d->emulated);
  release_lease(r.lease_id());
  finish(lease.job, std::move(m));
}

void FarmDispatcher::release_lease(uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  if (auto sit = sessions_.find(it->second.identity); sit != sessions_.end()) {
    sit->second.leases.erase(lease_id);
    if (Device* d = sit->second.device(it->second.device)) d->held = std::max(0, d->held - 1);
  }
  if (auto jit = jobs_.find(it->second.job); jit != jobs_.end() && jit->second.lease == lease_id)
    jit->second.lease = 0;
  leases_.erase(it);
}

Measurement FarmDispatcher::failure(const JobEntry& job, JobStatus status, const std::string& error) const {
  Measurement m;
  m.workload = job.meta.workload;
  m.variant_key = job.meta.variant_kernel.variant_key;
  m.source_hash = job.source_hash;
  m.gpu_type = job.meta.gpu_type;
  m.job_id = job.meta.job_id;
  m.status = status;
  m.error = error;
  m.estimate_us = job.meta.estimate_us;
  m.attempts = job.attempts;
  m.emulated = job.last_emulated;
  m.finished_unix_ms = farm::unix_ms_now();
  return m;
}

void FarmDispatcher::requeue_or_fail(uint64_t job_id, const std::string& why, JobStatus final_status) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  JobEntry& job = it->second;
  job.history += (job.history.empty() ? "" : "; ") + str_cat("attempt ", job.attempts, ": ", why);
  if (job.attempts >= options_.max_attempts) {
    spdlog::warn("farm: job {} failed {} times; recorded as {}", job.meta.job_id, job.attempts,
                 job_status_name(final_status));
    finish(job_id, failure(job, final_status, job.history));
    return;
  }
  if (final_status == JobStatus::worker_lost) ++counters_.requeued;
  // To the front: it has waited longest.
  queues_[job.meta.gpu_type].push_front(job_id);
  dirty_ = true;
}

void FarmDispatcher::finish(uint64_t job_id, Measurement m) {
  results_.push_back(std::move(m));
  jobs_.erase(job_id);
  ++done_;
}

void FarmDispatcher::drop_session(const std::string& identity, const std::string& why,
                                  const std::set<uint64_t>& keep, Session* heir) {
  auto it = sessions_.find(identity);
  if (it == sessions_.end()) return;
  const std::vector<uint64_t> leases(it->second.leases.begin(), it->second.leases.end());
  for (uint64_t l : leases) {
    auto lit = leases_.find(l);
    if (lit == leases_.end()) continue;
    Device* hd = heir != nullptr ? heir->device(lit->second.device) : nullptr;
    if (keep.count(l) != 0 && hd != nullptr) {
      // Moves with the worker (its identity is fixed up when the heir is placed).
      heir->leases.insert(l);
      ++hd->held;
      it->second.leases.erase(l);
      continue;
    }
    const uint64_t job = lit->second.job;
    release_lease(l);
    requeue_or_fail(job, why);
  }
  sessions_.erase(it);
  dirty_ = true;  // a job that avoided other workers may now take any
}

void FarmDispatcher::dispatch(Clock::time_point now) {
  if (!dirty_) return;
  dirty_ = false;
  // This pass's jobs, one JobBatch per session, sent when the pass is over (or sooner, when
  // one grows past kMaxBatchBytes): one message per worker instead of one per job.
  std::map<Session*, OutgoingJobs> outgoing;
  for (auto& [type, queue] : queues_) {
    if (queue.empty()) continue;
    // Every device of this type with credits, taking one job each in turn.
    std::vector<std::pair<Session*, Device*>> ready;
    std::set<std::string> workers_of_type;
    for (auto& [id, s] : sessions_)
      for (Device& d : s.devices) {
        if (d.gpu_type != type) continue;
        workers_of_type.insert(s.worker_id);
        if (d.credits > 0) ready.emplace_back(&s, &d);
      }
    while (!queue.empty() && !ready.empty()) {
      for (size_t i = 0; i < ready.size() && !queue.empty();) {
        auto [s, d] = ready[i];
        const std::optional<size_t> pick = pick_job(queue, *s, workers_of_type);
        if (!pick) {  // every queued job waits for another worker: none for this device now
          ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        const uint64_t job_id = queue[*pick];
        queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(*pick));
        auto jit = jobs_.find(job_id);
        if (jit == jobs_.end()) continue;
        JobEntry& job = jit->second;
        const uint64_t lease_id = next_lease_++;
        ++job.attempts;
        job.lease = lease_id;
        job.last_emulated = d->emulated;
        // Jobs already waiting on this device run first: the deadline covers them too.
        const auto work = std::chrono::milliseconds(farm::wire_ms(job.meta.compile_deadline)) +
                          std::chrono::milliseconds(farm::wire_ms(job.meta.run_deadline));
        Lease lease{job_id, s->identity, d->index, now + work * (d->held + 1) + options_.deadline_grace};
        next_due_ = std::min(next_due_, lease.deadline);
        leases_[lease_id] = lease;
        s->leases.insert(lease_id);
        ++d->held;
        --d->credits;
        // The job goes into the batch for the send and comes back after (a requeue sends it
        // again): swapped, not copied with its kernels' sources (the farm service's hot path).
        OutgoingJobs& o = outgoing[s];
        std::string* out = o.envelope.mutable_jobs()->add_jobs();
        out->swap(job.wire);
        o.entries.emplace_back(&job, out->size());
        farm::append_dispatch_fields(*out, lease_id, d->index, static_cast<uint32_t>(job.attempts));
        o.bytes += out->size();
        if (o.bytes >= kMaxBatchBytes) send_jobs(s->identity, o);
        if (d->credits == 0) {
          ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
  }
  for (auto& [s, o] : outgoing)
    if (!o.entries.empty()) send_jobs(s->identity, o);
}

void FarmDispatcher::send_jobs(const std::string& identity, OutgoingJobs& o) {
  // Each job goes back to its entry, whether the send returns or throws.
  auto restore = [&o] {
    farm::JobBatch* batch = o.envelope.mutable_jobs();
    for (size_t i = 0; i < o.entries.size(); ++i) {
      auto& [entry, length] = o.entries[i];
      entry->wire.swap(*batch->mutable_jobs(static_cast<int>(i)));
      entry->wire.resize(length);
    }
    o.envelope.Clear();
    o.entries.clear();
    o.bytes = 0;
  };
  try {
    send_envelope(identity, o.envelope);
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

std::optional<size_t> FarmDispatcher::pick_job(const std::deque<uint64_t>& queue, const Session& s,
                                               const std::set<std::string>& workers_of_type) const {
  for (size_t i = 0; i < queue.size(); ++i) {
    const auto jit = jobs_.find(queue[i]);
    if (jit == jobs_.end()) return i;  // finished meanwhile: dispatch drops it
    const std::set<std::string>& avoid = jit->second.avoid_workers;
    if (avoid.count(s.worker_id) == 0) return i;
    // Avoided here, but taken anyway when no other worker of this type is connected.
    const bool other = std::any_of(workers_of_type.begin(), workers_of_type.end(),
                                   [&](const std::string& w) { return avoid.count(w) == 0; });
    if (!other) return i;
  }
  return std::nullopt;
}

void FarmDispatcher::tick(Clock::time_point now) {
  if (now >= next_due_) {
    const auto silence = options_.heartbeat * options_.liveness;
    next_due_ = Clock::time_point::max();
    std::vector<std::string> dead;
    for (auto& [id, s] : sessions_) {
      if (now - s.last_seen > silence) {
        dead.push_back(id);
        continue;
      }
      if (now >= s.next_heartbeat) {
        farm::Envelope e;
        e.mutable_heartbeat()->set_sent_unix_ms(static_cast<uint64_t>(farm::unix_ms_now()));
        send(id, std::move(e));
      }
      next_due_ = std::min({next_due_, s.next_heartbeat, s.last_seen + silence});
    }
    for (const std::string& id : dead) {
      ++counters_.sessions_expired;
      const Session& s = sessions_.at(id);
      spdlog::warn("farm: worker {} silent for {} ms; declared dead ({} job(s) requeued)", s.worker_id,
                   std::chrono::duration_cast<std::chrono::milliseconds>(now - s.last_seen).count(),
                   s.leases.size());
      const std::string why = "worker " + s.worker_id + " went silent";
      disconnect(id, "declared dead after silence");
      drop_session(id, why);
    }
    std::vector<uint64_t> expired;
    for (const auto& [lease_id, lease] : leases_) {
      if (now >= lease.deadline) expired.push_back(lease_id);
      else next_due_ = std::min(next_due_, lease.deadline);
    }
    for (uint64_t lease_id : expired) {
      ++counters_.expired_leases;
      const Lease lease = leases_.at(lease_id);
      JobEntry& job = jobs_.at(lease.job);
      std::string worker = lease.identity;
      if (auto sit = sessions_.find(lease.identity); sit != sessions_.end()) worker = sit->second.worker_id;
      const std::string error = str_cat("no result within the deadline (compile ", farm::wire_ms(job.meta.compile_deadline),
                                        " ms + run ", farm::wire_ms(job.meta.run_deadline), " ms) from worker ", worker);
      spdlog::warn("farm: job {}: {}", job.meta.job_id, error);
      Measurement m = failure(job, JobStatus::timeout, error);
      m.worker = str_cat(worker, "/", lease.device);
      release_lease(lease_id);
      finish(lease.job, std::move(m));
    }
  }
  dispatch(now);
}

void FarmDispatcher::disconnect_all(const std::string& reason) {
  for (const auto& [id, s] : sessions_) disconnect(id, reason);
  sessions_.clear();
}

std::vector<Measurement> FarmDispatcher::take_results() {
  std::vector<Measurement> out;
  out.swap(results_);
  // As many as last time, without growing there again one doubling at a time (the broker
  // takes them every turn; regrowth was most of finish()'s cost at thousands a second).
  results_.reserve(out.size());
  return out;
}

FarmStatus FarmDispatcher::status() const {
  FarmStatus st;
  for (const auto& [id, s] : sessions_) {
    FarmWorkerState w;
    w.worker_id = s.worker_id;
    w.host = s.host;
    w.leases = static_cast<int>(s.leases.size());
    for (const Device& d : s.devices) {
      ++st.workers_per_gpu_type[d.gpu_type];
      if (d.emulated) ++st.emulated_workers_per_gpu_type[d.gpu_type];
      w.gpu_types.push_back(d.gpu_type);
      w.device_indexes.push_back(d.index);
      w.device_leases.push_back(d.held);
    }
    st.workers.push_back(std::move(w));
  }
  for (const auto& [type, q] : queues_) {
    st.queued += static_cast<int64_t>(q.size());
    if (!q.empty()) st.queued_per_gpu_type[type] = static_cast<int64_t>(q.size());
  }
  st.in_flight = static_cast<int64_t>(leases_.size());
  st.done = done_;
  return st;
}

}  // namespace dc
