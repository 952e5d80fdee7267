// ModelBuilder: a one-cluster workload built node by node, for the code generator's tests.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/workload.h"
#include "testing.h"

namespace dc::testing {

// A model graph built node by node; weights are initializers with random values (they
// become workload inputs), scalars stay constants.
struct ModelBuilder {
  Graph g;
  uint32_t seed = 100;

  ModelBuilder& input(const std::string& name, const Shape& s) {
    g.inputs.push_back(name);
    g.tensors[name] = {DType::f32, s};
    return *this;
  }
  ModelBuilder& weight(const std::string& name, const Shape& s) {
    g.initializers[name] = random_tensor(s, seed++);
    g.tensors[name] = {DType::f32, s};
    return *this;
  }
  ModelBuilder& scalar(const std::string& name, float v) {
    g.initializers[name] = Tensor::scalar(v);
    g.tensors[name] = {DType::f32, {}};
    return *this;
  }
  ModelBuilder& node(const std::string& op, std::vector<std::string> in, const std::string& out,
                     const Shape& out_shape, Attributes a = {}) {
    g.nodes.push_back(make_node(op, std::move(in), {out}, std::move(a)));
    g.tensors[out] = {DType::f32, out_shape};
    return *this;
  }
  // The whole graph as one cluster; its last node's output is the model output.
  Workload workload(ClusterKind kind) {
    g.outputs = {g.nodes.back().outputs[0]};
    std::vector<size_t> all;
    for (size_t i = 0; i < g.nodes.size(); ++i) all.push_back(i);
    return make_workload(g, all, kind);
  }
};

}  // namespace dc::testing
