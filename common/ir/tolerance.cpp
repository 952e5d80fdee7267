#include "ir/tolerance.h"

#include <algorithm>
#include <cmath>

#include "ir/precision.h"

namespace dc {

namespace {

// Safety factor on the statistical terms: the model gives the typical (RMS) error of
// sums of independently rounded terms; 4 covers the spread between runs and layers.
constexpr double kSafety = 4.0;
// The floor every fp32 comparison in the project has used: host libm and CUDA's math
// functions differ by a few ulp in transcendental chains (expf, erff, tanhf).
constexpr double kFloor = 1e-5;

// True if the math path multiplies values of this storage dtype without rounding them.
bool exact_operands(const std::string& math, DType operand) {
  if (math == "fp32") return true;
  if (math == "fp16") return operand == DType::f16;
  if (math == "bf16") return operand == DType::bf16;
  // tf32 keeps 10 mantissa bits: f16 (10 bits, wider exponent range in tf32) and bf16
  // (7 bits) operands pass unchanged.
  return operand == DType::f16 || operand == DType::bf16;
}

Tolerance model(double operand_u, DType output_dtype, int64_t reduction_length) {
  const double k = static_cast<double>(std::max<int64_t>(reduction_length, 1));
  const double accumulate_u = unit_roundoff(DType::f32);
  const double store_u = unit_roundoff(output_dtype == DType::f64 ? DType::f32 : output_dtype);
  // Two operands rounded per product: relative error up to 2u each product, RMS over a
  // sum of random-sign products about the same relative size. fp32 accumulation in a
  // different order: about sqrt(K) u (both sides). Output rounding to the storage type:
  // the two sides may land one ulp (2 u) apart.
  const double rtol = kSafety * (2 * operand_u + std::sqrt(k) * accumulate_u) + 2 * store_u;
  const double r = std::max(kFloor, rtol);
  // Unit-scale data: an RMS absolute error of a hundredth of the relative bound only
  // matters for outputs that are ~0 everywhere.
  return Tolerance{r, r / 100};
}

}  // namespace

double unit_roundoff(DType t) {
  switch (t) {
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f64: return std::ldexp(1.0, -53);
    default: return 0;
  }
}

// The math paths are the plan precisions' names (ir/precision.h): one list of them.
bool is_math_precision(const std::string& p) { return precision_from_name(p).has_value(); }

double math_roundoff(const std::string& p) {
  switch (parse_precision(p)) {  // UserError for an unknown path
    case Precision::fp32: return 0;
    case Precision::bf16: return unit_roundoff(DType::bf16);
    case Precision::tf32:  // 10 explicit mantissa bits, as f16
    case Precision::fp16: return unit_roundoff(DType::f16);
  }
  return 0;
}

Tolerance kernel_tolerance(const std::string& math_precision, DType output_dtype,
                           int64_t reduction_length) {
  return model(math_roundoff(math_precision), output_dtype, reduction_length);
}

Tolerance kernel_tolerance(const std::string& math_precision, DType operand_dtype,
                           DType output_dtype, int64_t reduction_length) {
  parse_precision(math_precision);  // UserError for an unknown path
  const double u =
      exact_operands(math_precision, operand_dtype) ? 0.0 : math_roundoff(math_precision);
  return model(u, output_dtype, reduction_length);
}

}  // namespace dc
