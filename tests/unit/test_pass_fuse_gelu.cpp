// fuse_gelu: the erf form 0.5 * x * (1 + erf(x / sqrt(2))) becomes one Gelu node.
#include "pass_testing.h"
#include "passes/fuse_gelu.h"

namespace dc {
namespace {

using namespace dc::testing;

enum class Form {
  x_times_a_then_half,  // Mul(Mul(x, a), 0.5)         (torch's export)
  half_x_times_a,       // Mul(Mul(x, 0.5), a)
  a_half_times_x,       // Mul(Mul(a, 0.5), x)
};

struct Spec {
  Form form = Form::x_times_a_then_half;
  bool mul_by_inverse = false;  // Mul(x, 0.7071) instead of Div(x, 1.4142)
  bool swap = false;            // constants / x on the other side of commutative ops
  float sqrt2 = 1.4142135f;
  float one = 1.f;
  float half = 0.5f;
};

// Intermediates: u (scaled), e (erf), a (1 + e), h / p / q (partial products); output y.
Graph gelu_graph(const Spec& s) {
  Graph g;
  add_input(g, "x", {2, 5});
  add_initializer(g, "c_scale", Tensor::scalar<float>(s.mul_by_inverse ? 1.f / s.sqrt2 : s.sqrt2));
  add_initializer(g, "c_one", Tensor::from_vector<float>({1}, {s.one}));
  add_initializer(g, "c_half", Tensor::scalar<float>(s.half));
  auto pair = [&](const std::string& a, const std::string& b) {
    return s.swap ? std::vector<std::string>{b, a} : std::vector<std::string>{a, b};
  };
  if (s.mul_by_inverse) add_node(g, "Mul", pair("x", "c_scale"), {"u"});
  else add_node(g, "Div", {"x", "c_scale"}, {"u"});
  add_node(g, "Erf", {"u"}, {"e"});
  add_node(g, "Add", pair("e", "c_one"), {"a"});
  switch (s.form) {
    case Form::x_times_a_then_half:
      add_node(g, "Mul", pair("x", "a"), {"p"});
      add_node(g, "Mul", pair("p", "c_half"), {"y"});
      break;
    case Form::half_x_times_a:
      add_node(g, "Mul", pair("x", "c_half"), {"h"});
      add_node(g, "Mul", pair("h", "a"), {"y"});
      break;
    case Form::a_half_times_x:
      add_node(g, "Mul", pair("a", "c_half"), {"q"});
      add_node(g, "Mul", pair("q", "x"), {"y"});
      break;
  }
  g.outputs = {"y"};
  return with_types(g);
}

void expect_fused(const Graph& g) {
  Graph after = fuse_gelu(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  const Node& gelu = after.nodes[0];
  EXPECT_EQ(gelu.op, "Gelu");
  EXPECT_EQ(gelu.name, g.nodes.back().name);
  EXPECT_EQ(gelu.attrs.get_string("approximate"), "none");
  EXPECT_EQ(gelu.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(gelu.outputs, std::vector<std::string>{"y"});
  for (const char* t : {"u", "e", "a", "p", "h", "q"}) EXPECT_FALSE(after.tensors.count(t)) << t;
  expect_same_outputs(g, after, 1e-5f);
}

TEST(PassFuseGelu, TorchExportForm) { expect_fused(gelu_graph({})); }

TEST(PassFuseGelu, TorchExportFormSwapped) {
  Spec s;
  s.swap = true;
  expect_fused(gelu_graph(s));
}

TEST(PassFuseGelu, HalfTimesXFirstWithInverseScale) {
  Spec s;
  s.form = Form::half_x_times_a;
  s.mul_by_inverse = true;
  expect_fused(gelu_graph(s));
  s.swap = true;
  expect_fused(gelu_graph(s));
}

TEST(PassFuseGelu, HalfOfSumTimesX) {
  Spec s;
  s.form = Form::a_half_times_x;
  expect_fused(gelu_graph(s));
  s.swap = true;
  s.mul_by_inverse = true;
  expect_fused(gelu_graph(s));
}

TEST(PassFuseGelu, ConstantsWithinTolerance) {
  Spec s;
  s.sqrt2 = 1.41421f;  // 5 digits, as some exporters write it: 2.5e-6 relative
  expect_fused(gelu_graph(s));
}

TEST(PassFuseGelu, HandComputedValues) {
  Graph after = fuse_gelu(gelu_graph({}));
  ASSERT_EQ(op_count(after, "Gelu"), 1);
  const std::vector<float> x = {-2.f, -0.5f, 0.f, 1.f, 3.f};
  // Python: 0.5 * x * (1 + math.erf(x / math.sqrt(2)))
  const std::vector<float> y = {-0.04550026f, -0.15426877f, 0.f, 0.84134475f, 2.9959503f};
  std::vector<float> xx = x, yy = y;
  xx.insert(xx.end(), x.begin(), x.end());
  yy.insert(yy.end(), y.begin(), y.end());
  const auto out = ref::run_graph(after, {{"x", Tensor::from_vector<float>({2, 5}, xx)}});
  expect_tensor_near(out.at("y"), Tensor::from_vector<float>({2, 5}, yy));
}

TEST(PassFuseGelu, XWithOtherConsumersStillFuses) {
  Graph g = gelu_graph({});
  add_node(g, "Relu", {"x"}, {"r"});
  g.outputs.push_back("r");
  g = with_types(g);
  Graph after = fuse_gelu(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Gelu"), 1);
  EXPECT_EQ(op_count(after, "Relu"), 1);
  EXPECT_EQ(after.nodes.size(), 2u);
  expect_same_outputs(g, after);
}

TEST(PassFuseGelu, RefusedForWrongConstants) {
  Spec s;
  s.sqrt2 = 1.5f;
  EXPECT_EQ(op_count(fuse_gelu(gelu_graph(s)), "Gelu"), 0);
  s = {};
  s.sqrt2 = 1.4142135f * (1.f + 2e-4f);  // outside 1e-4 relative
  EXPECT_EQ(op_count(fuse_gelu(gelu_graph(s)), "Gelu"), 0);
  s = {};
  s.one = 2.f;
  EXPECT_EQ(op_count(fuse_gelu(gelu_graph(s)), "Gelu"), 0);
  s = {};
  s.half = 0.25f;
  EXPECT_EQ(op_count(fuse_gelu(gelu_graph(s)), "Gelu"), 0);
  s = {};
  s.form = Form::half_x_times_a;
  s.half = 0.4f;
  EXPECT_EQ(op_count(fuse_gelu(gelu_graph(s)), "Gelu"), 0);
}

TEST(PassFuseGelu, RefusedWhenIntermediateHasAnotherConsumer) {
  for (const char* t : {"u", "e", "a", "p"}) {
    Graph g = gelu_graph({});
    add_node(g, "Neg", {t}, {"extra"});
    g.outputs.push_back("extra");
    g = with_types(g);
    Graph after = fuse_gelu(g);
    EXPECT_EQ(op_count(after, "Gelu"), 0) << t;
    EXPECT_EQ(after.nodes.size(), g.nodes.size()) << t;
  }
}

TEST(PassFuseGelu, RefusedWhenHalfXIsSharedOrAnOutput) {
  Spec s;
  s.form = Form::half_x_times_a;
  Graph g = gelu_graph(s);
  g.outputs.push_back("h");
  EXPECT_EQ(op_count(fuse_gelu(g), "Gelu"), 0);
}

TEST(PassFuseGelu, RefusedWhenMultiplyingAnotherTensor) {
  // (z * a) * 0.5 with z != x is not GELU.
  Graph g = gelu_graph({});
  add_input(g, "z", {2, 5});
  for (auto& n : g.nodes)
    if (n.outputs[0] == "p") n.inputs = {"z", "a"};
  EXPECT_EQ(op_count(fuse_gelu(g), "Gelu"), 0);
}

TEST(PassFuseGelu, RefusedWhenConstantWouldBroadcastX) {
  // A [1,1,1] "0.5" would raise the rank of the result: not an elementwise GELU of x.
  Graph g = gelu_graph({});
  g.initializers["c_half"] = Tensor::from_vector<float>({1, 1, 1}, {0.5f});
  g.tensors["c_half"] = TensorInfo{DType::f32, {1, 1, 1}};
  EXPECT_EQ(op_count(fuse_gelu(g), "Gelu"), 0);
}

// The tanh form as torch 2.x's dynamo exporter writes GPT-2's NewGELUActivation:
// h = x * 0.5; c = Pow(x, 3); k = c * 0.044715; s = x + k; b = s * sqrt(2/pi); t = Tanh(b);
// a = t + 1; y = h * a. `cube_by_mul`: c = Mul(Mul(x, x), x) (intermediate sq).
struct TanhSpec {
  bool cube_by_mul = false;
  bool swap = false;
  float cubic = 0.044715f;
  float scale = 0.7978846f;
};

Graph tanh_gelu_graph(const TanhSpec& s) {
  Graph g;
  add_input(g, "x", {2, 5});
  add_initializer(g, "c_half", Tensor::scalar<float>(0.5f));
  add_initializer(g, "c_three", Tensor::scalar<float>(3.f));
  add_initializer(g, "c_cubic", Tensor::scalar<float>(s.cubic));
  add_initializer(g, "c_scale", Tensor::scalar<float>(s.scale));
  add_initializer(g, "c_one", Tensor::scalar<float>(1.f));
  auto pair = [&](const std::string& a, const std::string& b) {
    return s.swap ? std::vector<std::string>{b, a} : std::vector<std::string>{a, b};
  };
  add_node(g, "Mul", pair("x", "c_half"), {"h"});
  if (s.cube_by_mul) {
    add_node(g, "Mul", {"x", "x"}, {"sq"});
    add_node(g, "Mul", pair("sq", "x"), {"c"});
  } else {
    add_node(g, "Pow", {"x", "c_three"}, {"c"});
  }
  add_node(g, "Mul", pair("c", "c_cubic"), {"k"});
  add_node(g, "Add", pair("x", "k"), {"s"});
  add_node(g, "Mul", pair("s", "c_scale"), {"b"});
  add_node(g, "Tanh", {"b"}, {"t"});
  add_node(g, "Add", pair("t", "c_one"), {"a"});
  add_node(g, "Mul", pair("h", "a"), {"y"});
  g.outputs = {"y"};
  return with_types(g);
}

TEST(PassFuseGelu, TanhFormBecomesApproximateTanh) {
  for (const bool by_mul : {false, true})
    for (const bool swap : {false, true}) {
      TanhSpec s;
      s.cube_by_mul = by_mul;
      s.swap = swap;
      const Graph g = tanh_gelu_graph(s);
      Graph after = fuse_gelu(g);
      expect_well_formed(after);
      ASSERT_EQ(after.nodes.size(), 1u) << by_mul << swap;
      const Node& gelu = after.nodes[0];
      EXPECT_EQ(gelu.op, "Gelu");
      EXPECT_EQ(gelu.attrs.get_string("approximate"), "tanh");
      EXPECT_EQ(gelu.inputs, std::vector<std::string>{"x"});
      EXPECT_EQ(gelu.outputs, std::vector<std::string>{"y"});
      for (const char* t : {"h", "c", "sq", "k", "s", "b", "t", "a"})
        EXPECT_FALSE(after.tensors.count(t)) << t;
      expect_same_outputs(g, after, 1e-5f);
    }
}

TEST(PassFuseGelu, TanhFormHandComputedValues) {
  Graph after = fuse_gelu(tanh_gelu_graph({}));
  ASSERT_EQ(op_count(after, "Gelu"), 1);
  // Python: 0.5*x*(1+math.tanh(math.sqrt(2/math.pi)*(x+0.044715*x**3)))
  const std::vector<float> x = {-2.f, -0.5f, 0.f, 1.f, 3.f, -2.f, -0.5f, 0.f, 1.f, 3.f};
  const std::vector<float> y = {-0.04540231f, -0.15428599f, 0.f, 0.84119199f, 2.99636261f,
                                -0.04540231f, -0.15428599f, 0.f, 0.84119199f, 2.99636261f};
  const auto out = ref::run_graph(after, {{"x", Tensor::from_vector<float>({2, 5}, x)}});
  expect_tensor_near(out.at("y"), Tensor::from_vector<float>({2, 5}, y));
}

TEST(PassFuseGelu, TanhFormRefusedForWrongConstantsOrSharedIntermediates) {
  TanhSpec s;
  s.cubic = 0.05f;
  EXPECT_EQ(op_count(fuse_gelu(tanh_gelu_graph(s)), "Gelu"), 0);
  s = {};
  s.scale = 0.8f;
  EXPECT_EQ(op_count(fuse_gelu(tanh_gelu_graph(s)), "Gelu"), 0);
  for (const char* t : {"h", "c", "k", "s", "b", "t", "a"}) {
    Graph g = tanh_gelu_graph({});
    add_node(g, "Neg", {t}, {"extra"});
    g.outputs.push_back("extra");
    g = with_types(g);
    EXPECT_EQ(op_count(fuse_gelu(g), "Gelu"), 0) << t;
  }
  // Pow(z, 3) of another tensor: not x's cube.
  Graph g = tanh_gelu_graph({});
  add_input(g, "z", {2, 5});
  for (auto& n : g.nodes)
    if (n.op == "Pow") n.inputs[0] = "z";
  g = with_types(g);
  EXPECT_EQ(op_count(fuse_gelu(g), "Gelu"), 0);
}

}  // namespace
}  // namespace dc
