// A Linear layer's bias gradient over 3-D activations, ReduceSum(dY [.., N]) over every axis
// but the last, sums the same elements as the 2-D view [rows, N] of dY that the weight
// gradient's GEMM reads (grad_linalg.cpp's folded dW = X^T dY). This pass makes it sum that
// view over axis 0, so both read one tensor and the candidate generator can fuse them
// (ir/gemm_operand_sum.h: the GEMM computes the sum from its own loads of dY).
#pragma once

#include <cstddef>

#include "ir/graph.h"

namespace dc::grad {

// Rewrites such ReduceSums among the nodes from `first` on (the backward pass); each keeps
// its output's name and shape (a Reshape view of the new sum). Nodes stay topological.
void sum_biases_over_gemm_views(Graph& g, size_t first);

}  // namespace dc::grad
