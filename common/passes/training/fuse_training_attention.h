// The training step's attention: each forward attention pattern on a trained weight's path
// becomes one dc.Attention node, so that its gradient is one FlashAttention-2 style
// dc.AttentionGrad (docs/training.md, "Attention backward") instead of the op-by-op backward
// that keeps the S x S probabilities.
#pragma once

#include <set>
#include <string>

#include "ir/graph.h"

namespace dc {

// Rewrites MatMul(Q, Kt) -> [Mul|Div by a scalar constant] -> [Add mask] -> Softmax(last
// axis) -> MatMul(P, V) into dc.Attention(Q, Kt, V[, mask]) {scale} -> (O, LSE), O under the
// second MatMul's output name, LSE (f32, the scores' shape without its last dim) the per-row
// log-sum-exp saved for the backward pass. Only where Q, Kt or V depends on a tensor of
// `trained` through float values, the mask does not, every tensor is f32 and of equal batch
// dims, and each intermediate has the next op as its only reader (and is no graph output);
// anything else keeps its ONNX ops and their op-by-op rules. Returns the number rewritten.
int fuse_training_attention(Graph& g, const std::set<std::string>& trained);

}  // namespace dc
