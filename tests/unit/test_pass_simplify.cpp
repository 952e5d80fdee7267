// simplify: the passes together, in the driver's order.
#include "pass_testing.h"
#include "passes/simplify.h"

namespace dc {
namespace {

using namespace dc::testing;

// x -> Conv -> BN -> Identity -> Reshape(by torch's Shape/Gather/Unsqueeze/Concat chain)
//   -> Dropout -> y, plus a dead branch.
Graph conv_bn_flatten() {
  Graph g;
  g.opset = 13;
  add_input(g, "x", {2, 3, 4, 4});
  add_initializer(g, "W", random_tensor({5, 3, 3, 3}, 1));
  add_initializer(g, "b", random_tensor({5}, 2));
  add_initializer(g, "scale", random_tensor({5}, 3, 0.5f, 1.5f));
  add_initializer(g, "shift", random_tensor({5}, 4));
  add_initializer(g, "mean", random_tensor({5}, 5));
  add_initializer(g, "var", random_tensor({5}, 6, 0.5f, 1.5f));
  add_initializer(g, "zero", Tensor::scalar<int64_t>(0));
  add_initializer(g, "axes0", Tensor::from_vector<int64_t>({1}, {0}));
  add_initializer(g, "minus1", Tensor::from_vector<int64_t>({1}, {-1}));
  add_initializer(g, "unused", Tensor::scalar<float>(3.f));
  add_node(g, "Conv", {"x", "W", "b"}, {"c"});
  add_node(g, "BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"bn"});
  add_node(g, "Identity", {"bn"}, {"i"});
  add_node(g, "Shape", {"i"}, {"s"});
  add_node(g, "Gather", {"s", "zero"}, {"n"}, attrs({{"axis", int64_t{0}}}));
  add_node(g, "Unsqueeze", {"n", "axes0"}, {"n1"});
  add_node(g, "Concat", {"n1", "minus1"}, {"shape"}, attrs({{"axis", int64_t{0}}}));
  add_node(g, "Reshape", {"i", "shape"}, {"r"});
  g.outputs = {"r"};
  g = with_types(g);
  // Typed by hand: the Dropout kernel may be random, and the dead branch is never run.
  add_node(g, "Dropout", {"r"}, {"y"});
  add_node(g, "Neg", {"x"}, {"dead"});
  g.tensors["y"] = g.tensors["r"];
  g.tensors["dead"] = g.tensors["x"];
  g.outputs = {"y"};
  return g;
}

TEST(PassSimplify, ConvBnFlattenCollapsesToConvReshape) {
  const Graph g = conv_bn_flatten();
  Graph after = simplify(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(after.nodes[0].op, "Conv");
  EXPECT_EQ(after.nodes[1].op, "Reshape");
  EXPECT_EQ(after.nodes[1].outputs, std::vector<std::string>{"y"});
  // Folded conv weight and bias plus the constant shape; everything else is gone.
  EXPECT_EQ(after.initializers.size(), 3u);
  EXPECT_EQ(after.initializers.at(after.nodes[1].inputs[1]).to_int64_vector(),
            (std::vector<int64_t>{2, -1}));
  EXPECT_FALSE(after.tensors.count("dead"));

  // The original, minus its Dropout (whose kernel may be random), is the reference.
  Graph reference = g;
  reference.nodes.erase(reference.nodes.end() - 2);
  reference.outputs = {"r"};
  Graph renamed = after;
  renamed.outputs = {"r"};
  renamed.nodes[1].outputs = {"r"};
  expect_same_outputs(reference, renamed, 1e-4f);
}

TEST(PassSimplify, OptionsTurnFusionsOff) {
  SimplifyOptions opts;
  opts.fold_batch_norm = false;
  Graph after = simplify(conv_bn_flatten(), opts);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 1);
}

}  // namespace
}  // namespace dc
