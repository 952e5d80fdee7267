// The simplification pipeline for a graph that will be trained.
#pragma once

#include "ir/graph.h"

namespace dc {

// simplify() without what is wrong in training: BatchNorm is not folded into the weights,
// no weight is constant-folded (every float initializer of rank >= 1 is shielded from
// fold_constants and the pattern passes, and restored unchanged after them), and Dropout is
// kept (remove_identity would drop it as the inference identity).
Graph simplify_for_training(Graph g);

}  // namespace dc
