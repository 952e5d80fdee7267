// Gradients of the dc-internal forward ops the training pass introduces: dc.Dropout (the
// saved mask), dc.BatchNormTrain (dc.BatchNormGrad from the saved batch statistics) and
// dc.SoftmaxCrossEntropy (dc.SoftmaxCrossEntropyGrad from the saved log-probabilities).
#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

Grads dropout_rule(GradBuilder& b, const GradCall& c) {
  return {b.mul(c.dy[0], c.node.outputs.at(1)), ""};
}

Grads batch_norm_train_rule(GradBuilder& b, const GradCall& c) {
  const auto& n = c.node;
  DC_INTERNAL_CHECK(n.outputs.size() == 5, "dc.BatchNormTrain with ", n.outputs.size(), " outputs");
  const auto outs = b.node("dc.BatchNormGrad",
                           {c.dy[0], n.inputs[0], n.inputs[1], n.outputs[3], n.outputs[4]},
                           {b.info(n.inputs[0]), b.info(n.inputs[1]), b.info(n.inputs[2])});
  Grads g(5);
  for (size_t i = 0; i < 3; ++i)
    if (c.want(i)) g[i] = outs[i];
  return g;
}

// dc.SoftmaxCrossEntropyGrad, the naive kernel of one thread per element (no loop): as ONNX
// ops (Where(label, expm1, exp) of the log-probabilities) the gradient is a DAG that the
// candidate generator's linear chains cover with 7 kernels (docs/training.md).
Grads softmax_cross_entropy_rule(GradBuilder& b, const GradCall& c) {
  const auto& n = c.node;
  return {b.node1("dc.SoftmaxCrossEntropyGrad", {c.dy[0], n.outputs.at(1), n.inputs.at(1)},
                  b.info(n.inputs[0])),
          ""};
}

const GradRuleDef kRules[] = {
    {"dc.Dropout", dropout_rule},
    {"dc.BatchNormTrain", batch_norm_train_rule},
    {"dc.SoftmaxCrossEntropy", softmax_cross_entropy_rule},
};

}  // namespace

std::span<const GradRuleDef> training_op_gradients() { return kRules; }

}  // namespace dc::grad
