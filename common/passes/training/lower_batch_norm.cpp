#include "passes/training/lower_batch_norm.h"

#include "ir/error.h"
#include "ir/shape.h"
#include "passes/gradients/grad_builder.h"

namespace dc {

namespace {

// Every input that reads `from` reads `to` instead.
void rename_reads(Graph& g, const std::string& from, const std::string& to) {
  for (Node& n : g.nodes)
    for (auto& in : n.inputs)
      if (in == from) in = to;
}

}  // namespace

void lower_batch_norm_apply(Graph& g) {
  std::vector<Node> nodes = std::move(g.nodes);
  g.nodes.clear();
  std::vector<std::pair<std::string, std::string>> saved_means;  // saved mean -> the batch mean
  for (Node& n : nodes) {
    if (n.op != "dc.BatchNormTrain") {
      g.nodes.push_back(std::move(n));
      continue;
    }
    DC_INTERNAL_CHECK(n.inputs.size() == 7 && n.outputs.size() == 5, n.op, " '", n.name,
                      "' needs 7 inputs and 5 outputs");
    const std::string &x = n.inputs[0], &scale = n.inputs[1], &bias = n.inputs[2];
    const std::string &batch_mean = n.inputs[5], &y = n.outputs[0], &invstd = n.outputs[4];
    const Shape& xs = g.info(x).shape;
    Node stats{n.name, "dc.BatchNormStats", n.attrs, {n.inputs[3], n.inputs[4], batch_mean, n.inputs[6]},
               {n.outputs[1], n.outputs[2], invstd}};
    stats.attrs.set("count", shape_numel(xs) / xs.at(1));
    g.nodes.push_back(std::move(stats));
    saved_means.emplace_back(n.outputs[3], batch_mean);
    if (y.empty()) continue;
    Shape per_channel(xs.size() - 1, 1);  // [C, 1, ...]: broadcasts over [N, C, ...]
    per_channel[0] = xs[1];
    // Forward nodes: named batch_norm_apply_prefix, not "grad/...".
    grad::GradBuilder b(g, "");
    const std::string prefix = batch_norm_apply_prefix(n.name);
    b.set_context(prefix.substr(0, prefix.size() - 1));
    const auto channel = [&](const std::string& t) { return b.reshape(t, per_channel); };
    const std::string normed = b.mul(b.sub(x, channel(batch_mean)), channel(invstd));
    const std::string out = b.add(b.mul(normed, channel(scale)), channel(bias));
    g.nodes.back().outputs[0] = y;  // Y keeps its name
    g.tensors.erase(out);
  }
  for (const auto& [saved, batch] : saved_means) {
    rename_reads(g, saved, batch);
    g.tensors.erase(saved);
  }
}

}  // namespace dc
