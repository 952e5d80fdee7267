// Device memory for a plan's intermediates and scratch: one arena, and an offset for each
// tensor such that two tensors whose live step ranges intersect never share a byte.
// Greedy by size (largest first, each at the lowest aligned offset that fits between the
// already placed tensors it is live with), as TensorFlow Lite's arena planner does: simple,
// deterministic, and close to the lower bound (the largest total live at any one step).
#pragma once

#include <cstdint>
#include <vector>

namespace dc {

struct MemoryRequest {
  int64_t bytes = 0;  // > 0
  int first = 0;      // first step that uses it (writes it)
  int last = 0;       // last step that uses it (>= first)
};

struct MemoryLayout {
  std::vector<int64_t> offsets;  // parallel to the requests, multiples of the alignment
  int64_t total_bytes = 0;       // arena size
  int64_t peak_live_bytes = 0;   // the most bytes (aligned) live at one step: a lower bound
};

MemoryLayout plan_memory(const std::vector<MemoryRequest>& requests, int64_t alignment);

// The most bytes (each request rounded up to `alignment`) live at any one step: the peak
// that any layout must hold. The memory report and the recompute pass measure with it.
int64_t peak_live_bytes(const std::vector<MemoryRequest>& requests, int64_t alignment);

}  // namespace dc
