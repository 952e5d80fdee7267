// dc's graph IR: what import produces, passes transform and every later stage reads.
//
// A Graph is a plain value. Passes are free functions Graph -> Graph (one per file pair in
// passes/), never hidden mutation of shared state. Nodes are kept in topological order;
// tensors are referred to by name; "" in a node's input list marks an absent optional input.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/dtype.h"
#include "ir/shape.h"
#include "ir/tensor.h"

namespace dc {

// Static type of a tensor in the graph.
struct TensorInfo {
  DType dtype = DType::undefined;
  Shape shape;
};

using AttrValue = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, Tensor>;

// Named node attributes with typed, checked accessors. A wrong type or a missing required
// attribute is a UserError naming the attribute (the model is malformed, not dc).
class Attributes {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  void erase(const std::string& name) { values_.erase(name); }
  const std::map<std::string, AttrValue>& all() const { return values_; }

  int64_t get_int(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t dflt) const;
  float get_float(const std::string& name) const;
  float get_float(const std::string& name, float dflt) const;
  std::string get_string(const std::string& name) const;
  std::string get_string(const std::string& name, const std::string& dflt) const;
  std::vector<int64_t> get_ints(const std::string& name) const;
  std::vector<int64_t> get_ints(const std::string& name, const std::vector<int64_t>& dflt) const;
  std::vector<float> get_floats(const std::string& name) const;
  const Tensor& get_tensor(const std::string& name) const;

  bool operator==(const Attributes& o) const;

 private:
  const AttrValue& at(const std::string& name) const;
  std::map<std::string, AttrValue> values_;
};

struct Node {
  std::string name;  // may be empty in the source model; import gives every node a name
  std::string op;    // ONNX op_type, e.g. "Conv"
  Attributes attrs;
  std::vector<std::string> inputs;   // "" = absent optional input
  std::vector<std::string> outputs;

  // Input i's name, or "" if the node has fewer inputs.
  const std::string& input(size_t i) const;
  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
};

struct Graph {
  std::string name;
  int64_t opset = 0;  // default-domain opset the model was imported with
  std::vector<Node> nodes;                    // topological order
  std::map<std::string, TensorInfo> tensors;  // type of every tensor: inputs, weights, values
  std::map<std::string, Tensor> initializers; // weights and constants
  std::vector<std::string> inputs;            // runtime inputs (never initializers)
  std::vector<std::string> outputs;

  bool is_constant(const std::string& tensor) const { return initializers.count(tensor) != 0; }
  const TensorInfo& info(const std::string& tensor) const;

  // Index of the node producing `tensor`, or nullopt (graph input, initializer, unknown).
  std::optional<size_t> producer(const std::string& tensor) const;
  // For every tensor name, the indices of nodes consuming it (a node appears once per use).
  std::map<std::string, std::vector<size_t>> consumers() const;

  // Sum of initializer element counts.
  int64_t parameter_count() const;
  // Node count per op type.
  std::map<std::string, int64_t> op_counts() const;
};

// Reorders nodes topologically (stable: keeps the given order where it is already valid).
// UserError naming a node on the cycle if the graph has one, or a tensor that no node,
// input or initializer defines.
Graph topo_sort(Graph g);

}  // namespace dc
