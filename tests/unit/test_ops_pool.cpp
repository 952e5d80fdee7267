// MaxPool, AveragePool and the global pools: ONNX's documented examples, the ceil_mode and
// count_include_pad edge cases, 1-D and 3-D windows, and the refused attributes.
#include <gtest/gtest.h>

#include <limits>
#include <optional>

#include "ir/error.h"
#include "ref/executor.h"
#include "ref/kernel.h"
#include "testing.h"

namespace {

using dc::Attributes;
using dc::DType;
using dc::Node;
using dc::Shape;
using dc::Tensor;
using dc::TensorInfo;
using dc::testing::expect_tensor_near;
using dc::testing::make_node;
using dc::testing::random_tensor;
using Ints = std::vector<int64_t>;

Tensor f32(Shape s, std::vector<float> v) { return Tensor::from_vector<float>(std::move(s), v); }

Tensor iota(Shape s, float start = 0.f) {
  Tensor t(DType::f32, std::move(s));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = start + static_cast<float>(i);
  return t;
}

Attributes attrs(std::initializer_list<std::pair<const char*, dc::AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

Tensor pool(const char* op, const Tensor& x, Attributes a) {
  return dc::ref::run_node(make_node(op, {"x"}, {"y"}, std::move(a)), {x}).at(0);
}

void check(const Node& n, const TensorInfo& x) {
  const dc::ref::OpDef* def = dc::ref::find_op(n.op);
  ASSERT_NE(def, nullptr);
  def->check(n, {&x});
}

TEST(OpsPool, OnnxCeilMode) {
  // 4x4 of 1..16, kernel 3, stride 2: floor mode gives 1x1, ceil mode 2x2.
  const Tensor x = iota({1, 1, 4, 4}, 1.f);
  const auto a = [] {
    return attrs(
        {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}});
  };
  expect_tensor_near(pool("MaxPool", x, a()), f32({1, 1, 2, 2}, {11, 12, 15, 16}));
  expect_tensor_near(pool("AveragePool", x, a()), f32({1, 1, 2, 2}, {6, 7.5f, 12, 13.5f}));
  expect_tensor_near(
      pool("MaxPool", x, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}})),
      f32({1, 1, 1, 1}, {11}));
}

TEST(OpsPool, CeilModeLastWindowMustStartInsideInput) {
  // 1-D, in 4, kernel 2, stride 2, end pad 1: ceil((4+1-2)/2)+1 = 3 windows by the formula,
  // but the third would start at 4, in the right padding: ONNX drops it.
  const Tensor x = f32({1, 1, 4}, {1, 5, 2, 7});
  const auto a = attrs({{"kernel_shape", Ints{2}},
                        {"strides", Ints{2}},
                        {"pads", Ints{0, 1}},
                        {"ceil_mode", int64_t{1}}});
  expect_tensor_near(pool("MaxPool", x, a), f32({1, 1, 2}, {5, 7}));
  // in 5, no pads: the third window starts at 4 (inside) and covers x[4] only.
  const Tensor x5 = f32({1, 1, 5}, {1, 5, 2, 7, 3});
  const auto a5 = [] {
    return attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}, {"ceil_mode", int64_t{1}}});
  };
  expect_tensor_near(pool("MaxPool", x5, a5()), f32({1, 1, 3}, {5, 7, 3}));
  expect_tensor_near(pool("AveragePool", x5, a5()), f32({1, 1, 3}, {3, 4.5f, 3}));
  // count_include_pad counts padding, not the overhang past it: still 3 / 1.
  auto a5p = a5();
  a5p.set("count_include_pad", int64_t{1});
  expect_tensor_near(pool("AveragePool", x5, a5p), f32({1, 1, 3}, {3, 4.5f, 3}));
}

TEST(OpsPool, OnnxPrecomputedPadsCountIncludePad) {
  const Tensor x = iota({1, 1, 5, 5}, 1.f);
  auto a = attrs({{"kernel_shape", Ints{5, 5}}, {"pads", Ints{2, 2, 2, 2}}});
  expect_tensor_near(pool("AveragePool", x, a),
                     f32({1, 1, 5, 5}, {7,  7.5f,  8,  8.5f,  9,  9.5f,  10, 10.5f, 11, 11.5f,
                                        12, 12.5f, 13, 13.5f, 14, 14.5f, 15, 15.5f, 16, 16.5f,
                                        17, 17.5f, 18, 18.5f, 19}));
  a.set("count_include_pad", int64_t{1});
  expect_tensor_near(
      pool("AveragePool", x, a),
      f32({1, 1, 5, 5},
          {2.52f, 3.6f, 4.8f,  4.08f, 3.24f, 4.56f,  6.4f,  8.4f,  7.04f, 5.52f, 7.2f,  10,   13,
           10.8f, 8.4f, 6.96f, 9.6f,  12.4f, 10.24f, 7.92f, 6.12f, 8.4f,  10.8f, 8.88f, 6.84f}));
  // MaxPool never takes padding into account: a window centred at (0,0) sees x[0:3,0:3].
  const Tensor mx =
      pool("MaxPool", x, attrs({{"kernel_shape", Ints{5, 5}}, {"pads", Ints{2, 2, 2, 2}}}));
  EXPECT_EQ(mx.data<float>()[0], 13.f);
  EXPECT_EQ(mx.data<float>()[12], 25.f);
}

TEST(OpsPool, OnnxSameUpperWithStride) {
  // 5x5 of 1..25, kernel 3, stride 2, SAME_UPPER: out 3x3, padding 1 on each side.
  const Tensor x = iota({1, 1, 5, 5}, 1.f);
  const auto a = [] {
    return attrs({{"kernel_shape", Ints{3, 3}},
                  {"strides", Ints{2, 2}},
                  {"auto_pad", std::string("SAME_UPPER")}});
  };
  expect_tensor_near(pool("MaxPool", x, a()),
                     f32({1, 1, 3, 3}, {7, 9, 10, 17, 19, 20, 22, 24, 25}));
  expect_tensor_near(pool("AveragePool", x, a()),
                     f32({1, 1, 3, 3}, {4, 5.5f, 7, 11.5f, 13, 14.5f, 19, 20.5f, 22}));
}

TEST(OpsPool, SameUpperVersusSameLower) {
  // 1-D, in 4, kernel 2, stride 1: one element of padding, at the end or at the beginning.
  const Tensor x = f32({1, 1, 4}, {3, 1, 4, 2});
  auto a = [](const char* mode) {
    return attrs({{"kernel_shape", Ints{2}}, {"auto_pad", std::string(mode)}});
  };
  expect_tensor_near(pool("MaxPool", x, a("SAME_UPPER")), f32({1, 1, 4}, {3, 4, 4, 2}));
  expect_tensor_near(pool("MaxPool", x, a("SAME_LOWER")), f32({1, 1, 4}, {3, 3, 4, 4}));
  expect_tensor_near(pool("AveragePool", x, a("SAME_LOWER")), f32({1, 1, 4}, {3, 2, 2.5f, 3}));
  expect_tensor_near(pool("MaxPool", x, a("VALID")), f32({1, 1, 3}, {3, 4, 4}));
}

TEST(OpsPool, OnnxDilations) {
  const Tensor x = iota({1, 1, 4, 4}, 1.f);
  expect_tensor_near(
      pool("MaxPool", x, attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}})),
      f32({1, 1, 2, 2}, {11, 12, 15, 16}));
}

TEST(OpsPool, StridesAndAsymmetricPads) {
  // 2-D, 3x4 input, kernel 2x2, stride (1, 2), pads top 1, right 1.
  const Tensor x = f32({1, 1, 3, 4}, {1, -2, 3, 4, 5, 6, -7, 8, 9, 10, 11, -12});
  const auto a = [] {
    return attrs(
        {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{1, 2}}, {"pads", Ints{1, 0, 0, 1}}});
  };
  // rows: window rows {-1,0}, {0,1}, {1,2}; cols {0,1}, {2,3}.
  expect_tensor_near(pool("MaxPool", x, a()), f32({1, 1, 3, 2}, {1, 4, 6, 8, 10, 11}));
  expect_tensor_near(pool("AveragePool", x, a()),
                     f32({1, 1, 3, 2}, {-0.5f, 3.5f, 2.5f, 2, 7.5f, 0}));
  auto inc = a();
  inc.set("count_include_pad", int64_t{1});
  expect_tensor_near(pool("AveragePool", x, inc),
                     f32({1, 1, 3, 2}, {-0.25f, 1.75f, 2.5f, 2, 7.5f, 0}));
}

TEST(OpsPool, ThreeDimensional) {
  // 3x3x3 of (i*7) % 11, kernel 2x2x2 (values from numpy).
  Tensor x(DType::f32, {1, 1, 3, 3, 3});
  for (int64_t i = 0; i < 27; ++i) x.mutable_data<float>()[i] = static_cast<float>(i * 7 % 11);
  const auto a = [] { return attrs({{"kernel_shape", Ints{2, 2, 2}}}); };
  expect_tensor_near(pool("MaxPool", x, a()),
                     f32({1, 1, 2, 2, 2}, {10, 10, 10, 10, 8, 10, 10, 10}));
  expect_tensor_near(pool("AveragePool", x, a()),
                     f32({1, 1, 2, 2, 2}, {5.625f, 4.375f, 6, 4.75f, 4, 4.125f, 4.375f, 5.875f}));
}

TEST(OpsPool, ManyChannelsAreIndependent) {
  // Each (n, c) plane pooled alone equals the plane inside the batch.
  const Tensor x = random_tensor({2, 5, 9, 8}, 3);
  const auto a = [] {
    return attrs(
        {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
  };
  const Tensor all = pool("MaxPool", x, a());
  ASSERT_EQ(all.shape(), (Shape{2, 5, 5, 4}));
  for (int64_t p = 0; p < 10; ++p) {
    Tensor plane(DType::f32, {1, 1, 9, 8});
    std::copy(x.data<float>() + p * 72, x.data<float>() + (p + 1) * 72,
              plane.mutable_data<float>());
    const Tensor one = pool("MaxPool", plane, a());
    for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(one.data<float>()[i], all.data<float>()[p * 20 + i]);
  }
}

TEST(OpsPool, GlobalPools) {
  const Tensor x = f32({1, 2, 2, 2}, {1, 2, 3, 6, -1, -5, -3, -7});
  const Node avg = make_node("GlobalAveragePool", {"x"}, {"y"});
  const Node mx = make_node("GlobalMaxPool", {"x"}, {"y"});
  expect_tensor_near(dc::ref::run_node(avg, {x}).at(0), f32({1, 2, 1, 1}, {3, -4}));
  expect_tensor_near(dc::ref::run_node(mx, {x}).at(0), f32({1, 2, 1, 1}, {6, -1}));
  // 3-D input (N x C x L) and a long plane averaged in double: 1e6 values of 0.1.
  Tensor big(DType::f32, {1, 1, 1000000});
  std::fill(big.mutable_data<float>(), big.mutable_data<float>() + big.numel(), 0.1f);
  const Tensor m = dc::ref::run_node(avg, {big}).at(0);
  EXPECT_EQ(m.shape(), (Shape{1, 1, 1}));
  EXPECT_NEAR(m.data<float>()[0], 0.1f, 1e-7f);
}

TEST(OpsPool, MaxPoolPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor y = pool("MaxPool", f32({1, 1, 1, 4}, {1, nan, 3, 4}),
                        attrs({{"kernel_shape", Ints{1, 2}}, {"strides", Ints{1, 2}}}));
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
  EXPECT_EQ(y.data<float>()[1], 4.f);
}

TEST(OpsPool, CheckRefusesBadAttributes) {
  const TensorInfo x{DType::f32, {1, 3, 8, 8}};
  auto mp = [](Attributes a) { return make_node("MaxPool", {"x"}, {"y"}, std::move(a)); };
  auto k = [](std::initializer_list<std::pair<const char*, dc::AttrValue>> extra) {
    Attributes a = attrs(extra);
    if (!a.has("kernel_shape")) a.set("kernel_shape", Ints{2, 2});
    return a;
  };
  EXPECT_NO_THROW(check(mp(k({})), x));
  EXPECT_THROW(check(mp({}), x), dc::UserError);  // kernel_shape missing
  EXPECT_THROW(check(mp(k({{"kernel_shape", Ints{2}}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"kernel_shape", Ints{0, 2}}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"strides", Ints{1, 0}}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"pads", Ints{1, 1, 1}}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"pads", Ints{1, 1, 1, -1}}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"dilations", Ints{0, 1}}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"auto_pad", std::string("same_upper")}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"ceil_mode", int64_t{2}}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"storage_order", int64_t{1}}})), x), dc::UserError);
  EXPECT_THROW(check(mp(k({{"kernel_shape", Ints{9, 9}}})), x), dc::UserError);  // > input
  EXPECT_THROW(check(make_node("MaxPool", {"x"}, {"y", "indices"}, k({})), x), dc::UserError);
  EXPECT_NO_THROW(check(make_node("MaxPool", {"x"}, {"y", ""}, k({})), x));
  EXPECT_THROW(
      check(make_node("AveragePool", {"x"}, {"y"}, k({{"count_include_pad", int64_t{3}}})), x),
      dc::UserError);
  EXPECT_THROW(check(mp(k({{"kernel_shape", Ints{1, 1, 1, 1}}})),
                     TensorInfo{DType::f32, {1, 1, 2, 2, 2, 2}}),
               dc::UserError);  // 4-D windows
  EXPECT_THROW(check(mp(k({})), TensorInfo{DType::f16, {1, 3, 8, 8}}), dc::UserError);
  EXPECT_THROW(check(make_node("GlobalAveragePool", {"x"}, {"y"}), TensorInfo{DType::f32, {3}}),
               dc::UserError);
  try {
    check(mp(k({{"storage_order", int64_t{1}}})), x);
    FAIL() << "no error";
  } catch (const dc::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("storage_order"), std::string::npos) << e.what();
  }
}

}  // namespace
