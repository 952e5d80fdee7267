// How far a kernel's output may lie from its reference: one error model for every check
// (the worker's reference check, the tests, dc-run --data builds on it), written down in
// docs/precision.md. A check passes when ||out - ref||_2 <= rtol * ||ref||_2 + atol * sqrt(n)
// (ref::compare_tensors).
#pragma once

#include <cstdint>
#include <string>

#include "ir/dtype.h"

namespace dc {

struct Tolerance {
  double rtol = 1e-5;
  double atol = 1e-7;
};

// Unit roundoff of a storage dtype (half the spacing of its numbers at 1): f32 2^-24,
// f16 2^-11, bf16 2^-8, f64 2^-53; 0 for integer and bool types (stored exactly).
double unit_roundoff(DType t);

// Relative rounding of an operand by a math path, when the operand is not already stored
// in the path's type: fp32 0, tf32 2^-11 (cvt.rna to 10 mantissa bits), fp16 2^-11,
// bf16 2^-8. UserError for an unknown path.
double math_roundoff(const std::string& math_precision);

// True for the math paths dc knows: fp32, tf32, fp16, bf16.
bool is_math_precision(const std::string& math_precision);

// A kernel against a reference that computes in fp32 (or f64) from the same stored
// inputs; `reduction_length` is the longest sum behind one output element (GEMM K, a
// softmax row, ...; 1 for elementwise work). This form assumes the operands may need the
// math path's rounding (stored as f32): the conservative case.
Tolerance kernel_tolerance(const std::string& math_precision, DType output_dtype,
                           int64_t reduction_length);
// The same when the operands' storage dtype is known: no operand rounding is counted when
// the math path multiplies the stored values exactly (f16 operands on the fp16 path, bf16
// on bf16, anything on fp32).
Tolerance kernel_tolerance(const std::string& math_precision, DType operand_dtype,
                           DType output_dtype, int64_t reduction_length);

}  // namespace dc
