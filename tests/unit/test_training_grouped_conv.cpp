// A training step of a small ResNeXt-style CNN (two grouped 3x3 convolutions, 4 and 2
// groups, between group-1 layers): each grouped weight gradient is one dc.ConvGradWeight in
// conv_implicit_gemm's weight-gradient mode (docs/training.md "Convolution gradients"), so
// the estimated plan has no Transpose kernel; its SGD steps on the host emulator follow the
// CPU reference's.
#include <gtest/gtest.h>

#include <string>

#include "model_builder.h"
#include "testing.h"
#include "training_step_testing.h"

namespace dc {
namespace {

Attributes conv(int64_t group, int64_t stride, int64_t pad, int64_t dilation) {
  Attributes a;
  a.set("kernel_shape", std::vector<int64_t>{3, 3});
  a.set("strides", std::vector<int64_t>{stride, stride});
  a.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  a.set("dilations", std::vector<int64_t>{dilation, dilation});
  a.set("group", group);
  return a;
}

// x [2, 4, 8, 8] -> conv 4 -> 8 (pads 1) -> ReLU -> conv of 4 groups, 8 -> 8, stride 2 ->
// ReLU -> conv of 2 groups, 8 -> 12, dilation 2 (pads 2) -> ReLU -> global average pool ->
// fc 12 -> 10.
Graph grouped_cnn() {
  testing::ModelBuilder m;
  m.g.opset = 17;
  m.input("x", {2, 4, 8, 8})
      .weight("w1", {8, 4, 3, 3})
      .weight("b1", {8})
      .weight("w2", {8, 2, 3, 3})
      .weight("w3", {12, 4, 3, 3})
      .weight("b3", {12})
      .weight("wf", {10, 12})
      .weight("bf", {10})
      .node("Conv", {"x", "w1", "b1"}, "c1", {2, 8, 8, 8}, conv(1, 1, 1, 1))
      .node("Relu", {"c1"}, "r1", {2, 8, 8, 8})
      .node("Conv", {"r1", "w2"}, "c2", {2, 8, 4, 4}, conv(4, 2, 1, 1))
      .node("Relu", {"c2"}, "r2", {2, 8, 4, 4})
      .node("Conv", {"r2", "w3", "b3"}, "c3", {2, 12, 4, 4}, conv(2, 1, 2, 2))
      .node("Relu", {"c3"}, "r3", {2, 12, 4, 4})
      .node("GlobalAveragePool", {"r3"}, "p", {2, 12, 1, 1})
      .node("Flatten", {"p"}, "f", {2, 12});
  Attributes fc;
  fc.set("transB", int64_t{1});
  m.node("Gemm", {"f", "wf", "bf"}, "logits", {2, 10}, fc);
  m.g.outputs = {"logits"};
  return m.g;
}

TEST(TrainGroupedConv, WeightGradientsInTheModeWithoutTransposes) {
  const TrainingSpec spec = testing::sgd_momentum_spec();
  testing::EstimatedStep s = testing::estimated_step(grouped_cnn(), spec);
  const Graph& step = s.step;
  int grouped_modes = 0;
  for (const Node& n : step.nodes) {
    EXPECT_NE(n.op, "Transpose") << n.name;
    if (n.op == "dc.ConvGradWeight" && n.attrs.get_int("group", 1) > 1) ++grouped_modes;
  }
  EXPECT_EQ(grouped_modes, 2);  // w2's (4 groups) and w3's (2 groups)
  const ModelPlan& plan = s.plan;
  int chosen_modes = 0, with_bias_sum = 0;
  for (size_t c : plan.gpus.at(0).cover.chosen) {
    const Candidate& cand = plan.candidates[c];
    int modes = 0, sums = 0;
    for (size_t i : cand.nodes) {
      EXPECT_NE(step.nodes[i].op, "Transpose") << cand.pattern;
      modes += step.nodes[i].op == "dc.ConvGradWeight" && step.nodes[i].attrs.get_int("group", 1) > 1;
      sums += step.nodes[i].op == "ReduceSum";
    }
    chosen_modes += modes;
    with_bias_sum += modes == 1 && sums == 1;
  }
  EXPECT_EQ(chosen_modes, 2);
  EXPECT_EQ(with_bias_sum, 1) << "b3's gradient beside w3's (2 groups); w2 has no bias";

  // Three SGD steps of the plan on the host emulator: a group's dW computed from another
  // group's channels or filters changes the updates of w2 and w3, the losses after the first
  // step and every weight upstream.
  EXPECT_EQ(testing::expect_plan_steps_follow_reference(s, spec, "grouped_cnn.onnx", 31, 3, 2), 14)
      << "7 weights and their momenta";
}

}  // namespace
}  // namespace dc
