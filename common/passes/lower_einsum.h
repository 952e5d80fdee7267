// Lowers Einsum onto ops with templates (docs/passes.md, "lower_einsum"), so that its
// contractions reach the tensor-core GEMM templates and its transposes fuse as index maps:
//   one operand, distinct letters:  ReduceSum over the letters the output drops (keepdims 0),
//                                   then a Transpose into the output's order ("bij->bi",
//                                   "bij->bji", "ij->")
//   two operands, distinct letters  letters of both operands and the output are batch axes,
//   per operand, each letter in     of both but not the output contracted, of one operand
//   the output or the other operand and the output free: Transpose each operand to
//                                   [batch, free, contracted] / [batch, contracted, free],
//                                   Reshape to [batch, M, K] / [batch, K, N], MatMul, Reshape
//                                   to [batch, free A, free B], Transpose into the output's
//                                   order ("bij,bjk->bik", "bhid,bhjd->bhij", "i,i->");
//                                   with no batch letter, one contracted and one free letter
//                                   of B, A keeps its shape and MatMul broadcasts it
//                                   ("bnd,dh->bnh": one MatMul, no reshape)
// Identity transposes and reshapes are left out. Any other equation (three or more operands,
// a repeated letter: a diagonal, a letter summed inside one operand of two) is a UserError
// with the node and the equation. Runs on typed graphs; every Einsum is lowered or refused.
#pragma once

#include "ir/graph.h"

namespace dc {

Graph lower_einsum(Graph g);

}  // namespace dc
