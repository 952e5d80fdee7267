// STUB: replaced by the real pass.
#include "passes/fold_batch_norm.h"

namespace dc {

Graph fold_batch_norm(Graph g) { return g; }

}  // namespace dc
