#include "cover.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "ir/error.h"

namespace dc {

namespace {

using Covered = std::vector<size_t>;  // sorted node indices > position, already covered

struct Search {
  size_t n;
  const std::vector<std::vector<size_t>>& cands;
  const std::vector<double>& cost;
  std::vector<std::vector<size_t>> starting_at;  // candidates by their first node
  std::map<std::pair<size_t, Covered>, std::pair<double, int64_t>> memo;  // -> (cost, choice)
  size_t budget;
  bool over_budget = false;

  // Least cost to cover nodes >= i given `ahead` (covered nodes >= i).
  double solve(size_t i, Covered ahead) {
    while (i < n && !ahead.empty() && ahead.front() == i) {
      ahead.erase(ahead.begin());
      ++i;
    }
    if (i >= n) return 0;
    auto key = std::make_pair(i, ahead);
    if (auto it = memo.find(key); it != memo.end()) return it->second.first;
    if (memo.size() >= budget) {
      over_budget = true;
      return std::numeric_limits<double>::infinity();
    }
    double best = std::numeric_limits<double>::infinity();
    int64_t choice = -1;
    for (size_t c : starting_at[i]) {
      const auto& nodes = cands[c];
      bool overlap = false;
      for (size_t k = 1; k < nodes.size() && !overlap; ++k)
        overlap = std::binary_search(ahead.begin(), ahead.end(), nodes[k]);
      if (overlap) continue;
      Covered next = ahead;
      next.insert(next.end(), nodes.begin() + 1, nodes.end());
      std::sort(next.begin(), next.end());
      const double total = cost[c] + solve(i + 1, std::move(next));
      if (total < best) {
        best = total;
        choice = static_cast<int64_t>(c);
      }
    }
    memo[key] = {best, choice};
    return best;
  }

  std::vector<size_t> reconstruct() const {
    std::vector<size_t> out;
    size_t i = 0;
    Covered ahead;
    while (true) {
      while (i < n && !ahead.empty() && ahead.front() == i) {
        ahead.erase(ahead.begin());
        ++i;
      }
      if (i >= n) break;
      const int64_t c = memo.at({i, ahead}).second;
      DC_INTERNAL_CHECK(c >= 0, "no cover from node ", i);
      out.push_back(static_cast<size_t>(c));
      ahead.insert(ahead.end(), cands[c].begin() + 1, cands[c].end());
      std::sort(ahead.begin(), ahead.end());
      ++i;
    }
    return out;
  }
};

// Greedy fallback: repeatedly take the candidate with the least cost per node among those
// disjoint from what is covered. Singletons guarantee it completes.
std::vector<size_t> greedy_cover(size_t n, const std::vector<std::vector<size_t>>& cands,
                                 const std::vector<double>& cost) {
  std::vector<size_t> order(cands.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return cost[a] / double(cands[a].size()) < cost[b] / double(cands[b].size());
  });
  std::vector<bool> covered(n, false);
  std::vector<size_t> out;
  for (size_t c : order) {
    bool free = std::none_of(cands[c].begin(), cands[c].end(), [&](size_t v) { return covered[v]; });
    if (!free) continue;
    for (size_t v : cands[c]) covered[v] = true;
    out.push_back(c);
  }
  DC_INTERNAL_CHECK(std::all_of(covered.begin(), covered.end(), [](bool b) { return b; }),
                    "greedy cover left a node uncovered");
  return out;
}

}  // namespace

CoverResult select_cover(size_t num_nodes, const std::vector<std::vector<size_t>>& candidates,
                         const std::vector<double>& cost, size_t state_budget) {
  DC_INTERNAL_CHECK(candidates.size() == cost.size(), "one cost per candidate");
  Search s{num_nodes, candidates, cost, std::vector<std::vector<size_t>>(num_nodes), {},
           state_budget};
  std::vector<bool> has_singleton(num_nodes, false);
  for (size_t c = 0; c < candidates.size(); ++c) {
    const auto& nodes = candidates[c];
    DC_INTERNAL_CHECK(!nodes.empty() && std::is_sorted(nodes.begin(), nodes.end()) &&
                          nodes.back() < num_nodes,
                      "candidate ", c, " is empty, unsorted or out of range");
    DC_INTERNAL_CHECK(cost[c] >= 0, "negative cost for candidate ", c);
    s.starting_at[nodes.front()].push_back(c);
    if (nodes.size() == 1) has_singleton[nodes.front()] = true;
  }
  for (size_t v = 0; v < num_nodes; ++v)
    DC_INTERNAL_CHECK(has_singleton[v], "node ", v, " has no singleton candidate");

  CoverResult r;
  s.solve(0, {});
  if (!s.over_budget) {
    r.chosen = s.reconstruct();
  } else {
    r.chosen = greedy_cover(num_nodes, candidates, cost);
    r.exact = false;
  }
  std::sort(r.chosen.begin(), r.chosen.end(),
            [&](size_t a, size_t b) { return candidates[a].front() < candidates[b].front(); });
  for (size_t c : r.chosen) r.total_cost += cost[c];
  return r;
}

}  // namespace dc
