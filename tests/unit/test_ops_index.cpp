// Reference kernels of DepthToSpace (DCR, CRD), SpaceToDepth and Trilu on hand-computed
// examples (the ONNX spec's), and their import-time refusals.
#include <cmath>

#include "ir/error.h"
#include "ref/executor.h"
#include "ref/kernel.h"
#include "testing.h"

namespace dc {
namespace {

using testing::make_node;

Tensor run(const std::string& op, const std::vector<Tensor>& in, Attributes a) {
  std::vector<std::string> names;
  for (size_t i = 0; i < in.size(); ++i) names.push_back("in" + std::to_string(i));
  return ref::run_node(make_node(op, names, {"out"}, std::move(a)), in).at(0);
}

Attributes block(int64_t b, const char* mode = nullptr) {
  Attributes a;
  a.set("blocksize", b);
  if (mode) a.set("mode", std::string(mode));
  return a;
}

std::vector<float> iota(int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<float>(i));
  return v;
}

TEST(OpsIndex, DepthToSpaceModes) {
  // x[0, c, 0, 0] = c for 4 channels, blocksize 2: one 2x2 output.
  const Tensor x = Tensor::from_vector<float>({1, 4, 1, 1}, iota(4));
  // DCR: y[i, j] = x[(i * 2 + j) * 1]; CRD: y[i, j] = x[i * 2 + j]: equal with one output channel.
  EXPECT_EQ(run("DepthToSpace", {x}, block(2)).to_float_vector(), (std::vector<float>{0, 1, 2, 3}));
  // 8 channels: two output channels. DCR puts channel c of block (i, j) at (i*2+j)*2 + c.
  const Tensor x8 = Tensor::from_vector<float>({1, 8, 1, 1}, iota(8));
  EXPECT_EQ(run("DepthToSpace", {x8}, block(2)).to_float_vector(),
            (std::vector<float>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(run("DepthToSpace", {x8}, block(2, "CRD")).to_float_vector(), iota(8));
  EXPECT_EQ(run("DepthToSpace", {x8}, block(2)).shape(), (Shape{1, 2, 2, 2}));
  EXPECT_THROW(run("DepthToSpace", {x8}, block(2, "XYZ")), UserError);
  EXPECT_THROW(run("DepthToSpace", {Tensor::from_vector<float>({1, 3, 1, 1}, iota(3))}, block(2)), UserError);
}

TEST(OpsIndex, SpaceToDepth) {
  // One channel 2x4, blocksize 2: output channel (i*2+j) holds x[i, 2w + j].
  const Tensor x = Tensor::from_vector<float>({1, 1, 2, 4}, iota(8));
  const Tensor y = run("SpaceToDepth", {x}, block(2));
  EXPECT_EQ(y.shape(), (Shape{1, 4, 1, 2}));
  EXPECT_EQ(y.to_float_vector(), (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_THROW(run("SpaceToDepth", {Tensor::from_vector<float>({1, 1, 3, 4}, iota(12))}, block(2)), UserError);
}

TEST(OpsIndex, Trilu) {
  const Tensor x = Tensor::from_vector<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Attributes lower;
  lower.set("upper", int64_t{0});
  EXPECT_EQ(run("Trilu", {x}, {}).to_float_vector(), (std::vector<float>{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  EXPECT_EQ(run("Trilu", {x}, lower).to_float_vector(), (std::vector<float>{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(run("Trilu", {x, Tensor::scalar<int64_t>(1)}, {}).to_float_vector(),
            (std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_EQ(run("Trilu", {x, Tensor::scalar<int64_t>(-1)}, lower).to_float_vector(),
            (std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  EXPECT_THROW(run("Trilu", {Tensor::from_vector<float>({3}, {1, 2, 3})}, {}), UserError);
}

TEST(OpsIndex, GatherElements) {
  // The spec's examples: axis 1 and axis 0, with a negative index.
  const Tensor d = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Attributes a1;
  a1.set("axis", int64_t{1});
  EXPECT_EQ(run("GatherElements", {d, Tensor::from_vector<int64_t>({2, 2}, {0, 0, 1, 0})}, a1).to_float_vector(),
            (std::vector<float>{1, 1, 4, 3}));
  const Tensor d3 = Tensor::from_vector<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(run("GatherElements", {d3, Tensor::from_vector<int64_t>({2, 3}, {-1, -2, 0, -2, 0, 0})}, {}).to_float_vector(),
            (std::vector<float>{7, 5, 3, 4, 2, 3}));
  EXPECT_THROW(run("GatherElements", {d, Tensor::from_vector<int64_t>({2, 2}, {0, 2, 0, 0})}, a1), UserError);
  EXPECT_THROW(run("GatherElements", {d, Tensor::from_vector<int64_t>({4}, {0, 0, 0, 0})}, {}), UserError);
}

TEST(OpsIndex, ArgMaxArgMin) {
  // Ties: the first index, or the last with select_last_index.
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1, 5, 5, 7, 2, 7});
  Attributes a1;
  a1.set("axis", int64_t{1});
  const Tensor am = run("ArgMax", {x}, a1);
  EXPECT_EQ(am.shape(), (Shape{2, 1}));
  EXPECT_EQ(am.to_int64_vector(), (std::vector<int64_t>{1, 0}));
  a1.set("select_last_index", int64_t{1});
  a1.set("keepdims", int64_t{0});
  const Tensor last = run("ArgMax", {x}, a1);
  EXPECT_EQ(last.shape(), (Shape{2}));
  EXPECT_EQ(last.to_int64_vector(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(run("ArgMin", {x}, {}).to_int64_vector(), (std::vector<int64_t>{0, 1, 0}));  // axis 0
  EXPECT_THROW(run("ArgMax", {Tensor::from_vector<bool>({2}, {true, false})}, {}), UserError);
}

TEST(OpsIndex, CumSum) {
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor ax1 = Tensor::scalar<int64_t>(1), ax0 = Tensor::scalar<int64_t>(0);
  EXPECT_EQ(run("CumSum", {x, ax1}, {}).to_float_vector(), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(run("CumSum", {x, ax0}, {}).to_float_vector(), (std::vector<float>{1, 2, 3, 5, 7, 9}));
  Attributes ex, rev, both;
  ex.set("exclusive", int64_t{1});
  rev.set("reverse", int64_t{1});
  both.set("exclusive", int64_t{1});
  both.set("reverse", int64_t{1});
  EXPECT_EQ(run("CumSum", {x, ax1}, ex).to_float_vector(), (std::vector<float>{0, 1, 3, 0, 4, 9}));
  EXPECT_EQ(run("CumSum", {x, ax1}, rev).to_float_vector(), (std::vector<float>{6, 5, 3, 15, 11, 6}));
  EXPECT_EQ(run("CumSum", {x, ax1}, both).to_float_vector(), (std::vector<float>{5, 3, 0, 11, 6, 0}));
  EXPECT_THROW(run("CumSum", {x, Tensor::from_vector<int64_t>({2}, {0, 1})}, {}), UserError);
}

Attributes ints_attrs(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

TEST(OpsIndex, GatherNDSpecExamples) {
  // The ONNX spec's examples 1, 3 and 5 (batch_dims = 1); a negative index wraps.
  const Tensor d2 = Tensor::from_vector<float>({2, 2}, {0, 1, 2, 3});
  const Tensor y1 = run("GatherND", {d2, Tensor::from_vector<int64_t>({2, 2}, {0, 0, 1, 1})}, {});
  EXPECT_EQ(y1.to_float_vector(), (std::vector<float>{0, 3}));
  const Tensor d3 = Tensor::from_vector<float>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  const Tensor y3 = run("GatherND", {d3, Tensor::from_vector<int64_t>({2, 2}, {0, 1, 1, 0})}, {});
  EXPECT_EQ(y3.shape(), (Shape{2, 2}));
  EXPECT_EQ(y3.to_float_vector(), (std::vector<float>{2, 3, 4, 5}));
  const Tensor y5 = run("GatherND", {d3, Tensor::from_vector<int64_t>({2, 1}, {1, 0})}, ints_attrs({{"batch_dims", 1}}));
  EXPECT_EQ(y5.shape(), (Shape{2, 2}));
  EXPECT_EQ(y5.to_float_vector(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(run("GatherND", {d2, Tensor::from_vector<int64_t>({1, 2}, {-1, -2})}, {}).to_float_vector(),
            (std::vector<float>{2}));
  EXPECT_THROW(run("GatherND", {d2, Tensor::from_vector<int64_t>({1, 2}, {2, 0})}, {}), UserError);
}

TEST(OpsIndex, ScatterND) {
  const Tensor d = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
  const Tensor idx = Tensor::from_vector<int64_t>({3, 1}, {3, -3, 3});  // 3 twice; -3 is 1
  const Tensor up = Tensor::from_vector<float>({3}, {10, 20, 30});
  Attributes add, mul, mx;
  add.set("reduction", std::string("add"));
  mul.set("reduction", std::string("mul"));
  mx.set("reduction", std::string("max"));
  EXPECT_EQ(run("ScatterND", {d, idx, up}, {}).to_float_vector(), (std::vector<float>{1, 20, 3, 30}));  // last wins
  EXPECT_EQ(run("ScatterND", {d, idx, up}, add).to_float_vector(), (std::vector<float>{1, 22, 3, 44}));
  EXPECT_EQ(run("ScatterND", {d, idx, up}, mul).to_float_vector(), (std::vector<float>{1, 40, 3, 1200}));
  EXPECT_EQ(run("ScatterND", {d, idx, Tensor::from_vector<float>({3}, {0, 1, 9})}, mx).to_float_vector(),
            (std::vector<float>{1, 2, 3, 9}));
  // Slices: indices [1, 1] into a [2, 3] tensor replace row 1.
  const Tensor rows = run("ScatterND", {Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}),
                                        Tensor::from_vector<int64_t>({1, 1}, {1}),
                                        Tensor::from_vector<float>({1, 3}, {7, 8, 9})}, {});
  EXPECT_EQ(rows.to_float_vector(), (std::vector<float>{1, 2, 3, 7, 8, 9}));
  EXPECT_THROW(run("ScatterND", {d, Tensor::from_vector<int64_t>({1, 1}, {4}), Tensor::from_vector<float>({1}, {0})}, {}), UserError);
}

TEST(OpsIndex, ScatterElements) {
  // The spec's example 2 (axis 1), a duplicate with add, a negative index.
  const Tensor d = Tensor::from_vector<float>({1, 5}, {1, 2, 3, 4, 5});
  const Tensor idx = Tensor::from_vector<int64_t>({1, 2}, {1, 3});
  const Tensor up = Tensor::from_vector<float>({1, 2}, {1.1f, 2.1f});
  Attributes ax1 = ints_attrs({{"axis", 1}});
  EXPECT_EQ(run("ScatterElements", {d, idx, up}, ax1).to_float_vector(), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
  ax1.set("reduction", std::string("add"));
  EXPECT_EQ(run("ScatterElements", {d, Tensor::from_vector<int64_t>({1, 2}, {-1, 4}), up}, ax1).to_float_vector(),
            (std::vector<float>{1, 2, 3, 4, 5 + 1.1f + 2.1f}));
  // axis 0 on [3, 2]: indices [[1, 0], [2, 1]].
  const Tensor y = run("ScatterElements", {Tensor::from_vector<float>({3, 2}, {0, 0, 0, 0, 0, 0}),
                                           Tensor::from_vector<int64_t>({2, 2}, {1, 0, 2, 1}),
                                           Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4})}, {});
  EXPECT_EQ(y.to_float_vector(), (std::vector<float>{0, 2, 1, 4, 3, 0}));
  EXPECT_THROW(run("ScatterElements", {d, Tensor::from_vector<int64_t>({1, 2}, {5, 0}), up}, ints_attrs({{"axis", 1}})), UserError);
}

TEST(OpsIndex, OneHot) {
  // indices [1, -1, 5, 0] with depth 3 on axis -1: -1 wraps to 2, 5 is out of range (all off).
  const Tensor idx = Tensor::from_vector<int64_t>({4}, {1, -1, 5, 0});
  const Tensor vals = Tensor::from_vector<float>({2}, {-2, 7});
  const Tensor y = run("OneHot", {idx, Tensor::scalar<int64_t>(3), vals}, {});
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(y.to_float_vector(), (std::vector<float>{-2, 7, -2, -2, -2, 7, -2, -2, -2, 7, -2, -2}));
  const Tensor y0 = run("OneHot", {idx, Tensor::scalar<float>(3.f), vals}, ints_attrs({{"axis", 0}}));
  EXPECT_EQ(y0.shape(), (Shape{3, 4}));
  EXPECT_EQ(y0.to_float_vector(), (std::vector<float>{-2, -2, -2, 7, 7, -2, -2, -2, -2, 7, -2, -2}));
}

TEST(OpsIndex, TopK) {
  // Ties keep the lower index first; NaN is the largest value.
  const Tensor x = Tensor::from_vector<float>({2, 4}, {1, 5, 5, 2, 3, std::nanf(""), -1, 3});
  const auto out = ref::run_node(testing::make_node("TopK", {"x", "k"}, {"v", "i"}, {}),
                                 {x, Tensor::from_vector<int64_t>({1}, {3})});
  EXPECT_EQ(out.at(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(out.at(1).to_int64_vector(), (std::vector<int64_t>{1, 2, 3, 1, 0, 3}));
  EXPECT_EQ(out.at(0).to_float_vector()[0], 5.f);
  EXPECT_TRUE(std::isnan(out.at(0).to_float_vector()[3]));
  Attributes small = ints_attrs({{"largest", 0}, {"axis", 0}});
  const auto s = ref::run_node(testing::make_node("TopK", {"x", "k"}, {"v", "i"}, small),
                               {x, Tensor::from_vector<int64_t>({1}, {1})});
  EXPECT_EQ(s.at(1).to_int64_vector(), (std::vector<int64_t>{0, 0, 1, 0}));  // NaN is not smallest
  EXPECT_THROW(ref::run_node(testing::make_node("TopK", {"x", "k"}, {"v", "i"}, {}),
                             {x, Tensor::from_vector<int64_t>({1}, {5})}), UserError);
}

}  // namespace
}  // namespace dc
