// The farm service's view of itself (docs/farm.md, "The service"): the devices' busy time,
// the ServiceView that `dc-coordinator status` and the metrics endpoint read, and the
// answer to a client's status request.
#include "farm_service_impl.h"

namespace dc {

// Devices as the broker has them now: a new one starts its busy tally, one that left loses
// it (a long-lived service sees workers come and go; its memory stays flat).
// Called on every pass of the loop: keys without a stream, and the set of present devices
// built only when a device left (the tally then holds more than are present).
void FarmService::Impl::observe_devices(const FarmStatus& st) {
  const auto now = Clock::now();
  size_t present = 0;
  for (const FarmWorkerState& w : st.workers)
    for (int32_t index : w.device_indexes) {
      device_tally.try_emplace(w.worker_id + '/' + std::to_string(index), DeviceTally{now, 0});
      ++present;
    }
  if (present == device_tally.size()) return;
  std::set<std::string> keys;
  for (const FarmWorkerState& w : st.workers)
    for (int32_t index : w.device_indexes) keys.insert(w.worker_id + '/' + std::to_string(index));
  for (auto it = device_tally.begin(); it != device_tally.end();)
    it = keys.count(it->first) ? std::next(it) : device_tally.erase(it);
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

}  // namespace dc
