#include "ir/host.h"
#include "remote_farm.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "client_codec.h"
#include "farm_codec.h"
#include "farm_dispatch.h"
#include "ratios_codec.h"
#include "wake_fd.h"

namespace dc {
namespace {

using Clock = std::chrono::steady_clock;

std::string default_client_id() { return host_and_pid(); }

// A job's frame: a SubmitBatch of this one job (the wire Job and what the service's DB records
// of it). Frames of one-job batches, concatenated, are one batch of all their jobs (below).
std::string submit_frame(FarmJob job) {
  farm::Envelope e = farm::make_envelope();
  farm::TuneJob* tj = e.mutable_submits()->add_jobs();
  const FarmJob::ServiceInfo si = job.service;
  const std::string canonical_signature = job.workload;
  FarmDispatcher::Submission s = FarmDispatcher::prepare(std::move(job));
  tj->set_job(std::move(s.wire));
  farm::WorkloadInfo* w = tj->mutable_workload();
  w->set_signature(canonical_signature);
  w->set_kind(si.workload_kind);
  w->set_canonical(si.workload_canonical);
  w->set_flops(s.meta.flops);
  w->set_bytes(s.meta.bytes);
  w->set_base_signature(si.workload_base_signature);
  farm::VariantInfo* v = tj->mutable_variant();
  v->set_template_name(si.variant_template);
  v->set_precision(si.variant_precision);
  for (const auto& [k, n] : si.variant_params) (*v->mutable_params())[k] = n;
  tj->set_emulated(si.emulated);
  tj->set_nvrtc_major(si.nvrtc_major);
  tj->set_reuse(si.reuse);
  for (const std::string& worker : s.meta.avoid_workers) tj->add_avoid_workers(worker);
  return farm::serialize(e);
}

// A frame to send, and whether it is a job's (submit_frame).
struct Outgoing {
  std::string frame;
  bool job = false;
};

}  // namespace

struct RemoteFarm::Impl {
  RemoteFarmOptions options;
  zmq::context_t context;
  zmq::socket_t socket;
  WakeFd wake;
  std::thread thread;
  std::atomic<uint64_t> tune_id{0};
  std::string service_id;
  std::chrono::milliseconds heartbeat{1000};
  int liveness = 3;

  mutable std::mutex mutex;
  std::condition_variable results_ready;
  std::vector<Outgoing> outbox;
  // Every Submit without an Outcome yet, by job id, in submission order (seq): sent again
  // after a reconnect.
  std::map<std::string, std::pair<uint64_t, std::string>> outstanding;
  uint64_t next_seq = 0;
  std::deque<Measurement> results;
  // RatiosRequests without a reply, by request id (sent again after a reconnect), and the
  // replies that estimator_ratios() has not taken yet.
  uint64_t next_request = 1;
  std::map<uint64_t, std::string> ratio_requests;
  std::map<uint64_t, farm::RatiosReply> ratio_replies;
  std::condition_variable replies_ready;
  FarmStatus status;
  RemoteFarmCounts counts;
  std::string fatal;  // the service refused us or went silent
  bool stopping = false;
  bool stopped = false;

  explicit Impl(RemoteFarmOptions o) : options(std::move(o)) {}

  void send(const std::string& frame) { socket.send(zmq::buffer(frame), zmq::send_flags::dontwait); }
  void send_all(const std::vector<Outgoing>& frames);
  void take_outcome(const farm::Outcome& o);
  std::optional<farm::Envelope> receive(std::string* why) {
    zmq::message_t msg;
    if (!socket.recv(msg, zmq::recv_flags::dontwait)) return std::nullopt;
    std::optional<farm::Envelope> e =
        farm::parse_envelope(msg.data(), msg.size(), farm::kDefaultMaxMessageBytes, why);
    if (e && !farm::version_ok(*e)) {
      *why = str_cat("protocol version ", e->protocol_version());
      e.reset();
    }
    if (!e) spdlog::warn("tune: dropped a message from the farm service: {}", *why);
    return e ? e : std::optional<farm::Envelope>(farm::Envelope());
  }
  void open_socket();
  // Says Hello (resuming tune_id when it has one) and waits up to `timeout` for the
  // Welcome. false: no answer; UserError: refused.
  bool hello(std::chrono::milliseconds timeout);
  void connect();
  bool reconnect(const std::string& why);  // false: gave up (fail() called)
  void loop();
  bool handle(const farm::Envelope& e);  // false: stop (refused)
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    if (fatal.empty()) fatal = why;
    results_ready.notify_all();
    replies_ready.notify_all();
  }
};

void RemoteFarm::Impl::open_socket() {
  socket = zmq::socket_t(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 1000);
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(farm::kDefaultMaxMessageBytes));
  socket.set(zmq::sockopt::sndhwm, 100000);
  socket.set(zmq::sockopt::rcvhwm, 100000);
  if (!options.server_public_key.empty()) {
    socket.set(zmq::sockopt::curve_serverkey, options.server_public_key);
    socket.set(zmq::sockopt::curve_publickey, options.client_public_key);
    socket.set(zmq::sockopt::curve_secretkey, options.client_secret_key);
  }
  try {
    socket.connect(options.endpoint);
  } catch (const zmq::error_t& e) {
    throw_user_error("cannot connect to the farm service at ", options.endpoint, ": ", e.what());
  }
}

bool RemoteFarm::Impl::hello(std::chrono::milliseconds timeout) {
  farm::Envelope hello = farm::make_envelope();
  farm::ClientHello* h = hello.mutable_client_hello();
  h->set_client_protocol_version(farm::kClientProtocolVersion);
  h->set_client_id(options.client_id.empty() ? default_client_id() : options.client_id);
  h->set_host(host_name());
  h->set_model(options.model);
  for (const std::string& g : options.gpu_types) h->add_gpu_types(g);
  h->set_priority(options.priority);
  if (tune_id != 0) {
    h->set_resume_tune_id(tune_id);
    h->set_resume_service_id(service_id);
  }
  socket.send(zmq::buffer(farm::serialize(hello)), zmq::send_flags::none);
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    std::vector<zmq::pollitem_t> items = {{socket.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, std::chrono::milliseconds(100));
    std::string why;
    while (std::optional<farm::Envelope> e = receive(&why)) {
      if (e->body_case() == farm::Envelope::kRefused && !e->refused().unknown_client())
        throw_user_error("the farm service at ", options.endpoint, " refused this tune: ", e->refused().reason());
      if (e->body_case() == farm::Envelope::kClientWelcome) {
        const farm::ClientWelcome& w = e->client_welcome();
        if (tune_id != 0)
          spdlog::warn("tune: {} the farm service {} at {} as tune {}", w.resumed() ? "resumed with" : "rejoined",
                       w.service_id(), options.endpoint, w.tune_id());
        else
          spdlog::info("tune: joined the farm service {} at {} as tune {}", w.service_id(), options.endpoint,
                       w.tune_id());
        tune_id = w.tune_id();
        service_id = w.service_id();
        heartbeat = std::chrono::milliseconds(std::max<uint32_t>(10, w.heartbeat_ms()));
        liveness = static_cast<int>(std::max<uint32_t>(1, w.liveness()));
        return true;
      }
    }
  }
  return false;
}

void RemoteFarm::Impl::connect() {
  open_socket();
  if (hello(options.connect_timeout)) return;
  throw_user_error("no answer from a farm service at ", options.endpoint, " within ",
                   options.connect_timeout.count() / 1000.0, " s (is `dc-coordinator serve` running there",
                   options.server_public_key.empty() ? "" : ", and is this client's key in its --allow-clients",
                   "?)");
}

// In order, with each run of jobs' frames sent as SubmitBatches of up to kMaxClientBatchBytes
// (client protocol 3): one frame instead of one per job. A job's frame is an Envelope whose
// SubmitBatch holds that job; protobuf parses concatenated messages as one, merging a message
// field that appears twice and appending its repeated fields, so the frames of a run joined
// are an Envelope whose batch holds every job of the run, in order.
void RemoteFarm::Impl::send_all(const std::vector<Outgoing>& frames) {
  std::string batch;
  const auto send_batch = [&] {
    if (!batch.empty()) send(batch);
    batch.clear();
  };
  for (const Outgoing& o : frames) {
    if (!o.job) {
      send_batch();
      send(o.frame);
      continue;
    }
    if (!batch.empty() && batch.size() + o.frame.size() > farm::kMaxClientBatchBytes) send_batch();
    batch += o.frame;
  }
  send_batch();
}

// The service was lost: Hello again on fresh sockets (a fresh identity each: the old one
// may be a connection the service no longer has) until one is welcomed, then every job
// without an outcome again.
bool RemoteFarm::Impl::reconnect(const std::string& why) {
  spdlog::warn("tune: lost the farm service at {}: {}; reconnecting (up to {} s)", options.endpoint, why,
               options.reconnect_timeout.count() / 1000.0);
  const auto deadline = Clock::now() + options.reconnect_timeout;
  try {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stopping) return false;
      }
      socket.set(zmq::sockopt::linger, 0);
      socket.close();
      open_socket();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      if (hello(std::min(left, std::max(heartbeat * 2, std::chrono::milliseconds(1000))))) break;
    }
  } catch (const UserError& e) {
    fail(e.what());
    return false;
  }
  if (Clock::now() >= deadline) {
    fail(str_cat("the farm service at ", options.endpoint, " was lost (", why, ") and not reached again within ",
                 options.reconnect_timeout.count() / 1000.0, " s: it stopped or the network is down (a rerun "
                 "measures what is missing)"));
    return false;
  }
  std::vector<std::pair<uint64_t, std::string>> again;
  std::vector<Outgoing> frames;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [job, sf] : outstanding) again.push_back(sf);
    for (const auto& [id, frame] : ratio_requests) frames.push_back({frame, false});
    outbox.clear();  // all of them are outstanding or requests without a reply
    ++counts.reconnects;
    counts.resubmitted += static_cast<int64_t>(again.size());
  }
  std::sort(again.begin(), again.end());
  for (auto& [seq, frame] : again) frames.push_back({std::move(frame), true});
  send_all(frames);
  spdlog::warn("tune: {} job(s) without an outcome submitted again", again.size());
  return true;
}

void RemoteFarm::Impl::take_outcome(const farm::Outcome& o) {
  Measurement m;
  try {
    m = farm::from_record(o.record());
  } catch (const farm::ProtocolError& ex) {
    spdlog::warn("tune: dropped an invalid outcome from the farm service: {}", ex.what());
    return;
  }
  m.job_id = o.job_id();
  std::lock_guard<std::mutex> lock(mutex);
  // One outcome per job: a second one (sent again after a reconnect) is dropped.
  if (outstanding.erase(m.job_id) == 0) return;
  switch (o.origin()) {
    case farm::JOINED: ++counts.joined; break;
    case farm::DATABASE: ++counts.from_db; break;
    default: ++counts.measured;
  }
  results.push_back(std::move(m));
  results_ready.notify_all();
}

bool RemoteFarm::Impl::handle(const farm::Envelope& e) {
  switch (e.body_case()) {
    case farm::Envelope::kOutcomes:
      for (const farm::Outcome& o : e.outcomes().outcomes()) take_outcome(o);
      return true;
    case farm::Envelope::kRatiosReply: {
      std::lock_guard<std::mutex> lock(mutex);
      // A reply to a request nobody waits for any more (answered twice after a reconnect,
      // or its wait ran out) is dropped.
      if (ratio_requests.erase(e.ratios_reply().request_id()) == 0) return true;
      ratio_replies[e.ratios_reply().request_id()] = e.ratios_reply();
      replies_ready.notify_all();
      return true;
    }
    case farm::Envelope::kClientStatus: {
      FarmStatus st;
      for (const auto& [type, n] : e.client_status().workers_per_gpu_type()) st.workers_per_gpu_type[type] = n;
      for (const auto& [type, n] : e.client_status().emulated_workers_per_gpu_type())
        st.emulated_workers_per_gpu_type[type] = n;
      std::lock_guard<std::mutex> lock(mutex);
      status = std::move(st);
      return true;
    }
    case farm::Envelope::kRefused:
      if (e.refused().unknown_client()) return reconnect("it does not know this tune (restarted?)");
      fail(str_cat("the farm service at ", options.endpoint, " ended this tune: ", e.refused().reason()));
      return false;
    case farm::Envelope::kHeartbeat:
    case farm::Envelope::BODY_NOT_SET:
      return true;
    default:
      spdlog::warn("tune: unexpected {} from the farm service", farm::body_name(e));
      return true;
  }
}

void RemoteFarm::Impl::loop() {
  auto last_heard = Clock::now();
  auto last_sent = Clock::now();
  std::vector<zmq::pollitem_t> items = {{socket.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake.fd(), ZMQ_POLLIN, 0}};
  try {
    while (true) {
      zmq::poll(items, heartbeat / 2);
      if (items[1].revents & ZMQ_POLLIN) wake.drain();
      std::vector<Outgoing> out;
      bool stop = false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        out.swap(outbox);
        stop = stopping;
      }
      send_all(out);
      if (!out.empty()) last_sent = Clock::now();
      if (stop) {
        farm::Envelope bye = farm::make_envelope();
        bye.mutable_client_bye()->set_reason("tune ended");
        send(farm::serialize(bye));
        return;
      }
      std::string why;
      const void* before = socket.handle();
      while (std::optional<farm::Envelope> e = receive(&why)) {
        last_heard = Clock::now();
        if (!handle(*e)) return;
        if (socket.handle() != before) break;  // reconnected: a new socket
      }
      items[0].socket = socket.handle();
      const auto now = Clock::now();
      if (now - last_sent >= heartbeat) {
        farm::Envelope hb = farm::make_envelope();
        hb.mutable_client_heartbeat()->set_sent_unix_ms(static_cast<uint64_t>(farm::unix_ms_now()));
        send(farm::serialize(hb));
        last_sent = now;
      }
      if (now - last_heard > heartbeat * liveness) {
        if (!reconnect(str_cat("silent for ",
                               std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard).count(), " ms")))
          return;
        items[0].socket = socket.handle();
        last_heard = last_sent = Clock::now();
      }
    }
  } catch (const zmq::error_t& e) {
    fail(str_cat("farm service connection: ", e.what()));
  }
}

RemoteFarm::RemoteFarm(RemoteFarmOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  DC_USER_CHECK(impl_->options.priority >= 1 && impl_->options.priority <= 100, "--priority must be 1 to 100, not ",
                impl_->options.priority);
  impl_->connect();
  // The socket moves to the loop's thread here (thread start is the barrier ZeroMQ asks for).
  impl_->thread = std::thread([this] { impl_->loop(); });
}

RemoteFarm::~RemoteFarm() { shutdown(); }

uint64_t RemoteFarm::tune_id() const { return impl_->tune_id; }

void RemoteFarm::submit(FarmJob job) {
  const std::string job_id = job.job_id;
  std::string frame = submit_frame(std::move(job));
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->outstanding[job_id] = {impl_->next_seq++, frame};
    // A non-empty outbox has a wake pending: the loop takes this job with the others, in one batch.
    wake = impl_->outbox.empty();
    impl_->outbox.push_back({std::move(frame), true});
  }
  if (wake) impl_->wake.wake();
}

// Sent once, not again after a reconnect: a mark lost with the connection leaves the
// service's row as it was (the tune's DB has the mark).
void RemoteFarm::mark_implausible(const Measurement& m, const std::string& why) {
  farm::Envelope e = farm::make_envelope();
  farm::MarkImplausible* mk = e.mutable_mark_implausible();
  mk->set_workload(m.workload);
  mk->set_variant_key(m.variant_key);
  mk->set_gpu_type(m.gpu_type);
  mk->set_worker(m.worker);
  mk->set_finished_unix_ms(m.finished_unix_ms);
  mk->set_why(why);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->outbox.push_back({farm::serialize(e), false});
  }
  impl_->wake.wake();
}

std::optional<Farm::Ratios> RemoteFarm::estimator_ratios(const std::string& gpu_type, bool emulated,
                                                         const std::string& storage, bool rank_vectors) {
  Impl& im = *impl_;
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(im.mutex);
    DC_USER_CHECK(!im.stopping, "the farm service's calibration asked after the tune's farm was shut down");
    id = im.next_request++;
    farm::Envelope e = farm::make_envelope();
    farm::RatiosRequest* r = e.mutable_ratios_request();
    r->set_client_protocol_version(farm::kClientProtocolVersion);
    r->set_request_id(id);
    r->set_gpu_type(gpu_type);
    r->set_emulated(emulated);
    r->set_storage(storage);
    r->set_rank_vectors(rank_vectors);
    std::string frame = farm::serialize(e);
    im.ratio_requests[id] = frame;
    im.outbox.push_back({std::move(frame), false});
  }
  im.wake.wake();
  const auto wait = im.options.connect_timeout + im.options.reconnect_timeout;
  farm::RatiosReply reply;
  {
    std::unique_lock<std::mutex> lock(im.mutex);
    im.replies_ready.wait_for(lock, wait, [&] { return im.ratio_replies.count(id) || !im.fatal.empty() || im.stopped; });
    const auto it = im.ratio_replies.find(id);
    if (it == im.ratio_replies.end()) {
      im.ratio_requests.erase(id);
      if (!im.fatal.empty()) throw_user_error(im.fatal);
      throw_user_error("the farm service at ", im.options.endpoint, " did not answer the calibration request for ",
                       gpu_type, " within ", std::chrono::duration<double>(wait).count(), " s");
    }
    reply = std::move(it->second);
    im.ratio_replies.erase(it);
  }
  if (!reply.error().empty())
    throw_user_error("the farm service at ", im.options.endpoint, " could not read its DB for the calibration of ",
                     gpu_type, ": ", reply.error());
  Ratios ratios;
  try {
    ratios.by_unit = ratios_from_proto(reply);
    ratios.param_fit = param_factors_from_proto(reply, gpu_type);
    ratios.rank_fit = rank_vectors_from_proto(reply, gpu_type);
  } catch (const farm::ProtocolError& ex) {
    throw_user_error("the farm service at ", im.options.endpoint, " answered the calibration request for ", gpu_type,
                     " with invalid ratios: ", ex.what());
  }
  for (const farm::UnitRatios& u : reply.units())
    if (u.total() > u.ratios_size())
      spdlog::info("tune: the farm service's DB holds {} ratios of {} ({}) on {}: {} evenly spaced ones were sent",
                   u.total(), u.kind(), farm::MathUnitCode_Name(u.unit()), gpu_type, u.ratios_size());
  return ratios;
}

std::vector<Measurement> RemoteFarm::collect(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->results_ready.wait_for(lock, timeout, [this] {
    return !impl_->results.empty() || !impl_->fatal.empty() || impl_->stopped;
  });
  std::vector<Measurement> out(std::make_move_iterator(impl_->results.begin()),
                               std::make_move_iterator(impl_->results.end()));
  impl_->results.clear();
  if (out.empty() && !impl_->fatal.empty()) throw_user_error(impl_->fatal);
  return out;
}

FarmStatus RemoteFarm::status() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->status;
}

RemoteFarmCounts RemoteFarm::counts() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->counts;
}

void RemoteFarm::shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->wake.wake();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->socket.close();  // lingers up to 1 s for the Bye
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stopped = true;
  impl_->results_ready.notify_all();
}

}  // namespace dc
