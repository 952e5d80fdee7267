// Helpers for the graph-pass suites: build small graphs by hand, fill in their types by
// running them, and check that a pass kept the outputs and left a well-formed graph.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ref/executor.h"
#include "testing.h"

namespace dc::testing {

inline Attributes attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attributes a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

inline void add_input(Graph& g, const std::string& name, Shape shape,
                      DType dtype = DType::f32) {
  g.inputs.push_back(name);
  g.tensors[name] = TensorInfo{dtype, std::move(shape)};
}

inline void add_initializer(Graph& g, const std::string& name, Tensor t) {
  g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  g.initializers[name] = std::move(t);
}

inline Node& add_node(Graph& g, std::string op, std::vector<std::string> inputs,
                      std::vector<std::string> outputs, Attributes a = {}) {
  g.nodes.push_back(make_node(std::move(op), std::move(inputs), std::move(outputs), std::move(a)));
  return g.nodes.back();
}

// One random f32 value per graph input (all test graphs take f32 inputs).
inline ref::TensorMap random_inputs(const Graph& g, uint32_t seed) {
  ref::TensorMap in;
  for (const auto& name : g.inputs) in[name] = random_tensor(g.info(name).shape, seed++);
  return in;
}

// Records the type of every node output by running the graph once, as import would.
inline Graph with_types(Graph g, uint32_t seed = 7) {
  ref::RunOptions opts;
  opts.keep_intermediates = true;
  for (const auto& [name, t] : ref::run_graph(g, random_inputs(g, seed), opts))
    g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  return g;
}

// Runs both graphs on the same random inputs and compares every output of `before`.
inline void expect_same_outputs(const Graph& before, const Graph& after, float tol = 1e-5f,
                                uint32_t seed = 11) {
  ASSERT_EQ(before.outputs, after.outputs);
  const auto in = random_inputs(before, seed);
  const auto want = ref::run_graph(before, in);
  const auto got = ref::run_graph(after, in);
  for (const auto& name : before.outputs) {
    SCOPED_TRACE("output " + name);
    expect_tensor_near(got.at(name), want.at(name), tol, tol);
  }
}

// Every tensor read or written has a type, initializers' types match their values, and
// the node order is topological (topo_sort leaves it unchanged).
inline void expect_well_formed(const Graph& g) {
  std::set<std::string> names(g.inputs.begin(), g.inputs.end());
  names.insert(g.outputs.begin(), g.outputs.end());
  for (const auto& n : g.nodes) {
    for (const auto& t : n.inputs)
      if (!t.empty()) names.insert(t);
    for (const auto& t : n.outputs)
      if (!t.empty()) names.insert(t);
  }
  for (const auto& t : names) EXPECT_TRUE(g.tensors.count(t)) << "no type for '" << t << "'";
  for (const auto& [name, t] : g.initializers) {
    ASSERT_TRUE(g.tensors.count(name)) << "no type for initializer '" << name << "'";
    EXPECT_EQ(g.tensors.at(name).dtype, t.dtype()) << name;
    EXPECT_EQ(g.tensors.at(name).shape, t.shape()) << name;
  }
  Graph sorted;
  ASSERT_NO_THROW(sorted = topo_sort(g));
  ASSERT_EQ(sorted.nodes.size(), g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    EXPECT_EQ(sorted.nodes[i].name, g.nodes[i].name) << "node order is not topological";
}

inline int64_t op_count(const Graph& g, const std::string& op) {
  const auto counts = g.op_counts();
  auto it = counts.find(op);
  return it == counts.end() ? 0 : it->second;
}

inline const Node* find_node(const Graph& g, const std::string& op) {
  for (const auto& n : g.nodes)
    if (n.op == op) return &n;
  return nullptr;
}

}  // namespace dc::testing
