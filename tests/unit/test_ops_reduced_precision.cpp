// The reference executor's rule for f16/bf16 storage (ref/storage_dtypes.h): every float op
// reads its inputs' values, computes in fp32 and rounds once, to nearest even, to its output
// dtype; data movement ops move f16/bf16 bits unchanged. Each family is checked bitwise
// against the fp32 computation from the same values followed by one rounding, and the
// rounding itself against hand-picked values (ties, overflow, NaN, inf).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ref/executor.h"
#include "ref/kernel.h"
#include "ref/storage_dtypes.h"
#include "testing.h"

namespace {

using dc::Attributes;
using dc::DType;
using dc::Shape;
using dc::Tensor;
using dc::ref::convert_float;
using dc::testing::make_node;
using dc::testing::random_tensor;
using Ints = std::vector<int64_t>;

Attributes attrs(std::initializer_list<std::pair<const char*, dc::AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

// Runs a single-output node with the output's declared dtype (undefined: not declared).
Tensor run(const std::string& op, const std::vector<Tensor>& in, Attributes a = {},
           DType out = DType::undefined) {
  std::vector<std::string> names;
  for (size_t i = 0; i < in.size(); ++i) names.push_back(in[i].defined() ? "in" + std::to_string(i) : "");
  const auto node = make_node(op, names, {"out"}, std::move(a));
  if (out == DType::undefined) return dc::ref::run_node(node, in).at(0);
  return dc::ref::run_node(node, in, {out}).at(0);
}

// Random values already representable in `t` (what an f16 tensor can hold).
Tensor stored(DType t, const Shape& s, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  return convert_float(random_tensor(s, seed, lo, hi), t);
}

std::vector<uint16_t> bits16(const Tensor& t) {
  std::vector<uint16_t> b(static_cast<size_t>(t.numel()));
  std::memcpy(b.data(), t.raw(), t.nbytes());
  return b;
}

Tensor from_bits(DType t, const Shape& s, const std::vector<uint16_t>& b) {
  Tensor out(t, s);
  std::memcpy(out.raw_mutable(), b.data(), out.nbytes());
  return out;
}

void expect_bitwise(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(dc::dtype_name(actual.dtype()), dc::dtype_name(expected.dtype()));
  ASSERT_EQ(actual.shape(), expected.shape());
  if (actual.bitwise_equal(expected)) return;
  const auto a = actual.to_float_vector(), e = expected.to_float_vector();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &e[i], sizeof(float)) != 0) {
      ADD_FAILURE() << "first difference at " << i << ": " << a[i] << " vs " << e[i];
      return;
    }
}

// The op on `in` (f16/bf16 values) must equal the op on the same values in f32, rounded once.
void expect_one_rounding(const std::string& op, const std::vector<Tensor>& in, const Attributes& a,
                         DType t) {
  std::vector<Tensor> wide;
  for (const Tensor& x : in)
    wide.push_back(x.defined() && dc::is_float(x.dtype()) ? convert_float(x, DType::f32) : x);
  const Tensor f32 = run(op, wide, a);
  ASSERT_EQ(f32.dtype(), DType::f32) << op;
  const Tensor got = run(op, in, a);
  SCOPED_TRACE(op + " in " + std::string(dc::dtype_name(t)));
  expect_bitwise(got, convert_float(f32, t));
  // The declared output dtype gives the same result.
  expect_bitwise(run(op, in, a, t), got);
}

class ReducedPrecision : public ::testing::TestWithParam<DType> {};

INSTANTIATE_TEST_SUITE_P(Storage, ReducedPrecision, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& p) { return std::string(dc::dtype_name(p.param)); });

TEST_P(ReducedPrecision, ElementwiseEqualsFp32ThenOneRounding) {
  const DType t = GetParam();
  const Shape s{4, 37};
  const Tensor a = stored(t, s, 1), b = stored(t, s, 2), pos = stored(t, s, 3, 0.1f, 4.f);
  const Tensor row = stored(t, {37}, 4);
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
    expect_one_rounding(op, {a, b}, {}, t);
    expect_one_rounding(op, {a, row}, {}, t);  // broadcast
  }
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "Gelu",
                         "HardSwish", "HardSigmoid", "LeakyRelu"})
    expect_one_rounding(op, {a}, {}, t);
  for (const char* op : {"Sqrt", "Log", "Reciprocal"}) expect_one_rounding(op, {pos}, {}, t);
  expect_one_rounding("Pow", {pos, b}, {}, t);
  expect_one_rounding("Clip", {a}, attrs({{"min", -0.3f}, {"max", 0.7f}}), t);
}

TEST_P(ReducedPrecision, AddRoundsEachElementByHand) {
  // Independent of the executor's kernels: convert, add in float, round with the IR helpers.
  const DType t = GetParam();
  const Tensor a = stored(t, {257}, 11, -100.f, 100.f), b = stored(t, {257}, 12, -1.f, 1.f);
  const Tensor got = run("Add", {a, b});
  ASSERT_EQ(got.dtype(), t);
  const auto ab = bits16(a), bb = bits16(b), gb = bits16(got);
  const bool half = t == DType::f16;
  for (size_t i = 0; i < gb.size(); ++i) {
    const float x = half ? dc::half_to_float(ab[i]) : dc::bf16_to_float(ab[i]);
    const float y = half ? dc::half_to_float(bb[i]) : dc::bf16_to_float(bb[i]);
    const uint16_t want = half ? dc::float_to_half(x + y) : dc::float_to_bf16(x + y);
    ASSERT_EQ(gb[i], want) << i;
  }
}

TEST_P(ReducedPrecision, LinalgAccumulatesInFp32) {
  const DType t = GetParam();
  const Tensor x = stored(t, {1, 3, 9, 9}, 21), w = stored(t, {8, 3, 3, 3}, 22), bias = stored(t, {8}, 23);
  expect_one_rounding("Conv", {x, w, bias}, attrs({{"pads", Ints{1, 1, 1, 1}}}), t);
  const Tensor a = stored(t, {2, 17, 64}, 24), m = stored(t, {64, 33}, 25);
  expect_one_rounding("MatMul", {a, m}, {}, t);
  const Tensor ga = stored(t, {17, 64}, 26), c = stored(t, {33}, 27);
  expect_one_rounding("Gemm", {ga, m, c}, attrs({{"alpha", 0.5f}}), t);
  // The accumulation is in fp32, not in the storage type: 4096 terms of 2^-11 sum to 2
  // exactly, where an f16 (or bf16) running sum would stall at 1 (adding half an ulp ties to
  // even).
  const Tensor ones = convert_float(Tensor::from_vector<float>({1, 4096}, std::vector<float>(4096, 1.f)), t);
  const Tensor small = convert_float(
      Tensor::from_vector<float>({4096, 1}, std::vector<float>(4096, 1.f / 2048)), t);
  EXPECT_EQ(run("MatMul", {ones, small}).to_float_vector().at(0), 2.f);
}

TEST_P(ReducedPrecision, ConvTransposeAndResizeComputeInFp32) {
  // Their import checks take f16/bf16 operands as Conv's kernels do (widened, one rounding).
  const DType t = GetParam();
  const Tensor x = stored(t, {1, 4, 5, 6}, 31), w = stored(t, {4, 3, 3, 3}, 32), bias = stored(t, {3}, 33);
  expect_one_rounding("ConvTranspose", {x, w, bias},
                      attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 1, 0}}, {"output_padding", Ints{1, 1}}}), t);
  const Tensor scales = Tensor::from_vector<float>({4}, {1.f, 1.f, 2.f, 1.5f});
  for (const char* mode : {"nearest", "linear", "cubic"})
    expect_one_rounding("Resize", {x, Tensor(), scales}, attrs({{"mode", std::string(mode)}}), t);
  const auto node = dc::testing::make_node("Resize", {"x", "", "scales"}, {"y"}, attrs({{"mode", std::string("linear")}}));
  const dc::TensorInfo xi{t, {1, 4, 5, 6}}, si{DType::f32, {4}};
  const dc::ref::OpDef* def = dc::ref::find_op("Resize");
  ASSERT_NE(def, nullptr);
  EXPECT_NO_THROW(def->check(node, {&xi, nullptr, &si}));
  const dc::TensorInfo wide{DType::f64, {1, 4, 5, 6}};
  EXPECT_THROW(def->check(node, {&wide, nullptr, &si}), dc::UserError);
}

TEST_P(ReducedPrecision, NormalisationsAndReductionsComputeInFp32) {
  const DType t = GetParam();
  const Tensor x = stored(t, {3, 5, 40}, 31, -4.f, 4.f);
  expect_one_rounding("Softmax", {x}, attrs({{"axis", int64_t{-1}}}), t);
  expect_one_rounding("LogSoftmax", {x}, attrs({{"axis", int64_t{-1}}}), t);
  expect_one_rounding("LayerNormalization", {x, stored(t, {40}, 32), stored(t, {40}, 33)},
                      attrs({{"axis", int64_t{-1}}}), t);
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceL2"})
    expect_one_rounding(op, {x}, attrs({{"axes", Ints{-1}}, {"keepdims", int64_t{1}}}), t);
  const Tensor img = stored(t, {2, 4, 7, 7}, 34);
  expect_one_rounding("BatchNormalization",
                      {img, stored(t, {4}, 35), stored(t, {4}, 36), stored(t, {4}, 37),
                       stored(t, {4}, 38, 0.5f, 2.f)},
                      {}, t);
  expect_one_rounding("MaxPool", {img}, attrs({{"kernel_shape", Ints{3, 3}}}), t);
  expect_one_rounding("AveragePool", {img},
                      attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}), t);
  expect_one_rounding("GlobalAveragePool", {img}, {}, t);
}

TEST_P(ReducedPrecision, DataMovementKeepsBits) {
  const DType t = GetParam();
  // Signalling-NaN payloads and negative zero survive: the bits move, nothing converts.
  std::vector<uint16_t> b = bits16(stored(t, {2, 3, 4}, 41));
  b[0] = 0x7c01;
  b[5] = 0xfc3f;
  b[7] = 0x8000;
  const Tensor x = from_bits(t, {2, 3, 4}, b);
  const Tensor tr = run("Transpose", {x}, attrs({{"perm", Ints{2, 0, 1}}}));
  ASSERT_EQ(tr.dtype(), t);
  const auto tb = bits16(tr);
  // out[k][i][j] = x[i][j][k]
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k)
        ASSERT_EQ(tb[static_cast<size_t>(k * 6 + i * 3 + j)], b[static_cast<size_t>(i * 12 + j * 4 + k)]);
  const Tensor cat = run("Concat", {x, x}, attrs({{"axis", int64_t{0}}}));
  auto cb = bits16(cat);
  EXPECT_EQ(std::vector<uint16_t>(cb.begin(), cb.begin() + 24), b);
  const Tensor shape = Tensor::from_vector<int64_t>({1}, {24});
  EXPECT_EQ(bits16(run("Reshape", {x, shape})), b);
  const Tensor idx = Tensor::from_vector<int64_t>({2}, {1, 0});
  const Tensor g = run("Gather", {x, idx}, attrs({{"axis", int64_t{0}}}));
  const auto gb = bits16(g);
  EXPECT_EQ(std::vector<uint16_t>(gb.begin() + 12, gb.end()), std::vector<uint16_t>(b.begin(), b.begin() + 12));
}

TEST_P(ReducedPrecision, MixedInputsComputeInFp32AndRoundToTheOutput) {
  const DType t = GetParam();
  const Tensor a = stored(t, {64}, 51);
  const Tensor f = random_tensor({64}, 52);  // f32 values, not representable in t
  const Tensor sum32 = run("Add", {convert_float(a, DType::f32), f});
  expect_bitwise(run("Add", {a, f}, {}, t), convert_float(sum32, t));
  expect_bitwise(run("Add", {a, f}, {}, DType::f32), sum32);
  expect_bitwise(run("Add", {f, a}, {}, DType::f32), run("Add", {f, convert_float(a, DType::f32)}));
  // MatMul(t, t) -> f32: fp32 accumulation, no rounding of the result.
  const Tensor m = stored(t, {16, 64}, 53), k = stored(t, {64, 8}, 54);
  expect_bitwise(run("MatMul", {m, k}, {}, DType::f32),
                 run("MatMul", {convert_float(m, DType::f32), convert_float(k, DType::f32)}));
  // Softmax(f32) -> t.
  const Tensor s = random_tensor({4, 33}, 55, -5.f, 5.f);
  expect_bitwise(run("Softmax", {s}, attrs({{"axis", int64_t{-1}}}), t),
                 convert_float(run("Softmax", {s}, attrs({{"axis", int64_t{-1}}})), t));
  // Where(bool, t, f32) -> t: the f32 operand is rounded to t, the t operand moves.
  const Tensor c = Tensor::from_vector<bool>({4}, {true, false, true, false});
  const Tensor x4 = stored(t, {4}, 56), y4 = random_tensor({4}, 57);
  const auto w = run("Where", {c, x4, y4}, {}, t).to_float_vector();
  const auto xv = x4.to_float_vector(), yv = convert_float(y4, t).to_float_vector();
  EXPECT_EQ(w, (std::vector<float>{xv[0], yv[1], xv[2], yv[3]}));
  // Comparisons of mixed float dtypes give bool.
  const Tensor gt = run("Greater", {a, f});
  ASSERT_EQ(gt.dtype(), DType::boolean);
  const auto av = a.to_float_vector(), fv = f.to_float_vector();
  const bool* gp = gt.data<bool>();
  for (size_t i = 0; i < av.size(); ++i) EXPECT_EQ(gp[i], av[i] > fv[i]) << i;
}

TEST_P(ReducedPrecision, NanAndInfPropagate) {
  const DType t = GetParam();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const Tensor x = convert_float(Tensor::from_vector<float>({4}, {nan, inf, -inf, 1.f}), t);
  const Tensor y = convert_float(Tensor::from_vector<float>({4}, {1.f, 1.f, 1.f, inf}), t);
  const auto sum = run("Add", {x, y}).to_float_vector();
  EXPECT_TRUE(std::isnan(sum[0]));
  EXPECT_EQ(sum[1], inf);
  EXPECT_EQ(sum[2], -inf);
  EXPECT_EQ(sum[3], inf);
  EXPECT_TRUE(std::isnan(run("Sub", {y, y}).to_float_vector()[3]));  // inf - inf
  EXPECT_TRUE(std::isnan(run("Relu", {x}).to_float_vector()[0]));
  const auto sm = run("Softmax", {x}, attrs({{"axis", int64_t{-1}}})).to_float_vector();
  EXPECT_TRUE(std::isnan(sm[3]));
}

TEST(ReducedPrecisionRounding, F16OverflowBecomesInfBf16DoesNot) {
  const Tensor a = convert_float(Tensor::from_vector<float>({3}, {300.f, 65504.f, -300.f}), DType::f16);
  const auto prod = run("Mul", {a, a}).to_float_vector();  // 90000 > 65504
  EXPECT_EQ(prod[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(prod[1], std::numeric_limits<float>::infinity());
  // 65504 + 15 rounds back to 65504 (the tie point to inf is 65520); + 16 overflows.
  const Tensor big = convert_float(Tensor::from_vector<float>({2}, {65504.f, 65504.f}), DType::f16);
  const Tensor add = Tensor::from_vector<float>({2}, {15.f, 16.f});
  const auto s = run("Add", {big, add}, {}, DType::f16).to_float_vector();
  EXPECT_EQ(s[0], 65504.f);
  EXPECT_EQ(s[1], std::numeric_limits<float>::infinity());
  const Tensor b = convert_float(Tensor::from_vector<float>({1}, {300.f}), DType::bf16);
  EXPECT_EQ(run("Mul", {b, b}).to_float_vector()[0], 90112.f);  // 90000 to 8 mantissa bits
}

TEST(ReducedPrecisionRounding, TiesGoToEven) {
  // f16 spacing at 2048 is 2: 2049 -> 2048, 2051 -> 2052; bf16 spacing at 256 is 2.
  const Tensor one = Tensor::from_vector<float>({2}, {1.f, 3.f});
  const Tensor h = convert_float(Tensor::from_vector<float>({2}, {2048.f, 2048.f}), DType::f16);
  EXPECT_EQ(run("Add", {h, one}, {}, DType::f16).to_float_vector(), (std::vector<float>{2048.f, 2052.f}));
  const Tensor b = convert_float(Tensor::from_vector<float>({2}, {256.f, 256.f}), DType::bf16);
  EXPECT_EQ(run("Add", {b, one}, {}, DType::bf16).to_float_vector(), (std::vector<float>{256.f, 260.f}));
}

TEST(ReducedPrecisionGraph, RunGraphRoundsAtEveryStoreOfTheDeclaredDtype) {
  // in (f32) -> Conv(f16 weights) -> y (f16) -> Relu -> r (f16) -> Add(f32 bias) -> out (f32)
  dc::Graph g;
  g.inputs = {"in"};
  g.outputs = {"out"};
  g.tensors["in"] = {DType::f32, {1, 2, 6, 6}};
  g.tensors["w"] = {DType::f16, {4, 2, 3, 3}};
  g.tensors["y"] = {DType::f16, {1, 4, 4, 4}};
  g.tensors["r"] = {DType::f16, {1, 4, 4, 4}};
  g.tensors["bias"] = {DType::f32, {4, 1, 1}};
  g.tensors["out"] = {DType::f32, {1, 4, 4, 4}};
  g.initializers["w"] = stored(DType::f16, {4, 2, 3, 3}, 61);
  g.initializers["bias"] = random_tensor({4, 1, 1}, 62);
  g.nodes = {make_node("Conv", {"in", "w"}, {"y"}), make_node("Relu", {"y"}, {"r"}),
             make_node("Add", {"r", "bias"}, {"out"})};
  const Tensor in = random_tensor({1, 2, 6, 6}, 63);
  dc::ref::RunOptions keep;
  keep.keep_intermediates = true;
  const auto v = dc::ref::run_graph(g, {{"in", in}}, keep);
  ASSERT_EQ(v.at("y").dtype(), DType::f16);
  ASSERT_EQ(v.at("out").dtype(), DType::f32);
  const Tensor y = convert_float(run("Conv", {in, convert_float(g.initializers["w"], DType::f32)}), DType::f16);
  expect_bitwise(v.at("y"), y);
  const Tensor r = convert_float(run("Relu", {convert_float(y, DType::f32)}), DType::f16);
  expect_bitwise(v.at("out"), run("Add", {convert_float(r, DType::f32), g.initializers["bias"]}));
}

TEST(ReducedPrecisionGraph, ConvertFloatRoundsF64AndRefusesIntegers) {
  const Tensor d = Tensor::from_vector<double>({2}, {1.0 + 1.0 / 4096, 70000.0});
  const auto h = convert_float(d, DType::f16).to_float_vector();
  EXPECT_EQ(h[0], 1.f);  // below half an f16 ulp (2^-11) of 1
  EXPECT_EQ(h[1], std::numeric_limits<float>::infinity());
  EXPECT_THROW(convert_float(Tensor::from_vector<int64_t>({1}, {1}), DType::f16), dc::InternalError);
}

}  // namespace
