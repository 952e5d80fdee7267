#include "ir/host.h"
#include "farm_broker.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "client_codec.h"
#include "farm_security.h"
#include "read_budget.h"
#include "wake_fd.h"

namespace dc {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

// Logs the first few drops of each kind, then one line per 1000: a flood of garbage must not
// become a flood of log lines.
class DropLog {
 public:
  void note(const std::string& kind, const std::string& detail) {
    const int64_t n = ++counts_[kind];
    if (n <= 10) spdlog::warn("farm: dropped {}: {}", kind, detail);
    else if (n % 1000 == 0) spdlog::warn("farm: dropped {} {} times so far (latest: {})", kind, n, detail);
  }

 private:
  std::map<std::string, int64_t> counts_;
};

std::string default_coordinator_id() { return host_and_pid(); }

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes.substr(0, 16)) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

}  // namespace

struct FarmBroker::Impl {
  FarmBrokerOptions options;
  zmq::context_t context;
  zmq::socket_t router;
  std::optional<zmq::socket_t> zap;       // with CURVE
  std::set<std::string> allowed_keys;     // raw 32-byte public keys (workers and clients)
  std::set<std::string> worker_peers;     // hex(key) of the workers' keys, as ZAP names them
  std::set<std::string> client_peers;     // hex(key) of the clients' keys
  std::string endpoint;
  std::string public_key;
  WakeFd wake;
  std::thread thread;

  mutable std::mutex mutex;
  std::condition_variable results_ready;
  std::vector<FarmDispatcher::Submission> inbox;
  std::deque<Measurement> results;
  std::vector<ClientMessage> client_inbox;
  std::vector<std::pair<std::string, farm::Envelope>> client_outbox;
  FarmStatus status;
  FarmCounters counters;
  bool stopping = false;
  bool stopped = false;
  // The loop's own invariant failure (InternalError, or any exception from dc's code):
  // the loop ends and the caller's next submit/collect/status throws it (exit 3).
  std::string fatal;

  // Loop thread only.
  DropLog drops;
  int64_t transport_drops = 0;

  explicit Impl(FarmBrokerOptions o) : options(std::move(o)) {}
  void setup_security();
  void bind();
  void loop();
  void read_router(FarmDispatcher& dispatcher);
  void serve_zap();
  void publish(FarmDispatcher& dispatcher);
  void serve(FarmDispatcher& dispatcher);
  // A client's message: to the inbox (serve_clients), else dropped with a Refused to a
  // ClientHello or StatusRequest (not a service, or a key not in the clients' allow-list).
  void take_client_message(const std::string& identity, farm::Envelope e, const std::string& peer);
  void send_client_outbox();
  void send_raw(const std::string& identity, const farm::Envelope& e) {
    const std::string payload = farm::serialize(e);
    router.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  }
  // Throws the loop's fatal error as an InternalError; call with `mutex` held.
  void rethrow_fatal() const {
    if (!fatal.empty()) throw_internal_error("farm broker: ", fatal);
  }
};

void FarmBroker::Impl::setup_security() {
  const bool loopback = farm::is_loopback_endpoint(options.endpoint);
  const bool curve = !options.curve_secret_key.empty();
  DC_USER_CHECK(curve || options.allowed_worker_keys.empty(),
                "worker keys given without the coordinator's CURVE secret key");
  if (!curve) {
    if (!loopback) {
      DC_USER_CHECK(options.insecure, "binding the farm to ", options.endpoint,
                    " exposes it beyond this machine, and workers run the code they are sent: "
                    "give CURVE keys (the coordinator's secret key and the workers' public keys) "
                    "or, on a network you trust, --insecure");
      spdlog::warn("farm: *** INSECURE *** {} is served WITHOUT authentication or encryption: anyone "
                   "who can reach it can join as a worker or read the jobs",
                   options.endpoint);
    }
    return;
  }
  DC_USER_CHECK(farm::is_z85_key(options.curve_secret_key),
                "the coordinator's CURVE secret key is not 40 characters of Z85");
  DC_USER_CHECK(!options.allowed_worker_keys.empty(),
                "CURVE needs the public keys of the workers that may connect (an allow-list)");
  for (const std::string& k : options.allowed_worker_keys) {
    DC_USER_CHECK(farm::is_z85_key(k), "worker key '", k, "' is not 40 characters of Z85");
    allowed_keys.insert(farm::z85_key_bytes(k));
    worker_peers.insert(hex(farm::z85_key_bytes(k)));
  }
  for (const std::string& k : options.allowed_client_keys) {
    DC_USER_CHECK(farm::is_z85_key(k), "client key '", k, "' is not 40 characters of Z85");
    allowed_keys.insert(farm::z85_key_bytes(k));
    client_peers.insert(hex(farm::z85_key_bytes(k)));
  }
  public_key = farm::curve_public_key(options.curve_secret_key);
  // The ZAP handler must be bound before the socket it guards.
  zap.emplace(context, zmq::socket_type::rep);
  zap->set(zmq::sockopt::linger, 0);
  zap->bind(kZapEndpoint);
  router.set(zmq::sockopt::curve_server, 1);
  router.set(zmq::sockopt::curve_secretkey, options.curve_secret_key);
  router.set(zmq::sockopt::zap_domain, "dc-farm");
}

void FarmBroker::Impl::bind() {
  router = zmq::socket_t(context, zmq::socket_type::router);
  // Let the Disconnects of a shutdown go out, but never hang on an unreachable peer.
  router.set(zmq::sockopt::linger, 500);
  router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_message_bytes));
  router.set(zmq::sockopt::rcvhwm, 100000);
  router.set(zmq::sockopt::sndhwm, 100000);
  setup_security();
  try {
    router.bind(options.endpoint);
  } catch (const zmq::error_t& e) {
    throw_user_error("cannot bind the farm to ", options.endpoint, ": ", e.what());
  }
  endpoint = router.get(zmq::sockopt::last_endpoint);
}

void FarmBroker::Impl::serve_zap() {
  // RFC 27: version, request id, domain, address, identity, mechanism, credentials.
  std::vector<zmq::message_t> req;
  while (true) {
    req.clear();
    const auto n = zmq::recv_multipart(*zap, std::back_inserter(req), zmq::recv_flags::dontwait);
    if (!n) return;
    const bool well_formed = req.size() >= 6 && req[0].to_string() == "1.0";
    bool allowed = false;
    std::string key;
    if (well_formed && req[5].to_string() == "CURVE" && req.size() >= 7 && req[6].size() == 32) {
      key = req[6].to_string();
      allowed = allowed_keys.count(key) != 0;
    }
    if (!allowed)
      spdlog::warn("farm: refused a connection from {}: {}", well_formed ? req[3].to_string() : "?",
                   key.empty() ? "no CURVE key" : "public key " + hex(key) + "... is not in the allow-list");
    const std::string request_id = req.size() > 1 ? req[1].to_string() : std::string();
    const std::string user = allowed ? hex(key) : std::string();
    const std::array<zmq::const_buffer, 6> reply = {
        zmq::str_buffer("1.0"),
        zmq::buffer(request_id),
        allowed ? zmq::str_buffer("200") : zmq::str_buffer("400"),
        allowed ? zmq::str_buffer("OK") : zmq::str_buffer("key not allowed"),
        zmq::buffer(user),
        zmq::const_buffer(),
    };
    zmq::send_multipart(*zap, reply);
  }
}

void FarmBroker::Impl::read_router(FarmDispatcher& dispatcher) {
  std::vector<zmq::message_t> parts;
  for (ReadBudget budget; budget.more();) {
    parts.clear();
    const auto n = zmq::recv_multipart(router, std::back_inserter(parts), zmq::recv_flags::dontwait);
    if (!n) return;
    size_t bytes = 0;
    for (const zmq::message_t& part : parts) bytes += part.size();
    budget.took(bytes);
    if (parts.size() != 2) {
      drops.note("malformed message", str_cat(parts.size(), " frames (expected routing id + 1)"));
      ++transport_drops;
      continue;
    }
    const std::string identity = parts[0].to_string();
    std::string why;
    std::optional<farm::Envelope> e =
        farm::parse_envelope(parts[1].data(), parts[1].size(), options.max_message_bytes, &why);
    if (!e) {
      drops.note("bad frame", why);
      ++transport_drops;
      continue;
    }
    std::string peer;
    if (zap) {
      // The key ZAP admitted (its hex, the user id serve_zap gave it).
      try {
        peer = parts[1].gets("User-Id");
      } catch (const zmq::error_t&) {
      }
    }
    if (farm::is_client_body(*e)) {
      take_client_message(identity, std::move(*e), peer);
      continue;
    }
    if (zap && !worker_peers.count(peer)) {
      // A client's key: it may submit jobs, not take them.
      drops.note("worker message from a key that is not a worker's", farm::body_name(*e));
      ++transport_drops;
      if (e->body_case() == farm::Envelope::kHello) {
        farm::Envelope r = farm::make_envelope();
        r.mutable_refused()->set_reason("this key is not in the workers' allow-list");
        send_raw(identity, r);
      }
      continue;
    }
    try {
      dispatcher.on_message(identity, *e, FarmDispatcher::Clock::now(), peer);
    } catch (const farm::ProtocolError& ex) {
      // A worker's bad message is its problem, not the farm's: dropped.
      drops.note("invalid message", str_cat(farm::body_name(*e), ": ", ex.what()));
      ++transport_drops;
    } catch (const zmq::error_t&) {
      throw;
    } catch (const std::exception& ex) {
      // dc's own bug while handling it: the farm's state can no longer be trusted.
      throw_internal_error("while handling a ", farm::body_name(*e), ": ", ex.what());
    }
  }
}

void FarmBroker::Impl::take_client_message(const std::string& identity, farm::Envelope e,
                                           const std::string& peer) {
  std::string refusal;
  if (!options.serve_clients) refusal = "this coordinator is not a farm service (dc-coordinator serve)";
  else if (zap && !client_peers.count(peer)) refusal = "this key is not in the clients' allow-list";
  if (!refusal.empty()) {
    drops.note("client message", str_cat(farm::body_name(e), ": ", refusal));
    ++transport_drops;
    if (e.body_case() == farm::Envelope::kClientHello || e.body_case() == farm::Envelope::kStatusRequest) {
      farm::Envelope r = farm::make_envelope();
      r.mutable_refused()->set_reason(refusal);
      send_raw(identity, r);
    }
    return;
  }
  std::lock_guard<std::mutex> lock(mutex);
  client_inbox.push_back({identity, std::move(e), peer});
  results_ready.notify_all();
}

void FarmBroker::Impl::send_client_outbox() {
  std::vector<std::pair<std::string, farm::Envelope>> out;
  {
    std::lock_guard<std::mutex> lock(mutex);
    out.swap(client_outbox);
  }
  for (auto& [identity, e] : out) {
    // Unset only (a refusal to an older client carries that client's version).
    if (e.protocol_version() == 0) e.set_protocol_version(farm::kProtocolVersion);
    send_raw(identity, e);
  }
}

void FarmBroker::Impl::publish(FarmDispatcher& dispatcher) {
  std::vector<Measurement> done = dispatcher.take_results();
  FarmCounters c = dispatcher.counters();
  c.dropped_frames += transport_drops;
  FarmStatus st = dispatcher.status();
  std::lock_guard<std::mutex> lock(mutex);
  st.queued += static_cast<int64_t>(inbox.size());
  status = st;
  counters = c;
  if (!done.empty()) {
    for (Measurement& m : done) results.push_back(std::move(m));
    results_ready.notify_all();
  }
}

void FarmBroker::Impl::loop() {
  std::optional<FarmDispatcher> dispatcher;
  std::string error;
  try {
    dispatcher.emplace(
        DispatchOptions{options.heartbeat, options.liveness, options.max_attempts,
                        options.max_credits_per_device, options.deadline_grace,
                        options.require_emulated, options.coordinator_id},
        [this](const std::string& identity, const farm::Envelope& e) {
          const std::string payload = farm::serialize(e);
          // ROUTER drops what it cannot route (a peer gone, a full queue): never blocks.
          router.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          router.send(zmq::buffer(payload), zmq::send_flags::dontwait);
        });
    serve(*dispatcher);
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  if (!error.empty()) {
    spdlog::error("farm: *** INTERNAL ERROR *** the broker stops: {}", error);
    std::lock_guard<std::mutex> lock(mutex);
    fatal = error;
    results_ready.notify_all();
  }
  if (!dispatcher) return;
  // What the farm survived, for logs and soak tests (scripts/soak.sh reads this line).
  FarmCounters c = dispatcher->counters();
  c.dropped_frames += transport_drops;
  spdlog::info("farm: counters: {} frames dropped, {} hellos refused, {} results ignored, {} invalid messages, "
               "{} leases requeued, {} leases expired, {} workers declared dead, {} internal errors",
               c.dropped_frames, c.refused_hellos, c.ignored_results, c.invalid_messages, c.requeued,
               c.expired_leases, c.sessions_expired, c.internal_errors);
  try {
    dispatcher->disconnect_all(error.empty() ? "coordinator shutting down" : "coordinator failed");
    publish(*dispatcher);
  } catch (const std::exception& e) {
    spdlog::warn("farm: while disconnecting workers: {}", e.what());
  }
}

// The poll loop, until shutdown. Errors sending or receiving are logged and the loop goes
// on; any other exception (a bug in dc's own code, or a failed poll) propagates to loop(),
// which ends the farm.
void FarmBroker::Impl::serve(FarmDispatcher& dispatcher) {
  std::vector<zmq::pollitem_t> items = {{router.handle(), 0, ZMQ_POLLIN, 0},
                                        {nullptr, wake.fd(), ZMQ_POLLIN, 0}};
  if (zap) items.push_back({zap->handle(), 0, ZMQ_POLLIN, 0});
  while (true) {
    const auto now = FarmDispatcher::Clock::now();
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(dispatcher.next_due() - now);
    wait = std::clamp(wait + std::chrono::milliseconds(1), std::chrono::milliseconds(0), options.heartbeat);
    try {
      zmq::poll(items, wait);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      // The farm cannot go on; ending it quietly would leave the tune waiting for ever.
      throw_internal_error("poll failed: ", e.what());
    }
    if (items[1].revents & ZMQ_POLLIN) wake.drain();
    // Taken out of the inbox before any is submitted, and owned by this iteration: an
    // exception part-way cannot leave moved-from entries behind to be submitted again.
    std::vector<FarmDispatcher::Submission> arrived;
    bool stop = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      arrived.swap(inbox);
      stop = stopping;
    }
    if (stop) return;
    const auto t = FarmDispatcher::Clock::now();
    size_t next = 0;  // arrived[next..] were not handed over yet
    try {
      while (next < arrived.size()) {
        // Consumed as soon as it is handed over, whether submit returns or throws.
        FarmDispatcher::Submission s = std::move(arrived[next++]);
        dispatcher.submit(std::move(s), t);
      }
      if (zap && (items[2].revents & ZMQ_POLLIN)) serve_zap();
      if (items[0].revents & ZMQ_POLLIN) read_router(dispatcher);
      send_client_outbox();
      dispatcher.tick(FarmDispatcher::Clock::now());
    } catch (const zmq::error_t& e) {
      spdlog::error("farm: socket error: {}", e.what());
      // The ones not handed over wait for the next turn, in order; none twice.
      std::lock_guard<std::mutex> lock(mutex);
      inbox.insert(inbox.begin(), std::make_move_iterator(arrived.begin() + static_cast<std::ptrdiff_t>(next)),
                   std::make_move_iterator(arrived.end()));
    }
    publish(dispatcher);
  }
}

FarmBroker::FarmBroker(FarmBrokerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& im = *impl_;
  DC_USER_CHECK(im.options.heartbeat.count() >= 10, "farm heartbeat of ", im.options.heartbeat.count(),
                " ms (at least 10)");
  DC_USER_CHECK(im.options.liveness >= 1, "farm liveness must be at least 1");
  DC_USER_CHECK(im.options.max_attempts >= 1, "farm max_attempts must be at least 1");
  DC_USER_CHECK(im.options.max_credits_per_device >= 1, "farm max_credits_per_device must be at least 1");
  if (im.options.coordinator_id.empty()) im.options.coordinator_id = default_coordinator_id();
  im.bind();
  spdlog::info("farm: listening on {}{}", im.endpoint, im.zap ? " (CURVE)" : "");
  // The sockets move to the loop thread here; thread start is the memory barrier ZeroMQ
  // asks for when a socket changes threads.
  im.thread = std::thread([&im] { im.loop(); });
}

FarmBroker::~FarmBroker() { shutdown(); }

const std::string& FarmBroker::endpoint() const { return impl_->endpoint; }
const std::string& FarmBroker::public_key() const { return impl_->public_key; }

void FarmBroker::submit(FarmJob job) {
  std::vector<FarmJob> one;
  one.push_back(std::move(job));
  submit_all(std::move(one));
}

void FarmBroker::submit_all(std::vector<FarmJob> jobs) {
  if (jobs.empty()) return;
  // Prepared (serialised) on the caller's thread, outside the lock.
  std::vector<FarmDispatcher::Submission> prepared;
  prepared.reserve(jobs.size());
  for (FarmJob& job : jobs) prepared.push_back(FarmDispatcher::prepare(std::move(job)));
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->rethrow_fatal();
    if (impl_->stopping) {
      spdlog::debug("farm: {} job(s) submitted after shutdown; ignored", prepared.size());
      return;
    }
    for (FarmDispatcher::Submission& s : prepared) impl_->inbox.push_back(std::move(s));
  }
  impl_->wake.wake();
}

std::vector<Measurement> FarmBroker::collect(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->results_ready.wait_for(lock, timeout, [this] {
    return !impl_->results.empty() || !impl_->client_inbox.empty() || impl_->stopped || !impl_->fatal.empty();
  });
  impl_->rethrow_fatal();
  std::vector<Measurement> out(std::make_move_iterator(impl_->results.begin()),
                               std::make_move_iterator(impl_->results.end()));
  impl_->results.clear();
  return out;
}

FarmStatus FarmBroker::status() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->rethrow_fatal();
  FarmStatus st = impl_->status;
  return st;
}

FarmCounters FarmBroker::counters() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->counters;
}

std::vector<FarmBroker::ClientMessage> FarmBroker::take_client_messages() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<ClientMessage> out;
  out.swap(impl_->client_inbox);
  return out;
}

void FarmBroker::send_to_client(const std::string& identity, farm::Envelope e) {
  std::vector<std::pair<std::string, farm::Envelope>> one;
  one.emplace_back(identity, std::move(e));
  send_to_clients(std::move(one));
}

void FarmBroker::send_to_clients(std::vector<std::pair<std::string, farm::Envelope>> messages) {
  if (messages.empty()) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) return;
    for (auto& m : messages) impl_->client_outbox.push_back(std::move(m));
  }
  impl_->wake.wake();
}

void FarmBroker::shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->wake.wake();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Closed on this thread now that the loop is done with them.
  impl_->router.close();
  if (impl_->zap) impl_->zap->close();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stopped = true;
  impl_->results_ready.notify_all();
}

}  // namespace dc
