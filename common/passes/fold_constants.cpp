// STUB: replaced by the real pass.
#include "passes/fold_constants.h"

namespace dc {

Graph fold_constants(Graph g) { return g; }

}  // namespace dc
