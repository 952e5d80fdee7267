// A Conv whose X the kernel computes as it gathers it (docs/candidates.md rule 3, "Conv X
// cones"): a training step's forward BatchNorm-apply + ReLU, relu((x - mean) * invstd * scale
// + bias), before a padded Conv. A padded tap must read 0, not f(0): the bias is chosen so
// that f(0) > 0 in every channel, so a kernel evaluating the cone at padded taps differs from
// the CPU reference on every border pixel. conv_implicit_gemm (group 1, grouped, strided and
// dilated) and the depthwise template, on the host emulator against the CPU reference.
#include <gtest/gtest.h>

#include <algorithm>

#include "codegen_testing.h"

namespace dc {
namespace {

using testing::check_all;
using testing::conv_attrs;
using testing::fp32_variants;
using testing::ModelBuilder;
using testing::pick;
using testing::random_tensor;
using testing::RunOptions;

// relu(BN(x)) -> Conv(w, attrs) -> y of shape `out`; mean, invstd, scale and bias are step
// tensors (graph inputs), not constants, as in a training step.
Workload batch_norm_relu_conv(const Shape& x, const Shape& w, const Shape& out, Attributes a,
                              ClusterKind kind) {
  const Shape per_channel = {1, x[1], 1, 1};
  ModelBuilder m;
  m.input("x", x).input("mean", per_channel).input("invstd", per_channel);
  m.input("scale", per_channel).input("bias", per_channel).weight("w", w);
  m.node("Sub", {"x", "mean"}, "xc", x);
  m.node("Mul", {"xc", "invstd"}, "xh", x);
  m.node("Mul", {"xh", "scale"}, "xs", x);
  m.node("Add", {"xs", "bias"}, "bn", x);
  m.node("Relu", {"bn"}, "r", x);
  m.node("Conv", {"r", "w"}, "y", out, std::move(a));
  return m.workload(kind);
}

// bias in [2, 3): with mean, invstd, scale in [-1, 1) (random_tensor), f(0) = relu(bias -
// mean * invstd * scale) >= 1 in every channel.
RunOptions positive_bias(int64_t channels) {
  Tensor b = random_tensor({1, channels, 1, 1}, 41);
  float* p = b.mutable_data<float>();
  for (int64_t i = 0; i < b.numel(); ++i) p[i] = 2.5f + 0.5f * p[i];
  RunOptions opt;
  opt.inputs["bias"] = b;
  return opt;
}

// The first variant of the space and of each template in it, double buffering and split-K
// where the space has them, and the last variant.
std::vector<Variant> picks(const Workload& w) {
  const auto all = fp32_variants(w);
  EXPECT_FALSE(all.empty());
  auto has = [](const Variant& v, const char* p) { return v.params.count(p) > 0; };
  auto out = pick(all, {[](const Variant&) { return true; },
                        [](const Variant& v) { return v.template_name == "conv_implicit_gemm"; },
                        [](const Variant& v) { return v.template_name == "depthwise_direct"; },
                        [&](const Variant& v) { return has(v, "stages") && v.param("stages") == 2; },
                        [&](const Variant& v) { return has(v, "split_k") && v.param("split_k") > 1; }});
  if (!all.empty() && out.back().key() != all.back().key()) out.push_back(all.back());
  return out;
}

TEST(CodegenConvComputedInput, PaddedTapsReadZeroNotTheConeAtZero) {
  // 3x3, pads 1, batch 2: [2,4,6,7] -> [2,6,6,7].
  const Workload w = batch_norm_relu_conv({2, 4, 6, 7}, {6, 4, 3, 3}, {2, 6, 6, 7},
                                          conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}),
                                          ClusterKind::conv);
  check_all(w, picks(w), positive_bias(4));
}

TEST(CodegenConvComputedInput, StridedDilatedAsymmetricPads) {
  // Stride 2, dilation 2, pads (top 1, left 2, bottom 0, right 1): OH = (13 + 1 - 5) / 2 + 1
  // = 5, OW = (12 + 3 - 5) / 2 + 1 = 6.
  const Workload w = batch_norm_relu_conv({2, 3, 13, 12}, {5, 3, 3, 3}, {2, 5, 5, 6},
                                          conv_attrs({3, 3}, {2, 2}, {1, 2, 0, 1}, {2, 2}),
                                          ClusterKind::conv);
  check_all(w, picks(w), positive_bias(3));
}

TEST(CodegenConvComputedInput, GroupedAndDepthwise) {
  {  // 2 groups of 3 channels, pads 1: conv_implicit_gemm, batch = groups.
    const Workload w = batch_norm_relu_conv({1, 6, 7, 7}, {4, 3, 3, 3}, {1, 4, 7, 7},
                                            conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2),
                                            ClusterKind::depthwise);
    check_all(w, picks(w), positive_bias(6));
  }
  {  // depthwise, 8 channels, pads 1: the depthwise template's staged tile.
    const Workload w = batch_norm_relu_conv({1, 8, 9, 9}, {8, 1, 3, 3}, {1, 8, 9, 9},
                                            conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 8),
                                            ClusterKind::depthwise);
    const auto vs = picks(w);
    EXPECT_TRUE(std::any_of(vs.begin(), vs.end(),
                            [](const Variant& v) { return v.template_name == "depthwise_direct"; }));
    check_all(w, vs, positive_bias(8));
  }
}

}  // namespace
}  // namespace dc
