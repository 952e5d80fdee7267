// eliminate_dead_nodes: nodes, initializers and types that no graph output needs go away.
#include "pass_testing.h"
#include "passes/eliminate_dead_nodes.h"

namespace dc {
namespace {

using namespace dc::testing;

TEST(PassEliminateDeadNodes, RemovesUnreachableNodesWeightsAndTypes) {
  Graph g;
  add_input(g, "x", {3});
  add_input(g, "unused_input", {3});
  add_initializer(g, "w_live", Tensor::from_vector<float>({3}, {1.f, 2.f, 3.f}));
  add_initializer(g, "w_dead", Tensor::from_vector<float>({3}, {4.f, 5.f, 6.f}));
  add_initializer(g, "w_orphan", Tensor::scalar<float>(1.f));
  add_node(g, "Neg", {"x"}, {"dead1"});
  add_node(g, "Add", {"x", "w_live"}, {"a"});
  add_node(g, "Mul", {"dead1", "w_dead"}, {"dead2"});
  add_node(g, "Relu", {"a"}, {"y"});
  add_node(g, "Abs", {"dead2"}, {"dead3"});
  g.outputs = {"y"};
  g = with_types(g);
  g.tensors["stale"] = TensorInfo{DType::f32, {1}};  // a type left behind by some pass

  Graph after = eliminate_dead_nodes(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(after.nodes[0].op, "Add");
  EXPECT_EQ(after.nodes[1].op, "Relu");
  EXPECT_EQ(after.initializers.size(), 1u);
  EXPECT_TRUE(after.initializers.count("w_live"));
  for (const char* t : {"dead1", "dead2", "dead3", "w_dead", "w_orphan", "stale"})
    EXPECT_FALSE(after.tensors.count(t)) << t;
  // Graph inputs are the interface: kept even when unused.
  EXPECT_EQ(after.inputs, (std::vector<std::string>{"x", "unused_input"}));
  EXPECT_TRUE(after.tensors.count("unused_input"));
  expect_same_outputs(g, after);
}

TEST(PassEliminateDeadNodes, KeepsNodeWhenAnyOutputIsLive) {
  // Structural only: a two-output node of which only the second output is used.
  Graph g;
  add_input(g, "x", {3});
  add_node(g, "TwoOut", {"x"}, {"p", "q"});
  add_node(g, "Relu", {"q"}, {"y"});
  g.outputs = {"y"};
  for (const char* t : {"p", "q", "y"}) g.tensors[t] = TensorInfo{DType::f32, {3}};
  Graph after = eliminate_dead_nodes(g);
  expect_well_formed(after);
  EXPECT_EQ(after.nodes.size(), 2u);
  EXPECT_TRUE(after.tensors.count("p"));  // still produced by a kept node
}

TEST(PassEliminateDeadNodes, InitializerThatIsAGraphOutputStays) {
  Graph g;
  add_input(g, "x", {2});
  add_initializer(g, "c", Tensor::from_vector<float>({2}, {1.f, 2.f}));
  add_node(g, "Neg", {"x"}, {"dead"});
  g.outputs = {"c"};
  g.tensors["dead"] = TensorInfo{DType::f32, {2}};
  Graph after = eliminate_dead_nodes(g);
  EXPECT_TRUE(after.nodes.empty());
  EXPECT_TRUE(after.initializers.count("c"));
  EXPECT_FALSE(after.tensors.count("dead"));
}

TEST(PassEliminateDeadNodes, LiveGraphIsUnchanged) {
  Graph g;
  add_input(g, "x", {2});
  add_node(g, "Neg", {"x"}, {"a"});
  add_node(g, "Relu", {"a"}, {"y"});
  g.outputs = {"y", "a"};
  g.tensors["a"] = g.tensors["y"] = TensorInfo{DType::f32, {2}};
  Graph after = eliminate_dead_nodes(g);
  EXPECT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(after.tensors.size(), 3u);
}

}  // namespace
}  // namespace dc
