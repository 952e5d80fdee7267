// Dead code elimination over the graph.
#pragma once

#include "ir/graph.h"

namespace dc {

// Removes nodes none of whose outputs reach a graph output, initializers nothing reads,
// and the type entries of tensors that no longer exist. Graph inputs stay even when unused:
// they are the model's interface.
Graph eliminate_dead_nodes(Graph g);

}  // namespace dc
