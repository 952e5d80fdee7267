// The optimizer update of a training step, as graph nodes (docs/training.md, "Optimizers").
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"
#include "passes/training_spec.h"

namespace dc {

// For each parameter -> gradient pair, adds its optimizer state as zero initializers and its
// update, whose outputs are graph outputs STATE@next (training_state.h), per tensor
//   sgd:   (W, G[, W@momentum]) -> (W@next[, W@momentum@next]) (momentum != 0 only)
//   adamw: (W, G, W@adam_m, W@adam_v) -> (W@next, W@adam_m@next, W@adam_v@next)
// and the step counter's increment, train.step@next = train.step + 1, last. Updates whose
// gradients finish one after another share one dc.SgdUpdate / dc.AdamWUpdate node, a bucket
// (ir/optimizer_update.h; up to spec.optimizer_bucket_bytes of weights, "optimizer/bucket<k>",
// or "optimizer/W" for a bucket of one), placed right after the node that produces the
// bucket's last gradient (the gradients' memory is free from there on).
void add_optimizer(Graph& g, const TrainingSpec& spec,
                   const std::map<std::string, std::string>& gradients);

}  // namespace dc
