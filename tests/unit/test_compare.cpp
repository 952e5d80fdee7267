// verify's comparison metric.
#include <gtest/gtest.h>

#include <cmath>

#include "ref/compare.h"

namespace dc::ref {
namespace {

TEST(Compare, RelativeL2AndMaxAbs) {
  auto ref = Tensor::from_vector<float>({4}, {1, 2, 3, 4});
  auto out = Tensor::from_vector<float>({4}, {1, 2, 3, 4.03f});
  auto c = compare_tensors(out, ref, 1e-4, 0);
  EXPECT_NEAR(c.max_abs_error, 0.03, 1e-6);
  EXPECT_NEAR(c.rel_l2_error, 0.03 / std::sqrt(30.0), 1e-6);
  EXPECT_FALSE(c.pass);
  EXPECT_TRUE(compare_tensors(out, ref, 1e-2, 0).pass);
  EXPECT_TRUE(compare_tensors(ref, ref, 0, 0).pass);
}

TEST(Compare, AbsoluteFloorForZeroReference) {
  auto ref = Tensor::from_vector<float>({2}, {0, 0});
  auto out = Tensor::from_vector<float>({2}, {1e-7f, -1e-7f});
  EXPECT_TRUE(compare_tensors(out, ref, 1e-4, 1e-6).pass);
  EXPECT_FALSE(compare_tensors(out, ref, 1e-4, 1e-8).pass);
}

TEST(Compare, ShapeDtypeNanAndIntegers) {
  auto a = Tensor::from_vector<float>({2}, {1, NAN});
  auto b = Tensor::from_vector<float>({2}, {1, 2});
  EXPECT_FALSE(compare_tensors(a, b, 1, 1).pass);
  EXPECT_TRUE(compare_tensors(a, a, 0, 0).pass);  // NaN where the reference has NaN
  EXPECT_FALSE(compare_tensors(b.reshaped({1, 2}), b, 1, 1).pass);
  auto i = Tensor::from_vector<int64_t>({2}, {1, 2});
  EXPECT_FALSE(compare_tensors(i, b, 1, 1).pass);  // dtype differs
  auto j = Tensor::from_vector<int64_t>({2}, {1, 3});
  EXPECT_FALSE(compare_tensors(j, i, 1, 1).pass);  // integers: exact
  EXPECT_TRUE(compare_tensors(i, i, 0, 0).pass);
}

}  // namespace
}  // namespace dc::ref
