// Opset 23's fused transformer ops as the opset-17 node chains exporters write for them, so
// that they import and reach the same fusion clusters (docs/candidates.md):
// - RMSNormalization: Cast to the stash type, Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul,
//   Cast back, Mul by the scale;
// - RotaryEmbedding: the rotate-half chain (Split, Neg, Concat, Mul, Add with the cos/sin
//   tables), or its interleaved form, on the rotated part of each head;
// - Attention: SDPA's decomposition (sqrt(scale) on Q and on Kᵀ, MatMul, the additive or
//   boolean mask, the causal mask, Softmax, MatMul), K and V repeated for grouped-query
//   attention by Unsqueeze/Expand/Reshape.
#pragma once

#include <string>

namespace onnx {
class ModelProto;
}

namespace dc {

// Replaces every RMSNormalization, RotaryEmbedding and Attention node of `m` (default domain,
// or the private domain opset lowering moves unknown ops to) by its opset-17 chain. The
// shapes of their inputs come from ONNX's shape inference, run again after each round, so
// that a node downstream of another becomes known. UserError naming the node for what the
// chain cannot express (a KV cache, softcap, an input of unknown shape). Returns how many
// nodes were expanded.
int expand_opset23_ops(onnx::ModelProto& m);

// RMSNormalization, RotaryEmbedding, Attention: the ops expand_opset23_ops expands.
bool is_opset23_fused_op(const std::string& op_type);

}  // namespace dc
