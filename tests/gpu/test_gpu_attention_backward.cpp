// The attention backward (codegen/template_attention_backward*.cpp) on a real GPU (ctest
// label "gpu"): the emulator test's cases (tests/unit/test_codegen_attention_backward.cpp,
// TensorCoresMatchTheReferenceOnTheEmulator) for every precision path the device's space
// offers, tensor cores (tf32, fp16, bf16; sm_80 and later) and the fp32 CUDA-core mode,
// compiled with NVRTC for the device, run through the CUDA driver API on seeded inputs with
// poisoned outputs, and compared with the CPU reference within variant_tolerance
// (docs/precision.md). Skipped without a device (DC_REQUIRE_GPU=1: a failure).
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "attention_backward_cases.h"
#include "../unit/attention_testing.h"
#include "generate.h"
#include "gpu_device_testing.h"
#include "op_case_harness.h"
#include "param_space.h"
#include "ref/executor.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

TEST(GpuAttentionBackward, EveryPathMatchesTheReference) {
  DC_REQUIRE_GPU();
  const testing::CaseDevice device = cuda_case_device();
  std::vector<std::pair<const char*, DType>> paths = {{"fp32", DType::f32}};
  if (gpu().info.spec.cc_major >= 8)
    paths.insert(paths.end(), {{"tf32", DType::f32}, {"fp16", DType::f32}, {"bf16", DType::f32},
                               {"fp16", DType::f16}, {"bf16", DType::bf16}});
  int compared = 0;
  for (const auto& [precision, storage] : paths) {
    for (const auto& c : testing::attention_backward_cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + precision + " on " + std::string(dtype_name(storage)));
      const Workload w32 = testing::attention_backward_workload(c);
      const Workload w = testing::attention_backward_workload(c, storage);
      std::vector<Tensor> in = testing::attention_backward_inputs(w32, c, 2029);
      for (size_t i = 0; i < in.size(); ++i)
        in[i] = testing::attn::to_storage(in[i], w.graph.info(w.graph.inputs[i]).dtype);
      ref::TensorMap in_map;
      for (size_t i = 0; i < in.size(); ++i) in_map[w.graph.inputs[i]] = in[i];
      const ref::TensorMap want = ref::run_graph(w.graph, in_map);
      const auto space = enumerate_variants(w, device.spec, SpaceOptions{{precision}});
      ASSERT_FALSE(space.empty());
      // Every tiling of the first case, every fourth of the others, as on the emulator (an
      // NVRTC compile each: the GPU runbook's time is short).
      const size_t step = std::string(c.name) == testing::attention_backward_cases()[0].name ? 1 : 4;
      for (size_t i = 0; i < space.size(); i += step) {
        const Variant& v = space[i];
        if (v.precision != precision) continue;
        const GeneratedKernel k = generate_kernel(w, v);
        std::string error;
        const std::vector<char> binary = device.compile(k, &error);
        ASSERT_EQ(error, "") << v.key();
        EXPECT_EQ(testing::run_and_compare_outputs(device.run, w, k, binary, in, want, false,
                                                   variant_tolerance(precision, w)),
                  "")
            << v.key();
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0) << "no variant ran";
  std::cout << compared << " attention-backward kernels on " << device.name << "\n";
}

}  // namespace
}  // namespace dc
