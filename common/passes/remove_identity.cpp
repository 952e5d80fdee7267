#include "passes/remove_identity.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dc {

namespace {

bool mask_unused(const Node& n, const std::set<std::string>& read,
                 const std::set<std::string>& graph_outputs) {
  if (n.outputs.size() < 2 || n.outputs[1].empty()) return true;
  return !read.count(n.outputs[1]) && !graph_outputs.count(n.outputs[1]);
}

// Dropout is the identity at inference, which is its mode when training_mode (opset 12+)
// is absent or a constant false. A training_mode that is true or only known at run time
// keeps the node: then it drops values.
bool inference_dropout(const Graph& g, const Node& n) {
  if (!n.has_input(2)) return true;
  auto it = g.initializers.find(n.inputs[2]);
  if (it == g.initializers.end() || it->second.numel() != 1) return false;
  return it->second.to_float_vector()[0] == 0.f;
}

// A Reshape, Squeeze or Flatten whose output has its input's shape and dtype (shapes are
// static after import): torch 2.x's dynamo export ends GPT-2 with view(-1, 16, 64) of a
// [1, 16, 64] tensor, which would otherwise be a copy into the graph output.
bool noop_view(const Graph& g, const Node& n) {
  if (n.op != "Reshape" && n.op != "Squeeze" && n.op != "Flatten") return false;
  if (n.outputs.size() != 1) return false;
  const auto in = g.tensors.find(n.inputs[0]);
  const auto out = g.tensors.find(n.outputs[0]);
  return in != g.tensors.end() && out != g.tensors.end() && in->second.dtype != DType::undefined &&
         in->second.dtype == out->second.dtype && in->second.shape == out->second.shape;
}

bool removable(const Graph& g, const Node& n, const std::set<std::string>& read,
               const std::set<std::string>& graph_outputs) {
  if (!n.has_input(0) || n.outputs.empty() || n.outputs[0].empty()) return false;
  if (n.op == "Identity") return n.outputs.size() == 1;
  if (noop_view(g, n)) return true;
  if (n.op == "Dropout") return inference_dropout(g, n) && mask_unused(n, read, graph_outputs);
  return false;
}

}  // namespace

Graph remove_identity(Graph g) {
  const std::set<std::string> graph_outputs(g.outputs.begin(), g.outputs.end());
  const std::set<std::string> graph_inputs(g.inputs.begin(), g.inputs.end());
  std::set<std::string> read;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs)
      if (!in.empty()) read.insert(in);

  // alias: a removed node's output -> the tensor it passed on (already resolved, since nodes
  // are visited in topological order). rename: a producer's output -> the graph output name
  // it takes over from a removed node.
  std::map<std::string, std::string> alias;
  std::map<std::string, std::string> rename;
  std::map<std::string, size_t> producer;
  std::vector<bool> removed(g.nodes.size(), false);
  auto resolve = [&](const std::string& t) {
    auto it = alias.find(t);
    return it == alias.end() ? t : it->second;
  };

  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    for (auto& in : n.inputs)
      if (!in.empty()) in = resolve(in);
    if (!removable(g, n, read, graph_outputs)) {
      for (const auto& o : n.outputs)
        if (!o.empty()) producer[o] = i;
      continue;
    }
    const std::string& in = n.inputs[0];
    const std::string& out = n.outputs[0];
    if (!graph_outputs.count(out)) {
      alias[out] = in;
      removed[i] = true;
    } else if (producer.count(in) && !graph_inputs.count(in) && !graph_outputs.count(in) &&
               !rename.count(in)) {
      rename[in] = out;
      removed[i] = true;
    } else {
      // The graph output name must survive and the input cannot take it: keep the node.
      producer[out] = i;
      continue;
    }
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty()) g.tensors.erase(n.outputs[k]);  // the unused Dropout mask
  }

  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (removed[i]) continue;
    Node& n = g.nodes[i];
    for (auto& in : n.inputs)
      if (auto it = rename.find(in); it != rename.end()) in = it->second;
    for (auto& o : n.outputs)
      if (auto it = rename.find(o); it != rename.end()) o = it->second;
    kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  for (const auto& [from, to] : alias) g.tensors.erase(from);
  // The graph output keeps its own (identical) type; the producer's old name disappears.
  for (const auto& [from, to] : rename) g.tensors.erase(from);
  return g;
}

}  // namespace dc
