// fuse_layer_norm: torch's opset-13 decomposition of LayerNorm becomes one node.
#include "pass_testing.h"
#include "passes/fuse_layer_norm.h"

namespace dc {
namespace {

using namespace dc::testing;

struct Spec {
  Shape x_shape = {2, 3, 8};
  std::vector<int64_t> axes = {-1};
  bool square_by_mul = false;  // Mul(d, d) instead of Pow(d, 2)
  bool swap = false;           // constants on the left of Add/Mul
  bool gamma = true, beta = true;
  std::optional<Shape> gamma_shape;  // default [K]
};

// x -> ReduceMean -> Sub -> Pow -> ReduceMean -> Add eps -> Sqrt -> Div [-> Mul gamma]
// [-> Add beta] -> y. Intermediates are named m, d, p, v, ve, s, n, gm.
Graph layer_norm_graph(const Spec& s) {
  Graph g;
  g.opset = 13;
  add_input(g, "x", s.x_shape);
  const int64_t k = s.x_shape.back();
  const Attributes mean_attrs = attrs({{"axes", s.axes}, {"keepdims", int64_t{1}}});
  auto ordered = [&](const std::string& value, const std::string& constant) {
    return s.swap ? std::vector<std::string>{constant, value}
                  : std::vector<std::string>{value, constant};
  };
  add_initializer(g, "two", Tensor::scalar<float>(2.f));
  add_initializer(g, "eps", Tensor::scalar<float>(1e-5f));
  add_initializer(g, "gamma", random_tensor(s.gamma_shape.value_or(Shape{k}), 5, 0.5f, 1.5f));
  add_initializer(g, "beta", random_tensor({k}, 6));

  add_node(g, "ReduceMean", {"x"}, {"m"}, mean_attrs);
  add_node(g, "Sub", {"x", "m"}, {"d"});
  if (s.square_by_mul) add_node(g, "Mul", {"d", "d"}, {"p"});
  else add_node(g, "Pow", {"d", "two"}, {"p"});
  add_node(g, "ReduceMean", {"p"}, {"v"}, mean_attrs);
  add_node(g, "Add", ordered("v", "eps"), {"ve"});
  add_node(g, "Sqrt", {"ve"}, {"s"});
  add_node(g, "Div", {"d", "s"}, {"n"});
  std::string last = "n";
  if (s.gamma) {
    add_node(g, "Mul", ordered(last, "gamma"), {"gm"});
    last = "gm";
  }
  if (s.beta) {
    add_node(g, "Add", ordered(last, "beta"), {"y"});
    last = "y";
  }
  g.outputs = {last};
  return with_types(g);
}

int64_t decomposed_ops(const Graph& g) {
  int64_t n = 0;
  for (const char* op : {"ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Mul", "Add"})
    n += op_count(g, op);
  return n;
}

TEST(PassFuseLayerNorm, FullPatternWithAffine) {
  const Graph g = layer_norm_graph({});
  Graph after = fuse_layer_norm(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  const Node& ln = after.nodes[0];
  EXPECT_EQ(ln.op, "LayerNormalization");
  EXPECT_EQ(ln.name, g.nodes.back().name);
  EXPECT_EQ(ln.inputs, (std::vector<std::string>{"x", "gamma", "beta"}));
  EXPECT_EQ(ln.outputs, std::vector<std::string>{"y"});
  EXPECT_EQ(ln.attrs.get_int("axis"), -1);
  EXPECT_FLOAT_EQ(ln.attrs.get_float("epsilon"), 1e-5f);
  for (const char* t : {"m", "d", "p", "v", "ve", "s", "n", "gm"})
    EXPECT_FALSE(after.tensors.count(t)) << t;
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFuseLayerNorm, HandComputedValues) {
  Spec s;
  s.x_shape = {1, 4};
  Graph g = layer_norm_graph(s);
  g.initializers["gamma"] = Tensor::from_vector<float>({4}, {1.f, 2.f, 0.5f, -1.f});
  g.initializers["beta"] = Tensor::from_vector<float>({4}, {0.f, 1.f, 0.f, 1.f});
  Graph after = fuse_layer_norm(g);
  ASSERT_EQ(op_count(after, "LayerNormalization"), 1);
  const auto out =
      ref::run_graph(after, {{"x", Tensor::from_vector<float>({1, 4}, {1.f, 2.f, 3.f, 4.f})}});
  // numpy: (x - 2.5) / sqrt(1.25 + 1e-5) * gamma + beta
  expect_tensor_near(out.at("y"), Tensor::from_vector<float>(
                                      {1, 4}, {-1.3416355f, 0.10557639f, 0.2236059f, -0.3416354f}));
}

TEST(PassFuseLayerNorm, MulSquareAndSwappedOperands) {
  Spec s;
  s.square_by_mul = true;
  s.swap = true;
  s.axes = {2};  // the last axis, written as a positive index
  const Graph g = layer_norm_graph(s);
  Graph after = fuse_layer_norm(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  EXPECT_EQ(after.nodes[0].op, "LayerNormalization");
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFuseLayerNorm, WithoutAffineUsesOnesScale) {
  Spec s;
  s.gamma = s.beta = false;
  const Graph g = layer_norm_graph(s);
  Graph after = fuse_layer_norm(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  const Node& ln = after.nodes[0];
  ASSERT_EQ(ln.inputs.size(), 2u);
  EXPECT_EQ(ln.outputs, std::vector<std::string>{"n"});
  expect_tensor_near(after.initializers.at(ln.inputs[1]),
                     Tensor::from_vector<float>({8}, std::vector<float>(8, 1.f)));
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFuseLayerNorm, BroadcastGammaIsReshapedToLastAxis) {
  Spec s;
  s.gamma_shape = Shape{1, 1, 8};
  const Graph g = layer_norm_graph(s);
  Graph after = fuse_layer_norm(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  const std::string& scale = after.nodes[0].inputs[1];
  EXPECT_NE(scale, "gamma");
  EXPECT_EQ(after.tensors.at(scale).shape, Shape{8});
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFuseLayerNorm, GammaVaryingAlongAnotherAxisIsNotAbsorbed) {
  Spec s;
  s.gamma_shape = Shape{3, 8};
  const Graph g = layer_norm_graph(s);
  Graph after = fuse_layer_norm(g);
  expect_well_formed(after);
  // The core still fuses; the Mul by gamma (and the Add after it) stay as nodes.
  EXPECT_EQ(op_count(after, "LayerNormalization"), 1);
  EXPECT_EQ(op_count(after, "Mul"), 1);
  EXPECT_EQ(op_count(after, "Add"), 1);
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFuseLayerNorm, NonConstantGammaIsNotAbsorbed) {
  Graph g = layer_norm_graph({});
  g.initializers.erase("gamma");
  g.inputs.push_back("gamma");
  Graph after = fuse_layer_norm(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "LayerNormalization"), 1);
  const Node* mul = find_node(after, "Mul");
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->inputs, (std::vector<std::string>{"n", "gamma"}));
  const Node* ln = find_node(after, "LayerNormalization");
  ASSERT_EQ(ln->inputs.size(), 2u);  // scale = ones, no bias
  EXPECT_EQ(ln->outputs, std::vector<std::string>{"n"});
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFuseLayerNorm, RefusedWhenIntermediateHasAnotherConsumer) {
  Graph g = layer_norm_graph({});
  add_node(g, "Relu", {"d"}, {"extra"});
  g.outputs.push_back("extra");
  g = with_types(g);
  Graph after = fuse_layer_norm(g);
  EXPECT_EQ(op_count(after, "LayerNormalization"), 0);
  EXPECT_EQ(decomposed_ops(after), decomposed_ops(g));
}

TEST(PassFuseLayerNorm, RefusedWhenIntermediateIsAGraphOutput) {
  Graph g = layer_norm_graph({});
  g.outputs.push_back("v");
  EXPECT_EQ(op_count(fuse_layer_norm(g), "LayerNormalization"), 0);
}

TEST(PassFuseLayerNorm, RefusedForNonLastAxis) {
  Spec s;
  s.axes = {1};
  s.x_shape = {2, 8, 8};  // square so that the shapes still broadcast
  const Graph g = layer_norm_graph(s);
  EXPECT_EQ(op_count(fuse_layer_norm(g), "LayerNormalization"), 0);
}

TEST(PassFuseLayerNorm, RefusedForTwoAxes) {
  Spec s;
  s.axes = {-2, -1};
  const Graph g = layer_norm_graph(s);
  EXPECT_EQ(op_count(fuse_layer_norm(g), "LayerNormalization"), 0);
}

TEST(PassFuseLayerNorm, RefusedWhenExponentIsNotTwo) {
  Graph g = layer_norm_graph({});
  g.initializers["two"] = Tensor::scalar<float>(3.f);
  EXPECT_EQ(op_count(fuse_layer_norm(g), "LayerNormalization"), 0);
}

TEST(PassFuseLayerNorm, RefusedWhenEpsilonIsNotConstant) {
  Graph g = layer_norm_graph({});
  g.initializers.erase("eps");
  g.inputs.push_back("eps");
  EXPECT_EQ(op_count(fuse_layer_norm(g), "LayerNormalization"), 0);
}

TEST(PassFuseLayerNorm, FusesEveryInstance) {
  // Two LayerNorms in sequence: the second reads the first's output.
  Graph g = layer_norm_graph({});
  const size_t n = g.nodes.size();
  for (size_t i = 0; i < n; ++i) {
    Node copy = g.nodes[i];
    copy.name += "_2";
    for (auto& t : copy.inputs)
      if (!g.initializers.count(t)) t = (t == "x" ? "y" : t + "_2");
    for (auto& t : copy.outputs) t += "_2";
    g.nodes.push_back(copy);
  }
  g.outputs = {"y_2"};
  g = with_types(g);
  Graph after = fuse_layer_norm(g);
  expect_well_formed(after);
  EXPECT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(op_count(after, "LayerNormalization"), 2);
  expect_same_outputs(g, after, 1e-4f);
}

}  // namespace
}  // namespace dc
