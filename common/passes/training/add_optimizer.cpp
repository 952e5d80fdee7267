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
  for (const auto& [w, grad] : gradients) {
    DC_USER_CHECK(g.info(w).dtype == DType::f32, "weight '", w, "' has dtype ",
                  dtype_name(g.info(w).dtype), "; dc trains f32 weights");
    g.nodes.push_back(update_node(g, spec, w, grad));
  }
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
