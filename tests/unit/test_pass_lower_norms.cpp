// lower_norms: InstanceNormalization, GroupNormalization (per-group and per-channel
// scale/bias, constant or run-time), LpNormalization (p 1 and 2) and LRN become
// LayerNormalization / Reduce* / AveragePool and elementwise ops that compute the same
// values as the reference kernels of the original ops; and those kernels' own identities
// (GroupNorm with one channel per group is InstanceNorm, with one group LayerNorm over C..).
#include <cmath>
#include <set>

#include "pass_testing.h"
#include "passes/lower_norms.h"
#include "ref/executor.h"

namespace dc {
namespace {

using testing::add_initializer;
using testing::add_input;
using testing::add_node;
using testing::attrs;
using testing::op_count;

// Lowers `g` (typed), checks that `op` is gone and `replacement` appears, and that outputs
// agree with the original's reference run on seeded random inputs.
void expect_lowered(const Graph& g, const std::string& op, const std::string& replacement) {
  const Graph typed = testing::with_types(g);
  const Graph lowered = lower_norms(typed);
  testing::expect_well_formed(lowered);
  EXPECT_EQ(op_count(lowered, op), 0) << op;
  EXPECT_GE(op_count(lowered, replacement), 1) << replacement;
  std::set<std::string> names;
  for (const auto& n : lowered.nodes) EXPECT_TRUE(names.insert(n.name).second) << "two nodes named " << n.name;
  testing::expect_same_outputs(typed, lowered, 2e-5f);
}

TEST(PassLowerNorms, InstanceNormalization) {
  for (bool constant : {false, true}) {
    Graph g;
    add_input(g, "x", {2, 3, 4, 5});
    if (constant) {
      add_initializer(g, "s", testing::random_tensor({3}, 3, 0.5f, 2.f));
      add_initializer(g, "b", testing::random_tensor({3}, 4));
    } else {
      add_input(g, "s", {3});
      add_input(g, "b", {3});
    }
    add_node(g, "InstanceNormalization", {"x", "s", "b"}, {"y"}, attrs({{"epsilon", 1e-3f}}));
    g.outputs = {"y"};
    expect_lowered(g, "InstanceNormalization", "LayerNormalization");
  }
}

TEST(PassLowerNorms, GroupNormalization) {
  for (int64_t params : {2, 6}) {  // opset 18 (per group) and 21 (per channel)
    for (bool constant : {false, true}) {
      Graph g;
      add_input(g, "x", {2, 6, 3, 4});
      if (constant) {
        add_initializer(g, "s", testing::random_tensor({params}, 5, 0.5f, 2.f));
        add_initializer(g, "b", testing::random_tensor({params}, 6));
      } else {
        add_input(g, "s", {params});
        add_input(g, "b", {params});
      }
      add_node(g, "GroupNormalization", {"x", "s", "b"}, {"y"}, attrs({{"num_groups", int64_t{2}}}));
      g.outputs = {"y"};
      expect_lowered(g, "GroupNormalization", "LayerNormalization");
    }
  }
}

TEST(PassLowerNorms, GroupNormReferenceIdentities) {
  const Tensor x = testing::random_tensor({2, 4, 3, 5}, 9, -3.f, 3.f);
  const Tensor s = testing::random_tensor({4}, 10, 0.5f, 2.f), b = testing::random_tensor({4}, 11);
  Graph g;
  add_input(g, "x", {2, 4, 3, 5});
  add_input(g, "s", {4});
  add_input(g, "b", {4});
  add_node(g, "GroupNormalization", {"x", "s", "b"}, {"per_channel"}, attrs({{"num_groups", int64_t{4}}}));
  add_node(g, "InstanceNormalization", {"x", "s", "b"}, {"instance"});
  g.outputs = {"per_channel", "instance"};
  auto out = ref::run_graph(g, {{"x", x}, {"s", s}, {"b", b}});
  testing::expect_tensor_near(out.at("per_channel"), out.at("instance"), 1e-6f, 1e-6f);
  // One group: LayerNorm over C, H, W (scale 1, bias 0).
  Graph h;
  add_input(h, "x", {2, 4, 3, 5});
  add_initializer(h, "one", Tensor::from_vector<float>({1}, {1.f}));
  add_initializer(h, "zero", Tensor::from_vector<float>({1}, {0.f}));
  add_initializer(h, "ones", Tensor::from_vector<float>({4, 1, 1}, {1, 1, 1, 1}));
  add_initializer(h, "zeros", Tensor::from_vector<float>({4, 1, 1}, {0, 0, 0, 0}));
  add_initializer(h, "s1", Tensor::from_vector<float>({1}, {1.f}));
  add_initializer(h, "b1", Tensor::from_vector<float>({1}, {0.f}));
  add_node(h, "GroupNormalization", {"x", "s1", "b1"}, {"gn"}, attrs({{"num_groups", int64_t{1}}}));
  add_node(h, "LayerNormalization", {"x", "one", "zero"}, {"ln"}, attrs({{"axis", int64_t{1}}}));
  h.outputs = {"gn", "ln"};
  out = ref::run_graph(h, {{"x", x}});
  testing::expect_tensor_near(out.at("gn"), out.at("ln"), 1e-5f, 1e-5f);
  // Hand-computed: InstanceNorm of [1, 2, 3, 4] (mean 2.5, variance 1.25), scale 2, bias 1.
  Graph k;
  add_input(k, "x", {1, 1, 4});
  add_initializer(k, "s", Tensor::from_vector<float>({1}, {2.f}));
  add_initializer(k, "b", Tensor::from_vector<float>({1}, {1.f}));
  add_node(k, "InstanceNormalization", {"x", "s", "b"}, {"y"}, attrs({{"epsilon", 0.f}}));
  k.outputs = {"y"};
  const float r = 1.f / std::sqrt(1.25f);
  testing::expect_tensor_near(
      ref::run_graph(k, {{"x", Tensor::from_vector<float>({1, 1, 4}, {1, 2, 3, 4})}}).at("y"),
      Tensor::from_vector<float>({1, 1, 4}, {1 - 3 * r, 1 - r, 1 + r, 1 + 3 * r}), 1e-6f, 1e-6f);
}

TEST(PassLowerNorms, LpNormalization) {
  for (int64_t p : {1, 2})
    for (int64_t axis : {-1, 1}) {
      Graph g;
      add_input(g, "x", {3, 4, 5});
      add_node(g, "LpNormalization", {"x"}, {"y"}, attrs({{"p", p}, {"axis", axis}}));
      g.outputs = {"y"};
      expect_lowered(g, "LpNormalization", p == 1 ? "ReduceL1" : "ReduceL2");
    }
}

TEST(PassLowerNorms, Lrn) {
  for (int64_t size : {1, 2, 3, 5}) {
    Graph g;
    add_input(g, "x", {2, 6, 3, 4});
    add_node(g, "LRN", {"x"}, {"y"},
             attrs({{"size", size}, {"alpha", 0.5f}, {"beta", 0.6f}, {"bias", 2.f}}));
    g.outputs = {"y"};
    expect_lowered(g, "LRN", "AveragePool");
  }
  Graph g3;  // rank 3: [N, C, L]
  add_input(g3, "x", {2, 5, 7});
  add_node(g3, "LRN", {"x"}, {"y"}, attrs({{"size", int64_t{3}}}));
  g3.outputs = {"y"};
  expect_lowered(g3, "LRN", "AveragePool");
}

}  // namespace
}  // namespace dc
