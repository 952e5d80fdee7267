// The worker's builders (TVM MetaSchedule's builder/runner split, Inductor's parallel
// precompile): a pool of compile processes that compile the jobs a worker holds ahead of
// the measurement child, into the shared compile cache. When a device's lane reaches a job,
// its compile is a cache hit, so the device measures one kernel while the next ones
// compile on the other cores.
//
// Each builder is a thread driving its own compile child (`dc-worker --compile-child`,
// crash-isolated like the measurement child, measure_child.h), which runs
// JobExecutor::build. What a build says about a job:
//   - ok or any failure the executor reports (compile_error included: failures are cached
//     too): nothing; the measurement child runs the job and reports it from the cache;
//   - the compile child died (NVRTC or ptxas crashed): compile_error for that job alone;
//   - the compile deadline passed: timeout.
// A job the lane reaches before a builder took it is simply compiled by the measurement
// child, as without builders.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "farm.pb.h"

namespace dc {

class MeasureChild;

class BuilderPool {
 public:
  // `builders` threads (at least 1); `child_argv(device_index)` is the command line of a
  // compile child for that device of the worker.
  BuilderPool(int builders, std::function<std::vector<std::string>(int32_t device_index)> child_argv);
  ~BuilderPool();  // stops the builders; their children are killed
  BuilderPool(const BuilderPool&) = delete;
  BuilderPool& operator=(const BuilderPool&) = delete;

  // Queues the compile of a job the worker just received (any thread).
  void submit(const farm::Job& job);
  // Called by the device's lane before it measures `job`: waits for its build if one is
  // under way and returns the Result to send instead of measuring (the compile child died,
  // or the compile deadline passed), or nothing (measure it).
  std::optional<farm::Result> take(const farm::Job& job);

  struct Stats {
    int64_t built = 0;      // builds finished
    int64_t skipped = 0;    // jobs the lane reached before a builder took them
    int64_t crashed = 0;    // compile children that died (compile_error)
  };
  Stats stats() const;

 private:
  enum class State { queued, building, done };
  struct Entry {
    farm::Job job;
    State state = State::queued;
    std::optional<farm::Result> verdict;
  };
  void builder_main(int index);

  std::function<std::vector<std::string>(int32_t)> child_argv_;
  mutable std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<uint64_t> queue_;               // lease ids, in arrival order
  std::map<uint64_t, Entry> entries_;        // by lease id
  bool stopping_ = false;
  Stats stats_;
  std::vector<std::thread> threads_;
};

// The verdict of a compile child's Result for the job (nothing: measure it).
std::optional<farm::Result> build_verdict(const farm::Job& job, const farm::Result& built);

}  // namespace dc
