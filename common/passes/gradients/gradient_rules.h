// The gradient column of the op table: one reverse-mode rule per op (docs/training.md).
//
// A rule receives the forward node, the gradient of each of its outputs ("" where an output
// has none) and which inputs need a gradient, and returns the gradient of each input ("" for
// none), built from ONNX ops and dc-internal ones (ref/ops_grad*.cpp) with a GradBuilder.
// The rules live in one file per op family; the table concatenating them is explicit
// (gradient_rules.cpp), not a static-init registry.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "passes/gradients/grad_builder.h"

namespace dc::grad {

struct GradCall {
  const Node& node;
  std::vector<std::string> dy;  // gradient of each output, "" where none
  std::vector<bool> wants;      // per input: the pass needs its gradient
  bool want(size_t i) const { return i < wants.size() && wants[i]; }
};

using GradRule = std::vector<std::string> (*)(GradBuilder& b, const GradCall& c);

// A form of the op its rule does not differentiate: UserError "node 'N' (Op): no gradient: why".
[[noreturn]] void no_gradient(const GradCall& c, const std::string& why);

struct GradRuleDef {
  std::string_view op;
  GradRule rule;
};

// The rule for an op type, or nullptr when dc has none.
const GradRuleDef* find_gradient_rule(std::string_view op);
std::span<const GradRuleDef> all_gradient_rules();

// Per-family tables, one file each.
std::span<const GradRuleDef> elementwise_gradients();  // grad_elementwise.cpp: arithmetic, math
std::span<const GradRuleDef> activation_gradients();   // grad_activation.cpp: Relu, Sigmoid, Gelu, ...
std::span<const GradRuleDef> conv_gradients();         // grad_conv.cpp: Conv
std::span<const GradRuleDef> conv_transpose_gradients();  // grad_conv_transpose.cpp: ConvTranspose
std::span<const GradRuleDef> linalg_gradients();       // grad_linalg.cpp: Gemm, MatMul
std::span<const GradRuleDef> norm_gradients();         // grad_norm.cpp: BN, LayerNorm, Softmax, Reduce*
std::span<const GradRuleDef> pool_gradients();         // grad_pool.cpp: MaxPool, AveragePool, GlobalAveragePool
std::span<const GradRuleDef> shape_gradients();        // grad_shape.cpp: Reshape, Transpose, Concat, Slice, ...
std::span<const GradRuleDef> resample_gradients();     // grad_resample.cpp: Resize, Upsample
std::span<const GradRuleDef> attention_gradients();    // grad_attention.cpp: dc.Attention (FlashAttention-2 backward)
std::span<const GradRuleDef> training_op_gradients();  // grad_training_ops.cpp: dc.Dropout, dc.BatchNormTrain, loss

}  // namespace dc::grad
