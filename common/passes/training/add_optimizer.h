// The optimizer update of a training step, as graph nodes (docs/training.md, "Optimizers").
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"
#include "passes/training_spec.h"

namespace dc {

// For each parameter -> gradient pair, adds its optimizer state as zero initializers and
// one update node, whose outputs are graph outputs STATE@next (training_state.h):
//   sgd:   dc.SgdUpdate(W, G[, W@momentum]) (the buffer only with momentum != 0)
//   adamw: dc.AdamWUpdate(W, G, W@adam_m, W@adam_v, train.step)
// and the step counter's increment, train.step@next = train.step + 1. Each update node is
// placed right after the node that produces its gradient (the gradient's memory is free
// from there on); the increment comes last.
void add_optimizer(Graph& g, const TrainingSpec& spec,
                   const std::map<std::string, std::string>& gradients);

}  // namespace dc
