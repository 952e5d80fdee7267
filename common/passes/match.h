// Small graph queries shared by the pattern-matching passes (fold_batch_norm,
// fuse_layer_norm, fuse_gelu): who reads a tensor, is it a one-element constant, and fresh
// tensor names. Header-only: each is a few lines and has no state of its own.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace dc::match {

// Consumers of every tensor and the set of graph outputs, computed once per pass.
struct Uses {
  std::map<std::string, std::vector<size_t>> consumers;  // node index once per use
  std::set<std::string> outputs;

  explicit Uses(const Graph& g)
      : consumers(g.consumers()), outputs(g.outputs.begin(), g.outputs.end()) {}

  const std::vector<size_t>& of(const std::string& tensor) const {
    static const std::vector<size_t> kNone;
    auto it = consumers.find(tensor);
    return it == consumers.end() ? kNone : it->second;
  }

  // The one node reading `tensor` (possibly through several of its inputs), if `tensor`
  // has exactly one consumer node and is not a graph output: the condition for folding it
  // away into a fused node.
  std::optional<size_t> sole_consumer(const std::string& tensor) const {
    if (outputs.count(tensor)) return std::nullopt;
    const auto& users = of(tensor);
    if (users.empty()) return std::nullopt;
    if (std::any_of(users.begin(), users.end(), [&](size_t u) { return u != users[0]; }))
      return std::nullopt;
    return users[0];
  }
};

// Value of a one-element numeric initializer (any rank, e.g. scalar or shape [1]).
inline std::optional<double> scalar_constant(const Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.numel() != 1) return std::nullopt;
  const DType t = it->second.dtype();
  if (!is_float(t) && !is_integer(t)) return std::nullopt;
  return static_cast<double>(it->second.to_float_vector()[0]);
}

// True if |value - want| <= rel * |want|.
inline bool near(double value, double want, double rel = 1e-4) {
  return std::fabs(value - want) <= rel * std::fabs(want);
}

// `base`, or `base_2`, `base_3`, ... : the first name no tensor of `g` uses yet.
inline std::string unique_name(const Graph& g, const std::string& base) {
  auto taken = [&](const std::string& n) {
    return g.tensors.count(n) || g.initializers.count(n) ||
           std::find(g.inputs.begin(), g.inputs.end(), n) != g.inputs.end() ||
           std::find(g.outputs.begin(), g.outputs.end(), n) != g.outputs.end();
  };
  if (!taken(base)) return base;
  for (int k = 2;; ++k) {
    std::string n = base + "_" + std::to_string(k);
    if (!taken(n)) return n;
  }
}

// The other input of a binary node whose input `known` is one of the two; nullopt if the
// node does not read `known` or reads it as both operands.
inline std::optional<std::string> other_input(const Node& n, const std::string& known) {
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.inputs[0] == known && n.inputs[1] != known) return n.inputs[1];
  if (n.inputs[1] == known && n.inputs[0] != known) return n.inputs[0];
  return std::nullopt;
}

// Rebuilds the node list after fusions: nodes flagged in `removed` are dropped, nodes with
// an entry in `replaced` are swapped for it in place (so order stays topological when the
// replacement sits where the last node of its pattern was).
inline std::vector<Node> rebuild_nodes(const std::vector<Node>& nodes,
                                       const std::vector<bool>& removed,
                                       std::map<size_t, Node> replaced) {
  std::vector<Node> out;
  out.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (auto it = replaced.find(i); it != replaced.end()) {
      out.push_back(std::move(it->second));
    } else if (!removed[i]) {
      out.push_back(nodes[i]);
    }
  }
  return out;
}

}  // namespace dc::match
