// The attention backward (codegen/template_attention_backward*.cpp) on a real GPU (ctest
// label "gpu"): the emulator test's cases (tests/unit/test_codegen_attention_backward.cpp,
// TensorCoresMatchTheReferenceOnTheEmulator) for every precision path the device's space
// offers, tensor cores (tf32, fp16, bf16; sm_80 and later) and the fp32 CUDA-core mode,
// compiled with NVRTC for the device, run through the CUDA driver API on seeded inputs with
// poisoned outputs, and compared with the CPU reference within variant_tolerance
// (docs/precision.md). Skipped without a device (DC_REQUIRE_GPU=1: a failure).
#include <gtest/gtest.h>

#include <iostream>
#include <utility>
#include <vector>

#include "attention_backward_cases.h"
#include "gpu_device_testing.h"

namespace dc {
namespace {

TEST(GpuAttentionBackward, EveryPathMatchesTheReference) {
  DC_REQUIRE_GPU();
  const testing::CaseDevice device = cuda_case_device();
  std::vector<std::pair<const char*, DType>> paths = {{"fp32", DType::f32}};
  if (gpu().info.spec.cc_major >= 8)
    paths.insert(paths.end(), {{"tf32", DType::f32}, {"fp16", DType::f32}, {"bf16", DType::f32},
                               {"fp16", DType::f16}, {"bf16", DType::bf16}});
  // Every tiling of the first case, every fourth of the others, as on the emulator (an NVRTC
  // compile each: the GPU runbook's time is short).
  const int compared = testing::expect_attention_backward_paths_match(device, paths, 2029);
  EXPECT_GT(compared, 0) << "no variant ran";
  std::cout << compared << " attention-backward kernels on " << device.name << "\n";
}

}  // namespace
}  // namespace dc
