#include "farm_inprocess.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "farm_codec.h"
#include "farm_dispatch.h"
#include "gpu/gpu_catalog.h"
#include "ir/error.h"
#include "job_executor.h"
#include "worker_devices.h"

namespace dc {

namespace {

class InProcessFarm final : public Farm {
 public:
  explicit InProcessFarm(InProcessFarmOptions o) : opts_(std::move(o)) {
    DC_INTERNAL_CHECK(opts_.workers_per_type >= 1, "in-process farm: workers_per_type < 1");
    const GpuCatalog catalog = GpuCatalog::builtin();
    // One executor per thread, configured as dc-worker configures an emulated device's
    // measurement child (UserError for an unknown type, as `dc-worker --emulate` gives).
    int index = 0;
    for (const auto& type : opts_.gpu_types) {
      queues_[type];
      for (int i = 0; i < opts_.workers_per_type; ++i) {
        ExecutorConfig c;
        c.device = emulated_inventory(catalog, type, index++);
        c.spec = catalog.require(type);
        c.cache_dir = opts_.cache_dir;
        if (opts_.faulty_worker < 0 || opts_.faulty_worker == index - 1) c.faults = opts_.faults;
        auto executor = std::make_shared<JobExecutor>(std::move(c));
        threads_.emplace_back([this, type, i, executor] {
          serve(type, worker_name(type, i), *executor);
        });
      }
    }
  }
  ~InProcessFarm() override { shutdown(); }

  void submit(FarmJob job) override {
    std::lock_guard lock(mu_);
    DC_INTERNAL_CHECK(!stopping_, "in-process farm: submit after shutdown");
    const auto it = queues_.find(job.gpu_type);
    DC_INTERNAL_CHECK(it != queues_.end(), "in-process farm has no worker of type '",
                      job.gpu_type, "'");
    it->second.push_back(std::move(job));
    ++queued_;
    work_cv_.notify_all();
  }

  std::vector<Measurement> collect(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    const bool crash = opts_.throw_after_results >= 0;
    if (crash && returned_ >= opts_.throw_after_results)
      throw std::runtime_error(fmt::format("in-process farm: simulated crash after {} results",
                                           returned_));
    done_cv_.wait_for(lock, timeout, [&] { return !results_.empty(); });
    std::vector<Measurement> out;
    while (!results_.empty() && !(crash && returned_ >= opts_.throw_after_results)) {
      out.push_back(std::move(results_.front()));
      results_.pop_front();
      ++returned_;
    }
    return out;
  }

  FarmStatus status() const override {
    std::lock_guard lock(mu_);
    FarmStatus s;
    if (!stopping_) {
      for (const auto& type : opts_.gpu_types) {
        s.workers_per_gpu_type[type] = opts_.workers_per_type;
        s.emulated_workers_per_gpu_type[type] = opts_.workers_per_type;
      }
    }
    s.queued = queued_;
    s.in_flight = in_flight_;
    s.done = done_;
    return s;
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      work_cv_.notify_all();
    }
    for (auto& t : threads_) t.join();
  }

 private:
  void serve(const std::string& type, const std::string& worker, JobExecutor& executor) {
    while (true) {
      FarmJob job;
      {
        std::unique_lock lock(mu_);
        auto& q = queues_[type];
        std::optional<size_t> pick;
        work_cv_.wait(lock, [&] { return stopping_ || (pick = pick_job(q, type, worker)).has_value(); });
        if (stopping_) return;
        job = std::move(q[*pick]);
        q.erase(q.begin() + static_cast<std::ptrdiff_t>(*pick));
        --queued_;
        ++in_flight_;
      }
      const auto t0 = std::chrono::steady_clock::now();
      Measurement m = run(std::move(job), worker, executor);
      std::this_thread::sleep_until(t0 + opts_.job_delay);
      std::lock_guard lock(mu_);
      // The job's identity in the DB includes the finished time: unique per farm.
      last_ms_ = std::max(farm::unix_ms_now(), last_ms_ + 1);
      m.finished_unix_ms = last_ms_;
      --in_flight_;
      ++done_;
      results_.push_back(std::move(m));
      done_cv_.notify_all();
    }
  }

  // The first job of the queue that `worker` may take: one that does not avoid it, or that
  // every worker of the type is avoided by (FarmJob::avoid_workers, as the dispatcher).
  std::optional<size_t> pick_job(const std::deque<FarmJob>& q, const std::string& type,
                                 const std::string& worker) const {
    for (size_t i = 0; i < q.size(); ++i) {
      const std::set<std::string>& avoid = q[i].avoid_workers;
      if (avoid.count(worker) == 0) return i;
      bool other = false;
      for (int k = 0; k < opts_.workers_per_type; ++k)
        other = other || avoid.count(worker_name(type, k)) == 0;
      if (!other) return i;
    }
    return std::nullopt;
  }

  std::string worker_name(const std::string& type, int i) const { return fmt::format("{}/{}-{}", opts_.host, type, i); }

  // The job as dc-worker gets it (the dispatcher's wire form, the codec's checks), run by
  // the production executor, and its Result turned back as the dispatcher turns it.
  Measurement run(FarmJob job, const std::string& worker, JobExecutor& executor) const {
    const std::optional<FakeOutcome> fake = opts_.timing ? std::optional(opts_.timing(job)) : std::nullopt;
    FarmDispatcher::Submission s = FarmDispatcher::prepare(std::move(job));
    farm::Job wire;  // the dispatcher keeps a job as its bytes (protocol version 4)
    if (!wire.ParseFromString(s.wire)) throw std::runtime_error("a prepared job does not parse");
    wire.set_lease_id(1);
    wire.set_attempt(1);
    farm::Result r = execute_wire_job(executor, wire, [] {});
    if (const std::string why = farm::validate_result(r); !why.empty())
      throw_internal_error("in-process farm: the executor returned an invalid result: ", why);
    Measurement m = farm::measurement_from_result(r);
    m.workload = s.meta.workload;
    m.variant_key = s.meta.variant_kernel.variant_key;
    m.source_hash = r.source_hash();
    m.gpu_type = s.meta.gpu_type;
    m.worker = worker;
    m.host = opts_.host;
    m.estimate_us = s.meta.estimate_us;
    m.emulated = true;
    if (m.status == JobStatus::internal_error)
      spdlog::error("in-process farm: job {}: {}", s.meta.job_id, m.error);
    if (fake && m.status == JobStatus::ok) {
      m.status = fake->status;
      m.error = fake->error;
      if (fake->status != JobStatus::ok) m.samples_us.clear();
      else if (!fake->samples_us.empty()) m.samples_us = fake->samples_us;
      summarize_samples(m);
    }
    return m;
  }

  const InProcessFarmOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::map<std::string, std::deque<FarmJob>> queues_;
  std::deque<Measurement> results_;
  bool stopping_ = false;
  int64_t queued_ = 0, in_flight_ = 0, done_ = 0, returned_ = 0;
  int64_t last_ms_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Farm> make_inprocess_farm(InProcessFarmOptions options) {
  return std::make_unique<InProcessFarm>(std::move(options));
}

}  // namespace dc
