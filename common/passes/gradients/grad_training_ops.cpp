// Gradients of the dc-internal forward ops the training pass introduces: dc.Dropout (the
// saved mask), dc.BatchNormTrain (dc.BatchNormGrad from the saved batch statistics) and
// dc.SoftmaxCrossEntropy (an elementwise chain of the saved log-probabilities).
#include <algorithm>

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

// dlogits = dloss / rows * (softmax - one_hot(label)) from the saved log-probabilities, as
// ONNX elementwise ops (one tuned kernel): exp(log p), and for the label's class p - 1 =
// expm1(log p), written 2t / (1 - t) with t = tanh(log p / 2) (ONNX has no Expm1): for a
// fitted batch (p near 1) exp(log p) - 1 would cancel; t is in (-1, 0], so 1 - t does not.
Grads softmax_cross_entropy_rule(GradBuilder& b, const GradCall& c) {
  const auto& n = c.node;
  const std::string& log_probs = n.outputs.at(1);
  const Shape& shape = b.shape(log_probs);
  const int64_t classes = shape.back();
  const int64_t rows = shape_numel(shape) / std::max<int64_t>(1, classes);
  Shape label_column = shape;
  label_column.back() = 1;
  std::vector<int64_t> class_ids(static_cast<size_t>(classes));
  for (int64_t k = 0; k < classes; ++k) class_ids[static_cast<size_t>(k)] = k;
  const std::string is_label =
      b.compare("Equal", b.reshape(n.inputs.at(1), label_column), b.ints(class_ids));
  const std::string t = b.unary("Tanh", b.scale(log_probs, 0.5));
  const std::string p_minus_1 = b.div(b.scale(t, 2.0), b.sub(b.scalar(1.0, DType::f32), t));
  const std::string d = b.where(is_label, p_minus_1, b.unary("Exp", log_probs));
  return {b.mul(d, b.scale(c.dy[0], 1.0 / static_cast<double>(std::max<int64_t>(1, rows)))), ""};
}

const GradRuleDef kRules[] = {
    {"dc.Dropout", dropout_rule},
    {"dc.BatchNormTrain", batch_norm_train_rule},
    {"dc.SoftmaxCrossEntropy", softmax_cross_entropy_rule},
};

}  // namespace

std::span<const GradRuleDef> training_op_gradients() { return kRules; }

}  // namespace dc::grad
