// Recognises RMSNorm (LLaMA, Mistral, T5) in the decomposed forms exporters write.
#pragma once

#include "ir/graph.h"

namespace dc {

// Replaces
//   [c = Cast(x, to=f32)]; q = Pow(c, 2) | Mul(c, c); m = ReduceMean(q, axes=[-1]);
//   a = Add(m, eps); then n = Mul(c, Reciprocal(Sqrt(a))) | Div(c, Sqrt(a))
//   | Mul(c, Div(1, Sqrt(a)))  [; Cast(n, to=f32)] [; Mul(.., weight)]
// by one RMSNormalization(x, scale; axis=-1, epsilon=eps) named after the last matched node
// (operands of Mul/Add in either order). Fires only for f32 x of known rank, a mean over the
// last axis alone with keepdims=1, one-element constant eps and exponent, and intermediates
// read by nothing else and not graph outputs. The normalised tensor itself may have other
// readers (the residual stream); the leading Cast is absorbed only when it has none. The weight is absorbed when it is an f32
// initializer varying along the last axis alone; otherwise scale = ones and the Mul stays.
Graph fuse_rms_norm(Graph g);

}  // namespace dc
