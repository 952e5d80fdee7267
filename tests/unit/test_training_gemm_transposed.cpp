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

#include "gpu/gpu_catalog.h"
#include "passes/build_training_graph.h"
#include "passes/simplify_for_training.h"
#include "passes/training_state.h"
#include "plan_build.h"
#include "plan_estimate.h"
#include "ref/compare.h"
#include "ref/train_step.h"
#include "runtime.h"
#include "emulated_steps_testing.h"
#include "testing.h"
#include "train_options.h"

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

TrainingSpec sgd_spec() {
  TrainingSpec spec;
  spec.optimizer = OptimizerKind::sgd;
  spec.lr = 0.1;
  spec.momentum = 0.9;
  spec.weight_decay = 0.01;
  return spec;
}

struct StepPlan {
  Graph step;
  ModelPlan plan;
};

StepPlan estimated_step() {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  StepPlan s{build_training_graph(simplify_for_training(gemm_model()), sgd_spec()), {}};
  s.plan = plan_by_estimate(s.step, {&catalog.require("h100")}, PlanOptions{});
  return s;
}

TEST(TrainGemmTransposed, NoTransposeKernelInTheStep) {
  const StepPlan s = estimated_step();
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
  StepPlan s = estimated_step();
  Graph& g = s.step;
  const PlanTraining t = cli::plan_training(sgd_spec(), "gemm_model.onnx", Precision::fp32);
  const ExecPlan p = build_estimated_plan(g, s.plan, 0, PlanOptions{}, &t);
  rt::Runtime r(p, rt::make_emulator_backend(rt::EmulatorBackendOptions{::testing::TempDir() + "dc-emulator-test-cache"}));
  const int compared = testing::expect_emulator_steps_follow_reference(r, g, 31, 3, 1);
  EXPECT_EQ(compared, 8) << "4 weights and their momenta";
}

}  // namespace
}  // namespace dc
