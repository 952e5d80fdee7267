// parallel_for over [0, n) on a small pool of std::threads (one per hardware thread).
// Chunks are contiguous so that each thread touches its own slice of the output.
#pragma once

#include <cstdint>
#include <functional>

namespace dc {

// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel when n >= 2*grain.
// The first exception thrown by any chunk is rethrown to the caller.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Number of worker threads parallel_for uses (std::thread::hardware_concurrency, at least 1).
int parallel_threads();

}  // namespace dc
