#include "passes/simplify_for_training.h"

#include <algorithm>
#include <map>

#include "passes/simplify.h"

namespace dc {

namespace {

// Dropout -> a placeholder op the inference passes leave alone, and back.
constexpr const char* kKeptDropout = "dc.KeptDropout";

void rename_op(Graph& g, const std::string& from, const std::string& to) {
  for (Node& n : g.nodes)
    if (n.op == from) n.op = to;
}

}  // namespace

Graph simplify_for_training(Graph g) {
  // Weights become graph inputs for the duration: nothing folds them.
  std::map<std::string, Tensor> shielded;
  for (const auto& [name, t] : g.initializers)
    if (is_float(t.dtype()) && t.rank() >= 1) shielded[name] = t;
  for (const auto& [name, t] : shielded) {
    g.initializers.erase(name);
    g.inputs.push_back(name);
  }
  rename_op(g, "Dropout", kKeptDropout);
  SimplifyOptions opts;
  opts.fold_batch_norm = false;
  g = simplify(std::move(g), opts);
  rename_op(g, kKeptDropout, "Dropout");
  for (const auto& [name, t] : shielded) {
    auto it = std::find(g.inputs.begin(), g.inputs.end(), name);
    if (it != g.inputs.end()) g.inputs.erase(it);
    bool read = false;
    for (const Node& n : g.nodes)
      read = read || std::find(n.inputs.begin(), n.inputs.end(), name) != n.inputs.end();
    if (read || std::find(g.outputs.begin(), g.outputs.end(), name) != g.outputs.end()) {
      g.initializers[name] = t;
      g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
    } else {
      g.tensors.erase(name);
    }
  }
  return g;
}

}  // namespace dc
