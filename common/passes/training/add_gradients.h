// Reverse-mode differentiation of a graph (docs/training.md, "Gradients").
#pragma once

#include <map>
#include <set>
#include <string>

#include "ir/graph.h"

namespace dc {

// Appends the nodes computing d(loss)/d(t) for every t in `wrt` that the loss depends on,
// visiting the forward nodes in reverse with the rule of each op (passes/gradients/).
// A tensor read more than once gets the sum of its gradients. Returns t -> its gradient's
// tensor name (tensors without a path to the loss are absent).
// UserError naming the node and its op for a node on a path from `wrt` to the loss whose
// op has no gradient rule.
std::map<std::string, std::string> add_gradients(Graph& g, const std::string& loss,
                                                 const std::set<std::string>& wrt);

// The vector-Jacobian product: as add_gradients, with each tensor in `seeds` given the
// gradient held by the tensor it maps to (same type), instead of a scalar loss seeded with 1.
std::map<std::string, std::string> add_vector_jacobian_product(
    Graph& g, const std::map<std::string, std::string>& seeds, const std::set<std::string>& wrt);

}  // namespace dc
