// Helpers of the farm tests (test_farm_*.cpp): jobs with small real kernels, and a fake
// worker that speaks the protocol by hand over a DEALER socket, so that a test can make a
// worker fall silent, lie, or send garbage at exactly the moment it wants.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "farm.h"
#include "farm_codec.h"
#include "prelude.h"
#include "testing.h"

namespace dc::testing {

// One compile cache for the in-process farms' executors: a kernel compiled by one test is a
// cache hit in the next. ctest runs every test in a process of its own, so it names one folder
// for the whole run (DC_TEST_COMPILE_CACHE, set in tests/CMakeLists.txt; the cache is keyed by
// source, architecture and NVRTC version, and its writes are atomic, so tests running side by
// side share it safely). Without it, a folder per process, removed at exit.
inline std::string shared_compile_cache() {
  struct Dir {
    const char* given = std::getenv("DC_TEST_COMPILE_CACHE");
    std::string path = given && *given ? std::string(given)
                                       : (std::filesystem::path(::testing::TempDir()) /
                                          ("dc-test-compile-cache-" + std::to_string(::getpid()))).string();
    ~Dir() {
      if (given && *given) return;
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// y[i] = 2 * x[i] over n floats; `extra` goes into the kernel body (a spin loop, a fault)
// and `tag` into a comment (a distinct source, so a distinct compile).
inline GeneratedKernel scale_kernel(int n, const std::string& extra = "", const std::string& tag = "",
                                    const std::string& key = "scale") {
  GeneratedKernel k;
  k.template_name = "test_scale";
  k.variant_key = key;
  k.source = cuda_prelude() + "// " + tag + "\n" +
             "extern \"C\" __global__ void scale(const float* __restrict__ x, float* __restrict__ y) {\n"
             "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < " + std::to_string(n) + ") y[i] = 2.f * x[i];\n" + extra + "}\nDC_EXPORT_KERNEL(scale)\n";
  KernelBuffer x{"t0", BufferRole::input, DType::f32, {n}, false};
  KernelBuffer y{"t1", BufferRole::output, DType::f32, {n}, false};
  k.buffers = {x, y};
  Launch l;
  l.kernel = "scale";
  l.grid = {(n + 127) / 128, 1, 1};
  l.block = {128, 1, 1};
  l.args = {0, 1};
  k.launches = {l};
  return k;
}

inline FarmJob scale_job(const std::string& id, const std::string& gpu_type, const std::string& extra = "",
                         const std::string& tag = "") {
  FarmJob j;
  j.job_id = id;
  j.gpu_type = gpu_type;
  j.workload = "scale1000";
  j.variant_kernel = scale_kernel(1000, extra, tag, "var-" + id);
  j.reference = scale_kernel(1000, "", "reference", "reference");
  j.reference.template_name = "reference";
  j.seed = 7;
  j.estimate_us = 3.5;
  return j;
}

// A worker written by hand.
class FakeWorker {
 public:
  FakeWorker(zmq::context_t& ctx, const std::string& endpoint) : socket_(ctx, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  void close() { socket_.close(); }
  bool answer_heartbeats = true;

  void send(farm::Envelope e, bool keep_version = false) {
    if (!keep_version) e.set_protocol_version(farm::kProtocolVersion);
    send_raw({farm::serialize(e)});
  }
  void send_raw(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      socket_.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  // Hello offering (type, emulated) devices with indices 0, 1, ...
  void hello(const std::string& id, const std::vector<std::string>& types, uint32_t version = farm::kProtocolVersion,
             const std::vector<uint64_t>& held = {}) {
    farm::Envelope e;
    e.set_protocol_version(version);
    farm::Hello* h = e.mutable_hello();
    h->set_worker_id(id);
    h->set_host("test");
    for (size_t i = 0; i < types.size(); ++i) {
      farm::GpuInventory* g = h->add_gpus();
      g->set_device_index(static_cast<int>(i));
      g->set_gpu_type(types[i]);
      g->set_emulated(true);
    }
    for (uint64_t l : held) h->add_held_leases(l);
    send(e, true);
  }
  void ready(int device, uint32_t credits) {
    farm::Envelope e;
    e.mutable_ready()->set_device_index(device);
    e.mutable_ready()->set_credits(credits);
    send(e);
  }
  void heartbeat() {
    farm::Envelope e;
    e.mutable_heartbeat()->set_sent_unix_ms(1);
    send(e);
  }
  void result(const farm::Job& job, const std::string& status = "ok", std::vector<double> samples = {5.0, 6.0, 7.0}) {
    farm::Envelope e;
    farm::Result* r = e.mutable_result();
    r->set_lease_id(job.lease_id());
    r->set_job_id(job.job_id());
    r->set_status(status);
    r->set_device_index(job.device_index());
    for (double s : samples) r->add_samples_us(s);
    send(e);
  }
  // The next envelope other than a Heartbeat, within `timeout`. A JobBatch comes out as one
  // Job envelope per job, in order (`batches` counts the batches, `largest_batch` their size).
  std::optional<farm::Envelope> next(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (!unpacked_.empty()) {
        farm::Envelope e = std::move(unpacked_.front());
        unpacked_.pop_front();
        return e;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, left);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t m;
      if (!socket_.recv(m, zmq::recv_flags::dontwait)) continue;
      std::string why;
      auto e = farm::parse_envelope(m.data(), m.size(), farm::kDefaultMaxMessageBytes, &why);
      if (e && e->body_case() == farm::Envelope::kHeartbeat) {
        if (answer_heartbeats) heartbeat();  // alive while it listens
        continue;
      }
      if (e && e->body_case() == farm::Envelope::kJobs) {
        ++batches;
        largest_batch = std::max(largest_batch, e->jobs().jobs_size());
        for (const std::string& j : e->jobs().jobs()) {
          farm::Envelope one;
          one.set_protocol_version(e->protocol_version());
          if (!one.mutable_job()->ParseFromString(j)) ADD_FAILURE() << "a JobBatch holds a job that does not parse";
          unpacked_.push_back(std::move(one));
        }
        continue;
      }
      if (e) return e;
    }
  }
  int64_t batches = 0;
  int largest_batch = 0;
  // The next Job, skipping anything else.
  std::optional<farm::Job> next_job(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      auto e = next(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()));
      if (e && e->has_job()) return e->job();
    }
    return std::nullopt;
  }
  // Hello, wait for Welcome, grant credits on device 0.
  bool join(const std::string& id, const std::vector<std::string>& types, uint32_t credits) {
    hello(id, types);
    auto e = next(std::chrono::milliseconds(3000));
    if (!e || !e->has_welcome()) return false;
    for (size_t d = 0; d < types.size(); ++d) ready(static_cast<int>(d), credits);
    return true;
  }

 private:
  zmq::socket_t socket_;
  std::deque<farm::Envelope> unpacked_;
};

// DC_TEST_TIME_SCALE (a number >= 1, default 1): how much longer the helpers below wait
// before they give up. `scripts/test.sh --tsan` sets it: ThreadSanitizer makes the farm
// several times slower, more so on a loaded machine. Only give-up bounds scale: a longer wait
// for something that must happen, or must not, never lets a wrong result pass. Protocol
// timings (heartbeats, deadlines) and lower bounds on elapsed time stay as written.
inline double time_scale() {
  static const double scale = [] {
    const char* given = std::getenv("DC_TEST_TIME_SCALE");
    if (!given || !*given) return 1.0;
    char* end = nullptr;
    const double v = std::strtod(given, &end);
    if (*end != '\0' || !(v >= 1.0))
      throw std::invalid_argument(std::string("DC_TEST_TIME_SCALE must be a number >= 1, not '") + given + "'");
    return v;
  }();
  return scale;
}
inline std::chrono::milliseconds scaled(std::chrono::milliseconds bound) {
  return std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(bound.count()) * time_scale()));
}

// Polls `pred` until it holds or `timeout` (scaled) passes.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) {
  const auto until = std::chrono::steady_clock::now() + scaled(timeout);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Collects until `n` measurements arrived or `timeout` (scaled) passed.
inline std::vector<Measurement> collect_n(Farm& farm, size_t n, std::chrono::milliseconds timeout) {
  std::vector<Measurement> out;
  const auto until = std::chrono::steady_clock::now() + scaled(timeout);
  while (out.size() < n && std::chrono::steady_clock::now() < until)
    for (Measurement& m : farm.collect(std::chrono::milliseconds(50))) out.push_back(std::move(m));
  return out;
}

}  // namespace dc::testing
