// Constant folding: evaluates at compile time what does not depend on runtime inputs.
#pragma once

#include "ir/graph.h"

namespace dc {

// In one topological sweep, replaces by initializers the outputs of
//   - every deterministic node whose inputs are all initializers (or absent), evaluated
//     with the reference executor (dc::ref::run_node), and
//   - every Shape and Size node whose input has a fully known static shape,
// and records each new initializer's computed type in g.tensors. Chains fold in the same
// sweep (torch's Shape -> Gather -> Unsqueeze -> Concat -> Reshape collapses to a constant
// shape). Not folded: random ops, Dropout, ops dc does not implement, and nodes that would
// materialise more than 1M elements from smaller inputs (ConstantOfShape, Expand, Tile ...),
// which stay cheap nodes instead of huge weights. Initializers left unused are for
// eliminate_dead_nodes to remove.
Graph fold_constants(Graph g);

}  // namespace dc
