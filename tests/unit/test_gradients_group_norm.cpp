// GroupNormalization and InstanceNormalization in a training step: lower_norms (run by
// simplify_for_training, as for inference) turns each into LayerNormalization over a
// reshaped X and a per-channel affine (Reshape, Expand, Mul, Add), whose gradient rules give
// X's, the scale's and the bias's gradients (docs/training.md, "Gradient rules"). Against
// central finite differences on the CPU reference (gradient_testing.h): opset 18's per-group
// scale and bias (repeated over their channels, so each gradient sums its group's channels),
// opset 21's per-channel ones, and InstanceNormalization's.
#include "gradient_testing.h"
#include "passes/simplify_for_training.h"

namespace dc::testing {
namespace {

// X [2, 6, 3, 5] (4-D) or [2, 6, 7] (3-D) normalised by `op`, scale and bias of `affine`
// values; weights the training pass would train.
Graph norm_graph(const std::string& op, int opset, const Shape& x, int64_t affine, int64_t groups) {
  Graph g;
  g.opset = opset;
  add_initializer(g, "x", random_tensor(x, 41, -2.f, 2.f));
  add_initializer(g, "s", random_tensor({affine}, 42, 0.5f, 1.5f));
  add_initializer(g, "b", random_tensor({affine}, 43));
  Attributes a = attrs({{"epsilon", 1e-5f}});
  if (groups > 0) a.set("num_groups", groups);
  add_node(g, op, {"x", "s", "b"}, {"y"}, a);
  g.outputs = {"y"};
  return g;
}

// The graph as the training pass sees it: lowered, with no GroupNormalization or
// InstanceNormalization left (neither has a rule of its own).
Graph lowered(Graph g) {
  g = simplify_for_training(std::move(g));
  for (const Node& n : g.nodes) {
    EXPECT_NE(n.op, "GroupNormalization");
    EXPECT_NE(n.op, "InstanceNormalization");
  }
  return g;
}

TEST(GradientRulesGroupNorm, PerGroupScaleOfOpset18) {
  check_gradients(lowered(norm_graph("GroupNormalization", 18, {2, 6, 3, 5}, 3, 3)), "y", {"x", "s", "b"});
}

TEST(GradientRulesGroupNorm, PerChannelScaleOfOpset21) {
  check_gradients(lowered(norm_graph("GroupNormalization", 21, {2, 6, 3, 5}, 6, 2)), "y", {"x", "s", "b"});
}

TEST(GradientRulesGroupNorm, InstanceNormalization) {
  for (const Shape& x : {Shape{2, 6, 3, 5}, Shape{2, 6, 7}}) {
    SCOPED_TRACE(x.size());
    check_gradients(lowered(norm_graph("InstanceNormalization", 17, x, 6, 0)), "y", {"x", "s", "b"});
  }
}

}  // namespace
}  // namespace dc::testing
