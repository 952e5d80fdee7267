// Horizontal fusion of sibling projections: MatMuls that read the same activation with
// constant weights (Q/K/V, SwiGLU's gate and up) become one MatMul over the concatenated
// weights.
#pragma once

#include "ir/graph.h"

namespace dc {

// Replaces MatMul(x, W_i) [; Add(.., b_i)] for i = 1..n (n >= 2, every W_i an f32 [K, N_i]
// initializer, every b_i an f32 [N_i] initializer read by that Add alone, all or none of the
// siblings with a bias) by y = MatMul(x, concat(W_1..W_n)) [; Add(y, concat(b_1..b_n))] and,
// per sibling, Slice(y, [offset_i], [offset_i + N_i], axes=[-1]) under the sibling's output
// name. The concatenated weights are new initializers (`<first>_siblings_W` / `_B`); the
// slices are index maps the consumers read (attention's operand loads, a GEMM's A prologue,
// an elementwise kernel), not copies. The fused nodes take the first sibling's place.
Graph fuse_sibling_matmuls(Graph g);

}  // namespace dc
