// The farm service's test fixtures (test_farm_service*.cpp): the service on a thread of its
// own, in-process ZeroMQ workers whose jobs take a set time and count what they ran, and
// the options of a `tune --farm` client.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "farm_client.h"
#include "farm_codec.h"
#include "farm_service.h"
#include "remote_farm.h"
#include "status_request.h"
#include "variant.h"

namespace dc::service_testing {

using namespace std::chrono_literals;

// A job of workload `workload` whose source is unique to (workload, i).
inline FarmJob service_job(const std::string& workload, int i) {
  Variant v;
  v.template_name = "bench";
  v.precision = "fp32";
  v.params = {{"i", i}};
  FarmJob j;
  j.gpu_type = "h100";
  j.workload = workload;
  j.variant_kernel.template_name = "bench";
  j.variant_kernel.variant_key = v.key();
  j.job_id = workload + "/" + v.key() + "/h100";
  j.variant_kernel.source = "// " + workload + " " + std::to_string(i) + "\n__global__ void k(float* t0) {}\n";
  KernelBuffer b;
  b.name = "t0";
  b.shape = {1024};
  j.variant_kernel.buffers = {b};
  Launch l;
  l.kernel = "k";
  l.args = {0};
  j.variant_kernel.launches = {l};
  j.reference = j.variant_kernel;
  j.service.workload_kind = "opaque";
  j.service.workload_canonical = "canonical " + workload;
  j.service.variant_template = v.template_name;
  j.service.variant_precision = v.precision;
  j.service.variant_params = v.params;
  j.service.emulated = true;
  j.service.nvrtc_major = "13";
  return j;
}

// Workers that count what they were given to run, by source.
class Workers {
 public:
  Workers(const std::string& endpoint, int n, std::chrono::milliseconds job_time,
          const std::string& public_key = "", const std::string& server_key = "",
          const std::string& secret_key = "") {
    for (int w = 0; w < n; ++w) {
      farm::GpuInventory g;
      g.set_gpu_type("h100");
      g.set_emulated(true);
      FarmClientOptions o;
      o.endpoint = endpoint;
      o.worker_id = "svc-" + std::to_string(w);
      o.server_public_key = server_key;
      o.public_key = public_key;
      o.secret_key = secret_key;
      JobRunner run = [this, job_time](const farm::Job& job) {
        // First, as dc-worker's executor does (execute_wire_job): the service forwards a
        // tune's kernels unchecked (protocol version 4), and a job whose kernels do not
        // check is answered as malformed, without a run.
        try {
          (void)farm::job_from_proto(farm::Job(job));
        } catch (const farm::ProtocolError& e) {
          farm::Result r;
          r.set_status("unsupported");
          r.set_error(std::string("malformed job: ") + e.what());
          r.set_emulated(true);
          return r;
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          ++runs_[job.variant().source()];
        }
        std::this_thread::sleep_for(job_time);
        farm::Result r;
        r.set_status("ok");
        r.add_samples_us(10.0);
        r.set_emulated(true);
        r.set_nvrtc_version("13.0.48");
        return r;
      };
      clients_.push_back(std::make_unique<FarmClient>(o, std::vector{g}, std::vector{run}));
      FarmClient* c = clients_.back().get();
      threads_.emplace_back([c] { c->run(); });
    }
  }
  ~Workers() {
    for (auto& c : clients_) c->stop();
    for (auto& t : threads_) t.join();
  }
  std::map<std::string, int> runs() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return runs_;
  }
  int total() const {
    int n = 0;
    for (const auto& [s, k] : runs()) n += k;
    return n;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int> runs_;
  std::vector<std::unique_ptr<FarmClient>> clients_;
  std::vector<std::thread> threads_;
};

// The service on its own thread until destroyed.
class Service {
 public:
  explicit Service(TuningDb& db, FarmServiceOptions o = {}) : service_(o, db) {
    thread_ = std::thread([this] { service_.run(stop_); });
  }
  ~Service() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return service_.endpoint(); }
  const std::string& public_key() const { return service_.public_key(); }
  farm::StatusReply status() const {
    StatusRequestOptions o;
    o.endpoint = endpoint();
    return request_status(o);
  }

 private:
  FarmService service_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

inline RemoteFarmOptions client(const std::string& endpoint, const std::string& model, int priority) {
  RemoteFarmOptions o;
  o.endpoint = endpoint;
  o.model = model;
  o.gpu_types = {"h100"};
  o.priority = priority;
  o.connect_timeout = 5s;
  return o;
}

}  // namespace dc::service_testing
