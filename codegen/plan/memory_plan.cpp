#include "plan/memory_plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "ir/error.h"

namespace dc {

namespace {

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

bool live_together(const MemoryRequest& a, const MemoryRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace

int64_t peak_live_bytes(const std::vector<MemoryRequest>& requests, int64_t alignment) {
  std::map<int, int64_t> delta;  // step -> change of live bytes
  for (const auto& r : requests) {
    delta[r.first] += align_up(r.bytes, alignment);
    delta[r.last + 1] -= align_up(r.bytes, alignment);
  }
  int64_t live = 0, peak = 0;
  for (const auto& [step, d] : delta) peak = std::max(peak, live += d);
  return peak;
}

MemoryLayout plan_memory(const std::vector<MemoryRequest>& requests, int64_t alignment) {
  DC_INTERNAL_CHECK(alignment > 0, "plan_memory: alignment ", alignment);
  for (const auto& r : requests)
    DC_INTERNAL_CHECK(r.bytes > 0 && r.first <= r.last, "plan_memory: request of ", r.bytes,
                      " bytes over steps ", r.first, "..", r.last);
  // Largest first (ties: earlier first, then request order) for a deterministic layout.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].bytes != requests[b].bytes) return requests[a].bytes > requests[b].bytes;
    return requests[a].first < requests[b].first;
  });

  MemoryLayout layout;
  layout.offsets.assign(requests.size(), -1);
  std::vector<size_t> placed;
  for (size_t i : order) {
    const MemoryRequest& r = requests[i];
    // The byte ranges of placed requests live at the same time as this one, by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed)
      if (live_together(r, requests[j])) busy.emplace_back(layout.offsets[j], layout.offsets[j] + requests[j].bytes);
    std::sort(busy.begin(), busy.end());
    // Lowest aligned gap that fits.
    int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + r.bytes <= begin) break;
      offset = std::max(offset, align_up(end, alignment));
    }
    layout.offsets[i] = offset;
    layout.total_bytes = std::max(layout.total_bytes, align_up(offset + r.bytes, alignment));
    placed.push_back(i);
  }
  layout.peak_live_bytes = peak_live_bytes(requests, alignment);
  return layout;
}

}  // namespace dc
