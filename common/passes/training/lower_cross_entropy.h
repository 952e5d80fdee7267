// The softmax cross-entropy loss as ops the tuned templates run (docs/training.md,
// "Cross-entropy"), after its gradient has been built.
#pragma once

#include "ir/graph.h"

namespace dc {

// Replaces each dc.SoftmaxCrossEntropy(logits, labels) -> (loss, log_probs) of `g` by
//   log_probs = LogSoftmax(logits, axis -1)                    (the row_reduce template)
//   loss      = ReduceMean(Neg(GatherElements(log_probs, Reshape(labels, [..., 1]), -1)))
// under the same tensor names, so dc.SoftmaxCrossEntropyGrad, which its rule emitted and
// which keeps the fused p - 1 (expm1) of the label's class, reads the same log_probs.
// Run after add_gradients: built from these ops, the gradient would come through
// LogSoftmax's rule, whose exp(log p) - 1 cancels for a fitted batch.
void lower_cross_entropy(Graph& g);

}  // namespace dc
