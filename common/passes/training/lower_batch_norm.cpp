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

// The node just added writes `out` (the name the rest of the graph reads) instead of its
// fresh name, and is named `node_name` when one is given.
void write_to(Graph& g, const std::string& fresh_out, const std::string& out, const std::string& node_name = "") {
  g.nodes.back().outputs[0] = out;
  if (!node_name.empty()) g.nodes.back().name = node_name;
  g.tensors.erase(fresh_out);
}

// dc.BatchNormTrain `n`'s per-channel outputs as elementwise ops over [C], channel_stats
// (ops_training.cpp) in f32: ONNX's momentum, running = running * momentum + batch * (1 -
// momentum), the running variance from the unbiased batch variance (count / (count - 1)
// folded into its constant), invstd = 1 / sqrt(var + eps). Every one reads the batch mean
// or variance only through ops over [C]: the candidate generator fuses them as row-space
// outputs of the batch statistics' ReduceMeans, no kernel of their own.
void add_channel_stats(Graph& g, const Node& n, int64_t count) {
  const std::string &running_mean = n.inputs[3], &running_var = n.inputs[4];
  const std::string &batch_mean = n.inputs[5], &batch_var = n.inputs[6];
  const double momentum = n.attrs.get_float("momentum", 0.9f), eps = n.attrs.get_float("epsilon", 1e-5f);
  const double unbias = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
  grad::GradBuilder b(g, "");
  const std::string prefix = batch_norm_stats_prefix(n.name);
  b.set_context(prefix.substr(0, prefix.size() - 1));
  const auto update = [&](const std::string& running, const std::string& batch, double batch_factor) {
    return b.add(b.scale(running, momentum), b.scale(batch, batch_factor * (1 - momentum)));
  };
  write_to(g, update(running_mean, batch_mean, 1.0), n.outputs[1]);
  write_to(g, update(running_var, batch_var, unbias), n.outputs[2]);
  const std::string std_dev = b.unary("Sqrt", b.add(batch_var, b.scalar(eps, DType::f32)));
  write_to(g, b.unary("Reciprocal", std_dev), n.outputs[4], batch_norm_invstd_node(n.name));
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
    add_channel_stats(g, n, shape_numel(xs) / xs.at(1));
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
    write_to(g, out, y);  // Y keeps its name
  }
  for (const auto& [saved, batch] : saved_means) {
    rename_reads(g, saved, batch);
    g.tensors.erase(saved);
  }
}

}  // namespace dc
