// The depthwise_direct template (codegen/template_depthwise.cpp): one input channel per
// group, an input tile with halo in shared memory; odd sizes, stride, dilation, asymmetric
// pads and channel multipliers, with fused bias and activations, on the host emulator against
// the CPU reference (codegen_testing.h's check_variant, which also compiles with NVRTC).
#include <gtest/gtest.h>

#include <cmath>

#include "codegen_testing.h"
#include "ir/error.h"

namespace dc {
namespace {

using testing::check_all;
using testing::conv_attrs;
using testing::fp32_variants;
using testing::ModelBuilder;
using testing::pick;
using testing::random_tensor;
using testing::RunOptions;

// ---- depthwise_direct ----------------------------------------------------------------------

Variant dw_variant(int64_t th, int64_t tw, int64_t bc, int64_t ppt) {
  Variant v;
  v.template_name = "depthwise_direct";
  v.params = {{"tile_h", th}, {"tile_w", tw}, {"block_c", bc}, {"pixels_per_thread", ppt}};
  return v;
}

std::vector<Variant> dw_picks(const Workload& w) {
  auto all = fp32_variants(w);
  EXPECT_FALSE(all.empty());
  return pick(all, {[](const Variant& v) { return v.param("pixels_per_thread") == 1; },
                    [](const Variant& v) { return v.param("pixels_per_thread") == 2 && v.param("tile_h") >= 4; },
                    [](const Variant& v) { return v.param("pixels_per_thread") == 4 && v.param("block_c") >= 2; }});
}

TEST(CodegenDepthwise, BiasReluOddSizes) {
  ModelBuilder m;
  m.input("x", {2, 6, 11, 13}).weight("w", {6, 1, 3, 3}).weight("bias", {6});
  m.node("Conv", {"x", "w", "bias"}, "y", {2, 6, 11, 13}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 6));
  m.node("Relu", {"y"}, "r", {2, 6, 11, 13});
  const Workload w = m.workload(ClusterKind::depthwise);
  EXPECT_EQ(analyze_workload(w).family, Family::depthwise);
  auto vs = dw_picks(w);
  vs.push_back(dw_variant(2, 8, 4, 2));  // 4 channels per block: the last block is partial
  check_all(w, vs);
}

TEST(CodegenDepthwise, StrideDilationPadsMultiplier) {
  {
    // Stride 2, dilation 2, asymmetric pads, 5 channels: OH = (15+2+1-5)/2+1 = 7, OW = (12+0+2-5)/2+1 = 5.
    ModelBuilder m;
    m.input("x", {1, 5, 15, 12}).weight("w", {5, 1, 3, 3});
    m.node("Conv", {"x", "w"}, "y", {1, 5, 7, 5}, conv_attrs({3, 3}, {2, 2}, {2, 0, 1, 2}, {2, 2}, 5));
    const Workload w = m.workload(ClusterKind::depthwise);
    auto vs = dw_picks(w);
    vs.push_back(dw_variant(4, 4, 2, 4));
    check_all(w, vs);
  }
  {
    // Channel multiplier 2 (4 -> 8) with a 5x5 kernel, + bias + sigmoid.
    ModelBuilder m;
    m.input("x", {1, 4, 9, 9}).weight("w", {8, 1, 5, 5}).weight("bias", {8});
    m.node("Conv", {"x", "w", "bias"}, "y", {1, 8, 9, 9}, conv_attrs({5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 4));
    m.node("Sigmoid", {"y"}, "s", {1, 8, 9, 9});
    const Workload w = m.workload(ClusterKind::depthwise);
    auto vs = dw_picks(w);
    vs.push_back(dw_variant(2, 4, 3, 1));   // 3 output channels per block straddle inputs
    vs.push_back(dw_variant(1, 8, 5, 2));
    check_all(w, vs);
  }
}

TEST(CodegenDepthwise, RefusesWiderGroups) {
  ModelBuilder m;
  m.input("x", {1, 6, 7, 7}).weight("w", {4, 3, 3, 3});
  m.node("Conv", {"x", "w"}, "y", {1, 4, 7, 7}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2));
  const Workload w = m.workload(ClusterKind::depthwise);
  EXPECT_THROW(generate_kernel(w, dw_variant(2, 8, 4, 2)), InternalError);
}

}  // namespace
}  // namespace dc
