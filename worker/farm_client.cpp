#include "ir/host.h"
#include "farm_client.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "farm/status.h"
#include "farm_security.h"
#include "job_wire.h"

namespace dc {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string default_worker_id() { return host_and_pid(); }

// One device: its jobs run here, one at a time, in arrival order.
struct Lane {
  farm::GpuInventory device;
  JobRunner runner;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<farm::Job> queue;
  bool closing = false;    // finish the queue, then end
  bool abandon = false;    // end after the current job
  std::thread thread;
  // Loop thread only. used: jobs received whose result is not yet sent (queued, running
  // or waiting for a session); granted: credits the current session has not used yet.
  int used = 0;
  int granted = 0;
};

}  // namespace

struct FarmClient::Impl {
  FarmClientOptions options;
  std::vector<std::unique_ptr<Lane>> lanes;
  int wake_fd = -1;
  std::atomic<int> stop_requests{0};

  std::mutex finished_mutex;
  std::deque<farm::Result> finished;  // from the lanes

  mutable std::mutex stats_mutex;
  Stats stats;
  std::string refusal;

  // Loop thread only.
  zmq::context_t context;
  std::optional<zmq::socket_t> socket;
  bool welcomed = false;
  milliseconds heartbeat{1000};
  int liveness = 3;
  Clock::time_point last_heard, next_heartbeat;
  std::set<uint64_t> held;              // leases received, result not yet sent
  std::vector<farm::Result> unsent;     // results waiting for a session
  // Results and credits to send, as one ResultBatch (protocol version 3): flush() sends it
  // once the loop has handled what woke it, so a wake that finds several results sends one
  // message, not one per result and one per credit.
  farm::ResultBatch outgoing;
  int64_t drops = 0;

  ~Impl() {
    for (auto& lane : lanes) {
      {
        std::lock_guard<std::mutex> lock(lane->mutex);
        lane->closing = lane->abandon = true;
      }
      lane->cv.notify_all();
      if (lane->thread.joinable()) lane->thread.join();
    }
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void wake() const {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  void lane_main(Lane& lane) {
    while (true) {
      farm::Job job;
      {
        std::unique_lock<std::mutex> lock(lane.mutex);
        lane.cv.wait(lock, [&] { return lane.abandon || !lane.queue.empty() || lane.closing; });
        if (lane.abandon || lane.queue.empty()) return;
        job = std::move(lane.queue.front());
        lane.queue.pop_front();
      }
      farm::Result r;
      try {
        r = lane.runner(job);
      } catch (const std::exception& e) {
        // The runner is dc's code (the measurement child's parent side): its failure is a
        // dc bug, not the variant's, and never final.
        spdlog::error("job {}: INTERNAL ERROR in the worker (a dc bug): {}", job.job_id(), e.what());
        r = farm::Result();
        r.set_status(std::string(job_status_name(JobStatus::internal_error)));
        r.set_error(std::string("internal error in the worker: ") + e.what());
      }
      r.set_lease_id(job.lease_id());
      r.set_job_id(job.job_id());
      r.set_device_index(job.device_index());
      {
        std::lock_guard<std::mutex> lock(finished_mutex);
        finished.push_back(std::move(r));
      }
      wake();
    }
  }

  void send(farm::Envelope e) {
    e.set_protocol_version(farm::kProtocolVersion);
    const std::string payload = farm::serialize(e);
    // A DEALER with no connection queues up to its HWM; past that, drop (never block).
    [[maybe_unused]] auto sent = socket->send(zmq::buffer(payload), zmq::send_flags::dontwait);
  }

  void flush() {
    if (!socket || !welcomed || (outgoing.results_size() == 0 && outgoing.ready_size() == 0)) return;
    farm::Envelope e;
    e.mutable_results()->Swap(&outgoing);
    send(std::move(e));
  }

  void connect() {
    socket.emplace(context, zmq::socket_type::dealer);
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options.max_message_bytes));
    if (!options.server_public_key.empty()) {
      socket->set(zmq::sockopt::curve_serverkey, options.server_public_key);
      socket->set(zmq::sockopt::curve_publickey, options.public_key);
      socket->set(zmq::sockopt::curve_secretkey, options.secret_key);
    }
    try {
      socket->connect(options.endpoint);
    } catch (const zmq::error_t& e) {
      throw_user_error("cannot connect to ", options.endpoint, ": ", e.what());
    }
    welcomed = false;
    outgoing.Clear();  // empty already (flushed before the old socket went): a session starts afresh
    farm::Envelope e;
    farm::Hello* h = e.mutable_hello();
    h->set_worker_id(options.worker_id);
    h->set_host(host_name());
    for (const auto& lane : lanes) *h->add_gpus() = lane->device;
    for (uint64_t l : held) h->add_held_leases(l);
    send(std::move(e));
    last_heard = Clock::now();
  }

  Lane* lane_of(int32_t device) {
    for (auto& lane : lanes)
      if (lane->device.device_index() == device) return lane.get();
    return nullptr;
  }

  void grant(Lane& lane) {
    const int free = options.credits - lane.used - lane.granted;
    if (free <= 0 || !welcomed || stop_requests.load() > 0) return;
    farm::Ready* r = outgoing.add_ready();
    r->set_device_index(lane.device.device_index());
    r->set_credits(static_cast<uint32_t>(free));
    lane.granted += free;
  }

  void deliver(farm::Result r) {
    if (!welcomed) {
      unsent.push_back(std::move(r));
      return;
    }
    const uint64_t lease = r.lease_id();
    const int32_t device = r.device_index();
    *outgoing.add_results() = std::move(r);
    held.erase(lease);
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      ++stats.jobs_done;
    }
    if (Lane* lane = lane_of(device)) {
      lane->used = std::max(0, lane->used - 1);
      grant(*lane);
    }
  }

  void on_welcome(const farm::Welcome& w) {
    welcomed = true;
    if (w.heartbeat_ms() >= 10) heartbeat = milliseconds(w.heartbeat_ms());
    if (w.liveness() >= 1) liveness = static_cast<int>(w.liveness());
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      ++stats.welcomes;
    }
    spdlog::info("worker: connected to coordinator {} at {} (heartbeat {} ms)", w.coordinator_id(),
                 options.endpoint, heartbeat.count());
    // Credits belong to a session: the new one starts with none.
    for (auto& lane : lanes) lane->granted = 0;
    std::vector<farm::Result> pending;
    pending.swap(unsent);
    for (farm::Result& r : pending) deliver(std::move(r));
    for (auto& lane : lanes) grant(*lane);
    flush();
  }

  void on_job(const farm::Job& job) {
    if (!welcomed || held.count(job.lease_id()) != 0) return;
    Lane* lane = lane_of(job.device_index());
    if (lane == nullptr) {
      farm::Result r;
      r.set_lease_id(job.lease_id());
      r.set_job_id(job.job_id());
      r.set_device_index(job.device_index());
      r.set_status(std::string(job_status_name(JobStatus::unsupported)));
      r.set_error(str_cat("this worker has no device ", job.device_index()));
      *outgoing.add_results() = std::move(r);  // sent when read_socket is done
      return;
    }
    spdlog::debug("worker: job {} (lease {}, attempt {}) on device {}", job.job_id(), job.lease_id(), job.attempt(),
                  job.device_index());
    held.insert(job.lease_id());
    lane->granted = std::max(0, lane->granted - 1);
    ++lane->used;
    if (options.on_job_received) options.on_job_received(job);
    {
      std::lock_guard<std::mutex> lock(lane->mutex);
      lane->queue.push_back(job);
    }
    lane->cv.notify_one();
  }

  // A job whose bytes do not parse as a Job (version 4: the service forwards a tune's bytes
  // unparsed): answered at once as a failed result, so the job is recorded as such, never
  // lost; the other jobs of its batch run.
  void refuse_job_bytes(const std::string& bytes) {
    const std::optional<farm::JobAddress> a = farm::read_job_address(bytes);
    if (!welcomed || !a || held.count(a->lease_id) != 0) {
      spdlog::warn("worker: dropped a job whose bytes do not parse{}", a ? "" : " and name no lease");
      return;
    }
    farm::Result r;
    r.set_lease_id(a->lease_id);
    r.set_job_id(a->job_id);
    r.set_device_index(a->device_index);
    r.set_status(std::string(job_status_name(JobStatus::unsupported)));
    r.set_error("malformed job: its bytes do not parse as a farm Job");
    spdlog::warn("worker: job {} (lease {}): {}", a->job_id, a->lease_id, r.error());
    Lane* lane = lane_of(a->device_index);
    if (lane != nullptr) {
      r.set_emulated(lane->device.emulated());
      r.set_driver_version(lane->device.driver_version());
      // The job took one of the lane's credits; its answer gives it back.
      lane->granted = std::max(0, lane->granted - 1);
    }
    *outgoing.add_results() = std::move(r);  // sent when read_socket is done
    if (lane != nullptr) grant(*lane);
  }

  // Returns false when the coordinator refused this worker.
  bool read_socket() {
    std::vector<zmq::message_t> parts;
    for (int i = 0; i < 256; ++i) {
      parts.clear();
      const auto n = zmq::recv_multipart(*socket, std::back_inserter(parts), zmq::recv_flags::dontwait);
      if (!n) break;
      std::string why;
      std::optional<farm::Envelope> e;
      if (parts.size() == 1) e = farm::parse_envelope(parts[0].data(), parts[0].size(), options.max_message_bytes, &why);
      else why = str_cat(parts.size(), " frames");
      if (e && !farm::version_ok(*e) && e->body_case() != farm::Envelope::kRefused)
        why = str_cat("protocol version ", e->protocol_version()), e.reset();
      if (!e) {
        if (++drops <= 10) spdlog::warn("worker: dropped a message from the coordinator: {}", why);
        continue;
      }
      last_heard = Clock::now();
      switch (e->body_case()) {
        case farm::Envelope::kWelcome: on_welcome(e->welcome()); break;
        case farm::Envelope::kRefused: {
          std::lock_guard<std::mutex> lock(stats_mutex);
          refusal = e->refused().reason();
          return false;
        }
        case farm::Envelope::kDisconnect:
          spdlog::warn("worker: coordinator asked to reconnect: {}", e->disconnect().reason());
          reconnect(options.reconnect_min);
          return true;
        case farm::Envelope::kJob: on_job(e->job()); break;
        case farm::Envelope::kJobs:
          for (const std::string& bytes : e->jobs().jobs()) {
            farm::Job job;
            if (job.ParseFromString(bytes)) on_job(job);
            else refuse_job_bytes(bytes);
          }
          break;
        case farm::Envelope::kHeartbeat: break;
        default:
          if (++drops <= 10) spdlog::warn("worker: unexpected {} from the coordinator", farm::body_name(*e));
      }
    }
    flush();
    return true;
  }

  void collect_finished() {
    std::deque<farm::Result> done;
    {
      std::lock_guard<std::mutex> lock(finished_mutex);
      done.swap(finished);
    }
    for (farm::Result& r : done) {
      spdlog::debug("worker: job {} finished: {}", r.job_id(), r.status());
      deliver(std::move(r));
    }
    flush();
  }

  // Closes the socket, waits `backoff` (collecting results meanwhile; stop() cuts it short)
  // and says Hello on a fresh socket.
  void reconnect(milliseconds backoff) {
    flush();  // what the old session already earned (an unsupported job's answer)
    socket.reset();
    welcomed = false;
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      ++stats.reconnects;
    }
    const auto until = Clock::now() + backoff;
    // A stop with nothing in hand or to deliver ends the wait: nobody needs the coordinator.
    const auto stopping_idle = [this] { return stop_requests.load() >= 1 && held.empty() && unsent.empty(); };
    while (Clock::now() < until && stop_requests.load() < 2 && !stopping_idle()) {
      zmq::pollitem_t item{nullptr, wake_fd, ZMQ_POLLIN, 0};
      const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
      try {
        zmq::poll(&item, 1, std::max(left, milliseconds(0)));
      } catch (const zmq::error_t& e) {  // SIGINT/SIGTERM: the loop's condition decides
        if (e.num() != EINTR) throw;
        continue;
      }
      if (item.revents & ZMQ_POLLIN) {
        uint64_t v;
        [[maybe_unused]] const ssize_t n = ::read(wake_fd, &v, sizeof v);
        collect_finished();
      }
    }
    connect();
  }

  void bye(const std::string& reason) {
    if (!socket) return;
    farm::Envelope e;
    e.mutable_bye()->set_reason(reason);
    send(std::move(e));
    // Give the last results and the Bye a chance to leave.
    socket->set(zmq::sockopt::linger, 2000);
    socket.reset();
  }
};

FarmClient::FarmClient(FarmClientOptions options, std::vector<farm::GpuInventory> inventory,
                       std::vector<JobRunner> runners)
    : impl_(std::make_unique<Impl>()) {
  DC_INTERNAL_CHECK(inventory.size() == runners.size(), "one runner per device");
  DC_USER_CHECK(!inventory.empty(), "a worker needs at least one device");
  DC_USER_CHECK(options.credits >= 1, "--credits must be at least 1");
  DC_USER_CHECK(options.heartbeat.count() >= 10, "heartbeat of at least 10 ms");
  DC_USER_CHECK(options.liveness >= 1, "liveness must be at least 1");
  const bool curve = !options.server_public_key.empty() || !options.secret_key.empty();
  if (curve) {
    DC_USER_CHECK(farm::is_z85_key(options.server_public_key), "the coordinator's public key is not a CURVE key");
    DC_USER_CHECK(farm::is_z85_key(options.secret_key), "the worker's secret key is not a CURVE key");
    if (options.public_key.empty()) options.public_key = farm::curve_public_key(options.secret_key);
  } else if (!farm::is_loopback_endpoint(options.endpoint)) {
    spdlog::warn("worker: connecting to {} WITHOUT CURVE: jobs and results travel unauthenticated",
                 options.endpoint);
  }
  if (options.worker_id.empty()) options.worker_id = default_worker_id();
  Impl& im = *impl_;
  im.options = std::move(options);
  im.heartbeat = im.options.heartbeat;
  im.liveness = im.options.liveness;
  im.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  DC_USER_CHECK(im.wake_fd >= 0, "eventfd failed");
  for (size_t i = 0; i < inventory.size(); ++i) {
    auto lane = std::make_unique<Lane>();
    lane->device = std::move(inventory[i]);
    lane->runner = std::move(runners[i]);
    im.lanes.push_back(std::move(lane));
  }
}

FarmClient::~FarmClient() = default;

void FarmClient::stop() {
  impl_->stop_requests.fetch_add(1);
  impl_->wake();
}

std::string FarmClient::refusal() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->refusal;
}

FarmClient::Stats FarmClient::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  Stats s = impl_->stats;
  return s;
}

FarmClient::Outcome FarmClient::run() {
  Impl& im = *impl_;
  for (auto& lane : im.lanes) {
    Lane* l = lane.get();
    lane->thread = std::thread([&im, l] { im.lane_main(*l); });
  }
  im.connect();
  im.next_heartbeat = Clock::now() + im.heartbeat;
  milliseconds backoff = im.options.reconnect_min;
  bool draining = false;
  Clock::time_point drain_started;
  Outcome outcome = Outcome::stopped;
  while (true) {
    const int stops = im.stop_requests.load();
    if (stops >= 2) {
      spdlog::warn("worker: stopping now; {} job(s) abandoned", im.held.size());
      if (im.welcomed) im.bye("stopped (jobs abandoned)");
      break;
    }
    if (stops == 1 && !draining) {
      draining = true;
      drain_started = Clock::now();
      // A job already delivered to the socket is in hand: take it before deciding to leave.
      // (One still on the wire is not; Bye makes the coordinator requeue it.)
      if (im.welcomed && !im.read_socket()) {
        outcome = Outcome::refused;
        break;
      }
      if (!im.held.empty()) spdlog::info("worker: stopping after {} job(s) in progress", im.held.size());
    }
    if (draining && im.held.empty() && im.unsent.empty()) {
      if (im.welcomed) im.bye("stopped");
      break;
    }
    if (draining && !im.welcomed && Clock::now() - drain_started > im.heartbeat * im.liveness * 2) {
      spdlog::warn("worker: stopping without a coordinator; {} result(s) not delivered", im.unsent.size());
      break;
    }
    const auto now = Clock::now();
    const auto silent_at = im.last_heard + im.heartbeat * im.liveness;
    const auto next = std::min(im.welcomed ? im.next_heartbeat : silent_at, silent_at);
    const auto wait = std::clamp(std::chrono::duration_cast<milliseconds>(next - now) + milliseconds(1),
                                 milliseconds(0), im.heartbeat);
    zmq::pollitem_t items[2] = {{im.socket->handle(), 0, ZMQ_POLLIN, 0}, {nullptr, im.wake_fd, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, wait);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t v;
      [[maybe_unused]] const ssize_t n = ::read(im.wake_fd, &v, sizeof v);
      im.collect_finished();
    }
    if (items[0].revents & ZMQ_POLLIN) {
      const bool was_welcomed = im.welcomed;
      if (!im.read_socket()) {
        spdlog::error("worker: the coordinator refused this worker: {}", im.refusal);
        outcome = Outcome::refused;
        break;
      }
      if (!was_welcomed && im.welcomed) backoff = im.options.reconnect_min;
    }
    const auto t = Clock::now();
    if (im.welcomed && t >= im.next_heartbeat) {
      farm::Envelope e;
      e.mutable_heartbeat()->set_sent_unix_ms(static_cast<uint64_t>(farm::unix_ms_now()));
      im.send(std::move(e));
      im.next_heartbeat = t + im.heartbeat;
    }
    if (t - im.last_heard > im.heartbeat * im.liveness) {
      spdlog::warn("worker: coordinator at {} silent for {} ms; reconnecting in {} ms", im.options.endpoint,
                   std::chrono::duration_cast<milliseconds>(t - im.last_heard).count(), backoff.count());
      im.reconnect(backoff);
      backoff = std::min(backoff * 2, im.options.reconnect_max);
    }
  }
  im.socket.reset();
  return outcome;
}

}  // namespace dc
