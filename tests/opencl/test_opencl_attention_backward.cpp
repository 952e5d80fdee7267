// "attention_backward" (FlashAttention-2's backward of dc.AttentionGrad) through the OpenCL
// dialect layer on PoCL's CPU device, the same template text as CUDA's: the reference kernel
// and variants of pocl-cpu's parameter space on fresh seeded inputs (outputs poisoned by the
// runner) against the CPU reference executor, edge shapes of attention_backward_cases.h.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "attention_backward_cases.h"
#include "generate.h"
#include "param_space.h"
#include "pocl_testing.h"
#include "random_inputs.h"
#include "ref/executor.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

TEST(OpenClAttentionBackward, EdgeShapesMatchTheCpu) {
  DC_REQUIRE_POCL();
  const testing::CaseDevice device = pocl_case_device();
  int compared = 0;
  for (const auto& c : testing::attention_backward_cases()) {
    const Workload w = testing::attention_backward_workload(c);
    const std::vector<Tensor> in = testing::attention_backward_inputs(w, c, 77);
    ref::TensorMap in_map;
    for (size_t i = 0; i < in.size(); ++i) in_map[w.graph.inputs[i]] = in[i];
    const ref::TensorMap want = ref::run_graph(w.graph, in_map);
    const Tolerance tol = variant_tolerance("fp32", w);
    const auto all = enumerate_variants(w, device.spec, SpaceOptions{{"fp32"}});
    ASSERT_FALSE(all.empty()) << c.name << ": no attention_backward variant fits pocl-cpu";
    std::vector<GeneratedKernel> kernels = {generate_reference(w)};
    for (size_t i = 0; i < 3 && i < all.size(); ++i) kernels.push_back(generate_kernel(w, all[i * all.size() / 3]));
    // And the first variant of each thread tile: every register-blocked cell layout through
    // the OpenCL dialect.
    std::set<std::pair<int64_t, int64_t>> tiles;
    for (const auto& v : all)
      if (tiles.insert({v.param("thread_m"), v.param("thread_n")}).second) kernels.push_back(generate_kernel(w, v));
    EXPECT_EQ(tiles.size(), 9u) << c.name;
    for (const auto& k : kernels) {
      SCOPED_TRACE(std::string(c.name) + " " + k.template_name + " " + k.variant_key);
      std::string error;
      const std::vector<char> spir = device.compile(k, &error);
      ASSERT_FALSE(spir.empty()) << error.substr(0, 3000);
      EXPECT_EQ(testing::run_and_compare_outputs(device.run, w, k, spir, in, want, false, tol), "");
      ++compared;
    }
  }
  EXPECT_EQ(compared, 3 * (1 + 3 + 9));
}

}  // namespace
}  // namespace dc
