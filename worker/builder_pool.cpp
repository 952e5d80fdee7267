#include "builder_pool.h"

#include <spdlog/spdlog.h>

#include "farm/status.h"
#include "measure_child.h"

namespace dc {

std::optional<farm::Result> build_verdict(const farm::Job& job, const farm::Result& built) {
  const std::optional<JobStatus> s = parse_job_status(built.status());
  if (s == JobStatus::timeout) return built;
  // A compile never faults: runtime_fault here is MeasureChild's report of a child that
  // died while compiling, a crash of NVRTC or ptxas on this source. The measurement child
  // would crash the same way.
  if (s == JobStatus::runtime_fault) {
    farm::Result r;
    r.set_lease_id(job.lease_id());
    r.set_job_id(job.job_id());
    r.set_device_index(job.device_index());
    r.set_status(std::string(job_status_name(JobStatus::compile_error)));
    r.set_error("the compile process died compiling this kernel: " + built.error());
    return r;
  }
  return std::nullopt;
}

BuilderPool::BuilderPool(int builders, std::function<std::vector<std::string>(int32_t)> child_argv)
    : child_argv_(std::move(child_argv)) {
  for (int i = 0; i < std::max(1, builders); ++i) threads_.emplace_back([this, i] { builder_main(i); });
}

BuilderPool::~BuilderPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  done_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BuilderPool::submit(const farm::Job& job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || entries_.count(job.lease_id())) return;
    entries_[job.lease_id()].job = job;
    queue_.push_back(job.lease_id());
  }
  work_.notify_one();
}

std::optional<farm::Result> BuilderPool::take(const farm::Job& job) {
  std::unique_lock lock(mutex_);
  auto it = entries_.find(job.lease_id());
  if (it == entries_.end()) return std::nullopt;
  if (it->second.state == State::queued) {
    // Not started: the measurement child compiles it, as it would without builders.
    std::erase(queue_, job.lease_id());
    entries_.erase(it);
    ++stats_.skipped;
    return std::nullopt;
  }
  done_.wait(lock, [&] { return stopping_ || it->second.state == State::done; });
  std::optional<farm::Result> verdict = std::move(it->second.verdict);
  entries_.erase(it);
  return verdict;
}

BuilderPool::Stats BuilderPool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void BuilderPool::builder_main(int index) {
  // One compile child per device this builder has compiled for (devices differ in arch).
  std::map<int32_t, std::unique_ptr<MeasureChild>> children;
  while (true) {
    uint64_t lease = 0;
    farm::Job job;
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      lease = queue_.front();
      queue_.pop_front();
      Entry& e = entries_.at(lease);
      e.state = State::building;
      job = e.job;
    }
    std::unique_ptr<MeasureChild>& child = children[job.device_index()];
    if (!child) child = std::make_unique<MeasureChild>(child_argv_(job.device_index()));
    const farm::Result built = child->run(job);
    std::optional<farm::Result> verdict = build_verdict(job, built);
    if (verdict)
      spdlog::warn("builder {}: job {}: {}", index, job.job_id(), verdict->error());
    {
      std::lock_guard lock(mutex_);
      ++stats_.built;
      if (verdict && verdict->status() == job_status_name(JobStatus::compile_error)) ++stats_.crashed;
      Entry& e = entries_.at(lease);
      e.verdict = std::move(verdict);
      e.state = State::done;
    }
    done_.notify_all();
  }
}

}  // namespace dc
