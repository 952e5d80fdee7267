#pragma once

#include "ir/graph.h"

namespace dc {

Graph fold_constants(Graph g);

}  // namespace dc
