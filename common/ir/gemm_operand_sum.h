// A ReduceSum of a 2-D GEMM operand over the GEMM's reduction axis: a Linear layer's bias
// gradient db = sum over rows of dY beside its weight gradient dW = X^T dY (or dY^T X).
// The GEMM computes it as one more row of A whose elements are all 1 (a sum of B) or one
// more column of B (a sum of A), so dY is read once: the candidate generator offers the pair
// as one cluster, the GEMM template emits it (docs/codegen.md "Operand sums").
#pragma once

#include <cstddef>
#include <optional>

#include "ir/graph.h"

namespace dc {

// Operands as the GEMM template sees them: A [M, K], B [K, N]; for dc.ConvGradWeight(X, dY)
// A is dY (M filters, K = images x output positions) and B the im2col gather of X.
struct GemmOperandSum {
  size_t operand = 0;              // 0: sum(A) over k, indexed by m; 1: sum(B) over k, by n
  bool through_transpose = false;  // the sum reads the input of the 2-D Transpose computing it
};

// Whether `sum` (a ReduceSum) sums an operand of `gemm` over exactly the GEMM's reduction
// axes: of a Gemm or a MatMul of 2-D operands, the operand itself or the input of the 2-D
// Transpose that computes it (read in place by the GEMM, matmul_swapped_source); of a
// dc.ConvGradWeight, dY over its batch and spatial axes (a convolution's bias gradient).
std::optional<GemmOperandSum> gemm_operand_sum(const Graph& g, const Node& gemm, const Node& sum);

}  // namespace dc
