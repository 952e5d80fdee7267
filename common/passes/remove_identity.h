#pragma once

#include "ir/graph.h"

namespace dc {

Graph remove_identity(Graph g);

}  // namespace dc
