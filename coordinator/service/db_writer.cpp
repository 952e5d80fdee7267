#include "db_writer.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "ir/error.h"

namespace dc {

DbWriter::DbWriter(TuningDb& db, std::chrono::milliseconds batch_age, std::chrono::microseconds idle)
    : db_(db), batch_age_(batch_age), idle_(idle), thread_([this] { loop(); }) {}

DbWriter::~DbWriter() {
  try {
    hand_over();
  } catch (...) {
    // Out of memory while handing over: what was not handed over is dropped.
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  thread_.join();  // the loop runs what it holds to the end first
}

uint64_t DbWriter::post(Work work) {
  unposted_.emplace_back(++posted_, std::move(work));
  return posted_;
}

void DbWriter::hand_over() {
  if (unposted_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& w : unposted_) queue_.push_back(std::move(w));
  }
  unposted_.clear();
  work_ready_.notify_one();
}

DbWriter::Done DbWriter::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fatal_) std::rethrow_exception(fatal_);
  Done d;
  d.then.swap(finished_);
  d.committed = committed_;
  return d;
}

void DbWriter::finish() {
  hand_over();
  std::unique_lock<std::mutex> lock(mutex_);
  committed_cv_.wait(lock, [&] { return committed_ >= posted_ || fatal_; });
  if (fatal_) std::rethrow_exception(fatal_);
}

void DbWriter::loop() {
  ::pthread_setname_np(::pthread_self(), "dc-db-writer");  // its CPU apart in top and /proc
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and everything run
    try {
      const uint64_t last = run_batch(lock);
      committed_ = std::max(committed_, last);
    } catch (...) {
      // A broken invariant (not a refusal of the DB): the loop's next take() throws it.
      if (!lock.owns_lock()) lock.lock();
      fatal_ = std::current_exception();
      committed_cv_.notify_all();
      return;
    }
    committed_cv_.notify_all();
  }
}

// Entered and left with the lock held; runs the works and commits without it.
uint64_t DbWriter::run_batch(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  std::unique_ptr<TuningDb::Batch> batch;
  try {
    batch = db_.begin_batch();
  } catch (const UserError& e) {
    spdlog::error("service: the DB refused a batch; each row goes in its own transaction: {}", e.what());
  }
  const auto opened = std::chrono::steady_clock::now();
  uint64_t last = 0;
  lock.lock();
  while (std::chrono::steady_clock::now() - opened < batch_age_) {
    if (queue_.empty()) {
      if (stopping_) break;
      const auto until = std::min(opened + batch_age_, std::chrono::steady_clock::now() + idle_);
      if (!work_ready_.wait_until(lock, until, [&] { return !queue_.empty() || stopping_; })) break;
      continue;
    }
    std::deque<std::pair<uint64_t, Work>> chunk;
    chunk.swap(queue_);
    last = chunk.back().first;
    lock.unlock();
    run_chunk(std::move(chunk));
    lock.lock();
  }
  lock.unlock();
  try {
    if (batch) batch->commit();
  } catch (const UserError& e) {
    spdlog::error("service: the DB could not commit a batch of rows (the tunes still get their outcomes): {}",
                  e.what());
  }
  batch.reset();
  lock.lock();
  return last;
}

void DbWriter::run_chunk(std::deque<std::pair<uint64_t, Work>> chunk) {
  std::vector<Then> then;
  for (auto& [number, work] : chunk) {
    try {
      if (Then t = work(db_)) then.push_back(std::move(t));
    } catch (const UserError& e) {
      // The DB refused (busy past its timeout, disk full): logged, the service goes on.
      spdlog::error("service: DB work {} failed: {}", number, e.what());
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (Then& t : then) finished_.push_back(std::move(t));
}

}  // namespace dc
