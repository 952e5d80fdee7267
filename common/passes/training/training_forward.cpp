#include "passes/training/training_forward.h"

#include <algorithm>

#include "ir/error.h"
#include "passes/gradients/grad_builder.h"
#include "passes/training_state.h"

namespace dc {

namespace {

void add_step_counter(Graph& g) {
  const std::string step(kStepTensor);
  if (g.initializers.count(step)) return;
  DC_USER_CHECK(!g.tensors.count(step), "the model already has a tensor named '", step,
                "', which training reserves for its step counter");
  g.initializers[step] = Tensor::scalar<int64_t>(0);
  g.tensors[step] = TensorInfo{DType::i64, {}};
}

std::string fresh(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.tensors.count(name); ++k) name = base + "." + std::to_string(k);
  return name;
}

std::string add_tensor(Graph& g, const std::string& base, TensorInfo info) {
  const std::string name = fresh(g, base);
  g.tensors[name] = std::move(info);
  return name;
}

Node make_node(std::string name, std::string op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// The batch mean and biased variance of X [N, C, ...] per channel, by two ReduceMeans over
// the batch and spatial axes (the tuned row_reduce template: a per-channel loop would have
// one thread per channel), the variance from the centred values: appended to `nodes`.
std::pair<std::string, std::string> batch_statistics(Graph& g, const Node& bn, std::vector<Node>& nodes) {
  const std::string& x = bn.inputs[0];
  const TensorInfo xi = g.info(x);
  DC_USER_CHECK(xi.shape.size() >= 2, "node '", bn.name, "' (BatchNormalization): X must have rank >= 2");
  const std::vector<int64_t> axes = grad::batch_and_spatial_axes(xi.shape.size());
  Shape per_channel(xi.shape.size(), 1);
  per_channel[1] = xi.shape[1];
  const auto ints = [&](const std::string& base, std::vector<int64_t> v) {
    const std::string name = add_tensor(g, bn.name + base, TensorInfo{DType::i64, {static_cast<int64_t>(v.size())}});
    g.initializers[name] = Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, std::move(v));
    return name;
  };
  const TensorInfo stat{xi.dtype, {xi.shape[1]}};
  const std::string axes_t = ints("/stat_axes", axes);
  const auto reduce_mean = [&](const std::string& in, const std::string& base) {
    const std::string out = add_tensor(g, bn.name + base, stat);
    Node n = make_node(bn.name + base, "ReduceMean", {in, axes_t}, {out});
    n.attrs.set("keepdims", int64_t{0});
    nodes.push_back(std::move(n));
    return out;
  };
  const std::string mean = reduce_mean(x, "/batch_mean");
  const std::string mean_c = add_tensor(g, bn.name + "/batch_mean_c", TensorInfo{xi.dtype, per_channel});
  nodes.push_back(make_node(bn.name + "/batch_mean_c", "Reshape", {mean, ints("/channel_shape", per_channel)}, {mean_c}));
  const std::string centred = add_tensor(g, bn.name + "/centred", xi);
  nodes.push_back(make_node(bn.name + "/centred", "Sub", {x, mean_c}, {centred}));
  const std::string squares = add_tensor(g, bn.name + "/squares", xi);
  nodes.push_back(make_node(bn.name + "/squares", "Mul", {centred, centred}, {squares}));
  return {mean, reduce_mean(squares, "/batch_var")};
}

Node batch_norm_train(Graph& g, const Node& bn, std::vector<Node>& nodes) {
  DC_USER_CHECK(bn.inputs.size() == 5, "node '", bn.name, "' (BatchNormalization): expected 5 inputs");
  for (size_t i = 3; i < 5; ++i) {
    DC_USER_CHECK(g.is_constant(bn.inputs[i]), "node '", bn.name, "' (BatchNormalization): its "
                  "running statistics '", bn.inputs[i], "' must be initializers to train");
    DC_USER_CHECK(!g.tensors.count(next_name(bn.inputs[i])), "node '", bn.name,
                  "': running statistics '", bn.inputs[i], "' are shared with another node");
  }
  for (size_t k = 1; k < bn.outputs.size(); ++k)
    DC_USER_CHECK(bn.outputs[k].empty(), "node '", bn.name, "' (BatchNormalization): its "
                  "training-mode outputs are not supported in the source model (export it in eval mode)");
  Node n;
  n.name = bn.name;
  n.op = "dc.BatchNormTrain";
  const auto [batch_mean, batch_var] = batch_statistics(g, bn, nodes);
  n.inputs = bn.inputs;
  n.inputs.push_back(batch_mean);
  n.inputs.push_back(batch_var);
  n.attrs.set("epsilon", bn.attrs.get_float("epsilon", 1e-5f));
  n.attrs.set("momentum", bn.attrs.get_float("momentum", 0.9f));
  const TensorInfo stat = g.info(bn.inputs[3]);
  const std::string mean_next = next_name(bn.inputs[3]), var_next = next_name(bn.inputs[4]);
  const std::string saved_mean = fresh(g, bn.name + "/saved_mean");
  g.tensors[saved_mean] = stat;
  const std::string saved_invstd = fresh(g, bn.name + "/saved_invstd");
  g.tensors[saved_invstd] = stat;
  g.tensors[mean_next] = stat;
  g.tensors[var_next] = stat;
  n.outputs = {bn.outputs[0], mean_next, var_next, saved_mean, saved_invstd};
  g.outputs.push_back(mean_next);
  g.outputs.push_back(var_next);
  return n;
}

float dropout_ratio(const Graph& g, const Node& d) {
  if (d.attrs.has("ratio")) return d.attrs.get_float("ratio");  // opset < 12
  if (!d.has_input(1)) return 0.5f;
  DC_USER_CHECK(g.is_constant(d.inputs[1]), "node '", d.name, "' (Dropout): its ratio must be a "
                "constant to train");
  return g.initializers.at(d.inputs[1]).to_float_vector().at(0);
}

Node dropout_train(Graph& g, const Node& d, int64_t seed) {
  if (d.outputs.size() > 1 && !d.outputs[1].empty()) {
    const bool output = std::find(g.outputs.begin(), g.outputs.end(), d.outputs[1]) != g.outputs.end();
    DC_USER_CHECK(!output && !g.consumers().count(d.outputs[1]), "node '", d.name,
                  "' (Dropout): its mask output is used, which training does not support");
  }
  Node n;
  n.name = d.name;
  n.op = "dc.Dropout";
  n.inputs = {d.inputs[0], std::string(kStepTensor)};
  n.attrs.set("ratio", dropout_ratio(g, d));
  n.attrs.set("seed", seed);
  const std::string mask = fresh(g, d.name + "/mask");
  g.tensors[mask] = g.info(d.outputs[0]);
  if (d.outputs.size() > 1 && !d.outputs[1].empty()) g.tensors.erase(d.outputs[1]);
  n.outputs = {d.outputs[0], mask};
  return n;
}

// LayerNormalization's row mean and inverse std (its optional outputs 1 and 2, f32, the
// normalised dims 1), saved for the backward pass (grad_norm.cpp) so it need not recompute them.
Node layer_norm_train(Graph& g, Node ln) {
  Shape stat = g.info(ln.inputs.at(0)).shape;
  const int64_t rank = static_cast<int64_t>(stat.size());
  int64_t axis = ln.attrs.get_int("axis", -1);
  if (axis < 0) axis += rank;
  DC_USER_CHECK(axis >= 0 && axis < rank, "node '", ln.name, "' (LayerNormalization): axis ",
                ln.attrs.get_int("axis", -1), " is out of range for rank ", rank);
  std::fill(stat.begin() + axis, stat.end(), 1);
  ln.outputs.resize(3);
  const char* what[] = {"", "/saved_mean", "/saved_invstd"};
  for (size_t k = 1; k < 3; ++k) {
    if (!ln.outputs[k].empty()) continue;
    ln.outputs[k] = fresh(g, ln.name + what[k]);
    g.tensors[ln.outputs[k]] = TensorInfo{DType::f32, stat};
  }
  return ln;
}

}  // namespace

Graph use_training_forward(Graph g) {
  add_step_counter(g);
  int64_t seed = 0;
  std::vector<Node> nodes;
  for (const Node& n : g.nodes) {
    if (n.op == "BatchNormalization") nodes.push_back(batch_norm_train(g, n, nodes));
    else if (n.op == "Dropout") nodes.push_back(dropout_train(g, n, ++seed));
    else if (n.op == "LayerNormalization") nodes.push_back(layer_norm_train(g, n));
    else nodes.push_back(n);
  }
  g.nodes = std::move(nodes);
  return g;
}

}  // namespace dc
