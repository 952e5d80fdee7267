// Conv, Gemm and MatMul of the reference executor: hand-computed cases for each attribute,
// Conv against a naive direct convolution over many parameter combinations, error cases.
#include <gtest/gtest.h>

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

Tensor f32(Shape s, std::vector<float> v) { return Tensor::from_vector<float>(std::move(s), v); }

Tensor iota(Shape s, float start = 0.f) {
  Tensor t(DType::f32, std::move(s));
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = start + static_cast<float>(i);
  return t;
}

Tensor run1(const Node& n, const std::vector<Tensor>& in) { return dc::ref::run_node(n, in).at(0); }

// Runs the op's import-time check on the given input types (nullopt: absent input).
void check(const Node& n, const std::vector<std::optional<TensorInfo>>& infos) {
  const dc::ref::OpDef* def = dc::ref::find_op(n.op);
  ASSERT_NE(def, nullptr);
  ASSERT_NE(def->check, nullptr);
  std::vector<const TensorInfo*> ptrs;
  for (const auto& i : infos) ptrs.push_back(i ? &*i : nullptr);
  def->check(n, ptrs);
}

TensorInfo info(Shape s, DType t = DType::f32) { return {t, std::move(s)}; }

Attributes attrs(std::initializer_list<std::pair<const char*, dc::AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}
using Ints = std::vector<int64_t>;

// ---------------------------------------------------------------------------------------
// Naive direct convolution over 3 spatial dims (lower ranks: leading extents of 1).

struct ConvSpec {
  int64_t strides[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  int64_t group = 1;
};

// x: N x C x D x H x W, w: M x C/g x KD x KH x KW, b: M or undefined.
Tensor naive_conv3d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvSpec& s) {
  const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0), cg = c / s.group, mg = m / s.group;
  const int64_t in[3] = {x.dim(2), x.dim(3), x.dim(4)}, k[3] = {w.dim(2), w.dim(3), w.dim(4)};
  int64_t out[3];
  for (int d = 0; d < 3; ++d)
    out[d] = (in[d] + s.pb[d] + s.pe[d] - (k[d] - 1) * s.dil[d] - 1) / s.strides[d] + 1;
  Tensor y(DType::f32, {n, m, out[0], out[1], out[2]});
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* yp = y.mutable_data<float>();
  for (int64_t in_ = 0; in_ < n; ++in_)
    for (int64_t oc = 0; oc < m; ++oc) {
      const int64_t g = oc / mg;
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            double acc = b.defined() ? b.data<float>()[oc] : 0.0;
            for (int64_t ic = 0; ic < cg; ++ic)
              for (int64_t k0 = 0; k0 < k[0]; ++k0)
                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t i0 = o0 * s.strides[0] - s.pb[0] + k0 * s.dil[0];
                    const int64_t i1 = o1 * s.strides[1] - s.pb[1] + k1 * s.dil[1];
                    const int64_t i2 = o2 * s.strides[2] - s.pb[2] + k2 * s.dil[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2])
                      continue;
                    const int64_t xc = in_ * c + g * cg + ic;
                    acc += static_cast<double>(xp[((xc * in[0] + i0) * in[1] + i1) * in[2] + i2]) *
                           wp[(((oc * cg + ic) * k[0] + k0) * k[1] + k1) * k[2] + k2];
                  }
            yp[(((in_ * m + oc) * out[0] + o0) * out[1] + o1) * out[2] + o2] =
                static_cast<float>(acc);
          }
    }
  return y;
}

// Shape with extents of 1 inserted after N and C so that it has 3 spatial dims.
Shape to5d(const Shape& s) {
  Shape r(s.begin(), s.begin() + 2);
  for (size_t i = s.size(); i < 5; ++i) r.push_back(1);
  r.insert(r.end(), s.begin() + 2, s.end());
  return r;
}

// Runs Conv with `rank` spatial dims (the spec's last `rank` slots) and compares it with the
// naive convolution.
void expect_conv_matches_naive(const Shape& xs, const Shape& ws, bool bias, const ConvSpec& s,
                               uint32_t seed) {
  const size_t rank = xs.size() - 2;
  const Tensor x = random_tensor(xs, seed), w = random_tensor(ws, seed + 1);
  const Tensor b = bias ? random_tensor({ws[0]}, seed + 2) : Tensor();
  Ints strides, dil, pads(2 * rank);
  for (size_t i = 0; i < rank; ++i) {
    const size_t d = 3 - rank + i;
    strides.push_back(s.strides[d]);
    dil.push_back(s.dil[d]);
    pads[i] = s.pb[d];
    pads[i + rank] = s.pe[d];
  }
  const Node n = make_node("Conv", {"x", "w", bias ? "b" : ""}, {"y"},
                           attrs({{"strides", strides},
                                  {"dilations", dil},
                                  {"pads", pads},
                                  {"group", s.group},
                                  {"kernel_shape", Ints(ws.begin() + 2, ws.end())}}));
  std::vector<std::optional<TensorInfo>> infos{info(xs), info(ws)};
  if (bias) infos.push_back(info({ws[0]}));
  check(n, infos);
  const Tensor y = run1(n, {x, w, b});
  const Tensor want = naive_conv3d(x.reshaped(to5d(xs)), w.reshaped(to5d(ws)), b, s);
  const int64_t k = ws[1] * dc::shape_numel(Shape(ws.begin() + 2, ws.end()));
  SCOPED_TRACE(::testing::Message()
               << "x " << dc::shape_str(xs) << " w " << dc::shape_str(ws) << " group " << s.group);
  ASSERT_EQ(y.numel(), want.numel());
  expect_tensor_near(y.reshaped(want.shape()), want, 1e-5f * static_cast<float>(k), 1e-5f);
}

// ---------------------------------------------------------------------------------------
// Conv: hand-computed cases (ONNX's documented examples and by hand).

TEST(OpsLinalgConv, TwoByTwoKernelByHand) {
  // x = [[1,2,3],[4,5,6],[7,8,9]], w = [[1,2],[3,4]]: 1+4+12+20 = 37, 2+6+15+24 = 47, ...
  const Node n = make_node("Conv", {"x", "w"}, {"y"});
  const Tensor y = run1(n, {iota({1, 1, 3, 3}, 1.f), f32({1, 1, 2, 2}, {1, 2, 3, 4})});
  expect_tensor_near(y, f32({1, 1, 2, 2}, {37, 47, 67, 77}));
}

TEST(OpsLinalgConv, OnnxBasicWithAndWithoutPadding) {
  const Tensor x = iota({1, 1, 5, 5}), w = f32({1, 1, 3, 3}, std::vector<float>(9, 1.f));
  const Node valid = make_node("Conv", {"x", "w"}, {"y"},
                               attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{0, 0, 0, 0}}}));
  expect_tensor_near(run1(valid, {x, w}),
                     f32({1, 1, 3, 3}, {54, 63, 72, 99, 108, 117, 144, 153, 162}));
  const Node padded = make_node("Conv", {"x", "w"}, {"y"}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  expect_tensor_near(run1(padded, {x, w}),
                     f32({1, 1, 5, 5}, {12,  21, 27, 33,  24,  33,  54,  63, 72,  51,  63,  99, 108,
                                        117, 81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84}));
}

TEST(OpsLinalgConv, OnnxStridesAndAsymmetricPadding) {
  const Tensor x = iota({1, 1, 7, 5}), w = f32({1, 1, 3, 3}, std::vector<float>(9, 1.f));
  const Node sp = make_node("Conv", {"x", "w"}, {"y"},
                            attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  expect_tensor_near(run1(sp, {x, w}),
                     f32({1, 1, 4, 3}, {12, 27, 24, 63, 108, 81, 123, 198, 141, 112, 177, 124}));
  const Node asym = make_node("Conv", {"x", "w"}, {"y"},
                              attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 1, 0}}}));
  expect_tensor_near(run1(asym, {x, w}), f32({1, 1, 4, 2}, {21, 33, 99, 117, 189, 207, 171, 183}));
}

TEST(OpsLinalgConv, DilationByHand) {
  // 4x4 iota, 2x2 ones dilated by 2: taps (0,0),(0,2),(2,0),(2,2) of each window.
  const Node n = make_node("Conv", {"x", "w"}, {"y"}, attrs({{"dilations", Ints{2, 2}}}));
  const Tensor y = run1(n, {iota({1, 1, 4, 4}), f32({1, 1, 2, 2}, {1, 1, 1, 1})});
  expect_tensor_near(y, f32({1, 1, 2, 2}, {20, 24, 36, 40}));
}

TEST(OpsLinalgConv, AutoPadSameUpperVersusLower) {
  const Tensor x = iota({1, 1, 4, 4}), w = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  // Total padding 1 per dim: at the end for SAME_UPPER, at the beginning for SAME_LOWER.
  const Node upper =
      make_node("Conv", {"x", "w"}, {"y"}, attrs({{"auto_pad", std::string("SAME_UPPER")}}));
  expect_tensor_near(run1(upper, {x, w}), f32({1, 1, 4, 4}, {10, 14, 18, 10, 26, 30, 34, 18, 42, 46,
                                                             50, 26, 25, 27, 29, 15}));
  const Node lower =
      make_node("Conv", {"x", "w"}, {"y"}, attrs({{"auto_pad", std::string("SAME_LOWER")}}));
  expect_tensor_near(run1(lower, {x, w}), f32({1, 1, 4, 4}, {0, 1, 3, 5, 4, 10, 14, 18, 12, 26, 30,
                                                             34, 20, 42, 46, 50}));
  // VALID ignores pads: 5x5 iota, 3x3 ones, stride 2.
  const Node valid = make_node("Conv", {"x", "w"}, {"y"},
                               attrs({{"auto_pad", std::string("VALID")},
                                      {"strides", Ints{2, 2}},
                                      {"pads", Ints{1, 1, 1, 1}}}));
  expect_tensor_near(run1(valid, {iota({1, 1, 5, 5}), f32({1, 1, 3, 3}, std::vector<float>(9, 1))}),
                     f32({1, 1, 2, 2}, {54, 72, 144, 162}));
}

TEST(OpsLinalgConv, SameWithStrideMatchesExplicitPads) {
  // in 8, kernel 3, stride 2: out 4, total padding 1 -> UPPER (0, 1), LOWER (1, 0).
  const Tensor x = random_tensor({1, 2, 8, 8}, 5), w = random_tensor({3, 2, 3, 3}, 6);
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER"}) {
    const Node same = make_node("Conv", {"x", "w"}, {"y"},
                                attrs({{"auto_pad", std::string(mode)}, {"strides", Ints{2, 2}}}));
    const bool upper = std::string(mode) == "SAME_UPPER";
    const Ints pads = upper ? Ints{0, 0, 1, 1} : Ints{1, 1, 0, 0};
    const Node expl =
        make_node("Conv", {"x", "w"}, {"y"}, attrs({{"pads", pads}, {"strides", Ints{2, 2}}}));
    const Tensor y = run1(same, {x, w});
    EXPECT_EQ(y.shape(), (Shape{1, 3, 4, 4})) << mode;
    expect_tensor_near(y, run1(expl, {x, w}));
  }
}

TEST(OpsLinalgConv, GroupsByHand) {
  // group 2, 4 input channels, 2 filters of 2 channels each, 1x1: y0 = x0 + 2 x1, y1 = 3 x2 + 4 x3.
  const Tensor x = f32({1, 4, 1, 2}, {1, 2, 10, 20, 100, 200, 1000, 2000});
  const Node n = make_node("Conv", {"x", "w", "b"}, {"y"}, attrs({{"group", int64_t{2}}}));
  const Tensor y = run1(n, {x, f32({2, 2, 1, 1}, {1, 2, 3, 4}), f32({2}, {0.5f, -1.f})});
  expect_tensor_near(y, f32({1, 2, 1, 2}, {21.5f, 42.5f, 4299, 8599}));
}

TEST(OpsLinalgConv, DepthwiseByHand) {
  // group == C == M: each channel with its own 2x2 kernel, plus bias.
  const Tensor x = f32({1, 2, 2, 3}, {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6});
  const Node n = make_node("Conv", {"x", "w", "b"}, {"y"}, attrs({{"group", int64_t{2}}}));
  const Tensor y = run1(n, {x, f32({2, 1, 2, 2}, {1, 0, 0, 1, 1, 1, 1, 1}), f32({2}, {10, 20})});
  // channel 0: x00 + x11 = 1+5, 2+6; channel 1: sum of 2x2 = -12, -16.
  expect_tensor_near(y, f32({1, 2, 1, 2}, {16, 18, 8, 4}));
}

TEST(OpsLinalgConv, MatchesNaiveAcrossParameters) {
  struct P {
    Shape x, w;
    bool bias;
    ConvSpec s;
  };
  auto spec = [](Ints st, Ints dil, Ints pads, int64_t g) {
    ConvSpec s;
    for (int d = 0; d < 2; ++d) {
      s.strides[1 + d] = st[d];
      s.dil[1 + d] = dil[d];
      s.pb[1 + d] = pads[d];
      s.pe[1 + d] = pads[2 + d];
    }
    s.group = g;
    return s;
  };
  const P cases[] = {
      {{1, 3, 9, 11}, {4, 3, 3, 3}, true, spec({1, 1}, {1, 1}, {1, 1, 1, 1}, 1)},
      {{2, 4, 8, 8}, {6, 2, 3, 3}, true, spec({2, 2}, {1, 1}, {0, 1, 2, 0}, 2)},
      {{1, 8, 7, 7}, {8, 1, 3, 3}, true, spec({1, 1}, {1, 1}, {1, 1, 1, 1}, 8)},     // depthwise
      {{2, 8, 10, 9}, {8, 1, 3, 5}, false, spec({2, 3}, {2, 1}, {2, 1, 0, 3}, 8)},   // depthwise
      {{1, 16, 6, 5}, {32, 16, 1, 1}, true, spec({1, 1}, {1, 1}, {0, 0, 0, 0}, 1)},  // pointwise
      {{2, 16, 6, 5}, {8, 16, 1, 1}, false, spec({2, 2}, {1, 1}, {0, 0, 0, 0}, 1)},
      {{1, 6, 7, 7}, {6, 6, 1, 1}, true, spec({1, 1}, {1, 1}, {1, 0, 0, 1}, 1)},  // 1x1, padded
      {{2, 6, 9, 7}, {4, 3, 2, 3}, true, spec({1, 2}, {3, 2}, {1, 0, 2, 1}, 2)},
      {{1, 3, 33, 35}, {70, 3, 7, 7}, true, spec({2, 2}, {1, 1}, {3, 3, 3, 3}, 1)},    // stem-like
      {{1, 64, 14, 14}, {40, 64, 3, 3}, true, spec({1, 1}, {1, 1}, {1, 1, 1, 1}, 1)},  // K > 256
      {{1, 4, 5, 5}, {8, 1, 3, 3}, true, spec({1, 1}, {1, 1}, {1, 1, 1, 1}, 4)},  // multiplier 2
      {{1, 12, 6, 6}, {6, 4, 3, 3}, false, spec({1, 1}, {1, 1}, {1, 1, 1, 1}, 3)},
      {{1, 2, 4, 4}, {3, 2, 4, 4}, false, spec({3, 3}, {1, 1}, {2, 2, 2, 2}, 1)},  // pads > half
  };
  uint32_t seed = 100;
  for (const P& c : cases) expect_conv_matches_naive(c.x, c.w, c.bias, c.s, seed += 3);
}

TEST(OpsLinalgConv, OneAndThreeSpatialDims) {
  ConvSpec s1;
  s1.strides[2] = 2;
  s1.dil[2] = 2;
  s1.pb[2] = 1;
  s1.pe[2] = 2;
  s1.group = 2;
  expect_conv_matches_naive({2, 4, 17}, {6, 2, 3}, true, s1, 11);
  ConvSpec s3;
  s3.strides[1] = 2;
  s3.dil[2] = 2;
  s3.pb[0] = 1;
  s3.pb[2] = 1;
  s3.pe[1] = 1;
  s3.pe[2] = 1;
  expect_conv_matches_naive({1, 3, 5, 6, 7}, {4, 3, 2, 3, 2}, true, s3, 12);
  ConvSpec dw3;
  dw3.group = 3;
  dw3.pb[1] = dw3.pe[1] = 1;
  expect_conv_matches_naive({1, 3, 4, 5, 6}, {3, 1, 2, 3, 3}, false, dw3, 13);  // depthwise 3-D
}

TEST(OpsLinalgConv, CheckRefusesBadAttributes) {
  const auto x = info({1, 64, 8, 8}), w = info({32, 64, 3, 3});
  auto conv = [](Attributes a) { return make_node("Conv", {"x", "w"}, {"y"}, std::move(a)); };
  EXPECT_NO_THROW(check(conv({}), {x, w}));
  EXPECT_THROW(check(conv(attrs({{"group", int64_t{3}}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"group", int64_t{0}}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"group", int64_t{2}}})), {x, w}), dc::UserError);  // W dim 1
  EXPECT_THROW(check(conv(attrs({{"strides", Ints{0, 1}}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"strides", Ints{1}}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"pads", Ints{1, 1}}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"pads", Ints{-1, 0, 0, 0}}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"dilations", Ints{1, 0}}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"kernel_shape", Ints{5, 5}}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"auto_pad", std::string("SAME")}})), {x, w}), dc::UserError);
  EXPECT_THROW(check(conv(attrs({{"dilations", Ints{5, 5}}})), {x, w}), dc::UserError);  // > input
  EXPECT_THROW(check(conv({}), {x, info({32, 64, 3})}), dc::UserError);                  // rank
  EXPECT_THROW(check(conv({}), {x, w, info({31})}), dc::UserError);                      // bias
  EXPECT_THROW(check(conv({}), {info({1, 64, 8, 8}, DType::f16), w}), dc::UserError);
  EXPECT_THROW(check(conv({}), {info({1, 64, 2, 2, 2, 2}), info({32, 64, 1, 1, 1, 1})}),
               dc::UserError);  // 4 spatial dims
  try {
    check(conv(attrs({{"group", int64_t{3}}})), {x, w});
    FAIL() << "no error";
  } catch (const dc::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("group 3 does not divide input channels 64"),
              std::string::npos)
        << e.what();
  }
  // The kernel refuses the same thing when run without the check.
  EXPECT_THROW(run1(conv(attrs({{"group", int64_t{3}}})),
                    {random_tensor({1, 6, 3, 3}, 1), random_tensor({2, 6, 1, 1}, 2)}),
               dc::UserError);
}

// ---------------------------------------------------------------------------------------
// Gemm

TEST(OpsLinalgGemm, BiasBroadcastForms) {
  // A B = [[22,28],[49,64]]; Y = 2 A B + 0.5 C.
  const Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  const Node n = make_node("Gemm", {"a", "b", "c"}, {"y"}, attrs({{"alpha", 2.f}, {"beta", 0.5f}}));
  expect_tensor_near(run1(n, {a, b, Tensor::scalar(10.f)}), f32({2, 2}, {49, 61, 103, 133}));
  expect_tensor_near(run1(n, {a, b, f32({2}, {10, 20})}), f32({2, 2}, {49, 66, 103, 138}));
  expect_tensor_near(run1(n, {a, b, f32({1, 2}, {10, 20})}), f32({2, 2}, {49, 66, 103, 138}));
  expect_tensor_near(run1(n, {a, b, f32({2, 1}, {10, 20})}), f32({2, 2}, {49, 61, 108, 138}));
  expect_tensor_near(run1(n, {a, b, f32({2, 2}, {1, 2, 3, 4})}),
                     f32({2, 2}, {44.5f, 57, 99.5f, 130}));
  const Node no_c = make_node("Gemm", {"a", "b"}, {"y"});
  expect_tensor_near(run1(no_c, {a, b}), f32({2, 2}, {22, 28, 49, 64}));
}

TEST(OpsLinalgGemm, Transposes) {
  const Tensor at = f32({3, 2}, {1, 4, 2, 5, 3, 6}), bt = f32({2, 3}, {1, 3, 5, 2, 4, 6});
  const Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6}), b = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor want = f32({2, 2}, {22, 28, 49, 64});
  auto gemm = [](int64_t ta, int64_t tb) {
    return make_node("Gemm", {"a", "b"}, {"y"}, attrs({{"transA", ta}, {"transB", tb}}));
  };
  expect_tensor_near(run1(gemm(1, 0), {at, b}), want);
  expect_tensor_near(run1(gemm(0, 1), {a, bt}), want);
  expect_tensor_near(run1(gemm(1, 1), {at, bt}), want);
}

TEST(OpsLinalgGemm, LargeMatchesNaive) {
  const int64_t m = 70, n = 90, k = 300;
  const Tensor a = random_tensor({m, k}, 21), b = random_tensor({n, k}, 22),
               c = random_tensor({n}, 23);
  const Node g = make_node("Gemm", {"a", "b", "c"}, {"y"},
                           attrs({{"transB", int64_t{1}}, {"alpha", 0.25f}, {"beta", -2.f}}));
  const Tensor y = run1(g, {a, b, c});
  Tensor want(DType::f32, {m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        acc += static_cast<double>(a.data<float>()[i * k + kk]) * b.data<float>()[j * k + kk];
      want.mutable_data<float>()[i * n + j] =
          static_cast<float>(0.25 * acc - 2.0 * c.data<float>()[j]);
    }
  expect_tensor_near(y, want, 1e-4f, 1e-5f);
}

TEST(OpsLinalgGemm, CheckRefusesBadShapes) {
  const Node g = make_node("Gemm", {"a", "b", "c"}, {"y"});
  EXPECT_NO_THROW(check(g, {info({2, 3}), info({3, 4}), info({4})}));
  EXPECT_NO_THROW(check(g, {info({2, 3}), info({3, 4}), std::nullopt}));
  EXPECT_THROW(check(g, {info({1, 2, 3}), info({3, 4}), std::nullopt}), dc::UserError);
  EXPECT_THROW(check(g, {info({2, 3}), info({4, 4}), std::nullopt}), dc::UserError);
  EXPECT_THROW(check(g, {info({2, 3}), info({3, 4}), info({3})}), dc::UserError);
  EXPECT_THROW(check(g, {info({2, 3}), info({3, 4}), info({4, 4})}), dc::UserError);
  EXPECT_THROW(check(g, {info({2, 3}), info({3, 4}), info({1, 1, 4})}), dc::UserError);
  EXPECT_THROW(check(g, {info({2, 3}, DType::i64), info({3, 4}), std::nullopt}), dc::UserError);
  EXPECT_THROW(check(make_node("Gemm", {"a", "b"}, {"y"}, attrs({{"transA", int64_t{2}}})),
                     {info({2, 3}), info({3, 4})}),
               dc::UserError);
  EXPECT_THROW(
      run1(g, {f32({2, 3}, std::vector<float>(6)), f32({2, 3}, std::vector<float>(6)), Tensor()}),
      dc::UserError);
}

// ---------------------------------------------------------------------------------------
// MatMul

Tensor naive_batched_matmul(const Tensor& a, const Tensor& b) {
  // a: B1 x B2 x M x K (broadcast), b: B2 x K x N; only for the test below.
  const int64_t b1 = a.dim(0), b2 = b.dim(0), m = a.dim(2), k = a.dim(3), n = b.dim(2);
  Tensor y(DType::f32, {b1, b2, m, n});
  for (int64_t i1 = 0; i1 < b1; ++i1)
    for (int64_t i2 = 0; i2 < b2; ++i2)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t kk = 0; kk < k; ++kk)
            acc += static_cast<double>(
                       a.data<float>()[((i1 * a.dim(1) + (a.dim(1) == 1 ? 0 : i2)) * m + i) * k +
                                       kk]) *
                   b.data<float>()[(i2 * k + kk) * n + j];
          y.mutable_data<float>()[((i1 * b2 + i2) * m + i) * n + j] = static_cast<float>(acc);
        }
  return y;
}

TEST(OpsLinalgMatMul, VectorPromotion) {
  const Node n = make_node("MatMul", {"a", "b"}, {"y"});
  const Tensor v = f32({3}, {1, 2, 3}), m = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  expect_tensor_near(run1(n, {v, f32({3}, {4, 5, 6})}), Tensor::scalar(32.f));
  expect_tensor_near(run1(n, {v, m}), f32({2}, {22, 28}));
  expect_tensor_near(run1(n, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3}, {1, 1, 1})}),
                     f32({2}, {6, 15}));
  // 1-D times a batch of matrices: [3] x [2,3,2] -> [2,2].
  expect_tensor_near(run1(n, {v, f32({2, 3, 2}, {1, 2, 3, 4, 5, 6, 1, 0, 0, 1, 0, 0})}),
                     f32({2, 2}, {22, 28, 1, 2}));
}

TEST(OpsLinalgMatMul, BatchedWithBroadcasting) {
  const Node n = make_node("MatMul", {"a", "b"}, {"y"});
  const Tensor a = random_tensor({2, 1, 5, 7}, 31), b = random_tensor({3, 7, 4}, 32);
  const Tensor y = run1(n, {a, b});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5, 4}));
  expect_tensor_near(y, naive_batched_matmul(a, b));
  // Shared weights: [2,3,5,7] x [7,4] is one tall GEMM; compare with per-batch [1,5,7] x [7,4].
  const Tensor a2 = random_tensor({2, 3, 5, 7}, 33), w = random_tensor({7, 4}, 34);
  const Tensor y2 = run1(n, {a2, w});
  EXPECT_EQ(y2.shape(), (Shape{2, 3, 5, 4}));
  expect_tensor_near(y2, naive_batched_matmul(a2.reshaped({6, 1, 5, 7}), w.reshaped({1, 7, 4}))
                             .reshaped({2, 3, 5, 4}));
  // ONNX's test_matmul_4d shapes: [1,2,3,4] x [1,2,4,3].
  const Tensor a3 = random_tensor({1, 2, 3, 4}, 35), b3 = random_tensor({1, 2, 4, 3}, 36);
  expect_tensor_near(run1(n, {a3, b3}), naive_batched_matmul(a3, b3.reshaped({2, 4, 3})));
}

TEST(OpsLinalgMatMul, ManyHeadsInParallel) {
  // Attention-like: [12, 16, 8] x [12, 8, 16], each head separately by the naive loop.
  const Node n = make_node("MatMul", {"a", "b"}, {"y"});
  const Tensor a = random_tensor({12, 16, 8}, 41), b = random_tensor({12, 8, 16}, 42);
  expect_tensor_near(run1(n, {a, b}),
                     naive_batched_matmul(a.reshaped({1, 12, 16, 8}), b).reshaped({12, 16, 16}));
}

TEST(OpsLinalgMatMul, Integers) {
  const Node n = make_node("MatMul", {"a", "b"}, {"y"});
  const Tensor a = Tensor::from_vector<int64_t>({2, 2}, {1, 2, 3, 4});
  const Tensor b = Tensor::from_vector<int64_t>({2, 2}, {5, 6, 7, -8});
  expect_tensor_near(run1(n, {a, b}), Tensor::from_vector<int64_t>({2, 2}, {19, -10, 43, -14}));
  const Tensor a32 = Tensor::from_vector<int32_t>({1, 3}, {1, 2, 3});
  const Tensor b32 = Tensor::from_vector<int32_t>({3, 1}, {4, 5, 6});
  expect_tensor_near(run1(n, {a32, b32}), Tensor::from_vector<int32_t>({1, 1}, {32}));
}

TEST(OpsLinalgMatMul, CheckRefusesMismatches) {
  const Node n = make_node("MatMul", {"a", "b"}, {"y"});
  EXPECT_NO_THROW(check(n, {info({2, 1, 5, 7}), info({3, 7, 4})}));
  EXPECT_THROW(check(n, {info({2, 3}), info({4, 5})}), dc::UserError);
  EXPECT_THROW(check(n, {info({2, 3, 4}), info({3, 4, 5})}), dc::UserError);  // batch 2 vs 3
  EXPECT_THROW(check(n, {info({2, 3}), info({3, 4}, DType::i64)}), dc::UserError);
  EXPECT_THROW(check(n, {info({2, 3}, DType::boolean), info({3, 4}, DType::boolean)}),
               dc::UserError);
  EXPECT_THROW(run1(n, {random_tensor({2, 3}, 1), random_tensor({4, 5}, 2)}), dc::UserError);
}

}  // namespace
