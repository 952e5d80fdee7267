// Lowers the normalisations that have no template of their own to ops that do, so that they
// fuse and run through the existing templates (docs/codegen.md, "Lowered normalisations"):
//   InstanceNormalization(x, s, b)  -> LayerNormalization(x, axis 2) * s[C,1..] + b[C,1..]
//   GroupNormalization(x, s, b, G)  -> Reshape [N, G, -1] -> LayerNormalization(axis 2)
//                                      -> Reshape back -> * s + b (per channel; an opset-18
//                                      per-group s/b is repeated over its channels)
//   LpNormalization(x, axis, p)     -> x / ReduceL1|ReduceL2(x, axis, keepdims)
//   LRN(x, size, alpha, beta, bias) -> x / (bias + alpha * AveragePool over channels of x^2)^beta,
//                                      the pool on x^2 reshaped to [N, 1, C, D] with the
//                                      window [size, 1] and count_include_pad=1
// Statistics stay fp32: LayerNormalization, Reduce* and AveragePool are fp32_compute ops.
// f32 nodes only (the reference kernels' dtype); other nodes are left as they are.
#pragma once

#include "ir/graph.h"

namespace dc {

Graph lower_norms(Graph g);

}  // namespace dc
