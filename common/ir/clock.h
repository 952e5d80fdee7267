// Wall-clock intervals for logs and progress: one definition for every stage timer.
#pragma once

#include <chrono>

namespace dc {

// Seconds from `t0` to now, on the monotonic clock.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace dc
