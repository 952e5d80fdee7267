#include "farm_service_impl.h"

#include "job_wire.h"
#include "ratios_codec.h"
#include "rank_fit_db.h"

namespace dc {

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

// One turn: client messages for at most kTurnSlice, then every result. Their DB work goes to
// the writer (db_writer.h), in order; the replies wait for its commits (flush).
void FarmService::Impl::serve_turn(std::vector<Measurement> results) {
  const auto until = Clock::now() + kTurnSlice;
  for (size_t n = 1; !pending.empty() && !writer_behind(); ++n) {
    FarmBroker::ClientMessage& m = pending.front();
    bool done = true;
    try {
      done = on_client(m);
    } catch (const UserError& e) {
      spdlog::error("service: while handling a {}: {}", farm::body_name(m.envelope), e.what());
      if (m.envelope.body_case() == farm::Envelope::kSubmits)
        done = front_jobs_done >= m.envelope.submits().jobs_size();
    }
    if (done) {
      pending.pop_front();
      front_jobs_done = 0;
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
}

// The rest of each finished DB work's job first (a job placed, a ratios reply), then what the
// writer has committed: the results being written that no job posted before them can still
// join are forgotten.
void FarmService::Impl::take_db_done() {
  DbWriter::Done done = writer.take();
  for (DbWriter::Then& then : done.then) {
    try {
      then();
    } catch (const UserError& e) {
      spdlog::error("service: after a DB work: {}", e.what());
    }
  }
  db_committed = done.committed;
  while (!being_written_order.empty() && being_written_order.front().first <= db_committed) {
    const auto it = being_written.find(being_written_order.front().second);
    if (it != being_written.end() && it->second.first == being_written_order.front().first) being_written.erase(it);
    being_written_order.pop_front();
  }
}

// The replies whose DB work is committed, each tune's outcomes in batches (client protocol 3):
// one message per tune and commit, not one per job.
void FarmService::Impl::flush() {
  std::vector<std::pair<std::string, farm::Envelope>> ready;
  while (!outbox.empty() && outbox.front().after <= db_committed) {
    ready.emplace_back(std::move(outbox.front().identity), std::move(outbox.front().envelope));
    outbox.pop_front();
  }
  if (!ready.empty()) broker.send_to_clients(farm::batch_outcomes(std::move(ready)));
}

bool FarmService::Impl::on_client(FarmBroker::ClientMessage& m) {
  farm::Envelope& e = m.envelope;
  if (!farm::version_ok(e)) {
    spdlog::warn("service: dropped a {} of transport version {} (this service speaks {})", farm::body_name(e),
                 e.protocol_version(), farm::kProtocolVersion);
    const auto body = e.body_case();
    if (body == farm::Envelope::kClientHello || body == farm::Envelope::kStatusRequest ||
        body == farm::Envelope::kRatiosRequest) {
      // Refused in the client's own version: a client drops envelopes of any other.
      farm::Envelope r = farm::make_envelope();
      r.set_protocol_version(e.protocol_version());
      r.mutable_refused()->set_reason(str_cat("transport protocol version ", e.protocol_version(),
                                              " is not supported (this service speaks ", farm::kProtocolVersion, ")"));
      send(m.identity, std::move(r));
    }
    return true;
  }
  switch (e.body_case()) {
    case farm::Envelope::kClientHello: on_hello(m.identity, m.peer, e.client_hello()); return true;
    case farm::Envelope::kStatusRequest: on_status_request(m.identity, e.status_request()); return true;
    case farm::Envelope::kRatiosRequest: on_ratios_request(m.identity, e.ratios_request()); return true;
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
    return true;
  }
  Tune& t = tunes.at(it->second);
  t.last_seen = Clock::now();
  if (!t.connected) {
    // Silent past its liveness, heard again before its grace ran out: back.
    reattach(t);
    spdlog::info("service: tune {} is heard again", t.id);
  }
  switch (e.body_case()) {
    case farm::Envelope::kSubmits: {
      // One job per call: a turn's time slice may end inside a batch.
      farm::SubmitBatch& b = *e.mutable_submits();
      if (front_jobs_done < b.jobs_size()) on_submit(t, *b.mutable_jobs(front_jobs_done++));
      return front_jobs_done >= b.jobs_size();
    }
    case farm::Envelope::kSubmit: on_submit(t, *e.mutable_submit()->mutable_job()); break;
    case farm::Envelope::kClientHeartbeat: break;
    case farm::Envelope::kMarkImplausible: on_mark_implausible(t, e.mark_implausible()); break;
    case farm::Envelope::kClientBye: end_tune(t.id, "client said bye (" + printable(e.client_bye().reason()) + ")"); break;
    default:
      spdlog::warn("service: tune {} sent a {}, which clients do not send; dropped", t.id, farm::body_name(e));
  }
  return true;
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
bool FarmService::Impl::record_rows(const FarmJob& job, const std::string& source_hash) {
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
  if (variants_recorded.insert({job.workload, job.variant_kernel.variant_key}).second) {
    Variant v;
    v.template_name = si.variant_template;
    v.precision = si.variant_precision;
    v.params = si.variant_params;
    return db.commit_variant(job.workload, v, source_hash);
  }
  return false;
}

std::optional<Measurement> FarmService::Impl::from_db(const FarmJob& job, const std::string& source_hash) {
  MeasurementQuery q;
  q.workload = job.workload;
  q.variant_key = job.variant_kernel.variant_key;
  q.gpu_type = job.gpu_type;
  q.source = source_of(job.service.emulated);
  for (Measurement& m : db.query(q)) {
    if (!is_final_status(m.status) || m.source_hash != source_hash) continue;
    if (!job.service.nvrtc_major.empty() && toolchain_major(m.nvrtc_version) != job.service.nvrtc_major) continue;
    return std::move(m);
  }
  return std::nullopt;
}

// A row of this tune's GPU types that the client's tune marked implausible (a quarantined
// worker's): marked in the service's DB too, so that no later tune is answered with it.
void FarmService::Impl::on_mark_implausible(const Tune& t, const farm::MarkImplausible& mk) {
  if (std::find(t.gpu_types.begin(), t.gpu_types.end(), mk.gpu_type()) == t.gpu_types.end()) {
    spdlog::warn("service: tune {} marked a result of GPU type '{}', which it did not name; ignored", t.id,
                 printable(mk.gpu_type()));
    return;
  }
  Measurement m;
  m.workload = mk.workload();
  m.variant_key = mk.variant_key();
  m.gpu_type = mk.gpu_type();
  m.worker = mk.worker();
  m.finished_unix_ms = mk.finished_unix_ms();
  writer.post([m, why = printable(mk.why()), tune = t.id](TuningDb& tuning_db) -> DbWriter::Then {
    try {
      if (tuning_db.mark_implausible(m, why))
        spdlog::warn("service: tune {} marked {}'s result of {} implausible: {}", tune, printable(m.worker),
                     printable(m.variant_key), why);
    } catch (const UserError& e) {
      spdlog::error("service: could not mark a result of {} implausible: {}", printable(m.variant_key), e.what());
    }
    return {};
  });
}

// The calibrate stage of a `tune --farm`: the estimator's ratios of this service's DB, as a
// local tune reads them from its own (bounded per kind and unit: ratios_codec.h), and of real
// results the per-parameter factors and, when the request asks (tune --rank-calibration), the
// ranking vectors, fitted here as a local tune fits them. An unknown GPU type has none.
void FarmService::Impl::on_ratios_request(const std::string& identity, const farm::RatiosRequest& r) {
  if (r.client_protocol_version() != farm::kClientProtocolVersion)
    return refuse(identity, str_cat("client protocol version ", r.client_protocol_version(),
                                    " is not supported (this service speaks ", farm::kClientProtocolVersion, ")"));
  writer.post([this, identity, r](TuningDb&) -> DbWriter::Then {
    return [this, identity, e = ratios_reply(r)]() mutable { send(identity, std::move(e)); };
  });
}

farm::Envelope FarmService::Impl::ratios_reply(const farm::RatiosRequest& r) {
  farm::Envelope e = farm::make_envelope();
  farm::RatiosReply* reply = e.mutable_ratios_reply();
  if (catalog.find(r.gpu_type()) == nullptr) {
    spdlog::warn("service: ratios asked for an unknown GPU type '{}': none", printable(r.gpu_type()));
  } else {
    try {
      const std::optional<DbContentStamp> stamp = db.content_stamp();
      auto key = std::make_tuple(r.gpu_type(), r.emulated(), r.storage(), r.rank_vectors());
      const auto cached = ratios_cache.find(key);
      if (stamp && cached != ratios_cache.end() && cached->second.stamp == *stamp) {
        *reply = cached->second.reply;
      } else {
        fill_ratios(r, reply);
        if (ratios_cache.size() >= kRatiosCacheMax) ratios_cache.clear();
        if (stamp) ratios_cache[std::move(key)] = {*stamp, *reply};
      }
    } catch (const UserError& ex) {
      spdlog::error("service: could not read the estimator's ratios of {}: {}", r.gpu_type(), ex.what());
      reply->Clear();
      reply->set_error(printable(ex.what()));
    }
  }
  reply->set_request_id(r.request_id());
  return e;
}

void FarmService::Impl::fill_ratios(const farm::RatiosRequest& r, farm::RatiosReply* reply) {
  ++ratios_fitted;
  const TimingSource source = source_of(r.emulated());
  const std::vector<EstimatorSample> samples = db.estimator_samples(r.gpu_type(), source, r.storage());
  to_proto(ratios_of(samples), reply);
  if (source != TimingSource::real) return;
  to_proto(fit_param_factors(r.gpu_type(), samples), reply);
  // The ranking fit only for a tune that applies it (tune --rank-calibration): a tune without
  // it, or a client that does not know the field, gets none.
  if (!r.rank_vectors()) return;
  if (const GpuSpec* gpu = catalog.find(r.gpu_type())) to_proto(fit_rank_vectors_of_db(db, *gpu, samples), reply);
}

// `tj` is consumed: the job's bytes move into the job. The service reads the job's names and
// scalars only and forwards the bytes; the worker checks the kernels and answers a bad one
// as a failed result, which is recorded (docs/farm.md, "Jobs as bytes").
void FarmService::Impl::on_submit(Tune& t, farm::TuneJob& tj) {
  FarmJob job;
  std::string_view source;
  try {
    static_cast<MeasureJob&>(job) = farm::read_job_head(tj.job(), &source);
    if (std::find(t.gpu_types.begin(), t.gpu_types.end(), job.gpu_type) == t.gpu_types.end())
      throw farm::ProtocolError(str_cat("a job for GPU type '", printable(job.gpu_type), "', which the tune did not name"));
    if (job.workload.empty() || job.job_id.empty()) throw farm::ProtocolError("a job without workload or job id");
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
    if (tj.avoid_workers_size() > kMaxAvoidWorkers)
      throw farm::ProtocolError(str_cat("a job avoiding ", tj.avoid_workers_size(), " workers (at most ", kMaxAvoidWorkers, ")"));
    job.avoid_workers.insert(tj.avoid_workers().begin(), tj.avoid_workers().end());
    Variant v;
    v.template_name = si.variant_template;
    v.precision = si.variant_precision;
    v.params = si.variant_params;
    if (v.key() != job.variant_kernel.variant_key)
      throw farm::ProtocolError(str_cat("the variant's parameters make the key '", printable(v.key()),
                                        "', not the job's '", printable(job.variant_kernel.variant_key), "'"));
    if (tj.workload().signature() != job.workload)
      throw farm::ProtocolError("the workload record does not belong to the job's workload");
  } catch (const farm::ProtocolError& e) {
    spdlog::warn("service: tune {} submitted an invalid job; dropped: {}", t.id, e.what());
    return;
  }
  // Hashed once here: the dispatcher takes it with the job (FarmJob::variant_source_hash).
  hash_scratch.assign(source);  // fnv1a_hex takes a string: a buffer kept between jobs, not one per job
  job.variant_source_hash = fnv1a_hex(hash_scratch);
  job.wire_bytes = std::move(*tj.mutable_job());
  const std::string& hash = job.variant_source_hash;
  Waiter w{t.id, job.job_id, job.workload, job.variant_kernel.variant_key, job.service.reuse,
           key_of({job.job_id, hash, job.check_on_emulator ? "check" : "", job.service.reuse ? "" : "fresh"})};
  if (t.resumes > 0) {
    if (const auto sent = t.recent.find(w.resend_key); sent != t.recent.end()) {
      // A resubmit after a reconnect of a job whose outcome was sent already: sent again.
      send(t.identity, sent->second.second);
      return;
    }
  }
  ++t.submitted;
  spdlog::debug("service: tune {} submitted {}", t.id, job.job_id);
  const uint64_t tune = t.id, number = writer.posted() + 1;
  writer.post([this, tune, number, w = std::move(w), job = std::move(job)](TuningDb&) mutable -> DbWriter::Then {
    std::optional<Measurement> known = look_up(job);
    return [this, tune, number, w = std::move(w), job = std::move(job), known = std::move(known)]() mutable {
      place(tune, w, std::move(job), std::move(known), number);
    };
  });
}

std::optional<Measurement> FarmService::Impl::look_up(const FarmJob& job) {
  try {
    // A variant new to the DB has no measurement yet: no lookup.
    const bool new_variant = record_rows(job, job.variant_source_hash);
    if (job.service.reuse && !new_variant) return from_db(job, job.variant_source_hash);
  } catch (const UserError& e) {
    // The DB refused (busy past its timeout): measured instead of answered.
    spdlog::error("service: DB lookup for {} failed; it is measured: {}", job.variant_kernel.variant_key, e.what());
  }
  return std::nullopt;
}

void FarmService::Impl::place(uint64_t tune, const Waiter& w, FarmJob job, std::optional<Measurement> known,
                              uint64_t number) {
  const auto found = tunes.find(tune);
  if (found == tunes.end()) return;  // it ended while the job's rows were written
  Tune& t = found->second;
  if (known) {
    ++answered_from_db;
    ++t.from_db;
    deliver(t, w, *known, farm::DATABASE);
    return;
  }
  const std::string& hash = job.variant_source_hash;
  std::string key = key_of({hash, job.gpu_type, job.service.nvrtc_major, job.service.emulated ? "emulated" : "real",
                            job.check_on_emulator ? "check" : "", avoid_key(job.avoid_workers)});
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
    if (join_written(t, w, key, number)) return;
    gid = next_group++;
    Group g;
    g.key = key;
    g.gpu_type = job.gpu_type;
    g.workload = job.workload;
    g.variant_key = job.variant_kernel.variant_key;
    ++queued_groups[g.gpu_type];
    ++t.queued;
    g.job = std::move(job);
    g.job.job_id = "g" + std::to_string(gid);  // the broker's name for it; results come back by it
    g.waiters.push_back(w);
    group_of_key[key] = gid;
    groups.emplace(gid, std::move(g));
  }
  t.groups.insert(gid);
  // Still waiting for a device: this tune's share may also pick it (a silent tune's when it is back).
  if (!groups.at(gid).dispatched && t.connected) share.push(groups.at(gid).gpu_type, t.id, gid);
}

// The group the job would have joined when it was posted (number) finished since: the job
// joins its result as it would have joined the group. Its own names are recorded if the
// group's are others (as a first result: a fresh group's row is under the group's names).
bool FarmService::Impl::join_written(Tune& t, const Waiter& w, const std::string& key, uint64_t number) {
  const auto it = being_written.find(key);
  if (it == being_written.end() || it->second.first < number) return false;
  const Measurement& m = it->second.second;
  if (is_recorded_status(m.status) && (w.workload != m.workload || w.variant_key != m.variant_key)) {
    std::set<std::pair<std::string, std::string>> names = {{w.workload, w.variant_key}};
    post_record_rows(std::move(names), false, m, m.worker.substr(0, m.worker.rfind('/')));
  }
  ++joined;
  ++t.joined;
  deliver(t, w, m, farm::JOINED);
  return true;
}

void FarmService::Impl::deliver(Tune& t, const Waiter& w, const Measurement& m, farm::Origin origin) {
  farm::Envelope e = farm::make_envelope();
  farm::Outcome* o = e.mutable_outcome();
  o->set_job_id(w.job_id);
  o->set_origin(origin);
  // The record under the waiter's own names, without a copy of the Measurement per waiter.
  farm::Record record = farm::to_record(m);
  record.set_workload(w.workload);
  record.set_variant_key(w.variant_key);
  o->mutable_record()->Swap(&record);
  ++t.done;
  // Kept a while: a client that reconnects gets it again when it resubmits the job. A tune
  // that is silent gets it then.
  if (t.connected) send(t.identity, e);
  const auto now = Clock::now();
  t.recent[w.resend_key] = {now, std::move(e)};
  t.recent_order.emplace_back(now, w.resend_key);
}

void FarmService::Impl::post_record(const Group& g, const Measurement& m, const std::string& worker_id) {
  const bool fresh = std::any_of(g.waiters.begin(), g.waiters.end(), [](const Waiter& w) { return !w.reuse; });
  std::set<std::pair<std::string, std::string>> names;
  names.insert({g.workload, g.variant_key});
  for (const Waiter& w : g.waiters) names.insert({w.workload, w.variant_key});
  post_record_rows(std::move(names), fresh, m, worker_id);
}

void FarmService::Impl::post_record_rows(std::set<std::pair<std::string, std::string>> names, bool fresh,
                                         const Measurement& m, const std::string& worker_id) {
  writer.post([this, names = std::move(names), fresh, m, worker_id](TuningDb&) -> DbWriter::Then {
    const int added = record_result(names, fresh, m, worker_id);
    if (added == 0) return {};
    return [this, added, status = m.status] { recorded_by_status[std::string(job_status_name(status))] += added; };
  });
}

int FarmService::Impl::record_result(const std::set<std::pair<std::string, std::string>>& names, bool fresh,
                                     const Measurement& m, const std::string& worker_id) {
  int added = 0;
  try {
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
    for (const auto& [workload, key] : names) {
      Measurement r = m;
      r.workload = workload;
      r.variant_key = key;
      if (fresh ? db.commit_measurement(r) : db.commit_first_measurement(r))
        ++added;
      else
        spdlog::info("service: {} {} on {}: already recorded; not added again", workload, key, m.gpu_type);
    }
  } catch (const UserError& e) {
    // The DB refused (busy past its timeout, disk full): logged; the tunes still get it.
    spdlog::error("service: could not record the result of {}: {}", m.variant_key, e.what());
  }
  return added;
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
  // Posted before the outcomes: they wait for its commit.
  if (is_recorded_status(m.status)) post_record(g, m, worker_id);
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
  // A job posted while the group was in flight may still join it (join_written).
  m.workload = g.workload;
  m.variant_key = g.variant_key;
  being_written[g.key] = {writer.posted(), std::move(m)};
  being_written_order.emplace_back(writer.posted(), std::move(g.key));
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

void FarmService::run(const std::atomic<bool>& stop) {
  Impl& im = *impl_;
  while (!stop.load()) {
    // No wait while client messages are left from the last turn (unless the writer is too far
    // behind to take them); a short one while the writer owes answers (jobs to place, commits
    // that release outcomes).
    const auto wait = !im.pending.empty() && !im.writer_behind() ? std::chrono::milliseconds(0)
                      : im.writer.posted() > im.db_committed     ? kWriterPoll
                                                                 : std::chrono::milliseconds(100);
    std::vector<Measurement> results = im.broker.collect(wait);
    im.take_client_messages();
    im.serve_turn(std::move(results));
    im.writer.hand_over();
    im.take_db_done();
    im.tick();
    im.flush();
    im.pump();
    if (im.options.on_view && Clock::now() >= im.next_view) {
      im.next_view = Clock::now() + im.options.view_interval;
      im.options.on_view(im.view());
    }
  }
  im.writer.finish();
  im.take_db_done();
  im.flush();
  spdlog::info("service: stopping: {} tune(s) connected, {} jobs measured, {} answered from the DB, {} joined, "
               "{} cancelled", im.tunes.size(), im.measured, im.answered_from_db, im.joined, im.cancelled);
  im.broker.shutdown();
}

}  // namespace dc
