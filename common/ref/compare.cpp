#include "ref/compare.h"

#include <cmath>
#include <limits>

namespace dc::ref {

Comparison compare_tensors(const Tensor& out, const Tensor& ref, double rtol, double atol) {
  Comparison c;
  if (out.dtype() != ref.dtype()) {
    c.problem = str_cat("dtype ", dtype_name(out.dtype()), ", expected ", dtype_name(ref.dtype()));
    return c;
  }
  if (out.shape() != ref.shape()) {
    c.problem = str_cat("shape ", shape_str(out.shape()), ", expected ", shape_str(ref.shape()));
    return c;
  }
  const bool exact = !is_float(ref.dtype());
  const auto a = out.to_float_vector();
  const auto b = ref.to_float_vector();
  double diff2 = 0, ref2 = 0;
  int64_t nan_mismatch = 0, int_mismatch = 0;
  if (exact) {
    const auto ai = out.to_int64_vector(), bi = ref.to_int64_vector();
    for (size_t i = 0; i < ai.size(); ++i) {
      int_mismatch += ai[i] != bi[i];
      c.max_abs_error = std::max(c.max_abs_error, std::fabs(double(ai[i]) - double(bi[i])));
    }
  }
  for (size_t i = 0; i < a.size() && !exact; ++i) {
    if (std::isnan(b[i]) || std::isnan(a[i])) {
      nan_mismatch += std::isnan(a[i]) != std::isnan(b[i]);
      continue;
    }
    if (std::isinf(b[i]) || std::isinf(a[i])) {
      if (a[i] != b[i]) c.max_abs_error = std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = double(a[i]) - double(b[i]);
    diff2 += d * d;
    ref2 += double(b[i]) * double(b[i]);
    c.max_abs_error = std::max(c.max_abs_error, std::fabs(d));
  }
  const double dn = std::sqrt(diff2), rn = std::sqrt(ref2);
  c.rel_l2_error = rn > 0 ? dn / rn : (dn > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  if (exact) {
    c.pass = int_mismatch == 0;
    if (!c.pass) c.problem = str_cat(int_mismatch, " of ", a.size(), " values differ");
    return c;
  }
  if (nan_mismatch) {
    c.problem = str_cat(nan_mismatch, " NaN(s) where the reference has none, or the reverse");
    return c;
  }
  if (std::isinf(c.max_abs_error)) {
    c.problem = "infinities differ";
    return c;
  }
  c.pass = dn <= rtol * rn + atol * std::sqrt(static_cast<double>(a.size()));
  return c;
}

}  // namespace dc::ref
