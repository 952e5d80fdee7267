// Gated linear units in the gate/up GEMM's epilogue: the merged projection's weight columns
// are interleaved so that gate column j and up column j are adjacent output columns.
#pragma once

#include "ir/graph.h"

namespace dc {

// Rewrites y = MatMul(x, W), W an f32 [K, 2F] initializer, whose output is read only by
// Slice(y, 0, F) and Slice(y, F, 2F) along the last axis (fuse_sibling_matmuls' merged
// gate/up projection, or one exported merged), when those two halves feed only an
// elementwise combination with one output (glu_combiner, ir/glu.h: SwiGLU's
// silu(gate) * up, GeGLU's gelu(gate) * up, ...): W becomes W' with W'[:, 2j] = W[:, j] and
// W'[:, 2j + 1] = W[:, F + j] (a new initializer `<W>_glu`, computed when its bytes are
// needed), and the Slices become Slice(y, 0, 2F, -1, 2) and Slice(y, 1, 2F, -1, 2), which
// give the same two halves. The graph computes exactly what it computed before; the GEMM
// template then finds each (gate, up) pair in adjacent accumulators of one thread and
// writes only the product (glu_split, ir/glu.h; docs/codegen.md "GLU epilogue").
Graph interleave_glu_weights(Graph g);

}  // namespace dc
