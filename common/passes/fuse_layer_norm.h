#pragma once

#include "ir/graph.h"

namespace dc {

Graph fuse_layer_norm(Graph g);

}  // namespace dc
