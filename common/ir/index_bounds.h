// Which values an integer graph input may take when dc feeds it random values: the exclusive
// upper bound of an input read as indices (Gather, GatherElements, GatherND, Scatter,
// ScatterElements, ScatterND, OneHot; the training ops' labels and dc.GatherGrad's indices). The coordinator computes these once per workload and
// sends them in the Job; the worker draws the inputs from them directly (random_inputs.h).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace dc {

// Per graph input, in graph input order: the smallest indexed extent over every node that
// reads it as indices, 0 where no node does.
std::vector<int64_t> input_index_bounds(const Graph& g);

}  // namespace dc
