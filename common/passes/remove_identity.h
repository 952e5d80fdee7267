// Removes nodes that compute nothing: Identity, Dropout in inference mode, and a Reshape,
// Squeeze or Flatten whose output has its input's shape and dtype.
#pragma once

#include "ir/graph.h"

namespace dc {

// Drops every Identity, every Reshape/Squeeze/Flatten that keeps its input's shape, and every
// Dropout whose training_mode input is absent or a constant false and whose mask output is unused; consumers read the node's input instead. When the
// dropped node's output is a graph output, that name is kept: the producer of the input is
// renamed to it, or, where the input is a graph input, an initializer or itself a graph
// output (so it cannot be renamed), the node stays.
Graph remove_identity(Graph g);

}  // namespace dc
