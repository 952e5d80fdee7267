// LayerNormalization's gradient rule (grad_norm.cpp) as ONNX ops from the saved statistics:
// against central finite differences on the CPU reference (gradient_testing.h), with the
// statistics saved (the training forward's outputs 1, 2) and recomputed, over one and two
// normalised axes, with a constant unit scale; and the training step's form: no dc.LayerNormGrad, the forward saves its
// mean and inverse std and the backward reads them.
#include "gradient_testing.h"
#include "training_testing.h"

namespace dc::testing {
namespace {

Graph layer_norm(const Shape& x, const Shape& scale, bool bias, int64_t axis, bool saved) {
  Graph g;
  add_initializer(g, "x", random_tensor(x, 31, -2.f, 2.f));
  add_initializer(g, "s", random_tensor(scale, 32));
  std::vector<std::string> in{"x", "s"};
  if (bias) {
    add_initializer(g, "b", random_tensor(scale, 33));
    in.push_back("b");
  }
  std::vector<std::string> out{"y"};
  if (saved) out = {"y", "mean", "invstd"};
  add_node(g, "LayerNormalization", in, out, attrs({{"axis", axis}}));
  return g;
}

TEST(GradientRulesLayerNorm, SavedStatisticsLastAxis) {
  check_gradients(layer_norm({3, 2, 8}, {8}, true, -1, true), "y", {"x", "s", "b"});
}

TEST(GradientRulesLayerNorm, TwoNormalisedAxesBroadcastScale) {
  // Rows over the last two axes; a [1, 5] scale broadcast over the first of them, so its
  // gradient also sums over that axis.
  for (bool saved : {false, true}) {
    SCOPED_TRACE(saved ? "saved statistics" : "recomputed statistics");
    check_gradients(layer_norm({2, 3, 4, 5}, {1, 5}, false, 2, saved), "y", {"x", "s"});
  }
}

TEST(GradientRulesLayerNorm, ConstantUnitScale) {
  // fuse_layer_norm's form: a constant scale of ones (no gradient), the weight a Mul after
  // it; the rule's three-kernel form, which leaves the scale out.
  for (bool saved : {false, true}) {
    SCOPED_TRACE(saved ? "saved statistics" : "recomputed statistics");
    Graph g = layer_norm({3, 2, 8}, {8}, true, -1, saved);
    g.initializers["s"] = Tensor::from_vector<float>({8}, std::vector<float>(8, 1.f));
    check_gradients(g, "y", {"x", "b"});
  }
}

TEST(GradientRulesLayerNorm, TrainingStepReadsTheSavedStatistics) {
  const Graph t = training_step("tiny_transformer", OptimizerKind::adamw);
  const auto consumers = t.consumers();
  int norms = 0;
  for (const auto& n : t.nodes) {
    EXPECT_NE(n.op, "dc.LayerNormGrad");
    if (n.op != "LayerNormalization") continue;
    ++norms;
    ASSERT_EQ(n.outputs.size(), 3u) << n.name;
    for (size_t k = 1; k < 3; ++k) {
      EXPECT_EQ(t.info(n.outputs[k]).dtype, DType::f32);
      EXPECT_EQ(t.info(n.outputs[k]).shape.back(), 1);
      EXPECT_TRUE(consumers.count(n.outputs[k])) << n.outputs[k] << " is not read";
    }
  }
  EXPECT_GT(norms, 0);
}

}  // namespace
}  // namespace dc::testing
