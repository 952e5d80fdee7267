#include "passes/training/add_optimizer.h"

#include "ir/error.h"
#include "passes/training_state.h"

namespace dc {

namespace {

// A zero-filled initializer shaped like `like`, named `name`.
std::string zero_state(Graph& g, const std::string& like, const std::string& name) {
  DC_USER_CHECK(!g.tensors.count(name), "the model has a tensor named '", name,
                "', which training reserves for optimizer state");
  const TensorInfo t = g.info(like);
  g.initializers[name] = Tensor(t.dtype, t.shape);
  g.tensors[name] = t;
  return name;
}

// Declares the next-value outputs of an update node and makes them graph outputs.
std::vector<std::string> next_outputs(Graph& g, const std::vector<std::string>& states) {
  std::vector<std::string> outs;
  for (const auto& s : states) {
    outs.push_back(next_name(s));
    g.tensors[outs.back()] = g.info(s);
    g.outputs.push_back(outs.back());
  }
  return outs;
}

Node update_node(Graph& g, const TrainingSpec& spec, const std::string& w, const std::string& grad) {
  Node n;
  n.name = "optimizer/" + w;
  n.attrs.set("lr", static_cast<float>(spec.lr));
  n.attrs.set("weight_decay", static_cast<float>(spec.weight_decay));
  if (spec.optimizer == OptimizerKind::sgd) {
    n.op = "dc.SgdUpdate";
    n.attrs.set("momentum", static_cast<float>(spec.momentum));
    n.inputs = {w, grad};
    std::vector<std::string> states{w};
    if (spec.momentum != 0) {
      n.inputs.push_back(zero_state(g, w, w + "@momentum"));
      states.push_back(n.inputs.back());
    }
    n.outputs = next_outputs(g, states);
    return n;
  }
  n.op = "dc.AdamWUpdate";
  n.attrs.set("beta1", static_cast<float>(spec.beta1));
  n.attrs.set("beta2", static_cast<float>(spec.beta2));
  n.attrs.set("epsilon", static_cast<float>(spec.eps));
  const std::string m = zero_state(g, w, w + "@adam_m"), v = zero_state(g, w, w + "@adam_v");
  n.inputs = {w, grad, m, v, std::string(kStepTensor)};
  n.outputs = next_outputs(g, {w, m, v});
  return n;
}

}  // namespace

void add_optimizer(Graph& g, const TrainingSpec& spec,
                   const std::map<std::string, std::string>& gradients) {
  // Each update runs right after the node that finishes its gradient, so the gradient dies
  // there instead of living until the last one is done (the update writes W@next, never W,
  // so the backward nodes after it still read the old W).
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  std::map<size_t, std::vector<Node>> after;  // node index -> updates placed after it
  for (const auto& [w, grad] : gradients) {
    DC_USER_CHECK(g.info(w).dtype == DType::f32, "weight '", w, "' has dtype ",
                  dtype_name(g.info(w).dtype), "; dc trains f32 weights");
    const auto p = producer.find(grad);
    after[p == producer.end() ? g.nodes.size() - 1 : p->second].push_back(update_node(g, spec, w, grad));
  }
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    nodes.push_back(std::move(g.nodes[i]));
    if (auto it = after.find(i); it != after.end())
      for (auto& n : it->second) nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  const std::string step(kStepTensor), one = step + "/one";
  g.initializers[one] = Tensor::scalar<int64_t>(1);
  g.tensors[one] = TensorInfo{DType::i64, {}};
  Node inc;
  inc.name = "optimizer/step";
  inc.op = "Add";
  inc.inputs = {step, one};
  inc.outputs = next_outputs(g, {step});
  g.nodes.push_back(inc);
}

}  // namespace dc
