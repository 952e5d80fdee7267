// A training step of Gemm layers whose operands a model's Transposes compute (docs/training.md,
// "MatMul gradients"): the Gemm rule reads each Transpose's input with the flag flipped and
// cancels the Transpose rule's inverse, and gemm_tiled reads the forward Transpose in place
// (matmul_swapped_source), so no Transpose kernel runs in the step; its plan on the host
// emulator against the CPU reference's steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "testing.h"
#include "training_step_testing.h"

namespace dc {
namespace {

// x [8, 12] -> Gemm(x, Transpose(W1 [16, 12]), b1) -> Relu -> r [8, 16];
// Gemm(Transpose(r), Transpose(W2s [16, 10]), b2) with transA = transB = 1 -> logits [8, 10]
// (op(A) = r, op(B) = W2s): a weight's Transpose with either flag, an activation's with transA.
Graph gemm_model() {
  Graph g;
  g.opset = 17;
  const auto tensor = [&](const std::string& name, const Shape& s) { g.tensors[name] = {DType::f32, s}; };
  const auto weight = [&](const std::string& name, const Shape& s, uint32_t seed) {
    g.initializers[name] = testing::random_tensor(s, seed, -0.5f, 0.5f);
    tensor(name, s);
  };
  g.inputs = {"x"};
  tensor("x", {8, 12});
  weight("w1", {16, 12}, 1);
  weight("b1", {16}, 2);
  weight("w2s", {16, 10}, 3);
  weight("b2", {10}, 4);
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{1, 0});
  Attributes flags;
  flags.set("transA", int64_t{1});
  flags.set("transB", int64_t{1});
  g.nodes.push_back(testing::make_node("Transpose", {"w1"}, {"w1t"}, perm));
  tensor("w1t", {12, 16});
  g.nodes.push_back(testing::make_node("Gemm", {"x", "w1t", "b1"}, {"h"}));
  tensor("h", {8, 16});
  g.nodes.push_back(testing::make_node("Relu", {"h"}, {"r"}));
  tensor("r", {8, 16});
  g.nodes.push_back(testing::make_node("Transpose", {"r"}, {"rt"}, perm));
  tensor("rt", {16, 8});
  g.nodes.push_back(testing::make_node("Transpose", {"w2s"}, {"w2"}, perm));
  tensor("w2", {10, 16});
  g.nodes.push_back(testing::make_node("Gemm", {"rt", "w2", "b2"}, {"logits"}, flags));
  tensor("logits", {8, 10});
  g.outputs = {"logits"};
  return g;
}

TEST(TrainGemmTransposed, NoTransposeKernelInTheStep) {
  const testing::EstimatedStep s = testing::estimated_step(gemm_model(), testing::sgd_momentum_spec());
  const Graph& g = s.step;
  int gemm_kernels = 0, transpose_kernels = 0, transposes_in_place = 0;
  for (size_t c : s.plan.gpus.at(0).cover.chosen) {
    const Candidate& cand = s.plan.candidates[c];
    if (cand.free_view) continue;
    bool gemm = false;
    int transposes = 0;
    for (size_t i : cand.nodes) {
      gemm = gemm || g.nodes[i].op == "Gemm";
      transposes += g.nodes[i].op == "Transpose";
    }
    const bool transpose = transposes > 0;
    gemm_kernels += gemm;
    transpose_kernels += transpose && !gemm;
    transposes_in_place += gemm ? transposes : 0;
    SCOPED_TRACE(cand.pattern);
    if (transpose && gemm) {
      // The Transpose is a prologue the Gemm kernel reads in place: it is no kernel input.
      const Workload w = make_workload(g, cand.nodes, cand.kind);
      for (const Node& n : w.graph.nodes) {
        if (n.op == "Transpose") {
          EXPECT_NE(std::find(w.graph.inputs.begin(), w.graph.inputs.end(), n.input(0)), w.graph.inputs.end());
        }
      }
    }
  }
  // The forward's three Transposes (W1^T, r^T, W2s^T) each in its Gemm's kernel; the six
  // gradient GEMMs read the stored tensors; the Transpose rule's inverses cancelled. Before:
  // 5 Transpose kernels (the three forward ones, read by the forward and the gradient
  // GEMMs, and two transposing dW1^T and dW2s^T back).
  EXPECT_EQ(transpose_kernels, 0);
  EXPECT_EQ(transposes_in_place, 3);
  EXPECT_EQ(gemm_kernels, 5) << "2 forward; dW1, dr and dW2s (x has no gradient)";
  // The forward Gemm alone reads each forward Transpose (the gradient GEMMs read the stored
  // tensors), so the Transpose is its prologue.
  const auto readers = g.consumers();
  for (const char* t : {"w1t", "rt", "w2"}) EXPECT_EQ(readers.at(t).size(), 1u) << t;
}

// Three SGD steps of the plan on the host emulator, the runtime carrying weights and
// momenta, against the CPU reference's steps: the in-place reads with the flipped flags
// change every loss and update if a layout were wrong.
TEST(TrainGemmTransposed, StepsOnTheEmulatorFollowTheReferenceSteps) {
  const TrainingSpec spec = testing::sgd_momentum_spec();
  testing::EstimatedStep s = testing::estimated_step(gemm_model(), spec);
  const int compared = testing::expect_plan_steps_follow_reference(s, spec, "gemm_model.onnx", 31, 3, 1);
  EXPECT_EQ(compared, 8) << "4 weights and their momenta";
}

}  // namespace
}  // namespace dc
