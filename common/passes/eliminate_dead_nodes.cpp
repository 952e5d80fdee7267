#include "passes/eliminate_dead_nodes.h"

#include <set>
#include <string>
#include <vector>

namespace dc {

Graph eliminate_dead_nodes(Graph g) {
  // One backward sweep suffices: nodes are in topological order, so every consumer of a
  // node's outputs has been seen before the node itself.
  std::set<std::string> live(g.outputs.begin(), g.outputs.end());
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    for (const auto& o : n.outputs)
      if (!o.empty() && live.count(o)) keep[i] = true;
    if (!keep[i]) continue;
    for (const auto& in : n.inputs)
      if (!in.empty()) live.insert(in);
  }

  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);

  std::erase_if(g.initializers, [&](const auto& kv) { return !live.count(kv.first); });

  // Every name still defined: graph inputs, initializers, outputs of kept nodes.
  std::set<std::string> defined(g.inputs.begin(), g.inputs.end());
  for (const auto& [name, t] : g.initializers) defined.insert(name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) defined.insert(o);
  std::erase_if(g.tensors, [&](const auto& kv) { return !defined.count(kv.first); });
  return g;
}

}  // namespace dc
