#include "passes/training/training_forward.h"

#include <algorithm>

#include "ir/error.h"
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

Node batch_norm_train(Graph& g, const Node& bn) {
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
  n.inputs = bn.inputs;
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
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node n = g.nodes[i];
    if (n.op == "BatchNormalization") g.nodes[i] = batch_norm_train(g, n);
    if (n.op == "Dropout") g.nodes[i] = dropout_train(g, n, ++seed);
    if (n.op == "LayerNormalization") g.nodes[i] = layer_norm_train(g, n);
  }
  return g;
}

}  // namespace dc
