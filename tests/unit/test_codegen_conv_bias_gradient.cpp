// A convolution's bias gradient computed by its weight gradient's GEMM (docs/training.md
// "Convolution gradients"): ReduceSum(dY) over the batch and spatial axes and
// dc.ConvGradWeight(X, dY) read the same dY, so the candidate generator offers them as one
// conv-kind cluster (ir/gemm_operand_sum.h) and conv_implicit_gemm's weight-gradient mode
// computes db as one more column of the im2col operand whose elements are all 1 (grouped:
// each group's sums after the filters of the groups before). Filter
// counts and C x taps no tile multiple, batch > 1, split-K where offered, every precision
// path, on the host emulator against the CPU reference (fresh random inputs, NaN-poisoned
// outputs, variant_tolerance); NVRTC compiles one variant a path for sm_80.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "candidates.h"
#include "conv_gradient_testing.h"
#include "estimator_testing.h"
#include "generate.h"
#include "ir/workload.h"
#include "param_space.h"
#include "passes/training/add_gradients.h"
#include "testing.h"

namespace dc {
namespace {

struct BiasCase {
  const char* name;
  Shape x, w;
  std::vector<int64_t> strides, pads;
  int64_t group = 1;  // grouped: the groups are the GEMM's batch, db each group's filters'
};

// Odd filter counts and C x taps; a long K (split-K offered); 64 filters (4-warp tf32 blocks).
const BiasCase kCases[] = {
    {"odd_strided", {3, 5, 11, 9}, {7, 5, 3, 3}, {2, 2}, {1, 1, 1, 1}},
    {"long_k", {4, 6, 16, 16}, {9, 6, 3, 3}, {1, 1}, {1, 1, 1, 1}},
    {"wide", {2, 8, 7, 6}, {64, 8, 3, 3}, {1, 1}, {1, 0, 1, 0}},
    {"grouped", {2, 8, 9, 7}, {6, 4, 3, 3}, {1, 1}, {1, 1, 1, 1}, 2},
    {"grouped_long_k", {4, 6, 16, 16}, {9, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, 3},
};

// The workload of dW and db of Conv(x, w, b) with graph input dy: one conv-kind cluster,
// the dc.ConvGradWeight and the ReduceSum.
Workload bias_gradient_workload(const BiasCase& c) {
  Graph g;
  g.opset = 17;
  g.inputs = {"x", "w", "b"};
  g.tensors["x"] = {DType::f32, c.x};
  g.tensors["w"] = {DType::f32, c.w};
  g.tensors["b"] = {DType::f32, {c.w[0]}};
  Node conv = testing::make_node("Conv", {"x", "w", "b"}, {"y"});
  conv.name = "conv";
  conv.attrs.set("strides", c.strides);
  conv.attrs.set("pads", c.pads);
  conv.attrs.set("group", c.group);
  g.nodes.push_back(conv);
  Shape y{c.x[0], c.w[0]};
  for (size_t d = 0; d < 2; ++d) {
    const int64_t in = c.x[2 + d] + c.pads[d] + c.pads[2 + d];
    y.push_back((in - c.w[2 + d]) / c.strides[d] + 1);
  }
  g.tensors["y"] = {DType::f32, y};
  g.tensors["dy"] = g.tensors["y"];
  g.inputs.push_back("dy");
  const auto grads = add_vector_jacobian_product(g, {{"y", "dy"}}, {"w", "b"});
  g.nodes.erase(g.nodes.begin());
  g.tensors.erase("y");
  g.outputs = {grads.at("w"), grads.at("b")};
  const auto candidates = generate_candidates(g);
  const WorkloadSet set = dedupe_workloads(g, candidates);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Workload& w = set.workloads[set.candidate_workload[i]];
    if (w.kind == ClusterKind::conv && w.graph.outputs.size() == 2) return w;
  }
  ADD_FAILURE() << "no workload of dc.ConvGradWeight with the bias's ReduceSum";
  return {};
}

TEST(CodegenConvBiasGradient, WeightGradientModeWritesTheBiasGradient) {
  const GpuSpec gpu = testing::spec_a100();
  int checked = 0, split = 0;
  for (const BiasCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const Workload w = bias_gradient_workload(c);
    ASSERT_EQ(w.graph.nodes.size(), 2u) << w.canonical;
    for (const char* path : {"fp32", "tf32", "fp16", "bf16"}) {
      SCOPED_TRACE(path);
      const auto space = enumerate_variants(w, gpu, SpaceOptions{{path}});
      if (std::string(path) == "fp32") {
        ASSERT_FALSE(space.empty());
      }
      std::vector<const Variant*> picked;
      if (!space.empty()) picked.push_back(&space.front());
      for (const auto& v : space)
        if (v.param_or("split_k", 1) > 1) {
          picked.push_back(&v);
          break;
        }
      bool nvrtc = true;
      for (const Variant* v : picked) {
        testing::check_variant_on_emulator(w, *v, nvrtc);
        nvrtc = false;
        ++checked;
        split += v->param_or("split_k", 1) > 1;
      }
    }
  }
  EXPECT_GE(checked, 14);
  EXPECT_GE(split, 4);  // long_k's split-K: the bias column's partial sums in the scratch
}

}  // namespace
}  // namespace dc
