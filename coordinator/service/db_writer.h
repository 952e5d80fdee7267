// The farm service's DB work on a thread of its own (docs/farm.md, "The DB writer"): the
// service's loop posts work in order, the writer runs it in batches of one transaction (one
// commit per batch age under load, at once when work stops coming) and reports back, in
// order, what each work left for the loop to do, and up to which work everything is
// committed. The loop never waits for SQLite (its rows were half of the loop's CPU a job,
// docs/bench/farm-service.md round 10); what must wait for a commit (an outcome) waits for
// the number of the last work posted before it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tuning_db.h"

namespace dc {

class DbWriter {
 public:
  // What a work leaves for the loop's thread (empty: nothing).
  using Then = std::function<void()>;
  // Runs on the writer's thread, inside the open batch. A UserError it throws is logged and
  // ends only that work; anything else ends the writer and is rethrown by take().
  using Work = std::function<Then(TuningDb&)>;

  // `db` is the writer's alone while it runs (other threads' calls wait for its batches).
  // `batch_age`: how long a batch stays open while work keeps coming; `idle`: how long it
  // waits for more once the queue is empty before it commits.
  DbWriter(TuningDb& db, std::chrono::milliseconds batch_age, std::chrono::microseconds idle);
  // Runs and commits everything posted, then stops. Never throws.
  ~DbWriter();
  DbWriter(const DbWriter&) = delete;
  DbWriter& operator=(const DbWriter&) = delete;

  // Queues `work` as number posted() + 1 (numbers start at 1); it reaches the writer at the
  // next hand_over(): one lock and one wake a turn of the loop, not one a job.
  uint64_t post(Work work);
  uint64_t posted() const { return posted_; }
  void hand_over();

  struct Done {
    std::vector<Then> then;  // of the works finished since the last take, in post order
    uint64_t committed = 0;  // every work numbered up to this is committed (or failed)
  };
  // A work's Then is in the same take as the first `committed` that covers the work, or an
  // earlier one. Rethrows what ended the writer.
  Done take();
  // Hands over, then waits until everything posted is committed.
  void finish();

 private:
  void loop();
  // Runs works until none comes for `idle_` or the batch is `batch_age_` old.
  uint64_t run_batch(std::unique_lock<std::mutex>& lock);
  void run_chunk(std::deque<std::pair<uint64_t, Work>> chunk);

  TuningDb& db_;
  const std::chrono::milliseconds batch_age_;
  const std::chrono::microseconds idle_;
  uint64_t posted_ = 0;                            // the loop's thread only
  std::deque<std::pair<uint64_t, Work>> unposted_;  // the loop's thread only

  std::mutex mutex_;
  std::condition_variable work_ready_, committed_cv_;
  std::deque<std::pair<uint64_t, Work>> queue_;
  std::vector<Then> finished_;
  uint64_t committed_ = 0;
  bool stopping_ = false;
  std::exception_ptr fatal_;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace dc
