// A training step of a small CNN with two BatchNorms: each BatchNorm's backward sums, dB =
// ReduceSum(dY) and dscale = ReduceSum(dY x_hat) over the batch and spatial axes, are one
// kernel in the estimated plan's cover (docs/candidates.md "Sibling sums", docs/codegen.md
// "Sibling sums"), and its SGD steps on the host emulator follow the CPU reference's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "model_builder.h"
#include "testing.h"
#include "training_step_testing.h"

namespace dc {
namespace {

Attributes conv(int64_t stride) {
  Attributes a;
  a.set("kernel_shape", std::vector<int64_t>{3, 3});
  a.set("strides", std::vector<int64_t>{stride, stride});
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  return a;
}

// BatchNormalization's scale, bias, running mean and (positive) running variance for c channels.
void batch_norm_weights(testing::ModelBuilder& m, const std::string& p, int64_t c) {
  m.weight(p + "_scale", {c}).weight(p + "_bias", {c}).weight(p + "_mean", {c}).weight(p + "_var", {c});
  float* var = m.g.initializers[p + "_var"].mutable_data<float>();
  for (int64_t i = 0; i < c; ++i) var[i] = 0.5f + std::fabs(var[i]);
}

// x [3, 3, 9, 7] -> conv 3 -> 6 -> BatchNorm -> ReLU -> conv 6 -> 5, stride 2 -> BatchNorm ->
// ReLU -> global average pool -> fc 5 -> 10 (the convolutions without bias, as ResNet's).
Graph batch_norm_cnn() {
  testing::ModelBuilder m;
  m.g.opset = 17;
  m.input("x", {3, 3, 9, 7}).weight("w1", {6, 3, 3, 3}).weight("w2", {5, 6, 3, 3}).weight("wf", {10, 5}).weight("bf", {10});
  batch_norm_weights(m, "n1", 6);
  batch_norm_weights(m, "n2", 5);
  m.node("Conv", {"x", "w1"}, "c1", {3, 6, 9, 7}, conv(1))
      .node("BatchNormalization", {"c1", "n1_scale", "n1_bias", "n1_mean", "n1_var"}, "b1", {3, 6, 9, 7})
      .node("Relu", {"b1"}, "r1", {3, 6, 9, 7})
      .node("Conv", {"r1", "w2"}, "c2", {3, 5, 5, 4}, conv(2))
      .node("BatchNormalization", {"c2", "n2_scale", "n2_bias", "n2_mean", "n2_var"}, "b2", {3, 5, 5, 4})
      .node("Relu", {"b2"}, "r2", {3, 5, 5, 4})
      .node("GlobalAveragePool", {"r2"}, "p", {3, 5, 1, 1})
      .node("Flatten", {"p"}, "f", {3, 5});
  Attributes fc;
  fc.set("transB", int64_t{1});
  m.node("Gemm", {"f", "wf", "bf"}, "logits", {3, 10}, fc);
  m.g.outputs = {"logits"};
  return m.g;
}

TEST(TrainBatchNormSums, EachBatchNormsSumsInOneKernel) {
  const TrainingSpec spec = testing::sgd_momentum_spec();
  testing::EstimatedStep s = testing::estimated_step(batch_norm_cnn(), spec);
  const Graph& step = s.step;
  int sums = 0;
  for (const Node& n : step.nodes) sums += n.op == "ReduceSum";
  EXPECT_GE(sums, 4) << "two per BatchNorm";
  int paired = 0;
  for (size_t c : s.plan.gpus.at(0).cover.chosen) {
    const Candidate& cand = s.plan.candidates[c];
    int in_cluster = 0;
    for (size_t i : cand.nodes) in_cluster += step.nodes[i].op == "ReduceSum";
    EXPECT_LE(in_cluster, 2) << cand.pattern;
    paired += in_cluster == 2;
  }
  EXPECT_EQ(paired, 2) << "dB and dscale of each BatchNorm in one kernel";

  // Three SGD steps of the plan on the host emulator: dB and dscale swapped or summed over
  // the wrong rows change every update upstream of a BatchNorm and the losses.
  EXPECT_EQ(testing::expect_plan_steps_follow_reference(s, spec, "batch_norm_cnn.onnx", 37, 3, 1), 20)
      << "8 weights, their momenta and the BatchNorms' running means and variances";
}

}  // namespace
}  // namespace dc
