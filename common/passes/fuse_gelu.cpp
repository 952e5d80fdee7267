// STUB: replaced by the real pass.
#include "passes/fuse_gelu.h"

namespace dc {

Graph fuse_gelu(Graph g) { return g; }

}  // namespace dc
