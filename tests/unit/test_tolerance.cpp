// The error model of common/ir/tolerance.h against simulated dot products: the bound must
// hold for the rounding it describes, and must not be vacuous: it is a worst case per product
// (2u) times a safety factor of 4, which is 15 to 20 times the RMS error of unit-uniform data,
// so an error 20 times the simulated one must fail it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ir/error.h"
#include "ir/tensor.h"
#include "ir/tolerance.h"

namespace dc {
namespace {

float round_to(const std::string& math, float x) {
  if (math == "fp16") return half_to_float(float_to_half(x));
  if (math == "bf16") return bf16_to_float(float_to_bf16(x));
  if (math == "tf32") {  // cvt.rna: round to 10 mantissa bits, ties away from zero
    uint32_t b = std::bit_cast<uint32_t>(x);
    b = (b + 0x1000u) & ~0x1fffu;
    return std::bit_cast<float>(b);
  }
  return x;
}

// Relative L2 error of M dot products of length K whose operands are rounded by `math`
// and summed in fp32, against the same sums in double from the unrounded operands.
double simulated_error(const std::string& math, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const int outputs = 256;
  double err2 = 0, ref2 = 0;
  for (int m = 0; m < outputs; ++m) {
    float acc = 0;
    double exact = 0;
    for (int64_t i = 0; i < k; ++i) {
      const float a = dist(rng), b = dist(rng);
      acc += round_to(math, a) * round_to(math, b);
      exact += static_cast<double>(a) * b;
    }
    err2 += (acc - exact) * (acc - exact);
    ref2 += exact * exact;
  }
  return std::sqrt(err2 / ref2);
}

TEST(Tolerance, UnitRoundoffPerStorageType) {
  EXPECT_EQ(unit_roundoff(DType::f32), std::ldexp(1.0, -24));
  EXPECT_EQ(unit_roundoff(DType::f16), std::ldexp(1.0, -11));
  EXPECT_EQ(unit_roundoff(DType::bf16), std::ldexp(1.0, -8));
  EXPECT_EQ(unit_roundoff(DType::i64), 0.0);
  EXPECT_EQ(math_roundoff("fp32"), 0.0);
  EXPECT_EQ(math_roundoff("tf32"), std::ldexp(1.0, -11));
  EXPECT_EQ(math_roundoff("bf16"), std::ldexp(1.0, -8));
  EXPECT_THROW(math_roundoff("int4"), UserError);
  EXPECT_THROW(kernel_tolerance("fp8", DType::f16, DType::f16, 16), UserError);
}

TEST(Tolerance, BoundsHoldForSimulatedRoundingAndAreNotVacuous) {
  for (const std::string math : {"tf32", "fp16", "bf16"})
    for (int64_t k : {16, 256, 4096}) {
      const double tol = kernel_tolerance(math, DType::f32, k).rtol;
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const double e = simulated_error(math, k, seed);
        EXPECT_LE(e, tol) << math << " K=" << k;
        EXPECT_GT(20 * e, tol) << math << " K=" << k << ": the bound is far above the error";
      }
    }
}

TEST(Tolerance, Fp32FloorAndGrowthWithReductionLength) {
  EXPECT_EQ(kernel_tolerance("fp32", DType::f32, 1).rtol, 1e-5);
  EXPECT_DOUBLE_EQ(kernel_tolerance("fp32", DType::f32, 1).atol, 1e-7);
  EXPECT_GT(kernel_tolerance("fp32", DType::f32, 1 << 20).rtol, 1e-5);
  EXPECT_GT(kernel_tolerance("tf32", DType::f32, 4096).rtol,
            kernel_tolerance("tf32", DType::f32, 16).rtol);
}

TEST(Tolerance, OperandsAlreadyInTheMathTypeAreNotRoundedAgain) {
  const Tolerance stored = kernel_tolerance("fp16", DType::f16, DType::f16, 64);
  const Tolerance converted = kernel_tolerance("fp16", DType::f32, DType::f16, 64);
  EXPECT_LT(stored.rtol, converted.rtol);
  // Only the output rounding (2 u of f16) and the accumulation order remain.
  EXPECT_NEAR(stored.rtol, 2 * std::ldexp(1.0, -11) + 4 * 8 * std::ldexp(1.0, -24), 1e-9);
  EXPECT_EQ(kernel_tolerance("tf32", DType::bf16, DType::f32, 64).rtol,
            kernel_tolerance("fp32", DType::f32, 64).rtol);
  EXPECT_GT(kernel_tolerance("bf16", DType::f16, DType::f32, 64).rtol,
            kernel_tolerance("bf16", DType::bf16, DType::f32, 64).rtol);
}

}  // namespace
}  // namespace dc
