// The reference kernels of the convolution family's new ops: Pad (every mode, attribute and
// input forms, negative pads, opset 18 axes), Resize/Upsample (hand-computed nearest, linear
// and cubic cases, every coordinate transformation, refused forms) and ConvTranspose
// (ONNX's documented examples, and a random check against a direct scatter loop for 1-D to
// 3-D with groups, strides, pads, output_padding and dilations). Also the fuse_pad_conv pass.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/error.h"
#include "passes/fuse_pad_conv.h"
#include "passes/simplify.h"
#include "pass_testing.h"
#include "ref/conv_transpose.h"
#include "ref/executor.h"
#include "ref/kernel.h"
#include "testing.h"

namespace dc {
namespace {

using testing::expect_tensor_near;
using testing::make_node;
using testing::random_tensor;
using Ints = std::vector<int64_t>;

Tensor f32(Shape s, std::vector<float> v) { return Tensor::from_vector<float>(std::move(s), v); }
Tensor i64(Shape s, std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(std::move(s), v); }

Tensor iota(Shape s, float start = 0.f) {
  Tensor t(DType::f32, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = start + static_cast<float>(i);
  return t;
}

Attributes attrs(std::initializer_list<std::pair<const char*, AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

Tensor run(const char* op, std::vector<std::string> names, const ref::Inputs& in, Attributes a = {}) {
  return ref::run_node(make_node(op, std::move(names), {"y"}, std::move(a)), in).at(0);
}

// ---- Pad ---------------------------------------------------------------------------------

TEST(OpsPad, OnnxModesOnTheDocumentedExample) {
  const Tensor x = f32({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
  const Tensor pads = i64({4}, {0, 2, 0, 0});
  expect_tensor_near(run("Pad", {"x", "p"}, {x, pads}, attrs({{"mode", std::string("reflect")}})),
                     f32({3, 4}, {1.0f, 1.2f, 1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f, 4.5f, 5.7f}));
  expect_tensor_near(run("Pad", {"x", "p"}, {x, pads}, attrs({{"mode", std::string("edge")}})),
                     f32({3, 4}, {1.0f, 1.0f, 1.0f, 1.2f, 2.3f, 2.3f, 2.3f, 3.4f, 4.5f, 4.5f, 4.5f, 5.7f}));
  expect_tensor_near(run("Pad", {"x", "p"}, {x, pads}, attrs({{"mode", std::string("wrap")}})),
                     f32({3, 4}, {1.0f, 1.2f, 1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f, 4.5f, 5.7f}));
  const Tensor cpads = i64({4}, {0, 2, 0, 0});
  expect_tensor_near(run("Pad", {"x", "p", "v"}, {x, cpads, Tensor::scalar<float>(-1.f)}),
                     f32({3, 4}, {-1, -1, 1.0f, 1.2f, -1, -1, 2.3f, 3.4f, -1, -1, 4.5f, 5.7f}));
}

TEST(OpsPad, ReflectBeyondOneExtentNegativePadsAxesAndAttributes) {
  // Reflect of [0 1 2] by 5 on the left and 4 on the right: the triangle wave of numpy.
  const Tensor x = iota({3});
  expect_tensor_near(run("Pad", {"x", "p"}, {x, i64({2}, {5, 4})}, attrs({{"mode", std::string("reflect")}})),
                     f32({12}, {1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2}));
  // Negative pads crop: begin -1 on axis 1, end +1 zero padding on axis 0.
  const Tensor m = iota({2, 3});
  expect_tensor_near(run("Pad", {"x", "p"}, {m, i64({4}, {0, -1, 1, 0})}),
                     f32({3, 2}, {1, 2, 4, 5, 0, 0}));
  // Opset 18 axes (negative axis): only the last axis padded.
  expect_tensor_near(run("Pad", {"x", "p", "", "a"}, {m, i64({2}, {1, 1}), Tensor(), i64({1}, {-1})}),
                     f32({2, 5}, {0, 0, 1, 2, 0, 0, 3, 4, 5, 0}));
  // Opset 2 attributes, opset 1's 'paddings'.
  expect_tensor_near(run("Pad", {"x"}, {m}, attrs({{"pads", Ints{1, 0, 0, 0}}, {"value", 7.f}})),
                     f32({3, 3}, {7, 7, 7, 0, 1, 2, 3, 4, 5}));
  expect_tensor_near(run("Pad", {"x"}, {m}, attrs({{"paddings", Ints{0, 0, 0, 1}}, {"mode", std::string("edge")}})),
                     f32({2, 4}, {0, 1, 2, 2, 3, 4, 5, 5}));
  // Integer data keeps its dtype and an exact integer fill.
  const Tensor xi = i64({2}, {int64_t{1} << 40, 3});
  const Tensor yi = run("Pad", {"x", "p", "v"}, {xi, i64({2}, {1, 0}), i64({}, {(int64_t{1} << 53) + 1})});
  EXPECT_EQ(yi.to_int64_vector(), (Ints{(int64_t{1} << 53) + 1, int64_t{1} << 40, 3}));
}

TEST(OpsPad, RefusesMalformedPads) {
  const Tensor m = iota({2, 3});
  EXPECT_THROW(run("Pad", {"x", "p"}, {m, i64({3}, {1, 1, 1})}), UserError);  // odd count
  EXPECT_THROW(run("Pad", {"x", "p"}, {m, i64({4}, {0, -2, 0, -2})}), UserError);  // below zero
  EXPECT_THROW(run("Pad", {"x", "p"}, {m, i64({4}, {0, 1, 0, 1})}, attrs({{"mode", std::string("mirror")}})),
               UserError);
}

// ---- Resize / Upsample -------------------------------------------------------------------

Attributes resize_attrs(const char* mode, const char* coord, const char* nearest = "round_prefer_floor") {
  return attrs({{"mode", std::string(mode)},
                {"coordinate_transformation_mode", std::string(coord)},
                {"nearest_mode", std::string(nearest)}});
}

Tensor resize_scales(const Tensor& x, std::vector<float> scales, Attributes a) {
  return run("Resize", {"x", "", "s"}, {x, Tensor(), f32({static_cast<int64_t>(scales.size())}, scales)},
             std::move(a));
}

Tensor resize_sizes(const Tensor& x, Ints sizes, Attributes a) {
  return run("Resize", {"x", "", "", "z"},
             {x, Tensor(), Tensor(), i64({static_cast<int64_t>(sizes.size())}, sizes)}, std::move(a));
}

TEST(OpsResize, NearestModesAndCoordinateTransforms) {
  const Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  // ONNX's resize_upsample_scales_nearest: scales 2x3, half_pixel, round_prefer_floor.
  expect_tensor_near(resize_scales(x, {1, 1, 2, 3}, resize_attrs("nearest", "half_pixel")),
                     f32({1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                        3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
  // 1-D [0..3] to 8, asymmetric: x/2 = 0, .5, 1, 1.5, ... floor and ceil pick differently.
  const Tensor v = iota({4});
  expect_tensor_near(resize_sizes(v, {8}, resize_attrs("nearest", "asymmetric", "floor")),
                     f32({8}, {0, 0, 1, 1, 2, 2, 3, 3}));
  expect_tensor_near(resize_sizes(v, {8}, resize_attrs("nearest", "asymmetric", "ceil")),
                     f32({8}, {0, 1, 1, 2, 2, 3, 3, 3}));
  expect_tensor_near(resize_sizes(v, {8}, resize_attrs("nearest", "asymmetric", "round_prefer_ceil")),
                     f32({8}, {0, 1, 1, 2, 2, 3, 3, 3}));
  expect_tensor_near(resize_sizes(v, {8}, resize_attrs("nearest", "asymmetric", "round_prefer_floor")),
                     f32({8}, {0, 0, 1, 1, 2, 2, 3, 3}));
  // align_corners to 7: x * 3 / 6 = 0, .5, 1, ... round_prefer_ceil.
  expect_tensor_near(resize_sizes(v, {7}, resize_attrs("nearest", "align_corners", "round_prefer_ceil")),
                     f32({7}, {0, 1, 1, 2, 2, 3, 3}));
}

TEST(OpsResize, LinearAndCubic) {
  const Tensor v = iota({4});
  // Linear half_pixel upsample by 2: (x + .5) / 2 - .5 = -.25, .25, .75, ... edges clamp.
  expect_tensor_near(resize_scales(v, {2}, resize_attrs("linear", "half_pixel")),
                     f32({8}, {0, 0.25f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3}));
  // align_corners to 7: exact halves.
  expect_tensor_near(resize_sizes(v, {7}, resize_attrs("linear", "align_corners")),
                     f32({7}, {0, 0.5f, 1, 1.5f, 2, 2.5f, 3}));
  // Cubic reproduces a linear ramp away from the edges (its weights sum to 1 and are
  // symmetric): asymmetric x/2 on [0..7] at 2 -> 1, 3 -> 1.5, 5 -> 2.5.
  const Tensor r = resize_scales(iota({8}), {2}, resize_attrs("cubic", "asymmetric"));
  ASSERT_EQ(r.shape(), Shape{16});
  for (int i : {2, 3, 5, 7, 9}) EXPECT_NEAR(r.data<float>()[i], i / 2.f, 1e-5) << i;
  // A = -0.75 weights at ratio 0.5: -0.09375, 0.59375, 0.59375, -0.09375 on [1, 5, 2, 8].
  const Tensor c = resize_scales(f32({4}, {1, 5, 2, 8}), {2}, resize_attrs("cubic", "asymmetric"));
  EXPECT_NEAR(c.data<float>()[3], -0.09375f * 1 + 0.59375f * 5 + 0.59375f * 2 - 0.09375f * 8, 1e-5);
  // exclude_outside renormalises: at ratio .5 next to the left edge the tap at -1 drops.
  Attributes ex = resize_attrs("cubic", "asymmetric");
  ex.set("exclude_outside", int64_t{1});
  const Tensor e = resize_scales(f32({4}, {1, 5, 2, 8}), {2}, ex);
  EXPECT_NEAR(e.data<float>()[1], (0.59375f * 1 + 0.59375f * 5 - 0.09375f * 2) / (1 + 0.09375f), 1e-5);
}

TEST(OpsResize, CropAndResizeExtrapolatesAndUpsampleIsAsymmetricFloor) {
  Attributes a = resize_attrs("linear", "tf_crop_and_resize");
  a.set("extrapolation_value", 10.f);
  // roi [-0.5, 1.5] over [0..3] to 5 points: x = -1.5, 0, 1.5, 3, 4.5 -> 10, 0, 1.5, 3, 10.
  const Tensor y = run("Resize", {"x", "roi", "", "z"},
                       {iota({4}), f32({2}, {-0.5f, 1.5f}), Tensor(), i64({1}, {5})}, a);
  expect_tensor_near(y, f32({5}, {10, 0, 1.5f, 3, 10}));
  const Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  expect_tensor_near(run("Upsample", {"x", "s"}, {x, f32({4}, {1, 1, 2, 2})},
                         attrs({{"mode", std::string("nearest")}})),
                     f32({1, 1, 4, 4}, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
}

TEST(OpsResize, AxesAspectRatioAndRefusals) {
  const Tensor x = iota({1, 2, 4, 6});
  Attributes a = resize_attrs("nearest", "asymmetric");
  a.set("axes", Ints{2, 3});
  a.set("keep_aspect_ratio_policy", std::string("not_larger"));
  // sizes 8x8 of 4x6: scale min(2, 4/3) = 4/3 -> 5 (round(5.33)) x 8.
  const Tensor y = run("Resize", {"x", "", "", "z"}, {x, Tensor(), Tensor(), i64({2}, {8, 8})}, a);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 5, 8}));
  Attributes anti = resize_attrs("linear", "half_pixel");
  anti.set("antialias", int64_t{1});
  const std::string msg = testing::user_error_of([&] { resize_scales(x, {1, 1, 0.5f, 0.5f}, anti); });
  EXPECT_NE(msg.find("unsupported"), std::string::npos) << msg;
  EXPECT_THROW(resize_scales(x, {1, 1, 2, 2}, resize_attrs("area", "half_pixel")), UserError);
  EXPECT_THROW(run("Resize", {"x", "", "s", "z"}, {x, Tensor(), f32({4}, {1, 1, 2, 2}), i64({4}, {1, 2, 8, 12})},
                   resize_attrs("nearest", "half_pixel")),
               UserError);  // both scales and sizes
}

// ---- ConvTranspose ---------------------------------------------------------------------

TEST(OpsConvTranspose, OnnxExamples) {
  const Tensor x = iota({1, 1, 3, 3});
  Tensor w(DType::f32, {1, 2, 3, 3});
  std::fill_n(w.mutable_data<float>(), w.numel(), 1.f);
  // test_convtranspose_pads: strides 3x2, pads (1, 2, 1, 2) -> 7x3.
  const Tensor y = run("ConvTranspose", {"x", "w"}, {x, w},
                       attrs({{"strides", Ints{3, 2}}, {"pads", Ints{1, 2, 1, 2}}}));
  const std::vector<float> plane = {1, 1, 3, 1, 1, 3, 7, 4, 9, 7, 4, 9, 7, 4, 9, 13, 7, 15, 13, 7, 15};
  std::vector<float> both = plane;
  both.insert(both.end(), plane.begin(), plane.end());
  expect_tensor_near(y, f32({1, 2, 7, 3}, both));
  // output_shape 10x8 (negative end padding: a zero last row and column), and SAME_UPPER.
  const Tensor o = run("ConvTranspose", {"x", "w"}, {x, w},
                       attrs({{"strides", Ints{3, 2}}, {"output_shape", Ints{10, 8}}}));
  ASSERT_EQ(o.shape(), (Shape{1, 2, 10, 8}));
  EXPECT_EQ(o.data<float>()[0 * 8 + 4], 3.f);
  EXPECT_EQ(o.data<float>()[3 * 8 + 2], 7.f);
  EXPECT_EQ(o.data<float>()[9 * 8 + 3], 0.f);
  EXPECT_EQ(o.data<float>()[4 * 8 + 7], 0.f);
  const Tensor s = run("ConvTranspose", {"x", "w"}, {x, w},
                       attrs({{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}}));
  ASSERT_EQ(s.shape(), (Shape{1, 2, 6, 6}));
  const std::vector<float> row2 = {3, 3, 8, 5, 12, 7};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(s.data<float>()[2 * 6 + j], row2[static_cast<size_t>(j)]);
}

// A direct scatter, the definition: y[n][g*Mg+m][i*s - p + k*d] += x[n][g*Cg+c][i] * w[g*Cg+c][m][k].
Tensor scatter_reference(const Tensor& x, const Tensor& w, const Tensor* b, const Node& n) {
  const auto geo = ref::conv_transpose_geometry(n, x.shape(), w.shape(), b ? &b->shape() : nullptr);
  const ref::Window& win = geo.window;
  Shape ys{geo.batch, geo.filters};
  for (int64_t d : win.out_dims()) ys.push_back(d);
  Tensor y(DType::f32, ys);
  float* yp = y.mutable_data<float>();
  const int64_t cg = geo.channels / geo.group, mg = geo.filters / geo.group;
  const int64_t osz = win.out_size(), isz = win.in_size(), ksz = win.kernel_size();
  for (int64_t i = 0; i < y.numel(); ++i) yp[i] = b ? b->data<float>()[(i / osz) % geo.filters] : 0.f;
  for (int64_t img = 0; img < geo.batch; ++img)
    for (int64_t c = 0; c < geo.channels; ++c)
      for (int64_t m = 0; m < mg; ++m)
        for (int64_t ip = 0; ip < isz; ++ip)
          for (int64_t t = 0; t < ksz; ++t) {
            const int64_t i3[3] = {ip / (win.in[1] * win.in[2]), ip / win.in[2] % win.in[1], ip % win.in[2]};
            const int64_t k3[3] = {t / (win.kernel[1] * win.kernel[2]), t / win.kernel[2] % win.kernel[1],
                                   t % win.kernel[2]};
            int64_t op = 0;
            bool inside = true;
            for (int d = 0; d < 3; ++d) {
              const int64_t o = i3[d] * win.stride[d] - win.pad_begin[d] + k3[d] * win.dilation[d];
              inside = inside && o >= 0 && o < win.out[d];
              op = op * win.out[d] + o;
            }
            if (!inside) continue;
            const int64_t oc = c / cg * mg + m;
            yp[(img * geo.filters + oc) * osz + op] +=
                x.data<float>()[(img * geo.channels + c) * isz + ip] * w.data<float>()[(c * mg + m) * ksz + t];
          }
  return y;
}

TEST(OpsConvTranspose, RandomAgainstTheScatterDefinition) {
  struct Case {
    Shape x, w;
    Attributes a;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7}, {3, 5, 4}, attrs({{"strides", Ints{3}}, {"pads", Ints{2, 1}}})},
      {{2, 6, 5, 4}, {6, 2, 3, 3},
       attrs({{"strides", Ints{2, 3}}, {"pads", Ints{1, 0, 0, 2}}, {"output_padding", Ints{1, 2}},
              {"group", int64_t{3}}})},
      {{1, 4, 4, 5}, {4, 3, 3, 2}, attrs({{"dilations", Ints{2, 1}}, {"strides", Ints{1, 2}}})},
      {{1, 4, 3, 4, 3}, {4, 3, 2, 3, 2}, attrs({{"strides", Ints{2, 1, 2}}, {"pads", Ints{0, 1, 1, 0, 0, 1}}})},
      {{1, 2, 5, 5}, {2, 3, 3, 3}, attrs({{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}})},
  };
  uint32_t seed = 11;
  for (const auto& c : cases) {
    const Node n = make_node("ConvTranspose", {"x", "w", "b"}, {"y"}, c.a);
    const Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++);
    const Tensor b = random_tensor({c.w[1] * c.a.get_int("group", 1)}, seed++);
    const Tensor got = ref::run_node(n, {x, w, b}).at(0);
    expect_tensor_near(got, scatter_reference(x, w, &b, n), 1e-4f);
  }
}

TEST(OpsConvTranspose, RefusesMalformedAttributes) {
  const Tensor x = iota({1, 2, 3, 3}), w = iota({2, 1, 3, 3});
  EXPECT_THROW(run("ConvTranspose", {"x", "w"}, {x, w}, attrs({{"strides", Ints{2}}})), UserError);
  EXPECT_THROW(run("ConvTranspose", {"x", "w"}, {x, w}, attrs({{"pads", Ints{5, 5, 5, 5}}})), UserError);
  EXPECT_THROW(run("ConvTranspose", {"x", "w"}, {x, iota({3, 1, 3, 3})}), UserError);
  EXPECT_THROW(run("ConvTranspose", {"x", "w"}, {x, w}, attrs({{"output_padding", Ints{-1, 0}}})),
               UserError);
}

// ---- fuse_pad_conv -----------------------------------------------------------------------

TEST(PassFusePadConv, ZeroSpatialPadFoldsIntoConvPads) {
  Graph g;
  testing::add_input(g, "x", {1, 2, 5, 6});
  testing::add_initializer(g, "p", i64({8}, {0, 0, 1, 2, 0, 0, 0, 1}));
  testing::add_initializer(g, "w", random_tensor({3, 2, 3, 3}, 5));
  testing::add_node(g, "Pad", {"x", "p"}, {"xp"});
  testing::add_node(g, "Conv", {"xp", "w"}, {"y"}, attrs({{"pads", Ints{1, 0, 0, 1}}}));
  g.outputs = {"y"};
  g = testing::with_types(g);
  const Graph s = simplify(g);
  ASSERT_EQ(s.nodes.size(), 1u);
  EXPECT_EQ(s.nodes[0].attrs.get_ints("pads"), (Ints{2, 2, 0, 2}));
  testing::expect_same_outputs(g, s);
  // Reflect padding, or padding read by two nodes, stays.
  Graph r = g;
  r.nodes[0].attrs.set("mode", std::string("reflect"));
  EXPECT_EQ(fuse_pad_conv(r).nodes[1].input(0), "xp");
}

}  // namespace
}  // namespace dc
