// Crash isolation for measurement: each GPU's jobs run in a child process (a fresh exec of
// dc-worker in its --measure-child mode), so that an illegal address, a sticky CUDA error,
// a crash of the emulator or NVRTC, or a kernel that never returns kills only the child.
// The worker sees a Result with the failure class (runtime_fault, timeout), starts a new
// child for the next job and carries on.
//
// Parent and child talk over a socket pair, the child's end being its fd 3: frames of a
// 4-byte little-endian length and a serialized farm::ChildMessage (Job down; `compiled`
// and Result up). The parent's watchdog gives the compile phase the job's compile deadline
// and, from the child's `compiled` message on, the run phase the run deadline; past either
// it kills the child with SIGKILL and reports timeout.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "farm.pb.h"

namespace dc {

class MeasureChild {
 public:
  // `argv`: the child's command line (argv[0] is the executable's path); it must serve
  // fd 3 with serve_measure_child.
  explicit MeasureChild(std::vector<std::string> argv);
  ~MeasureChild();  // kills and reaps the child
  MeasureChild(const MeasureChild&) = delete;
  MeasureChild& operator=(const MeasureChild&) = delete;

  // Runs one job in the child (starting one if none runs), blocking until its Result, its
  // deadline or its death. Never throws for what the child does; the Result's lease_id,
  // job_id and device_index are the job's.
  farm::Result run(const farm::Job& job);

  int starts() const { return starts_; }  // children started so far
  // The current child, 0 if none; other threads may read it (a watchdog that kills it).
  pid_t pid() const { return pid_.load(); }

 private:
  void start();
  void stop();  // SIGKILL and reap
  std::string reap();  // waits for the child; how it ended ("killed by signal 11 (...)")

  std::vector<std::string> argv_;
  std::atomic<pid_t> pid_{0};
  int fd_ = -1;
  int starts_ = 0;
};

// The child's side: reads jobs from `fd` and answers each with `execute`'s Result; the
// callback given to `execute` announces the end of the compile phase. Returns 0 when the
// parent closes the socket, or when `must_exit` says the process must not run more jobs
// (a lost CUDA context) after sending the result; non-zero on a broken stream.
using ChildExecute = std::function<farm::Result(const farm::Job& job, const std::function<void()>& compiled)>;
int serve_measure_child(int fd, const ChildExecute& execute, const std::function<bool()>& must_exit);

}  // namespace dc
