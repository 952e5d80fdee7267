// Arithmetic work of a node, counted the usual way: a multiply-add is 2 FLOPs; elementwise
// ops 1 per output element; data movement 0. Used by `inspect` and later by the estimator.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace dc {

int64_t node_flops(const Graph& g, const Node& n);
int64_t graph_flops(const Graph& g);

}  // namespace dc
