// Cover selection: least-cost exact covers on hand-built candidate sets with known answers.
#include <gtest/gtest.h>

#include <random>

#include "cover.h"
#include "ir/error.h"

namespace dc {
namespace {

using Cands = std::vector<std::vector<size_t>>;

TEST(Cover, ChainPrefersFusedWhenCheaper) {
  // conv(0) -> bias(1) -> relu(2): singletons cost 3+1+1, fused pair 3.5, fused triple 3.6.
  Cands c = {{0}, {1}, {2}, {0, 1}, {0, 1, 2}, {1, 2}};
  std::vector<double> cost = {3, 1, 1, 3.5, 3.6, 1.5};
  auto r = select_cover(3, c, cost);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.chosen, (std::vector<size_t>{4}));
  EXPECT_DOUBLE_EQ(r.total_cost, 3.6);
  // Make the triple expensive: best is {0,1} + {2} = 4.5 vs {0} + {1,2} = 4.5 vs singles 5.
  cost[4] = 10;
  cost[5] = 1.2;
  r = select_cover(3, c, cost);
  EXPECT_EQ(r.chosen, (std::vector<size_t>{0, 5}));
  EXPECT_DOUBLE_EQ(r.total_cost, 4.2);
}

TEST(Cover, DagWithNonContiguousClusters) {
  // 0 -> {1, 2}; candidate {0, 2} skips node 1 in topological order.
  Cands c = {{0}, {1}, {2}, {3}, {0, 2}, {1, 3}, {2, 3}};
  std::vector<double> cost = {2, 2, 2, 2, 2.5, 2.5, 3.9};
  auto r = select_cover(4, c, cost);
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.total_cost, 5.0);  // {0,2} + {1,3}
  EXPECT_EQ(r.chosen, (std::vector<size_t>{4, 5}));
}

// Brute force over all subsets for small random instances: the search must be optimal.
TEST(Cover, MatchesBruteForceOnRandomInstances) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 3 + rng() % 5;
    Cands c;
    std::vector<double> cost;
    for (size_t v = 0; v < n; ++v) {
      c.push_back({v});
      cost.push_back(1 + rng() % 10);
    }
    for (int extra = 0; extra < 6; ++extra) {
      std::vector<size_t> s;
      for (size_t v = 0; v < n; ++v)
        if (rng() % 3 == 0) s.push_back(v);
      if (s.size() < 2) continue;
      c.push_back(s);
      cost.push_back(1 + rng() % 15);
    }
    double best = 1e18;
    for (uint32_t mask = 0; mask < (1u << c.size()); ++mask) {
      std::vector<int> hits(n, 0);
      double total = 0;
      for (size_t i = 0; i < c.size(); ++i)
        if (mask >> i & 1) {
          total += cost[i];
          for (size_t v : c[i]) ++hits[v];
        }
      if (std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }))
        best = std::min(best, total);
    }
    auto r = select_cover(n, c, cost);
    EXPECT_DOUBLE_EQ(r.total_cost, best) << "trial " << trial;
    std::vector<int> hits(n, 0);
    for (size_t i : r.chosen)
      for (size_t v : c[i]) ++hits[v];
    for (size_t v = 0; v < n; ++v) EXPECT_EQ(hits[v], 1) << "node " << v << " trial " << trial;
  }
}

TEST(Cover, GreedyFallbackStaysAValidCover) {
  Cands c = {{0}, {1}, {2}, {3}, {0, 3}, {1, 2}};
  std::vector<double> cost = {1, 1, 1, 1, 1, 1};
  auto r = select_cover(4, c, cost, /*state_budget=*/1);
  EXPECT_FALSE(r.exact);
  std::vector<int> hits(4, 0);
  for (size_t i : r.chosen)
    for (size_t v : c[i]) ++hits[v];
  EXPECT_EQ(hits, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(r.total_cost, 2.0);
}

TEST(Cover, MissingSingletonIsAnInternalError) {
  EXPECT_THROW(select_cover(2, {{0}, {0, 1}}, {1, 1}), InternalError);
}

}  // namespace
}  // namespace dc
