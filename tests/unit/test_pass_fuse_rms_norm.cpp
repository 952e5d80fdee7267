// fuse_rms_norm: the decomposed RMSNorm forms exporters write become one RMSNormalization;
// fuse_layer_norm's Reciprocal and Cast forms; fuse_sibling_matmuls. Each checked against
// the reference executor on random inputs, plus the cases that must not fire.
#include "pass_testing.h"
#include "passes/fuse_layer_norm.h"
#include "passes/fuse_rms_norm.h"
#include "passes/fuse_sibling_matmuls.h"

namespace dc {
namespace {

using namespace dc::testing;

enum class Rsqrt { reciprocal, div, one_over };

struct Spec {
  Shape x_shape = {2, 3, 16};
  bool casts = true;           // x.to(float32) ... .to(float32), as LlamaRMSNorm
  bool square_by_mul = false;  // Mul(x, x) instead of Pow(x, 2)
  Rsqrt rsqrt = Rsqrt::reciprocal;
  bool weight = true, weight_first = true;
  std::vector<int64_t> axes = {-1};
};

// LlamaRMSNorm as torch exports it: Cast, Pow, ReduceMean, Add eps, Sqrt, Reciprocal, Mul,
// Cast, Mul(weight, ..). Intermediates: c, q, m, a, s, r, n, nc.
Graph rms_graph(const Spec& s) {
  Graph g;
  g.opset = 17;
  add_input(g, "x", s.x_shape);
  const int64_t k = s.x_shape.back();
  add_initializer(g, "two", Tensor::scalar<float>(2.f));
  add_initializer(g, "one", Tensor::scalar<float>(1.f));
  add_initializer(g, "eps", Tensor::scalar<float>(1e-6f));
  add_initializer(g, "w", random_tensor({k}, 5, 0.5f, 1.5f));
  std::string c = "x";
  if (s.casts) {
    add_node(g, "Cast", {"x"}, {"c"}, attrs({{"to", int64_t{1}}}));
    c = "c";
  }
  if (s.square_by_mul) add_node(g, "Mul", {c, c}, {"q"});
  else add_node(g, "Pow", {c, "two"}, {"q"});
  add_node(g, "ReduceMean", {"q"}, {"m"}, attrs({{"axes", s.axes}, {"keepdims", int64_t{1}}}));
  add_node(g, "Add", {"m", "eps"}, {"a"});
  add_node(g, "Sqrt", {"a"}, {"s"});
  switch (s.rsqrt) {
    case Rsqrt::reciprocal:
      add_node(g, "Reciprocal", {"s"}, {"r"});
      add_node(g, "Mul", {c, "r"}, {"n"});
      break;
    case Rsqrt::one_over:
      add_node(g, "Div", {"one", "s"}, {"r"});
      add_node(g, "Mul", {"r", c}, {"n"});
      break;
    case Rsqrt::div:
      add_node(g, "Div", {c, "s"}, {"n"});
      break;
  }
  std::string last = "n";
  if (s.casts) {
    add_node(g, "Cast", {"n"}, {"nc"}, attrs({{"to", int64_t{1}}}));
    last = "nc";
  }
  if (s.weight) {
    add_node(g, "Mul", s.weight_first ? std::vector<std::string>{"w", last} : std::vector<std::string>{last, "w"},
             {"y"});
    last = "y";
  }
  g.outputs = {last};
  return with_types(g);
}

TEST(PassFuseRmsNorm, LlamaFormWithCastsBecomesOneNode) {
  const Graph g = rms_graph({});
  Graph after = fuse_rms_norm(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  const Node& n = after.nodes[0];
  EXPECT_EQ(n.op, "RMSNormalization");
  EXPECT_EQ(n.inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(n.outputs, std::vector<std::string>{"y"});
  EXPECT_FLOAT_EQ(n.attrs.get_float("epsilon"), 1e-6f);
  expect_same_outputs(g, after, 1e-5f);
}

TEST(PassFuseRmsNorm, HandComputedValues) {
  Spec s;
  s.x_shape = {1, 4};
  Graph g = rms_graph(s);
  g.initializers["w"] = Tensor::from_vector<float>({4}, {1.f, 2.f, 0.5f, -1.f});
  Graph after = fuse_rms_norm(g);
  ASSERT_EQ(op_count(after, "RMSNormalization"), 1);
  const auto out = ref::run_graph(after, {{"x", Tensor::from_vector<float>({1, 4}, {1.f, 2.f, 3.f, 4.f})}});
  // mean of squares 7.5: x / sqrt(7.5 + 1e-6) * w
  const float r = 1.f / std::sqrt(7.5f + 1e-6f);
  expect_tensor_near(out.at("y"), Tensor::from_vector<float>({1, 4}, {r, 4 * r, 1.5f * r, -4 * r}));
}

TEST(PassFuseRmsNorm, DivAndOneOverFormsWithoutCasts) {
  for (const Rsqrt form : {Rsqrt::div, Rsqrt::one_over}) {
    Spec s;
    s.casts = false;
    s.square_by_mul = true;
    s.rsqrt = form;
    s.weight_first = false;
    const Graph g = rms_graph(s);
    Graph after = fuse_rms_norm(g);
    expect_well_formed(after);
    ASSERT_EQ(after.nodes.size(), 1u);
    EXPECT_EQ(after.nodes[0].op, "RMSNormalization");
    expect_same_outputs(g, after, 1e-5f);
  }
}

TEST(PassFuseRmsNorm, WithoutWeightUsesOnes) {
  Spec s;
  s.weight = false;
  const Graph g = rms_graph(s);
  Graph after = fuse_rms_norm(g);
  ASSERT_EQ(after.nodes.size(), 1u);
  EXPECT_EQ(after.nodes[0].outputs, std::vector<std::string>{"nc"});
  expect_tensor_near(after.initializers.at(after.nodes[0].inputs[1]),
                     Tensor::from_vector<float>({16}, std::vector<float>(16, 1.f)));
  expect_same_outputs(g, after, 1e-5f);
}

TEST(PassFuseRmsNorm, ResidualStreamReadElsewhereStillFuses) {
  // torch 2.x's dynamo export of an fp32 LLaMA or T5 drops the no-op Cast, so the normalised
  // tensor is the residual stream, read by the next residual Add too.
  Spec s;
  s.casts = false;
  Graph g = rms_graph(s);
  add_input(g, "stream", s.x_shape);
  add_node(g, "Add", {"x", "stream"}, {"res"});
  g.outputs.push_back("res");
  g = with_types(g);
  Graph after = fuse_rms_norm(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(op_count(after, "RMSNormalization"), 1);
  EXPECT_EQ(op_count(after, "Add"), 1);
  expect_same_outputs(g, after, 1e-5f);
}

TEST(PassFuseRmsNorm, CastReadElsewhereIsKept) {
  // c = Cast(x) is read by another node too: the norm reads c and the Cast stays.
  Graph g = rms_graph({});
  add_node(g, "Neg", {"c"}, {"other"});
  g.outputs.push_back("other");
  g = with_types(g);
  Graph after = fuse_rms_norm(g);
  expect_well_formed(after);
  ASSERT_EQ(op_count(after, "RMSNormalization"), 1);
  EXPECT_EQ(op_count(after, "Cast"), 1);
  for (const Node& n : after.nodes) {
    if (n.op == "RMSNormalization") {
      EXPECT_EQ(n.inputs[0], "c");
    }
  }
  expect_same_outputs(g, after, 1e-5f);
}

TEST(PassFuseRmsNorm, RefusedOverAnotherAxis) {
  Spec s;
  s.x_shape = {2, 16, 16};
  s.axes = {1};
  EXPECT_EQ(op_count(fuse_rms_norm(rms_graph(s)), "RMSNormalization"), 0);
}

TEST(PassFuseRmsNorm, RefusedWhenAnIntermediateIsReadElsewhere) {
  Graph g = rms_graph({});
  add_node(g, "Relu", {"m"}, {"extra"});
  g.outputs.push_back("extra");
  g = with_types(g);
  EXPECT_EQ(op_count(fuse_rms_norm(g), "RMSNormalization"), 0);
}

TEST(PassFuseRmsNorm, RefusedWhenTheSquaredTensorIsNotTheNormalisedOne) {
  // x^2 averaged, but another tensor divided: not an RMSNorm.
  Graph g = rms_graph({});
  add_input(g, "z", {2, 3, 16});
  for (auto& n : g.nodes)
    if (n.op == "Mul" && n.outputs[0] == "n") n.inputs = {"z", "r"};
  g = with_types(g);
  EXPECT_EQ(op_count(fuse_rms_norm(g), "RMSNormalization"), 0);
}

TEST(PassFuseLayerNorm, ReciprocalFormWithCasts) {
  // torch's LayerNorm decomposition with rsqrt as Sqrt + Reciprocal and fp32 casts.
  Graph g;
  g.opset = 17;
  add_input(g, "x", {2, 3, 16});
  add_initializer(g, "two", Tensor::scalar<float>(2.f));
  add_initializer(g, "eps", Tensor::scalar<float>(1e-5f));
  add_initializer(g, "gamma", random_tensor({16}, 5, 0.5f, 1.5f));
  add_initializer(g, "beta", random_tensor({16}, 6));
  const Attributes mean = attrs({{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}});
  add_node(g, "Cast", {"x"}, {"c"}, attrs({{"to", int64_t{1}}}));
  add_node(g, "ReduceMean", {"c"}, {"m"}, mean);
  add_node(g, "Sub", {"c", "m"}, {"d"});
  add_node(g, "Pow", {"d", "two"}, {"p"});
  add_node(g, "ReduceMean", {"p"}, {"v"}, mean);
  add_node(g, "Add", {"v", "eps"}, {"ve"});
  add_node(g, "Sqrt", {"ve"}, {"s"});
  add_node(g, "Reciprocal", {"s"}, {"r"});
  add_node(g, "Mul", {"d", "r"}, {"n"});
  add_node(g, "Cast", {"n"}, {"nc"}, attrs({{"to", int64_t{1}}}));
  add_node(g, "Mul", {"nc", "gamma"}, {"gm"});
  add_node(g, "Add", {"gm", "beta"}, {"y"});
  g.outputs = {"y"};
  g = with_types(g);
  Graph after = fuse_layer_norm(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  EXPECT_EQ(after.nodes[0].op, "LayerNormalization");
  EXPECT_EQ(after.nodes[0].inputs[0], "x");
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFuseSiblingMatmuls, QkvWithBiasBecomesOneMatMulAndSlices) {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {2, 5, 16});
  const std::vector<int64_t> cols = {16, 8, 8};
  for (size_t i = 0; i < cols.size(); ++i) {
    const std::string s = std::to_string(i);
    add_initializer(g, "w" + s, random_tensor({16, cols[i]}, 10 + static_cast<uint32_t>(i)));
    add_initializer(g, "b" + s, random_tensor({cols[i]}, 20 + static_cast<uint32_t>(i)));
    add_node(g, "MatMul", {"x", "w" + s}, {"mm" + s});
    add_node(g, "Add", {"mm" + s, "b" + s}, {"y" + s});
    add_node(g, "Relu", {"y" + s}, {"out" + s});
    g.outputs.push_back("out" + s);
  }
  g = with_types(g);
  Graph after = fuse_sibling_matmuls(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "MatMul"), 1);
  EXPECT_EQ(op_count(after, "Add"), 1);
  EXPECT_EQ(op_count(after, "Slice"), 3);
  const Node* mm = find_node(after, "MatMul");
  EXPECT_EQ(after.tensors.at(mm->outputs[0]).shape, (Shape{2, 5, 32}));
  expect_same_outputs(g, after, 1e-5f);
}

TEST(PassFuseSiblingMatmuls, MixedBiasKeepsTheAddsAndDifferentKIsLeftAlone) {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {3, 8});
  add_initializer(g, "wa", random_tensor({8, 4}, 1));
  add_initializer(g, "wb", random_tensor({8, 6}, 2));
  add_initializer(g, "ba", random_tensor({4}, 3));
  add_initializer(g, "wc", random_tensor({4, 4}, 4));  // reads another tensor: not a sibling
  add_node(g, "MatMul", {"x", "wa"}, {"a"});
  add_node(g, "Add", {"a", "ba"}, {"ab"});
  add_node(g, "MatMul", {"x", "wb"}, {"b"});
  add_node(g, "MatMul", {"ab", "wc"}, {"c"});
  g.outputs = {"b", "c"};
  g = with_types(g);
  Graph after = fuse_sibling_matmuls(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "MatMul"), 2);  // a+b merged, c alone
  EXPECT_EQ(op_count(after, "Add"), 1);     // the bias stays on its slice
  EXPECT_EQ(op_count(after, "Slice"), 2);
  expect_same_outputs(g, after, 1e-5f);
}

TEST(PassFuseSiblingMatmuls, ComputedWeightsAreNotMerged) {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {3, 8});
  add_input(g, "w", {8, 4});
  add_initializer(g, "wb", random_tensor({8, 4}, 2));
  add_node(g, "MatMul", {"x", "w"}, {"a"});
  add_node(g, "MatMul", {"x", "wb"}, {"b"});
  g.outputs = {"a", "b"};
  g = with_types(g);
  EXPECT_EQ(op_count(fuse_sibling_matmuls(g), "MatMul"), 2);
}

}  // namespace
}  // namespace dc
