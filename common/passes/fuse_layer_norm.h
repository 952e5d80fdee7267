// Recognises the decomposed LayerNorm that exporters emit below opset 17.
#pragma once

#include "ir/graph.h"

namespace dc {

// Replaces
//   m = ReduceMean(x, axes=[-1]); d = Sub(x, m); p = Pow(d, 2) | Mul(d, d);
//   v = ReduceMean(p, axes=[-1]); s = Sqrt(Add(v, eps));
//   n = Div(d, s) | Mul(d, Reciprocal(s)) | Mul(d, Div(1, s))
//   [; Cast(.., to=f32)] [; Mul(.., gamma)] [; Add(.., beta)]
// (x may come through a Cast to f32 of an f32 tensor read by nothing else, which is absorbed)
// by one LayerNormalization(x, scale, bias; axis=-1, epsilon=eps) named after the last
// matched node (Mul/Add operands in either order). Fires only for f32 x of known rank,
// reductions over the last axis alone with keepdims=1, a one-element constant eps and
// exponent 2, and intermediates read by nothing else and not graph outputs. gamma and beta
// are absorbed only when they are initializers that broadcast along the last axis alone;
// otherwise the fused node stops at n (scale = ones) and the Mul/Add stay as nodes.
Graph fuse_layer_norm(Graph g);

}  // namespace dc
