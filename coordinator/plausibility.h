// Is a measured time physically possible? Every ok result is compared with its variant's
// floor (estimator.h's floor_seconds: the larger of FLOPs over the math path's peak and the
// workload's compulsory bytes over DRAM bandwidth, from gpus.yaml). No kernel beats it; a
// time more than 20% below it says the worker's timing is wrong (a faulty device, a timing
// bug, a worker that lies), so the result is recorded as `implausible`: never selected, never
// fitted, measured again by a later tune, and logged with the worker's name (docs/tune.md).
#pragma once

#include <string>

#include "gpu/gpu_spec.h"
#include "ir/workload.h"

namespace dc {

// The floor the check uses, in microseconds: floor_seconds with the workload's bytes less
// the inputs a kernel need not read whole (the data of Gather*, Slice; the input of a strided
// convolution or pool), so that it stays a lower bound on every kernel of the workload. On a
// CPU device (timed with hot caches) bytes that fit in the last-level cache give no floor.
double plausibility_floor_us(const Workload& w, const GpuSpec& gpu, const std::string& precision);

// Times below this fraction of the floor are implausible (the 20% absorb clock boosts and
// the gpus.yaml figures' rounding).
inline constexpr double kPlausibleFractionOfFloor = 0.8;

// "" when `median_us` is plausible against `floor_us` (or there is no floor: floor_us <= 0),
// else why not, in words with both figures.
std::string implausibility(double median_us, double floor_us);

}  // namespace dc
