#pragma once

#include "ir/graph.h"

namespace dc {

Graph fold_batch_norm(Graph g);

}  // namespace dc
