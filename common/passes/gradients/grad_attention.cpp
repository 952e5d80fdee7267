// The gradient of dc.Attention, the training step's fused attention (fuse_training_attention):
// one dc.AttentionGrad node computing dQ, dKt and dV in the FlashAttention-2 way from the
// saved log-sum-exp, so no S x S probability matrix is kept for the backward pass
// (docs/training.md, "Attention backward").
#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

// dc.Attention(Q, Kt, V[, mask]) -> (O, LSE)  =>
// dc.AttentionGrad(Q, Kt, V, O, dO, LSE[, mask]) {scale} -> (dQ, dKt, dV).
Grads attention_rule(GradBuilder& b, const GradCall& c) {
  const Node& n = c.node;
  if (c.dy.size() > 1 && !c.dy[1].empty()) no_gradient(c, "its log-sum-exp output is read on the loss's path");
  if (c.want(3)) no_gradient(c, "its mask needs a gradient (fuse_training_attention leaves such attention unfused)");
  std::vector<std::string> in = {n.inputs[0], n.inputs[1], n.inputs[2], n.outputs[0], c.dy[0], n.outputs[1]};
  if (n.has_input(3)) in.push_back(n.inputs[3]);
  Attributes a;
  a.set("scale", n.attrs.get_float("scale", 1.f));
  const auto g = b.node("dc.AttentionGrad", in, {b.info(n.inputs[0]), b.info(n.inputs[1]), b.info(n.inputs[2])}, a);
  Grads out(n.inputs.size());
  for (size_t i = 0; i < 3; ++i)
    if (c.want(i)) out[i] = g[i];
  return out;
}

const GradRuleDef kRules[] = {
    {"dc.Attention", attention_rule},
};

}  // namespace

std::span<const GradRuleDef> attention_gradients() { return kRules; }

}  // namespace dc::grad
