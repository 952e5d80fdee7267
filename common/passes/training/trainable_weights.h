// Which initializers of a model are trained (docs/training.md, "Which weights train").
#pragma once

#include <set>
#include <string>

#include "ir/graph.h"
#include "passes/training_spec.h"

namespace dc {

// Every float initializer of rank >= 1 (and in spec.parameters, when given) that some node
// reads at an input that can carry a gradient (not a BatchNorm running statistic, a Resize scale,
// a Pad or Clip constant, a Dropout ratio, a Pow exponent); minus spec.freeze.
// UserError for a --freeze name that is not an initializer of the model.
std::set<std::string> trainable_weights(const Graph& g, const TrainingSpec& spec);

}  // namespace dc
