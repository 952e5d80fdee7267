// BatchNormalization, LayerNormalization, Softmax / LogSoftmax and Reduce*: expected values
// computed with numpy in float64, numerically hard inputs, and the refused attributes.
#include <gtest/gtest.h>

#include <cmath>
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
using Ints = std::vector<int64_t>;

Tensor f32(Shape s, std::vector<float> v) { return Tensor::from_vector<float>(std::move(s), v); }
Tensor i64(Shape s, std::vector<int64_t> v) {
  return Tensor::from_vector<int64_t>(std::move(s), v);
}

Attributes attrs(std::initializer_list<std::pair<const char*, dc::AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

Tensor run1(const Node& n, const std::vector<Tensor>& in) { return dc::ref::run_node(n, in).at(0); }

void check(const Node& n, const std::vector<std::optional<TensorInfo>>& infos) {
  const dc::ref::OpDef* def = dc::ref::find_op(n.op);
  ASSERT_NE(def, nullptr);
  ASSERT_NE(def->check, nullptr);
  std::vector<const TensorInfo*> ptrs;
  for (const auto& i : infos) ptrs.push_back(i ? &*i : nullptr);
  def->check(n, ptrs);
}

TensorInfo info(Shape s, DType t = DType::f32) { return {t, std::move(s)}; }

// ---------------------------------------------------------------------------------------
// BatchNormalization

TEST(OpsNormBatchNorm, MatchesNumpy) {
  const Tensor x = f32({2, 3, 1, 2}, {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6});
  const Node n = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"});
  const Tensor y = run1(n, {x, f32({3}, {1, 0.5f, 2}), f32({3}, {0, 1, -1}), f32({3}, {1, 2, 3}),
                            f32({3}, {1, 4, 0.25f})});
  expect_tensor_near(
      y, f32({2, 3, 1, 2}, {0, 0.999995f, 1.25f, 1.499999f, 6.99984f, 10.99976f, -1.99999f,
                            -2.999985f, -0.2499984f, -0.4999981f, -32.99936f, -36.99928f}));
}

TEST(OpsNormBatchNorm, EpsilonAndRankTwo) {
  // N x C input, epsilon 0.5: (x - 0) / sqrt(0.5 + 0.5) = x.
  const Node n =
      make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}, attrs({{"epsilon", 0.5f}}));
  const Tensor ones = f32({2}, {1, 1}), zeros = f32({2}, {0, 0}), halves = f32({2}, {0.5f, 0.5f});
  expect_tensor_near(run1(n, {f32({1, 2}, {3, -4}), ones, zeros, zeros, halves}),
                     f32({1, 2}, {3, -4}));
}

TEST(OpsNormBatchNorm, CheckRefusesTrainingAndBadShapes) {
  const std::vector<std::optional<TensorInfo>> ok{info({1, 3, 4, 4}), info({3}), info({3}),
                                                  info({3}), info({3})};
  const Node n = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"});
  EXPECT_NO_THROW(check(n, ok));
  EXPECT_THROW(check(make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"},
                               attrs({{"training_mode", int64_t{1}}})),
                     ok),
               dc::UserError);
  EXPECT_THROW(check(make_node("BatchNormalization", {"x", "s", "b", "m", "v"},
                               {"y", "running_mean", "running_var"}),
                     ok),
               dc::UserError);
  EXPECT_THROW(check(make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"},
                               attrs({{"epsilon", -1.f}})),
                     ok),
               dc::UserError);
  EXPECT_THROW(check(make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"},
                               attrs({{"spatial", int64_t{0}}})),
                     ok),
               dc::UserError);
  EXPECT_THROW(check(n, {info({1, 3, 4, 4}), info({4}), info({3}), info({3}), info({3})}),
               dc::UserError);
  EXPECT_THROW(check(make_node("BatchNormalization", {"x", "s", "b", "m"}, {"y"}),
                     {info({1, 3}), info({3}), info({3}), info({3})}),
               dc::UserError);  // var missing
}

// ---------------------------------------------------------------------------------------
// LayerNormalization

const std::vector<float> kLnX{-0.5f,  -0.13f, 0.24f,  0.61f,  -0.32f, 0.05f, 0.42f,  0.79f,
                              -0.14f, 0.23f,  0.6f,   -0.33f, 0.04f,  0.41f, 0.78f,  -0.15f,
                              0.22f,  0.59f,  -0.34f, 0.03f,  0.4f,   0.77f, -0.16f, 0.21f};

TEST(OpsNormLayerNorm, LastAxisWithBiasAndStatistics) {
  const Node n = make_node("LayerNormalization", {"x", "w", "b"}, {"y", "mean", "inv"});
  const auto out = dc::ref::run_node(
      n, {f32({2, 3, 4}, kLnX), f32({4}, {1, -2, 0.5f, 3}), f32({4}, {0.1f, 0.2f, 0.3f, 0.4f})});
  ASSERT_EQ(out.size(), 3u);
  expect_tensor_near(out[0],
                     f32({2, 3, 4}, {-1.241602f, 1.094401f,  0.5236003f,  4.424805f,   -1.241602f,
                                     1.094401f,  0.5236002f, 4.424805f,   -0.5447359f, -0.5848959f,
                                     1.014816f,  -3.132032f, -0.5447359f, -0.584896f,  1.014816f,
                                     -3.132032f, 0.3830655f, -2.571062f,  -0.3927655f, -0.4491964f,
                                     0.3830655f, -2.571062f, -0.3927655f, -0.4491965f}),
                     2e-5f, 1e-5f);
  expect_tensor_near(out[1], f32({2, 3, 1}, {0.055f, 0.235f, 0.09f, 0.27f, 0.125f, 0.305f}));
  expect_tensor_near(out[2],
                     f32({2, 3, 1}, {2.4173f, 2.4173f, 2.8032f, 2.8032f, 2.979637f, 2.979637f}),
                     1e-4f, 1e-5f);
}

TEST(OpsNormLayerNorm, AxisOneNoBiasEpsilon) {
  const std::vector<float> w{-1,   -0.75f, -0.5f, -0.25f, 0,    0.25f,
                             0.5f, 0.75f,  1,     1.25f,  1.5f, 1.75f};
  const Tensor want = f32(
      {2, 3, 4}, {1.22296f,    0.3756698f,  -0.1105868f, -0.2358101f, 0,          -0.03740436f,
                  0.2862246f,  0.970887f,   -0.5204085f, 0.2520728f,  1.385588f,  -1.559599f,
                  0.4088818f,  -0.2802251f, -0.5780743f, 0.2026785f,  0,          0.1885791f,
                  -0.6062731f, -0.3225232f, 0.3524844f,  1.418749f,   -1.247795f, -0.08635866f});
  for (int64_t axis : {1, -2}) {
    const Node n = make_node("LayerNormalization", {"x", "w"}, {"y", "", "inv"},
                             attrs({{"axis", axis}, {"epsilon", 0.1f}}));
    const auto out = dc::ref::run_node(n, {f32({2, 3, 4}, kLnX), f32({3, 4}, w)});
    expect_tensor_near(out[0], want, 2e-5f, 1e-5f);
    expect_tensor_near(out[2], f32({2, 1, 1}, {1.951532f, 2.114906f}), 1e-5f, 1e-5f);
  }
}

TEST(OpsNormLayerNorm, LargeOffsetIsNumericallyStable) {
  // 1e4 + small noise over a long row: E[x^2] - E[x]^2 in float would lose it all.
  const int64_t cols = 4096;
  Tensor x(DType::f32, {1, cols});
  for (int64_t i = 0; i < cols; ++i) x.mutable_data<float>()[i] = 1e4f + (i % 2 ? 0.25f : -0.25f);
  const Node n = make_node("LayerNormalization", {"x", "w"}, {"y"});
  const Tensor y = run1(n, {x, f32({cols}, std::vector<float>(cols, 1.f))});
  // mean 1e4, var 1/16: y = +-0.25 / sqrt(1/16 + 1e-5) = +-0.99992.
  EXPECT_NEAR(y.data<float>()[0], -0.99992001f, 1e-5f);
  EXPECT_NEAR(y.data<float>()[1], 0.99992001f, 1e-5f);
}

TEST(OpsNormLayerNorm, CheckRefusesBadInputs) {
  const Node n = make_node("LayerNormalization", {"x", "w", "b"}, {"y"});
  EXPECT_NO_THROW(check(n, {info({2, 3, 4}), info({4}), info({4})}));
  EXPECT_NO_THROW(check(n, {info({2, 3, 4}), info({1, 4}), std::nullopt}));
  // [1, 4] scales like [4] (leading 1s beyond the normalised rank are dropped).
  const Node nb = make_node("LayerNormalization", {"x", "w"}, {"y"});
  expect_tensor_near(run1(nb, {f32({2, 3, 4}, kLnX), f32({1, 4}, {1, -2, 0.5f, 3})}),
                     run1(nb, {f32({2, 3, 4}, kLnX), f32({4}, {1, -2, 0.5f, 3})}));
  EXPECT_THROW(check(n, {info({2, 3, 4}), info({3}), info({4})}), dc::UserError);
  EXPECT_THROW(check(n, {info({2, 3, 4}), info({4}), info({5})}), dc::UserError);
  EXPECT_THROW(
      check(make_node("LayerNormalization", {"x", "w"}, {"y"}, attrs({{"axis", int64_t{3}}})),
            {info({2, 3, 4}), info({4})}),
      dc::UserError);
  EXPECT_THROW(
      check(make_node("LayerNormalization", {"x", "w"}, {"y"}, attrs({{"epsilon", -0.1f}})),
            {info({2, 3, 4}), info({4})}),
      dc::UserError);
  EXPECT_THROW(check(make_node("LayerNormalization", {"x"}, {"y"}), {info({2, 3, 4})}),
               dc::UserError);  // Scale missing
}

// ---------------------------------------------------------------------------------------
// Softmax / LogSoftmax

const std::vector<float> kZ{1, 2, 3, 4, 5, 6, -1, 0, 1, 2, 3, 10};

TEST(OpsNormSoftmax, SingleAxis) {
  const Tensor z = f32({2, 3, 2}, kZ);
  expect_tensor_near(run1(make_node("Softmax", {"x"}, {"y"}, attrs({{"axis", int64_t{1}}})), {z}),
                     f32({2, 3, 2}, {0.01587624f, 0.01587624f, 0.1173104f, 0.1173104f, 0.8668133f,
                                     0.8668133f, 0.01587624f, 4.538265e-05f, 0.1173104f,
                                     0.0003353349f, 0.8668133f, 0.9996193f}),
                     1e-6f, 1e-5f);
  // Default axis -1.
  expect_tensor_near(
      run1(make_node("Softmax", {"x"}, {"y"}), {z}),
      f32({2, 3, 2}, {0.2689414f, 0.7310586f, 0.2689414f, 0.7310586f, 0.2689414f, 0.7310586f,
                      0.2689414f, 0.7310586f, 0.2689414f, 0.7310586f, 0.0009110512f, 0.9990889f}),
      1e-6f, 1e-5f);
  expect_tensor_near(
      run1(make_node("LogSoftmax", {"x"}, {"y"}, attrs({{"axis", int64_t{-2}}})), {z}),
      f32({2, 3, 2}, {-4.142932f, -4.142932f, -2.142932f, -2.142932f, -0.1429316f, -0.1429316f,
                      -4.142932f, -10.00038f, -2.142932f, -8.000381f, -0.1429316f, -0.00038079f}),
      1e-5f, 1e-5f);
}

TEST(OpsNormSoftmax, LegacyFlatten) {
  // Opset < 13: axis 1 of [2,3,2] means softmax over each flattened row of 6.
  const Node n = make_node("Softmax", {"x"}, {"y"},
                           attrs({{"axis", int64_t{1}}, {"dc_legacy_flatten", int64_t{1}}}));
  expect_tensor_near(run1(n, {f32({2, 3, 2}, kZ)}),
                     f32({2, 3, 2}, {0.004269779f, 0.01160646f, 0.03154963f, 0.08576079f, 0.233122f,
                                     0.6336913f, 1.66778e-05f, 4.533497e-05f, 0.0001232332f,
                                     0.0003349826f, 0.0009105772f, 0.9985692f}),
                     1e-6f, 1e-5f);
  // Without an explicit axis the legacy default is 1 as well.
  const Node dflt = make_node("Softmax", {"x"}, {"y"}, attrs({{"dc_legacy_flatten", int64_t{1}}}));
  expect_tensor_near(run1(dflt, {f32({2, 3, 2}, kZ)}), run1(n, {f32({2, 3, 2}, kZ)}));
}

TEST(OpsNormSoftmax, LargeValuesDoNotOverflow) {
  const Tensor y = run1(make_node("Softmax", {"x"}, {"y"}), {f32({1, 3}, {1000, 1000, -1000})});
  expect_tensor_near(y, f32({1, 3}, {0.5f, 0.5f, 0}));
}

TEST(OpsNormSoftmax, CheckRefusesBadAxis) {
  EXPECT_NO_THROW(
      check(make_node("Softmax", {"x"}, {"y"}, attrs({{"axis", int64_t{-3}}})), {info({2, 3, 4})}));
  EXPECT_THROW(
      check(make_node("Softmax", {"x"}, {"y"}, attrs({{"axis", int64_t{3}}})), {info({2, 3, 4})}),
      dc::UserError);
  EXPECT_THROW(check(make_node("LogSoftmax", {"x"}, {"y"}), {info({2, 3}, DType::i64)}),
               dc::UserError);
}

// ---------------------------------------------------------------------------------------
// Reduce*

const std::vector<float> kD{5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2};  // [3, 2, 2]

Tensor reduce(const char* op, const Tensor& x, Attributes a, std::optional<Tensor> axes = {}) {
  if (axes) return run1(make_node(op, {"x", "axes"}, {"y"}, std::move(a)), {x, *axes});
  return run1(make_node(op, {"x"}, {"y"}, std::move(a)), {x});
}

TEST(OpsNormReduce, FamilyMatchesNumpy) {
  const Tensor d = f32({3, 2, 2}, kD);
  const auto keep0 = [](Ints axes) { return attrs({{"axes", axes}, {"keepdims", int64_t{0}}}); };
  expect_tensor_near(reduce("ReduceSum", d, keep0({1})), f32({3, 2}, {25, 3, 70, 3, 115, 3}));
  expect_tensor_near(reduce("ReduceMean", d, attrs({{"axes", Ints{-2}}})),
                     f32({3, 1, 2}, {12.5f, 1.5f, 35, 1.5f, 57.5f, 1.5f}));
  expect_tensor_near(reduce("ReduceMax", d, keep0({1})), f32({3, 2}, {20, 2, 40, 2, 60, 2}));
  expect_tensor_near(reduce("ReduceMin", d, keep0({0, 2})), f32({2}, {1, 2}));
  expect_tensor_near(reduce("ReduceProd", d, keep0({2})), f32({3, 2}, {5, 40, 30, 80, 55, 120}));
  expect_tensor_near(reduce("ReduceL2", d, keep0({1})),
                     f32({3, 2}, {20.61553f, 2.236068f, 50, 2.236068f, 81.3941f, 2.236068f}));
  expect_tensor_near(reduce("ReduceSumSquare", d, keep0({0})), f32({2, 2}, {3950, 3, 5600, 12}));
  expect_tensor_near(
      reduce("ReduceLogSum", d, keep0({1})),
      f32({3, 2}, {3.218876f, 1.098612f, 4.248495f, 1.098612f, 4.744932f, 1.098612f}));
  expect_tensor_near(reduce("ReduceLogSumExp", d, keep0({2})),
                     f32({3, 2}, {5.01815f, 20, 30, 40, 55, 60}));
  std::vector<float> shifted(kD);
  for (float& v : shifted) v -= 30;
  expect_tensor_near(reduce("ReduceL1", f32({3, 2, 2}, shifted), keep0({2})),
                     f32({3, 2}, {54, 38, 29, 38, 54, 58}));
}

TEST(OpsNormReduce, DefaultAxesReduceEverything) {
  const Tensor d = f32({3, 2, 2}, kD);
  expect_tensor_near(reduce("ReduceMean", d, {}), f32({1, 1, 1}, {18.25f}));
  expect_tensor_near(reduce("ReduceMean", d, attrs({{"keepdims", int64_t{0}}})),
                     Tensor::scalar(18.25f));
}

TEST(OpsNormReduce, AxesAsInputAndNoop) {
  const Tensor d = f32({3, 2, 2}, kD);
  // Opset 13 ReduceSum: axes is the second input.
  expect_tensor_near(reduce("ReduceSum", d, attrs({{"keepdims", int64_t{0}}}), i64({1}, {1})),
                     f32({3, 2}, {25, 3, 70, 3, 115, 3}));
  expect_tensor_near(reduce("ReduceSum", d, {}, i64({1}, {-2})),
                     f32({3, 1, 2}, {25, 3, 70, 3, 115, 3}));
  // Empty axes with noop_with_empty_axes=1: the identity; without it: everything.
  const Tensor empty = i64({0}, {});
  expect_tensor_near(reduce("ReduceSum", d, attrs({{"noop_with_empty_axes", int64_t{1}}}), empty),
                     d);
  expect_tensor_near(reduce("ReduceSum", d, {}, empty), f32({1, 1, 1}, {219}));
  // Absent optional axes input ("") behaves as empty.
  const Node absent = make_node("ReduceSum", {"x", ""}, {"y"}, attrs({{"keepdims", int64_t{0}}}));
  expect_tensor_near(run1(absent, {d, Tensor()}), Tensor::scalar(219.f));
}

TEST(OpsNormReduce, Integers) {
  const Tensor d = i64({2, 3}, {1, -2, 3, 4, 5, -6});
  const auto a = [] { return attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}); };
  expect_tensor_near(reduce("ReduceSum", d, a()), i64({2}, {2, 3}));
  expect_tensor_near(reduce("ReduceProd", d, a()), i64({2}, {-6, -120}));
  expect_tensor_near(reduce("ReduceMax", d, a()), i64({2}, {3, 5}));
  expect_tensor_near(reduce("ReduceMin", d, a()), i64({2}, {-2, -6}));
  const Tensor d32 = Tensor::from_vector<int32_t>({3}, {7, 8, 9});
  expect_tensor_near(reduce("ReduceSum", d32, {}), Tensor::from_vector<int32_t>({1}, {24}));
  EXPECT_THROW(reduce("ReduceMean", d, a()), dc::UserError);
}

TEST(OpsNormReduce, LongRowsAccumulateInDouble) {
  // 4e6 values of 0.1f: a float running sum stalls far below 4e5.
  const int64_t n = 4000000;
  Tensor x(DType::f32, {1, n});
  std::fill(x.mutable_data<float>(), x.mutable_data<float>() + n, 0.1f);
  const Tensor s = reduce("ReduceSum", x, attrs({{"axes", Ints{1}}}));
  EXPECT_NEAR(s.data<float>()[0], 400000.006f, 0.05f);
  const Tensor m = reduce("ReduceMean", x, attrs({{"axes", Ints{1}}}));
  EXPECT_NEAR(m.data<float>()[0], 0.1f, 1e-8f);
}

TEST(OpsNormReduce, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor y = reduce("ReduceMax", f32({2, 2}, {1, nan, 3, 4}), attrs({{"axes", Ints{1}}}));
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
  EXPECT_EQ(y.data<float>()[1], 4.f);
}

TEST(OpsNormReduce, CheckRefusesBadAxes) {
  const auto x = info({3, 2, 2});
  auto node = [](Attributes a) { return make_node("ReduceMean", {"x"}, {"y"}, std::move(a)); };
  EXPECT_NO_THROW(check(node(attrs({{"axes", Ints{-1, 0}}})), {x}));
  EXPECT_THROW(check(node(attrs({{"axes", Ints{3}}})), {x}), dc::UserError);
  EXPECT_THROW(check(node(attrs({{"axes", Ints{1, -2}}})), {x}), dc::UserError);  // twice
  EXPECT_THROW(check(node(attrs({{"keepdims", int64_t{2}}})), {x}), dc::UserError);
  EXPECT_THROW(check(make_node("ReduceSum", {"x", "axes"}, {"y"}), {x, info({1}, DType::i32)}),
               dc::UserError);
  EXPECT_THROW(check(node({}), {info({3}, DType::i64)}), dc::UserError);  // Mean of integers
  EXPECT_NO_THROW(check(make_node("ReduceSum", {"x"}, {"y"}), {info({3}, DType::i64)}));
  EXPECT_THROW(reduce("ReduceSum", f32({3, 2, 2}, kD), {}, i64({1}, {5})), dc::UserError);
}

}  // namespace
