// Gradients of the dc-internal forward ops the training pass introduces: dc.Dropout (the
// saved mask), dc.BatchNormTrain (ReduceSums and an elementwise chain from the saved batch
// statistics) and
// dc.SoftmaxCrossEntropy (dc.SoftmaxCrossEntropyGrad from the saved log-probabilities).
#include <algorithm>

#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

Grads dropout_rule(GradBuilder& b, const GradCall& c) {
  return {b.mul(c.dy[0], c.node.outputs.at(1)), ""};
}

// BatchNorm's backward from the saved batch statistics, as ONNX ops that the tuned
// templates run: two ReduceSums over the batch and spatial axes (x_hat = (X - mean) invstd
// computed in the second's prologue) and one elementwise chain,
//   dB = sum dY,  dscale = sum dY x_hat,  dX = scale invstd (dY - (dB + x_hat dscale) / count).
// (A per-channel loop, as dc.BatchNormTrain's naive kernel, has one thread per channel: on a
// GPU it keeps too few loads in flight, docs/estimator.md.) Each consumer gets its own x_hat and
// per-channel Reshapes, so the fusion need not materialise a shared one.
Grads batch_norm_train_rule(GradBuilder& b, const GradCall& c) {
  const auto& n = c.node;
  DC_INTERNAL_CHECK(n.outputs.size() == 5, "dc.BatchNormTrain with ", n.outputs.size(), " outputs");
  const Shape x = b.shape(n.inputs[0]);  // a copy: nodes are added below
  Shape per_channel(x.size(), 1);
  per_channel[1] = x[1];
  const int64_t count = shape_numel(x) / std::max<int64_t>(1, x[1]);
  const auto channel = [&](const std::string& v) { return b.reshape(v, per_channel); };
  const auto x_hat = [&] { return b.mul(b.sub(n.inputs[0], channel(n.outputs[3])), channel(n.outputs[4])); };
  const std::string& dy = c.dy[0];
  const std::string db = b.sum_per_channel(dy);
  const std::string dscale = b.sum_per_channel(b.mul(dy, x_hat()));
  Grads g(5);
  if (c.want(0)) {
    const double k = 1.0 / static_cast<double>(count);
    const std::string mean_part = b.add(channel(b.scale(db, k)), b.mul(x_hat(), channel(b.scale(dscale, k))));
    g[0] = b.mul(b.sub(dy, mean_part), channel(b.mul(n.inputs[1], n.outputs[4])));
  }
  if (c.want(1)) g[1] = dscale;
  if (c.want(2)) g[2] = db;
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
