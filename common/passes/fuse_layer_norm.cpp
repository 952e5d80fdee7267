// STUB: replaced by the real pass.
#include "passes/fuse_layer_norm.h"

namespace dc {

Graph fuse_layer_norm(Graph g) { return g; }

}  // namespace dc
