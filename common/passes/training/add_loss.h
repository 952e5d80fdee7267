// The loss of a training step, appended to the forward graph (docs/training.md, "Loss").
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"
#include "passes/training_spec.h"

namespace dc {

// The cross-entropy loss node; lower_cross_entropy names its ops "<this>/<op>".
inline constexpr std::string_view kCrossEntropyPrefix = "loss/cross_entropy";

// Adds the labels input (spec.labels; none for LossKind::none) and the nodes computing the
// scalar loss from the graph's first output, the mean over the batch as PyTorch's default:
//   cross_entropy: dc.SoftmaxCrossEntropy(logits, labels), classes on the last axis, labels
//                  i64 of the logits' shape without it;
//   mse:           ReduceMean((y - target)^2) over every element, target of y's type;
//   none:          the first output itself, which must be a one-element float tensor.
// Returns the loss tensor's name. UserError for an output the loss cannot take (no class
// axis, not float, not a scalar for none) and for a labels name already in use.
std::string add_loss(Graph& g, const TrainingSpec& spec);

}  // namespace dc
