// Reference kernels for shape and data-movement ops: hand-computed values (numpy for the
// permutations and slices), negative axes, every dtype byte-copied, and the errors.
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "ir/error.h"
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
Tensor i32(Shape s, const std::vector<int32_t>& v) { return Tensor::from_vector<int32_t>(std::move(s), v); }
Tensor i64(Shape s, const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(std::move(s), v); }
Tensor ints(const std::vector<int64_t>& v) { return i64({static_cast<int64_t>(v.size())}, v); }
Tensor bools(Shape s, const std::vector<bool>& v) { return Tensor::from_vector<bool>(std::move(s), v); }

// 0, 1, 2, ... as f32 of the given shape.
Tensor iota(Shape s) {
  std::vector<float> v(static_cast<size_t>(dc::shape_numel(s)));
  std::iota(v.begin(), v.end(), 0.f);
  return f32(std::move(s), v);
}

dc::Attributes attrs(std::initializer_list<std::pair<std::string, dc::AttrValue>> kv) {
  dc::Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

std::vector<Tensor> run_all(const std::string& op, const std::vector<Tensor>& in, size_t outputs,
                            dc::Attributes a = {}) {
  std::vector<std::string> names, outs;
  for (size_t i = 0; i < in.size(); ++i) names.push_back(in[i].defined() ? "in" + std::to_string(i) : "");
  for (size_t i = 0; i < outputs; ++i) outs.push_back("out" + std::to_string(i));
  return dc::ref::run_node(make_node(op, names, outs, std::move(a)), in);
}

Tensor run(const std::string& op, const std::vector<Tensor>& in, dc::Attributes a = {}) {
  return run_all(op, in, 1, std::move(a)).at(0);
}

void check(const std::string& op, const std::vector<dc::TensorInfo>& in, dc::Attributes a = {},
           size_t outputs = 1) {
  const dc::ref::OpDef* def = dc::ref::find_op(op);
  ASSERT_NE(def, nullptr) << op;
  ASSERT_NE(def->check, nullptr) << op;
  std::vector<std::string> names, outs;
  std::vector<const dc::TensorInfo*> ptrs;
  for (size_t i = 0; i < in.size(); ++i) {
    const bool here = in[i].dtype != DType::undefined;
    names.push_back(here ? "in" + std::to_string(i) : "");
    ptrs.push_back(here ? &in[i] : nullptr);
  }
  for (size_t i = 0; i < outputs; ++i) outs.push_back("out" + std::to_string(i));
  def->check(make_node(op, names, outs, std::move(a)), ptrs);
}

template <class Fn>
std::string user_error(Fn&& fn) {
  try {
    fn();
  } catch (const dc::UserError& e) {
    return e.what();
  }
  return "";
}

// ---- Reshape, Flatten, Squeeze, Unsqueeze -----------------------------------------------

TEST(OpsShape, ReshapeInferAndCopyDims) {
  const Tensor x = iota({2, 3, 4});
  Tensor y = run("Reshape", {x, ints({4, -1})});
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  expect_tensor_near(y, iota({4, 6}));
  EXPECT_EQ(run("Reshape", {x, ints({0, -1})}).shape(), (Shape{2, 12}));
  EXPECT_EQ(run("Reshape", {x, ints({0, 0, 2, 2})}).shape(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(run("Reshape", {x, ints({-1, 2, 1, 3})}).shape(), (Shape{4, 2, 1, 3}));  // negative_extended_dims
  EXPECT_EQ(run("Reshape", {x, ints({24})}).shape(), (Shape{24}));
  EXPECT_EQ(run("Reshape", {f32({1}, {5}), ints({})}).shape(), (Shape{}));  // to a scalar
  EXPECT_EQ(run("Reshape", {x, ints({4, 3, 2})}).raw(), x.raw());  // a view, no copy
}

TEST(OpsShape, ReshapeAllowZero) {
  // allowzero=1: 0 is a real zero-size dim (reshape_allowzero_reordered)
  const Tensor empty = f32({0, 3, 4}, {});
  EXPECT_EQ(run("Reshape", {empty, ints({3, 4, 0})}, attrs({{"allowzero", int64_t{1}}})).shape(),
            (Shape{3, 4, 0}));
  // allowzero=0: 0 copies the input dim
  EXPECT_EQ(run("Reshape", {iota({2, 3, 4}), ints({0, 4, 3})}).shape(), (Shape{2, 4, 3}));
  // zero-size dims with -1 cannot be inferred
  EXPECT_THROW(run("Reshape", {empty, ints({0, -1})}, attrs({{"allowzero", int64_t{1}}})), dc::UserError);
}

TEST(OpsShape, ReshapeErrors) {
  const Tensor x = iota({2, 3, 4});
  const std::string msg = user_error([&] { run("Reshape", {x, ints({5, -1})}); });
  EXPECT_NE(msg.find("2x3x4"), std::string::npos) << msg;
  EXPECT_THROW(run("Reshape", {x, ints({-1, -1})}), dc::UserError);
  EXPECT_THROW(run("Reshape", {x, ints({7, 2})}), dc::UserError);
  EXPECT_THROW(run("Reshape", {x, ints({-2, 12})}), dc::UserError);
  EXPECT_THROW(run("Reshape", {x, ints({1, 1, 1, 0})}), dc::UserError);  // copies dim 3 of a rank-3 input
  EXPECT_THROW(check("Reshape", {{DType::f32, {2}}, {DType::f32, {1}}}), dc::UserError);
  EXPECT_THROW(check("Reshape", {{DType::f32, {2}}, {DType::i64, {1}}}, attrs({{"allowzero", int64_t{2}}})),
               dc::UserError);
}

TEST(OpsShape, Flatten) {
  const Tensor x = iota({2, 3, 4, 5});
  EXPECT_EQ(run("Flatten", {x}).shape(), (Shape{2, 60}));  // default axis 1
  EXPECT_EQ(run("Flatten", {x}, attrs({{"axis", int64_t{0}}})).shape(), (Shape{1, 120}));
  EXPECT_EQ(run("Flatten", {x}, attrs({{"axis", int64_t{2}}})).shape(), (Shape{6, 20}));
  EXPECT_EQ(run("Flatten", {x}, attrs({{"axis", int64_t{4}}})).shape(), (Shape{120, 1}));
  EXPECT_EQ(run("Flatten", {x}, attrs({{"axis", int64_t{-1}}})).shape(), (Shape{24, 5}));
  EXPECT_EQ(run("Flatten", {x}, attrs({{"axis", int64_t{-4}}})).shape(), (Shape{1, 120}));
  expect_tensor_near(run("Flatten", {x}, attrs({{"axis", int64_t{3}}})), iota({24, 5}));
  EXPECT_THROW(check("Flatten", {{DType::f32, {2, 3}}}, attrs({{"axis", int64_t{3}}})), dc::UserError);
  EXPECT_THROW(check("Flatten", {{DType::f32, {2, 3}}}, attrs({{"axis", int64_t{-3}}})), dc::UserError);
}

TEST(OpsShape, Squeeze) {
  const Tensor x = iota({1, 3, 1, 2});
  EXPECT_EQ(run("Squeeze", {x}).shape(), (Shape{3, 2}));
  EXPECT_EQ(run("Squeeze", {x, ints({2})}).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run("Squeeze", {x, ints({-2, 0})}).shape(), (Shape{3, 2}));  // negative, unsorted
  EXPECT_EQ(run("Squeeze", {x}, attrs({{"axes", std::vector<int64_t>{0}}})).shape(), (Shape{3, 1, 2}));
  expect_tensor_near(run("Squeeze", {x}), iota({3, 2}));
  const std::string msg = user_error([&] { run("Squeeze", {x, ints({1})}); });
  EXPECT_NE(msg.find("extent 3"), std::string::npos) << msg;
  EXPECT_THROW(run("Squeeze", {x, ints({4})}), dc::UserError);
  EXPECT_THROW(run("Squeeze", {x, ints({0, -4})}), dc::UserError);  // same axis twice
  EXPECT_THROW(check("Squeeze", {{DType::f32, {1, 3}}}, attrs({{"axes", std::vector<int64_t>{1}}})),
               dc::UserError);
}

TEST(OpsShape, Unsqueeze) {
  const Tensor x = iota({3, 4});
  EXPECT_EQ(run("Unsqueeze", {x, ints({0})}).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(run("Unsqueeze", {x, ints({2})}).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(run("Unsqueeze", {x, ints({-1})}).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(run("Unsqueeze", {x, ints({1, 3})}).shape(), (Shape{3, 1, 4, 1}));
  EXPECT_EQ(run("Unsqueeze", {x, ints({3, 1})}).shape(), (Shape{3, 1, 4, 1}));  // unsorted
  EXPECT_EQ(run("Unsqueeze", {iota({3, 4, 5}), ints({5, 4, 2})}).shape(), (Shape{3, 4, 1, 5, 1, 1}));
  EXPECT_EQ(run("Unsqueeze", {x}, attrs({{"axes", std::vector<int64_t>{0, -1}}})).shape(),
            (Shape{1, 3, 4, 1}));
  EXPECT_EQ(run("Unsqueeze", {Tensor::scalar<float>(1.f), ints({0})}).shape(), (Shape{1}));
  EXPECT_THROW(run("Unsqueeze", {x, ints({3})}), dc::UserError);  // output rank is 3
  EXPECT_THROW(run("Unsqueeze", {x, ints({1, 4})}), dc::UserError);
  EXPECT_THROW(run("Unsqueeze", {x, ints({1, 1})}), dc::UserError);
  EXPECT_THROW(check("Unsqueeze", {{DType::f32, {3}}}), dc::UserError);  // no axes at all
}

// ---- Transpose --------------------------------------------------------------------------

TEST(OpsShape, Transpose) {
  const Tensor x = iota({2, 3, 4});
  const Tensor y = run("Transpose", {x}, attrs({{"perm", std::vector<int64_t>{1, 2, 0}}}));
  expect_tensor_near(y, f32({3, 4, 2}, {0, 12, 1, 13, 2, 14, 3, 15, 4, 16, 5, 17, 6, 18, 7, 19,
                                        8, 20, 9, 21, 10, 22, 11, 23}));
  // default: reverse the dims
  expect_tensor_near(run("Transpose", {x}), f32({4, 3, 2}, {0, 12, 4, 16, 8, 20, 1, 13, 5, 17, 9, 21,
                                                            2, 14, 6, 18, 10, 22, 3, 15, 7, 19, 11, 23}));
  expect_tensor_near(run("Transpose", {x}, attrs({{"perm", std::vector<int64_t>{0, 1, 2}}})), x);
  // int64 and bool move as bytes
  expect_tensor_near(run("Transpose", {i64({2, 2}, {1, 2, 3, 4})}), i64({2, 2}, {1, 3, 2, 4}));
  expect_tensor_near(run("Transpose", {bools({1, 2}, {true, false})}), bools({2, 1}, {true, false}));
}

TEST(OpsShape, TransposeLargeMatchesNaive) {
  // BERT-like head split [1,S,H,D] -> [1,H,S,D] plus a fully strided one.
  const Tensor x = dc::testing::random_tensor({1, 128, 12, 64}, 5);
  const Tensor y = run("Transpose", {x}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  const Tensor z = run("Transpose", {x}, attrs({{"perm", std::vector<int64_t>{3, 1, 0, 2}}}));
  ASSERT_EQ(y.shape(), (Shape{1, 12, 128, 64}));
  ASSERT_EQ(z.shape(), (Shape{64, 128, 1, 12}));
  const float* px = x.data<float>();
  int64_t bad = 0;
  for (int64_t s = 0; s < 128; ++s)
    for (int64_t h = 0; h < 12; ++h)
      for (int64_t d = 0; d < 64; ++d) {
        const float v = px[(s * 12 + h) * 64 + d];
        bad += y.data<float>()[(h * 128 + s) * 64 + d] != v;
        bad += z.data<float>()[(d * 128 + s) * 12 + h] != v;
      }
  EXPECT_EQ(bad, 0);
}

TEST(OpsShape, TransposeBadPerm) {
  EXPECT_THROW(check("Transpose", {{DType::f32, {2, 3}}}, attrs({{"perm", std::vector<int64_t>{0}}})),
               dc::UserError);
  EXPECT_THROW(check("Transpose", {{DType::f32, {2, 3}}}, attrs({{"perm", std::vector<int64_t>{0, 0}}})),
               dc::UserError);
  EXPECT_THROW(check("Transpose", {{DType::f32, {2, 3}}}, attrs({{"perm", std::vector<int64_t>{0, 2}}})),
               dc::UserError);
  EXPECT_THROW(run("Transpose", {iota({2, 3})}, attrs({{"perm", std::vector<int64_t>{1, -1}}})),
               dc::UserError);
}

// ---- Concat and Split ---------------------------------------------------------------------

TEST(OpsShape, Concat) {
  const Tensor a = f32({2, 2}, {1, 2, 3, 4});
  const Tensor b = f32({2, 1}, {5, 6});
  expect_tensor_near(run("Concat", {a, b}, attrs({{"axis", int64_t{1}}})), f32({2, 3}, {1, 2, 5, 3, 4, 6}));
  expect_tensor_near(run("Concat", {a, b}, attrs({{"axis", int64_t{-1}}})), f32({2, 3}, {1, 2, 5, 3, 4, 6}));
  expect_tensor_near(run("Concat", {a, f32({1, 2}, {7, 8}), a}, attrs({{"axis", int64_t{0}}})),
                     f32({5, 2}, {1, 2, 3, 4, 7, 8, 1, 2, 3, 4}));
  // zero-size input and 3-D middle axis
  expect_tensor_near(run("Concat", {a, f32({2, 0}, {})}, attrs({{"axis", int64_t{1}}})), a);
  const Tensor c = run("Concat", {iota({2, 1, 2}), iota({2, 2, 2})}, attrs({{"axis", int64_t{-2}}}));
  expect_tensor_near(c, f32({2, 3, 2}, {0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 6, 7}));
  expect_tensor_near(run("Concat", {i64({1}, {1}), i64({2}, {2, 3})}, attrs({{"axis", int64_t{0}}})),
                     i64({3}, {1, 2, 3}));
}

TEST(OpsShape, ConcatErrors) {
  const dc::Attributes ax1 = attrs({{"axis", int64_t{1}}});
  EXPECT_THROW(check("Concat", {{DType::f32, {2, 2}}, {DType::f32, {3, 1}}}, ax1), dc::UserError);
  EXPECT_THROW(check("Concat", {{DType::f32, {2, 2}}, {DType::i64, {2, 1}}}, ax1), dc::UserError);
  EXPECT_THROW(check("Concat", {{DType::f32, {2, 2}}, {DType::f32, {2}}}, ax1), dc::UserError);
  const std::string msg = user_error([] {
    check("Concat", {{DType::f32, {2, 2}}, {DType::f32, {2, 2}}}, attrs({{"axis", int64_t{2}}}));
  });
  EXPECT_NE(msg.find("axis 2 is out of range for rank 2"), std::string::npos) << msg;
  EXPECT_THROW(check("Concat", {{DType::f32, {2}}}), dc::UserError);  // axis missing
}

TEST(OpsShape, SplitEqualAndVariable) {
  const Tensor x = f32({6}, {1, 2, 3, 4, 5, 6});
  auto parts = run_all("Split", {x}, 3, attrs({{"axis", int64_t{0}}}));
  ASSERT_EQ(parts.size(), 3u);
  expect_tensor_near(parts[0], f32({2}, {1, 2}));
  expect_tensor_near(parts[2], f32({2}, {5, 6}));
  parts = run_all("Split", {x, ints({2, 4})}, 2);
  expect_tensor_near(parts[0], f32({2}, {1, 2}));
  expect_tensor_near(parts[1], f32({4}, {3, 4, 5, 6}));
  // opset < 13: split as attribute; 2-D along axis 1
  parts = run_all("Split", {iota({2, 6})}, 2,
                  attrs({{"axis", int64_t{1}}, {"split", std::vector<int64_t>{2, 4}}}));
  expect_tensor_near(parts[0], f32({2, 2}, {0, 1, 6, 7}));
  expect_tensor_near(parts[1], f32({2, 4}, {2, 3, 4, 5, 8, 9, 10, 11}));
  parts = run_all("Split", {iota({2, 6})}, 2, attrs({{"axis", int64_t{-1}}}));
  expect_tensor_near(parts[1], f32({2, 3}, {3, 4, 5, 9, 10, 11}));
}

TEST(OpsShape, SplitZeroSize) {
  // split_zero_size_splits: a zero-size input split into zero-size parts
  auto parts = run_all("Split", {f32({0}, {}), ints({0, 0, 0})}, 3);
  ASSERT_EQ(parts.size(), 3u);
  for (const auto& p : parts) EXPECT_EQ(p.shape(), (Shape{0}));
  parts = run_all("Split", {f32({3}, {1, 2, 3}), ints({0, 3})}, 2);
  EXPECT_EQ(parts[0].shape(), (Shape{0}));
  expect_tensor_near(parts[1], f32({3}, {1, 2, 3}));
}

TEST(OpsShape, SplitErrors) {
  EXPECT_THROW(run_all("Split", {iota({5})}, 2), dc::UserError);                  // not divisible
  EXPECT_THROW(run_all("Split", {iota({5}), ints({2, 2})}, 2), dc::UserError);    // sums to 4
  EXPECT_THROW(run_all("Split", {iota({5}), ints({5})}, 2), dc::UserError);       // count
  EXPECT_THROW(run_all("Split", {iota({5}), ints({6, -1})}, 2), dc::UserError);   // negative
  EXPECT_THROW(check("Split", {{DType::f32, {4}}}, attrs({{"axis", int64_t{1}}}), 2), dc::UserError);
  EXPECT_THROW(check("Split", {{DType::f32, {4}}}, attrs({{"split", std::vector<int64_t>{1, 2}}}), 2),
               dc::UserError);
  EXPECT_NO_THROW(check("Split", {{DType::f32, {4}}}, attrs({{"split", std::vector<int64_t>{1, 3}}}), 2));
}

// ---- Slice ---------------------------------------------------------------------------------

TEST(OpsShape, SliceInputs) {
  const Tensor x = iota({2, 3, 4});
  // x[1:, -2:, 1:3]
  expect_tensor_near(run("Slice", {x, ints({1, -2, 1}), ints({2, 3, 3})}), f32({1, 2, 2}, {17, 18, 21, 22}));
  // negative steps: x[:, 2:0:-1, ::-2]
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  expect_tensor_near(run("Slice", {x, ints({2, -1}), ints({0, small}), ints({1, 2}), ints({-1, -2})}),
                     f32({2, 2, 2}, {11, 9, 7, 5, 23, 21, 19, 17}));
  // ends beyond the dim clamp; negative axes
  expect_tensor_near(run("Slice", {x, ints({2}), ints({big}), ints({-1})}),
                     f32({2, 3, 2}, {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23}));
  // start beyond the dim: empty
  EXPECT_EQ(run("Slice", {x, ints({10}), ints({20}), ints({2}), ints({1})}).shape(), (Shape{2, 3, 0}));
  // start < end with a negative step: empty
  EXPECT_EQ(run("Slice", {x, ints({0}), ints({3}), ints({1}), ints({-1})}).shape(), (Shape{2, 0, 4}));
  // step larger than the extent: one element
  expect_tensor_near(run("Slice", {x, ints({1}), ints({big}), ints({2}), ints({big})}),
                     f32({2, 3, 1}, {1, 5, 9, 13, 17, 21}));
  // int32 starts/ends
  expect_tensor_near(run("Slice", {f32({4}, {1, 2, 3, 4}), i32({1}, {1}), i32({1}, {3})}), f32({2}, {2, 3}));
}

TEST(OpsShape, SliceAttributes) {
  // opset < 10: starts/ends/axes attributes
  const Tensor x = iota({3, 4});
  expect_tensor_near(run("Slice", {x}, attrs({{"starts", std::vector<int64_t>{1, 0}},
                                              {"ends", std::vector<int64_t>{2, 3}},
                                              {"axes", std::vector<int64_t>{0, 1}}})),
                     f32({1, 3}, {4, 5, 6}));
  expect_tensor_near(run("Slice", {x}, attrs({{"starts", std::vector<int64_t>{-1}},
                                              {"ends", std::vector<int64_t>{1000}}})),
                     f32({1, 4}, {8, 9, 10, 11}));
  EXPECT_THROW(check("Slice", {{DType::f32, {3, 4}}}, attrs({{"starts", std::vector<int64_t>{1}},
                                                             {"ends", std::vector<int64_t>{2, 3}}})),
               dc::UserError);
  EXPECT_THROW(check("Slice", {{DType::f32, {3, 4}}}, attrs({{"starts", std::vector<int64_t>{1}},
                                                             {"ends", std::vector<int64_t>{2}},
                                                             {"axes", std::vector<int64_t>{2}}})),
               dc::UserError);
}

TEST(OpsShape, SliceErrors) {
  const Tensor x = iota({2, 3});
  EXPECT_THROW(run("Slice", {x, ints({0}), ints({1}), ints({0}), ints({0})}), dc::UserError);   // step 0
  EXPECT_THROW(run("Slice", {x, ints({0}), ints({1}), ints({2})}), dc::UserError);              // axis
  EXPECT_THROW(run("Slice", {x, ints({0, 0}), ints({1, 1}), ints({0, -2})}), dc::UserError);    // repeated
  EXPECT_THROW(run("Slice", {x, ints({0, 0}), ints({1})}), dc::UserError);                      // lengths
  EXPECT_THROW(check("Slice", {{DType::f32, {2}}, {DType::f32, {1}}, {DType::i64, {1}}}), dc::UserError);
}

// ---- Gather ---------------------------------------------------------------------------------

TEST(OpsShape, Gather) {
  const Tensor x = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  expect_tensor_near(run("Gather", {x, i64({2, 2}, {0, 1, 1, 2})}),
                     f32({2, 2, 2}, {1, 2, 3, 4, 3, 4, 5, 6}));
  expect_tensor_near(run("Gather", {x, i64({1}, {1})}, attrs({{"axis", int64_t{1}}})),
                     f32({3, 1}, {2, 4, 6}));
  expect_tensor_near(run("Gather", {x, i64({}, {-1})}, attrs({{"axis", int64_t{-2}}})), f32({2}, {5, 6}));
  expect_tensor_near(run("Gather", {x, i32({3}, {-3, -1, 0})}), f32({3, 2}, {1, 2, 5, 6, 1, 2}));
  // embedding lookup of int64 rows
  expect_tensor_near(run("Gather", {i64({3, 1}, {10, 20, 30}), i64({1, 2}, {2, 0})}),
                     i64({1, 2, 1}, {30, 10}));
}

TEST(OpsShape, GatherErrors) {
  const std::string msg = user_error([] {
    check("Gather", {{DType::f32, {3, 2}}, {DType::i64, {2}}}, attrs({{"axis", int64_t{3}}}));
  });
  EXPECT_NE(msg.find("Gather: axis 3 is out of range for rank 2"), std::string::npos) << msg;
  EXPECT_THROW(check("Gather", {{DType::f32, {3, 2}}, {DType::f32, {2}}}), dc::UserError);
  EXPECT_THROW(run("Gather", {f32({3}, {1, 2, 3}), i64({1}, {3})}), dc::UserError);
  EXPECT_THROW(run("Gather", {f32({3}, {1, 2, 3}), i64({1}, {-4})}), dc::UserError);
}

// ---- Shape, Size, Constant, ConstantOfShape, Identity, Dropout ------------------------------

TEST(OpsShape, ShapeAndSize) {
  const Tensor x = iota({3, 4, 5});
  expect_tensor_near(run("Shape", {x}), ints({3, 4, 5}));
  expect_tensor_near(run("Shape", {x}, attrs({{"start", int64_t{1}}})), ints({4, 5}));
  expect_tensor_near(run("Shape", {x}, attrs({{"end", int64_t{1}}})), ints({3}));
  expect_tensor_near(run("Shape", {x}, attrs({{"start", int64_t{-1}}})), ints({5}));
  expect_tensor_near(run("Shape", {x}, attrs({{"end", int64_t{-1}}})), ints({3, 4}));
  expect_tensor_near(run("Shape", {x}, attrs({{"start", int64_t{-10}}})), ints({3, 4, 5}));
  expect_tensor_near(run("Shape", {x}, attrs({{"start", int64_t{2}}, {"end", int64_t{1}}})), ints({}));
  expect_tensor_near(run("Shape", {Tensor::scalar<float>(1.f)}), ints({}));
  expect_tensor_near(run("Size", {x}), i64({}, {60}));
}

TEST(OpsShape, Constant) {
  const Tensor t = i64({2}, {7, 8});
  expect_tensor_near(run("Constant", {}, attrs({{"value", t}})), t);
  expect_tensor_near(run("Constant", {}, attrs({{"value_float", 2.5f}})), Tensor::scalar<float>(2.5f));
  expect_tensor_near(run("Constant", {}, attrs({{"value_floats", std::vector<float>{1, 2}}})), f32({2}, {1, 2}));
  expect_tensor_near(run("Constant", {}, attrs({{"value_int", int64_t{-3}}})), i64({}, {-3}));
  expect_tensor_near(run("Constant", {}, attrs({{"value_ints", std::vector<int64_t>{4, 5}}})), ints({4, 5}));
  EXPECT_THROW(check("Constant", {}), dc::UserError);
  EXPECT_THROW(check("Constant", {}, attrs({{"value_int", int64_t{1}}, {"value_float", 1.f}})), dc::UserError);
  EXPECT_THROW(check("Constant", {}, attrs({{"value_string", std::string("a")}})), dc::UserError);
}

TEST(OpsShape, ConstantOfShape) {
  expect_tensor_near(run("ConstantOfShape", {ints({2, 3})}), f32({2, 3}, {0, 0, 0, 0, 0, 0}));
  expect_tensor_near(run("ConstantOfShape", {ints({4, 3, 2})}, attrs({{"value", f32({1}, {1})}})),
                     f32({4, 3, 2}, std::vector<float>(24, 1.f)));
  expect_tensor_near(run("ConstantOfShape", {ints({3})}, attrs({{"value", i32({1}, {-7})}})),
                     i32({3}, {-7, -7, -7}));
  expect_tensor_near(run("ConstantOfShape", {ints({})}, attrs({{"value", i64({1}, {9})}})), i64({}, {9}));
  EXPECT_EQ(run("ConstantOfShape", {ints({2, 0})}).shape(), (Shape{2, 0}));
  EXPECT_THROW(run("ConstantOfShape", {ints({-1})}), dc::UserError);
  EXPECT_THROW(check("ConstantOfShape", {{DType::i64, {1}}}, attrs({{"value", f32({2}, {1, 2})}})),
               dc::UserError);
}

TEST(OpsShape, IdentityAndDropout) {
  const Tensor x = f32({2}, {1, -1});
  EXPECT_EQ(run("Identity", {x}).raw(), x.raw());
  auto out = run_all("Dropout", {x}, 2, attrs({{"ratio", 0.5f}}));
  expect_tensor_near(out[0], x);
  expect_tensor_near(out[1], bools({2}, {true, true}));
  out = run_all("Dropout", {x, Tensor::scalar<float>(0.3f), Tensor::scalar<bool>(false)}, 1);
  expect_tensor_near(out[0], x);
  EXPECT_THROW(run_all("Dropout", {x, Tensor::scalar<float>(0.3f), Tensor::scalar<bool>(true)}, 1),
               dc::UserError);
}

// ---- Expand, Tile, Range --------------------------------------------------------------------

TEST(OpsShape, Expand) {
  const Tensor x = f32({3, 1}, {1, 2, 3});
  // expand_dim_changed: [3,1] -> [2,1,6] gives [2,3,6]
  const Tensor y = run("Expand", {x, ints({2, 1, 6})});
  ASSERT_EQ(y.shape(), (Shape{2, 3, 6}));
  EXPECT_EQ(y.data<float>()[0], 1.f);
  EXPECT_EQ(y.data<float>()[6], 2.f);
  EXPECT_EQ(y.data<float>()[35], 3.f);
  // expand_dim_unchanged: [3,1] -> [3,4]
  expect_tensor_near(run("Expand", {x, ints({3, 4})}), f32({3, 4}, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}));
  // a target with 1s keeps the input's extent (bidirectional)
  expect_tensor_near(run("Expand", {f32({1, 3}, {1, 2, 3}), ints({2, 1})}), f32({2, 3}, {1, 2, 3, 1, 2, 3}));
  expect_tensor_near(run("Expand", {Tensor::scalar<int64_t>(4), ints({3})}), i64({3}, {4, 4, 4}));
  EXPECT_THROW(run("Expand", {x, ints({2, 4})}), dc::UserError);
}

TEST(OpsShape, Tile) {
  expect_tensor_near(run("Tile", {f32({2, 2}, {1, 2, 3, 4}), ints({2, 3})}),
                     f32({4, 6}, {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  expect_tensor_near(run("Tile", {i64({2}, {5, 6}), ints({2})}), i64({4}, {5, 6, 5, 6}));
  EXPECT_EQ(run("Tile", {iota({2, 2}), ints({0, 1})}).shape(), (Shape{0, 2}));
  EXPECT_THROW(run("Tile", {iota({2, 2}), ints({2})}), dc::UserError);
  EXPECT_THROW(run("Tile", {iota({2, 2}), ints({2, -1})}), dc::UserError);
}

TEST(OpsShape, Range) {
  expect_tensor_near(run("Range", {i64({}, {1}), i64({}, {10}), i64({}, {3})}), i64({3}, {1, 4, 7}));
  expect_tensor_near(run("Range", {i32({}, {10}), i32({}, {4}), i32({}, {-3})}), i32({2}, {10, 7}));
  expect_tensor_near(run("Range", {Tensor::scalar<float>(1.f), Tensor::scalar<float>(2.f),
                                   Tensor::scalar<float>(0.25f)}),
                     f32({4}, {1, 1.25f, 1.5f, 1.75f}));
  EXPECT_EQ(run("Range", {i64({}, {5}), i64({}, {1}), i64({}, {1})}).shape(), (Shape{0}));
  EXPECT_THROW(run("Range", {i64({}, {5}), i64({}, {1}), i64({}, {0})}), dc::UserError);
  EXPECT_THROW(check("Range", {{DType::i64, {}}, {DType::i32, {}}, {DType::i64, {}}}), dc::UserError);
}

// ---- Every dtype moves as bytes -------------------------------------------------------------

TEST(OpsShape, HalfTensorsMoveAsBytes) {
  Tensor h(DType::f16, {2, 2});
  auto* bits = reinterpret_cast<uint16_t*>(h.raw_mutable());
  for (uint16_t i = 0; i < 4; ++i) bits[i] = static_cast<uint16_t>(0x3C00 + i);
  const Tensor t = run("Transpose", {h});
  const auto* tb = reinterpret_cast<const uint16_t*>(t.raw());
  EXPECT_EQ(t.dtype(), DType::f16);
  EXPECT_EQ((std::vector<uint16_t>{tb[0], tb[1], tb[2], tb[3]}),
            (std::vector<uint16_t>{0x3C00, 0x3C02, 0x3C01, 0x3C03}));
  const Tensor g = run("Gather", {h, i64({1}, {1})});
  const auto* gb = reinterpret_cast<const uint16_t*>(g.raw());
  EXPECT_EQ(gb[0], 0x3C02);
  EXPECT_EQ(gb[1], 0x3C03);
}

TEST(OpsShape, TableListsEveryOp) {
  for (const char* op : {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Concat",
                         "Split", "Slice", "Gather", "Shape", "Size", "Constant",
                         "ConstantOfShape", "Identity", "Dropout", "Expand", "Tile", "Range"}) {
    const dc::ref::OpDef* def = dc::ref::find_op(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_NE(def->check, nullptr) << op;
  }
}

}  // namespace
