// A Linear layer's bias gradient computed by its weight gradient's GEMM (docs/training.md,
// "MatMul gradients"): the ReduceSum of dY over the rows and dW = X^T dY (or dY^T X) read
// the same dY (passes/gradients/bias_sums.h rewrites the 3-D layers' sums to read the GEMM's
// 2-D view), the candidate generator offers them as one cluster (ir/gemm_operand_sum.h) and
// gemm_tiled computes the sum as a row or column of ones. A three-layer step: the plan's
// clusters, and its steps on the host emulator against the CPU reference's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing.h"
#include "training_step_testing.h"

namespace dc {
namespace {

// x [4, 6, 12] -> MatMul(W1 [12, 16]) + b1 -> Relu -> MatMul(Transpose(W2 [16, 16])) + b2
// (torch's Linear as MatMul) -> Relu -> Reshape [24, 16] -> Gemm(W3 [10, 16], b3, transB)
// (torch's Linear as Gemm) -> logits [24, 10]: the three forms of a Linear layer with a bias,
// two of them over 3-D activations.
Graph linear_model() {
  Graph g;
  g.opset = 17;
  const auto tensor = [&](const std::string& name, const Shape& s) { g.tensors[name] = {DType::f32, s}; };
  const auto weight = [&](const std::string& name, const Shape& s, uint32_t seed) {
    g.initializers[name] = testing::random_tensor(s, seed, -0.5f, 0.5f);
    tensor(name, s);
  };
  const auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out,
                        const Shape& s, Attributes a = {}) {
    g.nodes.push_back(testing::make_node(op, std::move(in), {out}, std::move(a)));
    tensor(out, s);
  };
  g.inputs = {"x"};
  tensor("x", {4, 6, 12});
  weight("w1", {12, 16}, 1);
  weight("b1", {16}, 2);
  weight("w2", {16, 16}, 3);
  weight("b2", {16}, 4);
  weight("w3", {10, 16}, 5);
  weight("b3", {10}, 6);
  g.initializers["rows"] = Tensor::from_vector<int64_t>({2}, {24, 16});
  g.tensors["rows"] = {DType::i64, {2}};
  Attributes perm, trans_b;
  perm.set("perm", std::vector<int64_t>{1, 0});
  trans_b.set("transB", int64_t{1});
  node("MatMul", {"x", "w1"}, "y1", {4, 6, 16});
  node("Add", {"y1", "b1"}, "z1", {4, 6, 16});
  node("Relu", {"z1"}, "r1", {4, 6, 16});
  node("Transpose", {"w2"}, "w2t", {16, 16}, perm);
  node("MatMul", {"r1", "w2t"}, "y2", {4, 6, 16});
  node("Add", {"y2", "b2"}, "z2", {4, 6, 16});
  node("Relu", {"z2"}, "r2", {4, 6, 16});
  node("Reshape", {"r2", "rows"}, "f", {24, 16});
  node("Gemm", {"f", "w3", "b3"}, "logits", {24, 10}, trans_b);
  g.outputs = {"logits"};
  return g;
}

TEST(TrainBiasGradient, EachBiasGradientIsItsWeightGradientsSecondOutput) {
  const testing::EstimatedStep s = testing::estimated_step(linear_model(), testing::sgd_momentum_spec());
  const Graph& g = s.step;
  int kernels = 0, gemms_with_sums = 0, sums_alone = 0;
  for (size_t c : s.plan.gpus.at(0).cover.chosen) {
    const Candidate& cand = s.plan.candidates[c];
    if (cand.free_view) continue;
    ++kernels;
    int gemms = 0, sums = 0;
    for (size_t i : cand.nodes) {
      gemms += g.nodes[i].op == "MatMul" || g.nodes[i].op == "Gemm";
      sums += g.nodes[i].op == "ReduceSum";
    }
    SCOPED_TRACE(cand.pattern);
    if (gemms == 1 && sums == 1) {
      ++gemms_with_sums;
      const Workload w = make_workload(g, cand.nodes, cand.kind);
      EXPECT_EQ(w.graph.outputs.size(), 2u) << "dW and db";
    }
    sums_alone += gemms == 0 && sums > 0;
  }
  // dW1 (x^T dY over the 24 rows, the 3-D sum rewritten to the GEMM's view), dW2 (dY^T r1
  // read through the Transpose), dW3 (Gemm transA): each with its bias's sum. Before: the
  // three sums were ReduceSum kernels of their own, 15 kernels (views not counted).
  EXPECT_EQ(gemms_with_sums, 3);
  EXPECT_EQ(sums_alone, 0);
  EXPECT_EQ(kernels, 15);
}

// Three SGD steps of the plan on the host emulator against the CPU reference's: a wrong sum
// (the ones row at the wrong place, a split-K slice lost) changes b1, b2 and b3's updates.
TEST(TrainBiasGradient, StepsOnTheEmulatorFollowTheReferenceSteps) {
  const TrainingSpec spec = testing::sgd_momentum_spec();
  testing::EstimatedStep s = testing::estimated_step(linear_model(), spec);
  const int compared = testing::expect_plan_steps_follow_reference(s, spec, "linear_model.onnx", 37, 3, 1);
  EXPECT_EQ(compared, 12) << "6 weights and their momenta";
}

}  // namespace
}  // namespace dc
