// Kernel times for an emulated device (dc-worker --emulate GPU): a timing model, so that a
// farm without GPUs still exercises every path of tuning. It is deliberately NOT the
// estimator (estimator/): its own roofline over the kernel's actual launch geometry, the
// ptxas figures NVRTC reported for the emulated arch and the bytes of the buffers each
// launch touches, with its own efficiency curves and constants; a deterministic
// per-variant factor (from a hash of the variant key and GPU type, within +-20%) stands in
// for everything a model cannot know; and each sample gets seeded measurement noise.
// Every figure it produces is reported as emulated. docs/farm.md, "Emulated devices".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/gpu_spec.h"
#include "ir/kernel.h"
#include "variant.h"
#include "nvrtc.h"

namespace dc {

struct EmulatedWork {
  int64_t flops = 0;  // the workload's arithmetic work; 0 = unknown (8 per thread assumed)
  std::string precision = "fp32";
};

struct EmulatedTiming {
  bool ok = true;
  std::string error;             // a launch the emulated GPU would refuse (launch_error)
  double model_us = 0;           // the noise-free modelled time, variation included
  double variation = 1.0;        // the per-variant factor in [0.8, 1.2]
  std::vector<double> samples_us;
};

// Models `kernel` on `spec`; `resources` are NVRTC's per-kernel figures (registers, static
// shared memory, spills). `samples` samples with noise seeded by `seed`.
EmulatedTiming emulated_timing(const GeneratedKernel& kernel, const GpuSpec& spec,
                               const std::vector<KernelResources>& resources,
                               const EmulatedWork& work, uint64_t seed, int samples = 10);

}  // namespace dc
