#pragma once

#include "ir/graph.h"

namespace dc {

Graph fuse_gelu(Graph g);

}  // namespace dc
