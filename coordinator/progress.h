// Progress of a tune's measurements, on stderr: on a terminal a bar redrawn in place (jobs
// done/total, per-GPU-type throughput, ETA); otherwise a plain line every few seconds and at
// every tenth of the jobs, so that logs of unattended runs stay short and readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>

namespace dc {

class Progress {
 public:
  enum class Mode { bar, lines, quiet };
  // bar if stderr is a terminal, else lines.
  static Mode detect();

  explicit Progress(Mode mode, std::ostream* out = nullptr);  // out: default std::cerr
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // More jobs for a GPU type (the clock starts with the first jobs).
  void add_jobs(const std::string& gpu_type, int64_t n);
  // One result arrived.
  void job_done(const std::string& gpu_type, bool ok);
  // Redraws or prints a line when due; cheap to call often.
  void tick();
  // The last state and a line break (bar), or a closing line.
  void finish();

  // "120/538 jobs (22%), 3 failed | h100 41.0/s | ETA 0:10": what is drawn or printed.
  std::string status_line() const;

 private:
  struct PerGpu {
    int64_t total = 0, done = 0;
  };
  void draw(bool final_line);
  double elapsed_s() const;

  Mode mode_;
  std::ostream* out_;
  std::map<std::string, PerGpu> gpus_;
  int64_t total_ = 0, done_ = 0, failed_ = 0;
  bool started_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t last_tenth_ = 0;
};

// "0:07", "1:02:03".
std::string format_duration(double seconds);

}  // namespace dc
