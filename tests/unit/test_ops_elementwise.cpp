// Reference kernels for elementwise ops: hand-computed values (numpy for the transcendental
// ones), broadcasting edge cases, dtypes, and the errors import relies on.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ir/error.h"
#include "ref/broadcast.h"
#include "ref/executor.h"
#include "ref/kernel.h"
#include "testing.h"

namespace {

using dc::DType;
using dc::Shape;
using dc::Tensor;
using dc::testing::expect_tensor_near;
using dc::testing::make_node;

Tensor f32(Shape s, const std::vector<float>& v) { return Tensor::from_vector<float>(std::move(s), v); }
Tensor f64(Shape s, const std::vector<double>& v) { return Tensor::from_vector<double>(std::move(s), v); }
Tensor i32(Shape s, const std::vector<int32_t>& v) { return Tensor::from_vector<int32_t>(std::move(s), v); }
Tensor i64(Shape s, const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(std::move(s), v); }
Tensor bools(Shape s, const std::vector<bool>& v) { return Tensor::from_vector<bool>(std::move(s), v); }

dc::Attributes attrs(std::initializer_list<std::pair<std::string, dc::AttrValue>> kv) {
  dc::Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

// Runs a single-output node; an undefined tensor is an absent optional input.
Tensor run(const std::string& op, const std::vector<Tensor>& in, dc::Attributes a = {}) {
  std::vector<std::string> names;
  for (size_t i = 0; i < in.size(); ++i) names.push_back(in[i].defined() ? "in" + std::to_string(i) : "");
  return dc::ref::run_node(make_node(op, names, {"out"}, std::move(a)), in).at(0);
}

// Runs the op's import-time check; a TensorInfo of undefined dtype is an absent input.
void check(const std::string& op, const std::vector<dc::TensorInfo>& in, dc::Attributes a = {}) {
  const dc::ref::OpDef* def = dc::ref::find_op(op);
  ASSERT_NE(def, nullptr) << op;
  ASSERT_NE(def->check, nullptr) << op;
  std::vector<std::string> names;
  std::vector<const dc::TensorInfo*> ptrs;
  for (size_t i = 0; i < in.size(); ++i) {
    const bool here = in[i].dtype != DType::undefined;
    names.push_back(here ? "in" + std::to_string(i) : "");
    ptrs.push_back(here ? &in[i] : nullptr);
  }
  def->check(make_node(op, names, {"out"}, std::move(a)), ptrs);
}

// The message of the UserError that `fn` throws ("" if it throws none).
template <class Fn>
std::string user_error(Fn&& fn) {
  try {
    fn();
  } catch (const dc::UserError& e) {
    return e.what();
  }
  return "";
}

// ---- Binary arithmetic and broadcasting ----------------------------------------------

TEST(OpsElementwise, AddSameShape) {
  expect_tensor_near(run("Add", {f32({2, 2}, {1, 2, 3, 4}), f32({2, 2}, {10, 20, 30, 40})}),
                     f32({2, 2}, {11, 22, 33, 44}));
}

TEST(OpsElementwise, AddScalarBothSides) {
  expect_tensor_near(run("Add", {f32({3}, {1, 2, 3}), Tensor::scalar<float>(0.5f)}),
                     f32({3}, {1.5f, 2.5f, 3.5f}));
  expect_tensor_near(run("Sub", {Tensor::scalar<float>(10.f), f32({3}, {1, 2, 3})}),
                     f32({3}, {9, 8, 7}));
  // scalar op scalar stays rank 0
  expect_tensor_near(run("Mul", {Tensor::scalar<float>(3.f), Tensor::scalar<float>(4.f)}),
                     Tensor::scalar<float>(12.f));
}

TEST(OpsElementwise, AddRankMismatchSuffix) {
  expect_tensor_near(run("Add", {f32({2, 3}, {0, 1, 2, 3, 4, 5}), f32({3}, {10, 20, 30})}),
                     f32({2, 3}, {10, 21, 32, 13, 24, 35}));
}

TEST(OpsElementwise, SubBothSidesBroadcast) {
  // [2,1] - [1,3] -> [2,3]
  expect_tensor_near(run("Sub", {f32({2, 1}, {10, 20}), f32({1, 3}, {1, 2, 3})}),
                     f32({2, 3}, {9, 8, 7, 19, 18, 17}));
}

TEST(OpsElementwise, MulSizeOneMiddleDims) {
  // [2,1,3] * [1,2,1] -> [2,2,3]
  const Tensor a = f32({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = f32({1, 2, 1}, {10, 100});
  expect_tensor_near(run("Mul", {a, b}),
                     f32({2, 2, 3}, {10, 20, 30, 100, 200, 300, 40, 50, 60, 400, 500, 600}));
}

TEST(OpsElementwise, MulPerChannelLikeConvBias) {
  // [1,2,2,2] * [2,1,1]: each channel scaled by its own factor
  const Tensor x = f32({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  expect_tensor_near(run("Mul", {x, f32({2, 1, 1}, {2, -1})}),
                     f32({1, 2, 2, 2}, {2, 4, 6, 8, -5, -6, -7, -8}));
}

TEST(OpsElementwise, BroadcastZeroSizeDim) {
  const Tensor out = run("Add", {f32({0, 3}, {}), f32({1, 3}, {1, 2, 3})});
  EXPECT_EQ(out.shape(), (Shape{0, 3}));
}

TEST(OpsElementwise, LargeBroadcastMatchesNaive) {
  // Big enough to go through parallel_for; strided general case with inner stride != 0/1.
  // An odd number of rows, so that a two-way split falls in the middle of a row.
  const Tensor a = dc::testing::random_tensor({3, 33, 1, 257}, 1);
  const Tensor b = dc::testing::random_tensor({33, 5, 1}, 2);
  const Tensor out = run("Sub", {a, b});
  ASSERT_EQ(out.shape(), (Shape{3, 33, 5, 257}));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* po = out.data<float>();
  int64_t bad = 0;
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t c = 0; c < 33; ++c)
      for (int64_t h = 0; h < 5; ++h)
        for (int64_t w = 0; w < 257; ++w) {
          const float want = pa[(n * 33 + c) * 257 + w] - pb[c * 5 + h];
          if (po[((n * 33 + c) * 5 + h) * 257 + w] != want) ++bad;
        }
  EXPECT_EQ(bad, 0);
}

TEST(OpsElementwise, LargeSameShapeAndScalar) {
  const Tensor a = dc::testing::random_tensor({300000}, 3);
  const Tensor out = run("Mul", {a, Tensor::scalar<float>(2.f)});
  const Tensor sum = run("Add", {a, a});
  EXPECT_TRUE(out.bitwise_equal(sum));
  EXPECT_EQ(out.data<float>()[299999], 2.f * a.data<float>()[299999]);
}

TEST(OpsElementwise, StridedLoopCollapsesAndVisitsAnyRange) {
  // [2,3,4] + [3,1]: no two dims walk alike for both operands, nothing merges.
  const Shape out{2, 3, 4}, a{2, 3, 4}, b{3, 1}, suffix{4};
  const auto loop = dc::ref::broadcast_loop<2>(out, {&a, &b});
  EXPECT_EQ(loop.dims, (Shape{2, 3, 4}));
  EXPECT_EQ(loop.strides[1], (std::vector<int64_t>{0, 1, 0}));
  // [2,3,4] + [4]: the two outer dims merge.
  const auto merged = dc::ref::broadcast_loop<2>(out, {&a, &suffix});
  EXPECT_EQ(merged.dims, (Shape{6, 4}));
  EXPECT_EQ(merged.strides[1], (std::vector<int64_t>{0, 1}));
  const auto same = dc::ref::broadcast_loop<2>(out, {&a, &a});
  EXPECT_EQ(same.dims, (Shape{24}));
  // Every sub-range visits exactly the offsets a naive index computation gives.
  for (int64_t begin = 0; begin <= 24; ++begin)
    for (int64_t end = begin; end <= 24; ++end) {
      std::vector<std::pair<int64_t, int64_t>> seen;
      dc::ref::for_each_run(loop, begin, end, [&](int64_t pos, const std::array<int64_t, 2>& off, int64_t cnt) {
        for (int64_t j = 0; j < cnt; ++j)
          seen.emplace_back(off[0] + j * loop.strides[0].back(), off[1] + j * loop.strides[1].back());
        EXPECT_EQ(pos, begin + static_cast<int64_t>(seen.size()) - cnt);
      });
      ASSERT_EQ(static_cast<int64_t>(seen.size()), end - begin);
      for (int64_t i = begin; i < end; ++i) {
        EXPECT_EQ(seen[i - begin].first, i);
        EXPECT_EQ(seen[i - begin].second, (i / 4) % 3) << "flat index " << i;
      }
    }
}

TEST(OpsElementwise, DivFloat) {
  expect_tensor_near(run("Div", {f32({4}, {1, -3, 0, 5}), f32({1}, {2})}),
                     f32({4}, {0.5f, -1.5f, 0.f, 2.5f}));
  const Tensor inf = run("Div", {f32({1}, {1}), f32({1}, {0})});
  EXPECT_TRUE(std::isinf(inf.data<float>()[0]));
}

TEST(OpsElementwise, IntegerArithmetic) {
  expect_tensor_near(run("Add", {i64({3}, {1, -2, 3}), i64({}, {10})}), i64({3}, {11, 8, 13}));
  expect_tensor_near(run("Mul", {i32({2}, {-3, 4}), i32({2}, {5, 6})}), i32({2}, {-15, 24}));
  // Division truncates toward zero, as C (numpy would floor: -7 // 2 == -4).
  expect_tensor_near(run("Div", {i64({4}, {7, -7, 7, -7}), i64({4}, {2, 2, -2, -2})}),
                     i64({4}, {3, -3, -3, 3}));
  expect_tensor_near(run("Div", {i32({2}, {9, -9}), i32({}, {4})}), i32({2}, {2, -2}));
  // Integers wrap like numpy instead of being undefined.
  const int32_t big = std::numeric_limits<int32_t>::max();
  const int32_t low = std::numeric_limits<int32_t>::min();
  expect_tensor_near(run("Add", {i32({1}, {big}), i32({1}, {1})}), i32({1}, {low}));
  expect_tensor_near(run("Div", {i32({1}, {low}), i32({1}, {-1})}), i32({1}, {low}));
}

TEST(OpsElementwise, IntegerDivisionByZeroIsUserError) {
  const std::string msg = user_error([] { run("Div", {i64({2}, {1, 2}), i64({2}, {1, 0})}); });
  EXPECT_NE(msg.find("division by zero"), std::string::npos) << msg;
}

TEST(OpsElementwise, Float64) {
  expect_tensor_near(run("Add", {f64({2}, {0.1, 0.2}), f64({2}, {1e-12, 1})}),
                     f64({2}, {0.100000000001, 1.2}), 0.f, 0.f);
  const Tensor e = run("Exp", {f64({1}, {1.0})});
  EXPECT_DOUBLE_EQ(e.data<double>()[0], std::exp(1.0));
}

// ---- Pow ------------------------------------------------------------------------------

TEST(OpsElementwise, PowFloat) {
  expect_tensor_near(run("Pow", {f32({3}, {1, 2, 3}), f32({3}, {4, 5, 6})}),
                     f32({3}, {1, 32, 729}));
  expect_tensor_near(run("Pow", {f32({3}, {1, 2, 3}), Tensor::scalar<float>(2.f)}),
                     f32({3}, {1, 4, 9}));
  expect_tensor_near(run("Pow", {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3}, {1, 2, 3})}),
                     f32({2, 3}, {1, 4, 27, 4, 25, 216}));
  expect_tensor_near(run("Pow", {f32({2}, {4, 9}), f32({1}, {0.5f})}), f32({2}, {2, 3}));
}

TEST(OpsElementwise, PowMixedTypesKeepBaseDtype) {
  // pow_types_int64_float32 -> int64
  expect_tensor_near(run("Pow", {i64({3}, {1, 2, 3}), f32({3}, {4, 5, 6})}),
                     i64({3}, {1, 32, 729}));
  // pow_types_float32_int64 -> float32
  expect_tensor_near(run("Pow", {f32({3}, {1, 2, 3}), i64({3}, {4, 5, 6})}),
                     f32({3}, {1, 32, 729}));
  expect_tensor_near(run("Pow", {i64({3}, {1, 2, 3}), i64({3}, {4, 5, 6})}),
                     i64({3}, {1, 32, 729}));
  expect_tensor_near(run("Pow", {i32({3}, {-2, 3, 10}), i32({3}, {3, 0, 9})}),
                     i32({3}, {-8, 1, 1000000000}));
  // int base, fractional exponent: truncated toward zero
  expect_tensor_near(run("Pow", {i64({2}, {2, 10}), f32({2}, {0.5f, -1.f})}), i64({2}, {1, 0}));
}

// ---- Max / Min ------------------------------------------------------------------------

TEST(OpsElementwise, MaxMinVariadic) {
  const Tensor a = f32({3}, {3, 2, 1});
  const Tensor b = f32({3}, {1, 4, 4});
  const Tensor c = f32({3}, {2, 5, 3});
  expect_tensor_near(run("Max", {a, b, c}), f32({3}, {3, 5, 4}));
  expect_tensor_near(run("Min", {a, b, c}), f32({3}, {1, 2, 1}));
  expect_tensor_near(run("Min", {a}), a);
  // broadcasting across three inputs of different ranks
  expect_tensor_near(run("Max", {f32({2, 1}, {0, 10}), f32({3}, {1, 5, 20}), Tensor::scalar<float>(4.f)}),
                     f32({2, 3}, {4, 5, 20, 10, 10, 20}));
  expect_tensor_near(run("Max", {i64({2}, {-5, 7}), i64({2}, {3, 2})}), i64({2}, {3, 7}));
  expect_tensor_near(run("Min", {i64({2}, {-5, 7}), i64({2}, {3, 2})}), i64({2}, {-5, 2}));
}

TEST(OpsElementwise, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor mx = run("Max", {f32({2}, {nan, 1}), f32({2}, {1, nan})});
  EXPECT_TRUE(std::isnan(mx.data<float>()[0]));
  EXPECT_TRUE(std::isnan(mx.data<float>()[1]));
  const Tensor mn = run("Min", {f32({2}, {nan, 1}), f32({2}, {1, nan})});
  EXPECT_TRUE(std::isnan(mn.data<float>()[0]));
  EXPECT_TRUE(std::isnan(mn.data<float>()[1]));
}

// ---- Unary math and activations -------------------------------------------------------

const std::vector<float> kX = {-2.f, -0.5f, 0.f, 0.5f, 2.f};

TEST(OpsElementwise, UnaryMath) {
  expect_tensor_near(run("Sqrt", {f32({4}, {0, 1, 2, 9})}), f32({4}, {0, 1, 1.41421356f, 3}));
  expect_tensor_near(run("Exp", {f32({5}, kX)}),
                     f32({5}, {0.13533528f, 0.60653066f, 1.f, 1.64872127f, 7.3890561f}));
  expect_tensor_near(run("Log", {f32({4}, {0.5f, 1, 2, 10})}),
                     f32({4}, {-0.69314718f, 0, 0.69314718f, 2.30258509f}));
  expect_tensor_near(run("Neg", {f32({3}, {1, -2, 0})}), f32({3}, {-1, 2, 0}));
  expect_tensor_near(run("Reciprocal", {f32({3}, {2, -4, 0.5f})}), f32({3}, {0.5f, -0.25f, 2}));
  expect_tensor_near(run("Abs", {f32({3}, {-1.5f, 2, 0})}), f32({3}, {1.5f, 2, 0}));
  expect_tensor_near(run("Erf", {f32({5}, kX)}),
                     f32({5}, {-0.99532227f, -0.52049988f, 0, 0.52049988f, 0.99532227f}));
  expect_tensor_near(run("Sigmoid", {f32({5}, kX)}),
                     f32({5}, {0.11920292f, 0.37754067f, 0.5f, 0.62245933f, 0.88079708f}));
  expect_tensor_near(run("Tanh", {f32({5}, kX)}),
                     f32({5}, {-0.96402758f, -0.46211716f, 0, 0.46211716f, 0.96402758f}));
  EXPECT_TRUE(std::isnan(run("Log", {f32({1}, {-1})}).data<float>()[0]));
  // sigmoid saturates cleanly instead of producing NaN
  expect_tensor_near(run("Sigmoid", {f32({2}, {-200, 200})}), f32({2}, {0, 1}));
}

TEST(OpsElementwise, UnaryIntegers) {
  expect_tensor_near(run("Neg", {i64({3}, {1, -2, 0})}), i64({3}, {-1, 2, 0}));
  expect_tensor_near(run("Abs", {i32({3}, {-7, 7, 0})}), i32({3}, {7, 7, 0}));
  expect_tensor_near(run("Relu", {i64({3}, {-7, 7, 0})}), i64({3}, {0, 7, 0}));
}

TEST(OpsElementwise, Activations) {
  expect_tensor_near(run("Relu", {f32({5}, kX)}), f32({5}, {0, 0, 0, 0.5f, 2}));
  expect_tensor_near(run("LeakyRelu", {f32({5}, kX)}, attrs({{"alpha", 0.1f}})),
                     f32({5}, {-0.2f, -0.05f, 0, 0.5f, 2}));
  expect_tensor_near(run("LeakyRelu", {f32({2}, {-1, 1})}), f32({2}, {-0.01f, 1}));  // default alpha
  expect_tensor_near(run("HardSigmoid", {f32({5}, kX)}, attrs({{"alpha", 0.5f}, {"beta", 0.6f}})),
                     f32({5}, {0, 0.35f, 0.6f, 0.85f, 1}));
  // defaults alpha 0.2, beta 0.5
  expect_tensor_near(run("HardSigmoid", {f32({3}, {-3, 1, 3})}), f32({3}, {0, 0.7f, 1}));
  expect_tensor_near(run("HardSwish", {f32({5}, {-4, -1, 0, 3, 4})}),
                     f32({5}, {0, -0.33333333f, 0, 3, 4}));
  expect_tensor_near(run("HardSwish", {f32({5}, kX)}),
                     f32({5}, {-0.33333333f, -0.20833333f, 0, 0.29166667f, 1.66666667f}));
}

TEST(OpsElementwise, Gelu) {
  expect_tensor_near(run("Gelu", {f32({5}, kX)}),
                     f32({5}, {-0.04550026f, -0.15426877f, 0, 0.34573123f, 1.95449974f}));
  expect_tensor_near(run("Gelu", {f32({5}, kX)}, attrs({{"approximate", std::string("none")}})),
                     f32({5}, {-0.04550026f, -0.15426877f, 0, 0.34573123f, 1.95449974f}));
  expect_tensor_near(run("Gelu", {f32({5}, kX)}, attrs({{"approximate", std::string("tanh")}})),
                     f32({5}, {-0.04540231f, -0.15428599f, 0, 0.34571401f, 1.95459769f}));
  EXPECT_THROW(check("Gelu", {{DType::f32, {2}}}, attrs({{"approximate", std::string("fast")}})),
               dc::UserError);
}

TEST(OpsElementwise, ActivationsOfIssue14) {
  // Hand-computed with numpy from the ONNX spec's formulas.
  expect_tensor_near(run("Elu", {f32({5}, kX)}), f32({5}, {-0.86466472f, -0.39346934f, 0, 0.5f, 2}));
  expect_tensor_near(run("Selu", {f32({5}, kX)}),
                     f32({5}, {-1.5201665f, -0.69175819f, 0, 0.52535051f, 2.101402f}));
  expect_tensor_near(run("Celu", {f32({5}, kX)}, attrs({{"alpha", 0.5f}})),
                     f32({5}, {-0.49084218f, -0.31606028f, 0, 0.5f, 2}));
  expect_tensor_near(run("Softplus", {f32({5}, kX)}),
                     f32({5}, {0.12692801f, 0.47407698f, 0.69314718f, 0.97407698f, 2.126928f}));
  expect_tensor_near(run("Softsign", {f32({5}, kX)}),
                     f32({5}, {-0.66666667f, -0.33333333f, 0, 0.33333333f, 0.66666667f}));
  expect_tensor_near(run("Mish", {f32({5}, kX)}),
                     f32({5}, {-0.25250148f, -0.22074377f, 0, 0.37524521f, 1.943959f}));
  expect_tensor_near(run("ThresholdedRelu", {f32({5}, kX)}, attrs({{"alpha", 0.4f}})),
                     f32({5}, {0, 0, 0, 0.5f, 2}));
  expect_tensor_near(run("PRelu", {f32({2, 2}, {-2, 1, -4, -1}), f32({2}, {0.5f, 0.25f})}),
                     f32({2, 2}, {-1, 1, -2, -0.25f}));
  EXPECT_THROW(check("PRelu", {{DType::f32, {2}}, {DType::f32, {3, 2}}}), dc::UserError);
  // Softplus does not overflow where exp(x) would.
  expect_tensor_near(run("Softplus", {f32({1}, {100.f})}), f32({1}, {100.f}));
}

TEST(OpsElementwise, RoundingSignModAndSpecials) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor t = f32({6}, {0.5f, 1.5f, 2.5f, -0.5f, -1.7f, 2.2f});
  expect_tensor_near(run("Round", {t}), f32({6}, {0, 2, 2, -0.f, -2, 2}));  // half to even
  expect_tensor_near(run("Floor", {t}), f32({6}, {0, 1, 2, -1, -2, 2}));
  expect_tensor_near(run("Ceil", {t}), f32({6}, {1, 2, 3, -0.f, -1, 3}));
  expect_tensor_near(run("Sign", {t}), f32({6}, {1, 1, 1, -1, -1, 1}));
  EXPECT_EQ(run("Sign", {i64({3}, {-5, 0, 7})}).to_int64_vector(), (std::vector<int64_t>{-1, 0, 1}));
  // Python's % (fmod=0) takes the divisor's sign, C's (fmod=1) the dividend's.
  const Tensor a = i64({4}, {-7, 7, -7, 7}), b = i64({4}, {3, -3, -3, 3});
  EXPECT_EQ(run("Mod", {a, b}).to_int64_vector(), (std::vector<int64_t>{2, -2, -1, 1}));
  EXPECT_EQ(run("Mod", {a, b}, attrs({{"fmod", int64_t{1}}})).to_int64_vector(),
            (std::vector<int64_t>{-1, 1, -1, 1}));
  expect_tensor_near(run("Mod", {f32({2}, {-7.5f, 7.5f}), f32({2}, {2, 2})}, attrs({{"fmod", int64_t{1}}})),
                     f32({2}, {-1.5f, 1.5f}));
  EXPECT_THROW(run("Mod", {f32({1}, {1}), f32({1}, {2})}), dc::UserError);  // floats need fmod=1
  EXPECT_THROW(run("Mod", {a, i64({4}, {1, 0, 1, 1})}), dc::UserError);    // modulo by zero
  const Tensor s = f32({4}, {nan, inf, -inf, 1});
  EXPECT_EQ(run("IsNaN", {s}).to_int64_vector(), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(run("IsInf", {s}).to_int64_vector(), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(run("IsInf", {s}, attrs({{"detect_negative", int64_t{0}}})).to_int64_vector(),
            (std::vector<int64_t>{0, 1, 0, 0}));
  EXPECT_EQ(run("IsInf", {s}, attrs({{"detect_positive", int64_t{0}}})).to_int64_vector(),
            (std::vector<int64_t>{0, 0, 1, 0}));
}

TEST(OpsElementwise, ReluKeepsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(run("Relu", {f32({1}, {nan})}).data<float>()[0]));
}

// ---- Clip -----------------------------------------------------------------------------

TEST(OpsElementwise, ClipInputs) {
  const Tensor x = f32({5}, {-3, -1, 0, 1, 3});
  const Tensor lo = Tensor::scalar<float>(-1.5f), hi = Tensor::scalar<float>(2.f);
  expect_tensor_near(run("Clip", {x, lo, hi}), f32({5}, {-1.5f, -1, 0, 1, 2}));
  expect_tensor_near(run("Clip", {x, lo}), f32({5}, {-1.5f, -1, 0, 1, 3}));          // min only
  expect_tensor_near(run("Clip", {x, Tensor(), hi}), f32({5}, {-3, -1, 0, 1, 2}));   // max only
  expect_tensor_near(run("Clip", {x, Tensor(), Tensor()}), x);                      // neither
  expect_tensor_near(run("Clip", {x}), x);
  // min > max: everything becomes max, as numpy.clip
  expect_tensor_near(run("Clip", {x, Tensor::scalar<float>(2.f), Tensor::scalar<float>(1.f)}),
                     f32({5}, {1, 1, 1, 1, 1}));
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor unbounded = run("Clip", {f32({2}, {-inf, inf})});  // no bound clips infinities
  EXPECT_EQ(unbounded.data<float>()[0], -inf);
  EXPECT_EQ(unbounded.data<float>()[1], inf);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(run("Clip", {f32({1}, {nan}), lo, hi}).data<float>()[0]));
}

TEST(OpsElementwise, ClipAttributesAndIntegers) {
  // opset < 11: bounds are attributes
  expect_tensor_near(run("Clip", {f32({4}, {-3, -1, 1, 3})}, attrs({{"min", -2.f}, {"max", 2.f}})),
                     f32({4}, {-2, -1, 1, 2}));
  expect_tensor_near(run("Clip", {f32({2}, {-3, 3})}, attrs({{"max", 0.5f}})), f32({2}, {-3, 0.5f}));
  expect_tensor_near(run("Clip", {i64({4}, {-30, -1, 1, 30}), i64({}, {-5}), i64({}, {5})}),
                     i64({4}, {-5, -1, 1, 5}));
  EXPECT_THROW(run("Clip", {f32({2}, {1, 2}), f32({2}, {0, 0})}), dc::UserError);  // non-scalar min
  EXPECT_THROW(run("Clip", {f32({2}, {1, 2}), i64({}, {0})}), dc::UserError);      // dtype mismatch
}

// ---- Comparisons and logic --------------------------------------------------------------

TEST(OpsElementwise, Comparisons) {
  const Tensor a = f32({2, 2}, {1, 2, 3, 4});
  const Tensor b = f32({2}, {2, 2});
  expect_tensor_near(run("Equal", {a, b}), bools({2, 2}, {false, true, false, false}));
  expect_tensor_near(run("Greater", {a, b}), bools({2, 2}, {false, false, true, true}));
  expect_tensor_near(run("Less", {a, b}), bools({2, 2}, {true, false, false, false}));
  expect_tensor_near(run("GreaterOrEqual", {a, b}), bools({2, 2}, {false, true, true, true}));
  expect_tensor_near(run("LessOrEqual", {a, b}), bools({2, 2}, {true, true, false, false}));
  expect_tensor_near(run("Equal", {i64({3}, {1, 2, 3}), i64({}, {2})}), bools({3}, {false, true, false}));
  expect_tensor_near(run("Equal", {bools({2}, {true, false}), bools({1}, {false})}),
                     bools({2}, {false, true}));
  EXPECT_EQ(run("Less", {a, b}).dtype(), DType::boolean);
}

TEST(OpsElementwise, Logic) {
  const Tensor a = bools({4}, {false, false, true, true});
  const Tensor b = bools({4}, {false, true, false, true});
  expect_tensor_near(run("And", {a, b}), bools({4}, {false, false, false, true}));
  expect_tensor_near(run("Or", {a, b}), bools({4}, {false, true, true, true}));
  expect_tensor_near(run("Xor", {a, b}), bools({4}, {false, true, true, false}));
  expect_tensor_near(run("Not", {a}), bools({4}, {true, true, false, false}));
  expect_tensor_near(run("And", {bools({2, 1}, {true, false}), bools({2}, {true, false})}),
                     bools({2, 2}, {true, false, false, false}));
  EXPECT_THROW(run("And", {f32({1}, {1}), f32({1}, {1})}), dc::UserError);
  EXPECT_THROW(run("Not", {i64({1}, {1})}), dc::UserError);
}

// ---- Where ------------------------------------------------------------------------------

TEST(OpsElementwise, WhereThreeWayBroadcast) {
  // condition [2,1], x [1,3], y scalar -> [2,3]
  const Tensor c = bools({2, 1}, {true, false});
  expect_tensor_near(run("Where", {c, f32({1, 3}, {1, 2, 3}), Tensor::scalar<float>(-1.f)}),
                     f32({2, 3}, {1, 2, 3, -1, -1, -1}));
  // where_example
  expect_tensor_near(run("Where", {bools({2, 2}, {true, false, true, true}), f32({2, 2}, {1, 2, 3, 4}),
                                   f32({2, 2}, {9, 8, 7, 6})}),
                     f32({2, 2}, {1, 8, 3, 4}));
  // where_long_example (int64), condition broadcast along rows
  expect_tensor_near(run("Where", {bools({2}, {false, true}), i64({2, 2}, {1, 2, 3, 4}),
                                   i64({2, 2}, {9, 8, 7, 6})}),
                     i64({2, 2}, {9, 2, 7, 4}));
  EXPECT_THROW(run("Where", {f32({1}, {1}), f32({1}, {1}), f32({1}, {1})}), dc::UserError);
  EXPECT_THROW(run("Where", {bools({1}, {true}), f32({1}, {1}), i64({1}, {1})}), dc::UserError);
}

// ---- Cast ---------------------------------------------------------------------------------

dc::Attributes to(DType t) { return attrs({{"to", int64_t{static_cast<int32_t>(t)}}}); }

TEST(OpsElementwise, CastFloatToIntTruncates) {
  const Tensor x = f32({5}, {-1.7f, -0.5f, 0.f, 2.9f, 100.5f});
  expect_tensor_near(run("Cast", {x}, to(DType::i32)), i32({5}, {-1, 0, 0, 2, 100}));
  expect_tensor_near(run("Cast", {x}, to(DType::i64)), i64({5}, {-1, 0, 0, 2, 100}));
  const Tensor u8 = run("Cast", {f32({3}, {300.f, -1.f, 255.9f})}, to(DType::u8));
  ASSERT_EQ(u8.dtype(), DType::u8);
  EXPECT_EQ(u8.to_int64_vector(), (std::vector<int64_t>{44, 255, 255}));  // as numpy
}

TEST(OpsElementwise, CastHalfAndBfloat) {
  const Tensor h = run("Cast", {f32({3}, {1.f, -2.5f, 65504.f})}, to(DType::f16));
  ASSERT_EQ(h.dtype(), DType::f16);
  const auto* bits = reinterpret_cast<const uint16_t*>(h.raw());
  EXPECT_EQ(bits[0], 0x3C00);
  EXPECT_EQ(bits[1], 0xC100);
  EXPECT_EQ(bits[2], 0x7BFF);
  expect_tensor_near(run("Cast", {h}, to(DType::f32)), f32({3}, {1.f, -2.5f, 65504.f}), 0, 0);
  expect_tensor_near(run("Cast", {h}, to(DType::i64)), i64({3}, {1, -2, 65504}));
  const Tensor b = run("Cast", {f32({2}, {1.f, 3.140625f})}, to(DType::bf16));
  const auto* bb = reinterpret_cast<const uint16_t*>(b.raw());
  EXPECT_EQ(bb[0], 0x3F80);
  EXPECT_EQ(bb[1], 0x4049);
}

TEST(OpsElementwise, CastBoolAndInts) {
  expect_tensor_near(run("Cast", {f32({3}, {0.f, -0.1f, 2.f})}, to(DType::boolean)),
                     bools({3}, {false, true, true}));
  expect_tensor_near(run("Cast", {bools({2}, {true, false})}, to(DType::f32)), f32({2}, {1, 0}));
  expect_tensor_near(run("Cast", {i64({2}, {-3, 1 << 20})}, to(DType::f64)), f64({2}, {-3, 1 << 20}));
  expect_tensor_near(run("Cast", {i64({2}, {-1, 4294967296 + 5})}, to(DType::i32)), i32({2}, {-1, 5}));
  const Tensor same = f32({1}, {1});
  EXPECT_EQ(run("Cast", {same}, to(DType::f32)).raw(), same.raw());  // no copy
}

TEST(OpsElementwise, CastUnsupportedTarget) {
  const std::string msg = user_error([] { run("Cast", {f32({1}, {1})}, attrs({{"to", int64_t{8}}})); });
  EXPECT_NE(msg.find("STRING"), std::string::npos) << msg;
  EXPECT_THROW(run("Cast", {f32({1}, {1})}), dc::UserError);  // 'to' missing
}

// ---- Errors and import-time checks ----------------------------------------------------------

TEST(OpsElementwise, IncompatibleShapes) {
  const std::string msg = user_error([] { run("Add", {f32({2, 3}, {0, 0, 0, 0, 0, 0}), f32({4}, {0, 0, 0, 0})}); });
  EXPECT_NE(msg.find("2x3"), std::string::npos) << msg;
  EXPECT_THROW(check("Mul", {{DType::f32, {2, 3}}, {DType::f32, {2}}}), dc::UserError);
  EXPECT_THROW(check("Where", {{DType::boolean, {3}}, {DType::f32, {2, 1}}, {DType::f32, {4}}}),
               dc::UserError);
  EXPECT_NO_THROW(check("Where", {{DType::boolean, {3}}, {DType::f32, {2, 1}}, {DType::f32, {1}}}));
}

TEST(OpsElementwise, UnsupportedDtypeNamesOpAndDtype) {
  const std::string msg = user_error([] { check("Sqrt", {{DType::i32, {2}}}); });
  EXPECT_NE(msg.find("Sqrt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
  EXPECT_THROW(check("Add", {{DType::u8, {2}}, {DType::u8, {2}}}), dc::UserError);
  EXPECT_THROW(check("Add", {{DType::f16, {2}}, {DType::f16, {2}}}), dc::UserError);
  EXPECT_THROW(check("Greater", {{DType::boolean, {2}}, {DType::boolean, {2}}}), dc::UserError);
  EXPECT_THROW(run("Exp", {i64({1}, {1})}), dc::UserError);
}

TEST(OpsElementwise, MixedDtypesRefused) {
  const std::string msg = user_error([] { run("Add", {f32({1}, {1}), i64({1}, {1})}); });
  EXPECT_NE(msg.find("i64"), std::string::npos) << msg;
  EXPECT_THROW(check("Equal", {{DType::f32, {1}}, {DType::f64, {1}}}), dc::UserError);
  EXPECT_NO_THROW(check("Pow", {{DType::f32, {1}}, {DType::i64, {1}}}));  // Pow allows mixing
}

TEST(OpsElementwise, ArityChecked) {
  EXPECT_THROW(check("Add", {{DType::f32, {1}}}), dc::UserError);
  EXPECT_THROW(check("Sub", {{DType::f32, {1}}, {DType::f32, {1}}, {DType::f32, {1}}}), dc::UserError);
  EXPECT_THROW(check("Max", {}), dc::UserError);
  EXPECT_THROW(check("Where", {{DType::boolean, {1}}, {DType::f32, {1}}}), dc::UserError);
  EXPECT_NO_THROW(check("Clip", {{DType::f32, {3}}, {}, {DType::f32, {}}}));
  EXPECT_THROW(check("Clip", {{DType::f32, {3}}, {DType::f32, {}}}, attrs({{"min", 0.f}})),
               dc::UserError);  // min twice
}

TEST(OpsElementwise, AttributeTypesChecked) {
  EXPECT_THROW(check("LeakyRelu", {{DType::f32, {1}}}, attrs({{"alpha", std::string("x")}})),
               dc::UserError);
  EXPECT_NO_THROW(check("HardSigmoid", {{DType::f32, {1}}}, attrs({{"alpha", 0.1f}})));
}

TEST(OpsElementwise, TableListsEveryOp) {
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sqrt", "Exp", "Log",
                         "Neg", "Reciprocal", "Abs", "Erf", "Relu", "LeakyRelu", "Sigmoid",
                         "Tanh", "HardSigmoid", "HardSwish", "Gelu", "Clip", "Equal", "Greater",
                         "Less", "Not", "And", "Or", "Where", "Cast"}) {
    const dc::ref::OpDef* def = dc::ref::find_op(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_NE(def->check, nullptr) << op;
  }
}

}  // namespace
