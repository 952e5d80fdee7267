// Choosing the cover of a graph by candidate clusters with the least total cost: every node
// in exactly one chosen cluster. Used with estimated times by `plan` and with measured times
// by plan selection after tuning.
//
// Method: nodes are in topological order; a search that always extends the cover at the
// first uncovered node, over the candidates whose first node it is, memoised on (position,
// set of later nodes already covered). That is exact (it enumerates every exact cover, with
// memoisation) and linear on chains, where the covered-ahead sets stay small. On DAGs whose
// clusters span far in topological order the state count can grow; past a state budget the
// search falls back to a greedy cover (least cost per node first), which is sound (always a
// valid exact cover) but may not be optimal, and the result says so.
#pragma once

#include <cstddef>
#include <vector>

namespace dc {

struct CoverResult {
  std::vector<size_t> chosen;  // indices into the candidate list, sorted by first node
  double total_cost = 0;
  bool exact = true;           // false when the greedy fallback answered
};

// candidates[i] = sorted node indices (each < num_nodes); cost[i] >= 0. Every node must be
// in at least one candidate of its own (a singleton) or the call throws InternalError.
CoverResult select_cover(size_t num_nodes, const std::vector<std::vector<size_t>>& candidates,
                         const std::vector<double>& cost, size_t state_budget = 200000);

}  // namespace dc
