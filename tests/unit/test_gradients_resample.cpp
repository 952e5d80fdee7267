// Gradient rules of ConvTranspose (through its adjoint Conv) and Resize/Upsample (the transposed
// interpolation per axis) against central finite differences on the CPU reference, in f32
// with the loss summed in f64 (gradient_testing.h; tolerance in docs/precision.md, "Gradient
// checks").
#include "gradient_testing.h"

namespace dc::testing {
namespace {

Tensor f32(Shape s, uint32_t seed) { return random_tensor(s, seed, -1.f, 1.f); }

Tensor floats(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<float>({n}, std::move(v));
}

// The ops of the backward nodes that the rules added to differentiate y with respect to wrt.
std::multiset<std::string> backward_ops(Graph g, const std::string& y, const std::set<std::string>& wrt) {
  g.outputs = {y};
  g = with_types(g);
  const size_t forward = g.nodes.size();
  add_initializer(g, "seed", Tensor(g.info(y).dtype, g.info(y).shape));
  add_vector_jacobian_product(g, {{y, "seed"}}, wrt);
  std::multiset<std::string> ops;
  for (size_t i = forward; i < g.nodes.size(); ++i) ops.insert(g.nodes[i].op);
  return ops;
}

TEST(GradientRulesF32, ConvTransposeStridedPaddedOutputPaddingDilated) {
  Graph g;
  add_initializer(g, "x", f32({2, 3, 4, 5}, 1));
  add_initializer(g, "w", f32({3, 4, 3, 2}, 2));
  add_initializer(g, "b", f32({4}, 3));
  add_node(g, "ConvTranspose", {"x", "w", "b"}, {"y"},
           attrs({{"strides", std::vector<int64_t>{2, 3}}, {"pads", std::vector<int64_t>{1, 0, 0, 2}},
                  {"output_padding", std::vector<int64_t>{1, 2}}, {"dilations", std::vector<int64_t>{1, 2}}}));
  check_gradients(g, "y", {"x", "w", "b"});
  // Both gradients are on the implicit-GEMM template: the data gradient a Conv, the weight
  // gradient (Conv's rule, group 1) its weight-gradient mode.
  const auto ops = backward_ops(g, "y", {"x", "w"});
  EXPECT_EQ(ops.count("Conv"), 1u);
  EXPECT_EQ(ops.count("dc.ConvGradWeight"), 1u);
}

TEST(GradientRulesF32, ConvTransposeGroupedSameUpper) {
  Graph g;
  add_initializer(g, "x", f32({1, 4, 5, 5}, 4));
  add_initializer(g, "w", f32({4, 3, 3, 3}, 5));  // group 2: 6 output channels
  add_node(g, "ConvTranspose", {"x", "w"}, {"y"},
           attrs({{"group", int64_t{2}}, {"strides", std::vector<int64_t>{2, 2}},
                  {"auto_pad", std::string("SAME_UPPER")}}));
  check_gradients(g, "y", {"x", "w"});
}

TEST(GradientRulesF32, ConvTransposeOutputShape1D) {
  Graph g;
  add_initializer(g, "x", f32({2, 2, 6}, 6));
  add_initializer(g, "w", f32({2, 3, 4}, 7));
  add_node(g, "ConvTranspose", {"x", "w"}, {"y"},
           attrs({{"strides", std::vector<int64_t>{2}}, {"output_shape", std::vector<int64_t>{13}}}));
  check_gradients(g, "y", {"x", "w"});
}

TEST(GradientRulesF32, ResizeNearestIntegerFactorIsAReduceSum) {
  Graph g;
  add_initializer(g, "x", f32({2, 3, 3, 4}, 8));
  add_initializer(g, "s", floats({1, 1, 2, 3}));
  add_node(g, "Resize", {"x", "", "s"}, {"y"}, attrs({{"mode", std::string("nearest")}}));
  check_gradients(g, "y", {"x"});
  const auto ops = backward_ops(g, "y", {"x"});
  EXPECT_EQ(ops.count("ReduceSum"), 2u);
  EXPECT_EQ(ops.count("MatMul"), 0u);
}

TEST(GradientRulesF32, ResizeNearestRoundPreferCeilDownscale) {
  Graph g;
  add_initializer(g, "x", f32({1, 2, 7, 5}, 9));
  add_initializer(g, "s", floats({1, 1, 0.6f, 1.7f}));
  add_node(g, "Resize", {"x", "", "s"}, {"y"},
           attrs({{"mode", std::string("nearest")}, {"nearest_mode", std::string("round_prefer_ceil")},
                  {"coordinate_transformation_mode", std::string("half_pixel")}}));
  check_gradients(g, "y", {"x"});
}

TEST(GradientRulesF32, ResizeLinearHalfPixelAndAlignCorners) {
  for (const char* mode : {"half_pixel", "align_corners", "pytorch_half_pixel"}) {
    SCOPED_TRACE(mode);
    Graph g;
    add_initializer(g, "x", f32({2, 2, 5, 3}, 10));
    add_initializer(g, "sizes", Tensor::from_vector<int64_t>({4}, {2, 2, 8, 7}));
    add_node(g, "Resize", {"x", "", "", "sizes"}, {"y"},
             attrs({{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string(mode)}}));
    check_gradients(g, "y", {"x"});
    const auto ops = backward_ops(g, "y", {"x"});
    EXPECT_EQ(ops.count("MatMul"), 2u);  // one per resized axis
  }
}

TEST(GradientRulesF32, ResizeCubicOneAxis) {
  Graph g;
  add_initializer(g, "x", f32({1, 3, 4, 6}, 11));
  add_initializer(g, "s", floats({1, 1, 1, 1.5f}));
  add_node(g, "Resize", {"x", "", "s"}, {"y"}, attrs({{"mode", std::string("cubic")}}));
  check_gradients(g, "y", {"x"});
}

TEST(GradientRulesF32, ResizeInsideAChainOfOps) {
  // The rule's reshapes and MatMuls compose with the gradients around it.
  Graph g;
  add_initializer(g, "x", f32({1, 2, 3, 3}, 12));
  add_initializer(g, "w", f32({2, 2, 3, 3}, 13));
  add_initializer(g, "s", floats({1, 1, 2, 2}));
  add_node(g, "Resize", {"x", "", "s"}, {"u"}, attrs({{"mode", std::string("linear")}}));
  add_node(g, "Conv", {"u", "w"}, {"y"}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  check_gradients(g, "y", {"x", "w"});
}

TEST(GradientRulesF32, UpsampleNearestOpset9) {
  Graph g;
  g.opset = 9;
  add_initializer(g, "x", f32({1, 2, 3, 2}, 14));
  add_initializer(g, "s", floats({1, 1, 2, 2}));
  add_node(g, "Upsample", {"x", "s"}, {"y"}, attrs({{"mode", std::string("nearest")}}));
  check_gradients(g, "y", {"x"});
}

TEST(GradientRules, ResizeWithComputedScalesIsRefused) {
  Graph g;
  add_initializer(g, "x", f32({1, 1, 2, 2}, 15));
  add_input(g, "s", {4});  // scales computed at run time: the rule cannot build R
  add_node(g, "Resize", {"x", "", "s"}, {"y"}, attrs({{"mode", std::string("nearest")}}));
  g.outputs = {"y"};
  g.tensors["y"] = TensorInfo{DType::f32, {1, 1, 4, 4}};
  add_initializer(g, "seed", Tensor(DType::f32, {1, 1, 4, 4}));
  try {
    add_vector_jacobian_product(g, {{"y", "seed"}}, {"x"});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a constant"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dc::testing
