// STUB: replaced by the real pass.
#include "passes/eliminate_dead_nodes.h"

namespace dc {

Graph eliminate_dead_nodes(Graph g) { return g; }

}  // namespace dc
