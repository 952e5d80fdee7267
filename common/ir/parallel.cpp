#include "ir/parallel.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dc {

int parallel_threads() {
  static const int n = std::max(1u, std::thread::hardware_concurrency());
  return n;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t threads = std::min<int64_t>(parallel_threads(), n / std::max<int64_t>(grain, 1));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  auto run = [&](int64_t b, int64_t e) {
    try {
      fn(b, e);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) pool.emplace_back(run, b, e);
  }
  run(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace dc
