// Every generated kernel declares __launch_bounds__ with its launch's block size (through
// DC_LAUNCH_BOUNDS): ptxas then keeps each kernel's registers within the share of the
// register file its block may take, so that no launch fails with LAUNCH_OUT_OF_RESOURCES for
// registers. Checked over the reference kernels and the first and last variant of every
// family and precision of the tiny models' workloads, plus a split-K GEMM with its epilogue
// kernel; and ptxas must honour the bound (a 1024-thread elementwise kernel within 64).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "candidates.h"
#include "estimator_testing.h"
#include "generate.h"
#include "model_builder.h"
#include "nvrtc.h"
#include "onnx/import.h"
#include "param_space.h"
#include "passes/simplify.h"

namespace dc {
namespace {

// Every launch's kernel is defined as `DC_LAUNCH_BOUNDS(<block.x>) <kernel>(` in the source.
::testing::AssertionResult bounded(const GeneratedKernel& k) {
  for (const auto& l : k.launches) {
    const std::string want = fmt::format("DC_LAUNCH_BOUNDS({}) {}(", l.block[0], l.kernel);
    if (k.source.find(want) == std::string::npos)
      return ::testing::AssertionFailure()
             << k.template_name << " " << k.variant_key << ": no `" << want << "` in the source";
  }
  return ::testing::AssertionSuccess();
}

TEST(CodegenLaunchBounds, EveryKernelOfEveryTemplate) {
  const GpuSpec gpu = testing::spec_a100();
  std::map<std::string, int> checked;  // template -> kernels
  for (const char* model : {"tiny_cnn", "tiny_transformer"}) {
    const Graph g = simplify(import_onnx_file(std::string(DC_SOURCE_DIR) + "/examples/" + model +
                                              "/model.onnx"));
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    for (const auto& w : set.workloads) {
      const GeneratedKernel ref = generate_reference(w);
      EXPECT_TRUE(bounded(ref)) << w.canonical;
      ++checked["reference"];
      // The first and the last variant of each precision path.
      std::map<std::string, std::pair<const Variant*, const Variant*>> ends;
      const auto space = enumerate_variants(w, gpu, SpaceOptions{});
      for (const auto& v : space) {
        auto& [first, last] = ends[v.precision];
        if (first == nullptr) first = &v;
        last = &v;
      }
      std::vector<const Variant*> picks;
      for (const auto& [precision, fl] : ends) picks.insert(picks.end(), {fl.first, fl.second});
      for (const Variant* v : picks) {
        const GeneratedKernel k = generate_kernel(w, *v);
        EXPECT_TRUE(bounded(k)) << w.canonical;
        checked[k.template_name + "/" + v->precision] += static_cast<int>(k.launches.size());
      }
    }
  }
  // Split-K through scratch: the main kernel and the epilogue kernel.
  testing::ModelBuilder m;
  m.input("a", {24, 512}).weight("b", {512, 40}).weight("bias", {40});
  m.node("MatMul", {"a", "b"}, "y", {24, 40}).node("Add", {"y", "bias"}, "z", {24, 40});
  const Workload w = m.workload(ClusterKind::gemm);
  for (const char* p : {"fp32", "fp16"}) {
    Variant v;
    v.template_name = "gemm_tiled";
    v.precision = p;
    v.params = {{"block_m", 32}, {"block_n", 32}, {"block_k", 16}, {"warp_m", std::string(p) == "fp32" ? 16 : 32},
                {"warp_n", std::string(p) == "fp32" ? 16 : 32}, {"thread_m", 2}, {"thread_n", 2},
                {"vec", 4}, {"stages", 2}, {"split_k", 4}};
    const GeneratedKernel k = generate_kernel(w, v);
    ASSERT_EQ(k.launches.size(), 2u) << p;
    EXPECT_TRUE(bounded(k));
  }
  for (const char* t : {"reference", "elementwise/fp32", "row_reduce/fp32", "pool_window/fp32",
                        "gemm_tiled/fp32", "gemm_tiled/fp16", "conv_implicit_gemm/tf32",
                        "depthwise_direct/fp32", "attention_fused/fp32", "attention_fused/bf16"})
    EXPECT_GT(checked[t], 0) << t;
}

TEST(CodegenLaunchBounds, PtxasKeepsTheBlockShare) {
  // 1024 threads may use 64 registers each; ptxas must honour the bound the template declares.
  testing::ModelBuilder m;
  m.input("x", {1 << 20});
  std::string prev = "x";
  for (int i = 0; i < 6; ++i) {
    const std::string out = "e" + std::to_string(i);
    m.node(i % 2 ? "Sigmoid" : "Tanh", {prev}, out, {1 << 20});
    prev = out;
  }
  const Workload w = m.workload(ClusterKind::elementwise);
  Variant v;
  v.template_name = "elementwise";
  v.precision = "fp32";
  v.params = {{"threads", 1024}, {"elems_per_thread", 8}, {"vec", 4}};
  const GeneratedKernel k = generate_kernel(w, v);
  ASSERT_EQ(k.launches.at(0).block[0], 1024);
  ASSERT_TRUE(bounded(k));
  const CompileResult r = compile_cuda(k.source, "sm_80");
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.kernels.size(), 1u);
  EXPECT_LE(r.kernels[0].registers, 64);
}

}  // namespace
}  // namespace dc
