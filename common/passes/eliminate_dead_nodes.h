#pragma once

#include "ir/graph.h"

namespace dc {

Graph eliminate_dead_nodes(Graph g);

}  // namespace dc
