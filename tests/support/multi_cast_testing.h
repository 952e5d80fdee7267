// Inputs and an oracle for the tests of dc.MultiCast (ir/multi_cast.h): f32 values whose
// rounding to f16/bf16 is delicate, and the rounding to nearest even written out in double
// arithmetic, independently of the reference's float_to_half / float_to_bf16.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ir/tensor.h"

namespace dc::testing {

// `f` rounded to nearest even with `mantissa` stored bits and normal exponents emin..emax
// (subnormals below 2^emin), as a double; past the largest finite value: inf; NaN stays NaN.
inline double hand_round(float f, int mantissa, int emin, int emax) {
  if (std::isnan(f) || std::isinf(f)) return f;
  const double a = std::fabs(static_cast<double>(f));
  const int binade = a >= std::ldexp(1.0, emin) ? std::ilogb(a) : emin;
  const double unit = std::ldexp(1.0, binade - mantissa);
  double r = std::nearbyint(a / unit) * unit;  // the default rounding mode: ties to even
  if (r >= std::ldexp(1.0, emax + 1)) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, static_cast<double>(f));
}

inline double hand_round(float f, DType to) {
  return to == DType::f16 ? hand_round(f, 10, -14, 15) : hand_round(f, 7, -126, 127);
}

// `n` f32 values: first the special ones (ties to even in both types' normal and subnormal
// ranges, f32 subnormals, fp16's overflow boundary, inf, -inf, NaN, signed zeros), then
// random ones of random sign with exponents from 2^-30 to 2^20 (past fp16's range).
inline Tensor cast_test_values(const Shape& shape, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {
      1.f + 0x1p-11f, 1.f + 3 * 0x1p-11f, -(1.f + 0x1p-11f), 1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f,  // f16, bf16 ties
      0x1p-25f, 3 * 0x1p-25f, 5 * 0x1p-26f, 0x1p-24f * 1.5f, 0x1.ffcp-15f, 0x1.ffep-15f,  // f16 subnormal ties
      1e-40f, -3e-39f, 0x1p-133f, 3 * 0x1p-134f,                                            // f32 and bf16 subnormals
      65504.f, 65519.f, 65520.f, -65520.f, 70000.f, 1e10f, 3.3961e38f, -3.4e38f,           // past the ranges
      inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.f, -0.f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(1.f, 2.f);
  std::uniform_int_distribution<int> exponent(-30, 20), sign(0, 1);
  Tensor t(DType::f32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float r = std::ldexp(mantissa(rng), exponent(rng)) * (sign(rng) ? -1.f : 1.f);
    p[i] = static_cast<size_t>(i) < special.size() ? special[static_cast<size_t>(i)] : r;
  }
  return t;
}

// The value of element i of an f16/bf16 tensor.
inline double reduced_value(const Tensor& t, int64_t i) {
  const uint16_t bits = reinterpret_cast<const uint16_t*>(t.raw())[i];
  return t.dtype() == DType::f16 ? half_to_float(bits) : bf16_to_float(bits);
}

// True when `a` and `b` hold the same values (NaN as NaN, the sign of zero included).
inline bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const auto x = a.to_float_vector(), y = b.to_float_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      if (std::isnan(x[i]) != std::isnan(y[i])) return false;
    } else if (x[i] != y[i] || std::signbit(x[i]) != std::signbit(y[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace dc::testing
