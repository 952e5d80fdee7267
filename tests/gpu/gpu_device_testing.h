// The CUDA device of the GPU tests (test_gpu_kernels.cpp, test_gpu_op_cases.cpp) and the op
// cases' perf tool: the first usable one, opened once per process, and DC_REQUIRE_GPU (gpu_testing.h's skip, or failure
// under DC_REQUIRE_GPU=1, where there is none).
#pragma once

#include <iostream>
#include <memory>
#include <string>

#include "device_discovery.h"
#include "gpu/gpu_catalog.h"
#include "gpu_runner.h"
#include "gpu_testing.h"
#include "nvrtc.h"
#include "op_case_harness.h"

namespace dc {

// The first usable device, opened once per process (never closed: the primary context
// lives until exit).
struct Gpu {
  std::unique_ptr<GpuDevice> device;
  DiscoveredDevice info;
  std::string why;  // when there is no device
};

inline const Gpu& gpu() {
  static const Gpu* const g = [] {
    auto* out = new Gpu;
    const auto devices = discover_devices(GpuCatalog::builtin(), &out->why);
    for (const auto& d : devices) {
      if (!d.usable()) {
        out->why += (out->why.empty() ? "" : "; ") + describe_device(d);
        continue;
      }
      out->info = d;
      out->device = std::make_unique<GpuDevice>(d.ordinal);
      std::cout << "GPU " << describe_device(d) << "\n";
      break;
    }
    return out;
  }();
  return *g;
}

inline GpuDevice& device() { return *gpu().device; }

// The op-case harness's device (op_case_harness.h): NVRTC for the device's architecture and
// the worker's CUDA runner.
inline testing::CaseDevice cuda_case_device() {
  testing::CaseDevice d;
  d.name = "CUDA " + gpu().info.spec.name + " " + gpu().info.arch;
  d.spec = gpu().info.spec;
  d.compile = [](const GeneratedKernel& k, std::string* error) {
    const CompileResult r = compile_cuda(k.source, gpu().info.arch);
    if (!r.ok) *error = r.error;
    return r.cubin;
  };
  d.run = [](const GeneratedKernel& k, const std::vector<char>& cubin, std::vector<Tensor>& buffers) {
    return run_on_gpu(device(), k, cubin, buffers);
  };
  d.time = [](const GeneratedKernel& k, const std::vector<char>& cubin, const std::vector<Tensor>& inputs) {
    return time_on_gpu(device(), k, cubin, inputs);
  };
  return d;
}

#define DC_REQUIRE_GPU() DC_SKIP_WITHOUT_GPU(!gpu().device, "no CUDA device: " << gpu().why)

}  // namespace dc
