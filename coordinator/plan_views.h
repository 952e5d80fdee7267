// Views are not kernels: a node that only re-describes its input's bytes (Reshape, Flatten,
// Squeeze, Unsqueeze, Identity; a Slice or Split whose every output is one contiguous run
// of its input's bytes) becomes `view` tensors of the plan instead of a copy kernel
// (assemble_plan, docs/plan-format.md "Views").
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace dc {

// The byte offset of each of `n`'s outputs inside its input 0, when `n` is such a view and
// every offset is a multiple of `alignment` (kernels rely on the plan's buffer alignment);
// nullopt otherwise.
std::optional<std::vector<int64_t>> view_byte_offsets(const Graph& g, const Node& n, int64_t alignment);

// True when the candidate cluster `nodes` is one node that the plan certainly turns into
// views (a view of a computed tensor, or of a weight in a training plan; no model output
// among its outputs): it launches
// nothing, so the cover prices it at zero. Otherwise a copy kernel priced at that cost
// could win over a cluster that absorbs the node's neighbour (a Transpose after attention).
bool is_free_view(const Graph& g, const std::vector<size_t>& nodes);

}  // namespace dc
