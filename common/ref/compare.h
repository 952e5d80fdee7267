// Output comparison used by `verify` (and later by workers checking kernels).
//
// A float output passes when   ||out - ref||_2 <= rtol * ||ref||_2 + atol * sqrt(n)
// (a relative L2 bound, with an absolute floor for outputs that are ~0), NaNs match NaNs,
// and shapes and dtypes agree. Integer and bool outputs must match exactly.
#pragma once

#include <string>

#include "ir/tensor.h"

namespace dc::ref {

struct Comparison {
  bool pass = false;
  double max_abs_error = 0;  // max |out - ref|
  double rel_l2_error = 0;   // ||out - ref|| / ||ref|| (0 when both are zero)
  std::string problem;       // why it failed, when it is not the numbers (shape, dtype, NaN)
};

Comparison compare_tensors(const Tensor& out, const Tensor& ref, double rtol, double atol);

}  // namespace dc::ref
