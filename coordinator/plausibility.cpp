#include "plausibility.h"

#include <algorithm>

#include <fmt/format.h>

#include "estimator.h"

namespace dc {

namespace {

bool strided(const Node& n) {
  for (int64_t s : n.attrs.get_ints("strides", {}))
    if (s > 1) return true;
  return false;
}

// Inputs some kernel of the workload may read only in part.
bool read_in_part(const Node& n, size_t input) {
  if (input == 0 && (n.op == "Gather" || n.op == "GatherElements" || n.op == "GatherND" || n.op == "Slice"))
    return true;
  return input == 0 && strided(n);
}

}  // namespace

double plausibility_floor_us(const Workload& w, const GpuSpec& gpu, const std::string& precision) {
  int64_t partial = 0;
  for (const std::string& in : w.graph.inputs) {
    bool part = false;
    for (const Node& n : w.graph.nodes)
      for (size_t i = 0; i < n.inputs.size(); ++i) part = part || (n.inputs[i] == in && read_in_part(n, i));
    if (part) {
      const TensorInfo& t = w.graph.info(in);
      partial += shape_numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype));
    }
  }
  WorkloadShape lower;
  lower.flops = static_cast<double>(w.flops);
  lower.bytes = static_cast<double>(std::max<int64_t>(0, w.bytes - partial));
  // A CPU device is timed with hot caches (worker/opencl_runner.cpp): work that fits in its
  // last-level cache is not bound by DRAM, so its bytes give no floor there.
  if (gpu.cache_holds(lower.bytes)) lower.bytes = 0;
  return floor_seconds(lower, gpu, precision) * 1e6;
}

std::string implausibility(double median_us, double floor_us) {
  if (!(floor_us > 0) || median_us >= kPlausibleFractionOfFloor * floor_us) return "";
  return fmt::format("median {:.4g} us is {:.0f}% below the variant's floor of {:.4g} us (max of FLOPs/peak "
                     "and bytes/bandwidth): no GPU of this type can run it that fast",
                     median_us, 100 * (1 - median_us / floor_us), floor_us);
}

}  // namespace dc
