#include "progress.h"

#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <unistd.h>

namespace dc {

namespace {
constexpr auto kBarInterval = std::chrono::milliseconds(100);
constexpr auto kLineInterval = std::chrono::seconds(5);
constexpr int kBarWidth = 24;
}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

Progress::Mode Progress::detect() { return ::isatty(STDERR_FILENO) ? Mode::bar : Mode::lines; }

Progress::Progress(Mode mode, std::ostream* out) : mode_(mode), out_(out ? out : &std::cerr) {}

void Progress::add_jobs(const std::string& gpu_type, int64_t n) {
  if (n <= 0) return;
  if (!started_) {
    started_ = true;
    start_ = last_draw_ = std::chrono::steady_clock::now();
  }
  gpus_[gpu_type].total += n;
  total_ += n;
}

void Progress::job_done(const std::string& gpu_type, bool ok) {
  ++gpus_[gpu_type].done;
  ++done_;
  if (!ok) ++failed_;
}

double Progress::elapsed_s() const {
  if (!started_) return 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::status_line() const {
  const double t = elapsed_s();
  std::string s = fmt::format("{}/{} jobs ({}%)", done_, total_,
                              total_ ? done_ * 100 / total_ : 100);
  if (failed_) s += fmt::format(", {} failed", failed_);
  s += " |";
  for (const auto& [gpu, g] : gpus_)
    s += fmt::format(" {} {:.1f}/s", gpu, t > 0 ? static_cast<double>(g.done) / t : 0.0);
  if (done_ < total_) {
    const double rate = t > 0 ? static_cast<double>(done_) / t : 0;
    s += " | ETA " + (rate > 0 ? format_duration(static_cast<double>(total_ - done_) / rate) : "?");
  } else {
    s += " | " + format_duration(t);
  }
  return s;
}

void Progress::draw(bool final_line) {
  if (mode_ == Mode::bar) {
    const int filled = total_ ? static_cast<int>(done_ * kBarWidth / total_) : kBarWidth;
    *out_ << "\r\033[K[" << std::string(static_cast<size_t>(filled), '#')
          << std::string(static_cast<size_t>(kBarWidth - filled), '.') << "] " << status_line();
    if (final_line) *out_ << "\n";
  } else {
    *out_ << "tune: " << status_line() << "\n";
  }
  out_->flush();
  last_draw_ = std::chrono::steady_clock::now();
}

void Progress::tick() {
  if (mode_ == Mode::quiet || !started_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (mode_ == Mode::bar) {
    if (now - last_draw_ >= kBarInterval) draw(false);
    return;
  }
  const int64_t tenth = total_ ? done_ * 10 / total_ : 10;
  if (tenth > last_tenth_ || now - last_draw_ >= kLineInterval) {
    last_tenth_ = tenth;
    if (done_ < total_) draw(false);
  }
}

void Progress::finish() {
  if (mode_ == Mode::quiet || !started_ || finished_) return;
  finished_ = true;
  draw(true);
}

}  // namespace dc
