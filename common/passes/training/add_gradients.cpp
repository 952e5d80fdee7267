#include "passes/training/add_gradients.h"

#include <algorithm>
#include <vector>

#include "ir/error.h"
#include "passes/gradients/bias_sums.h"
#include "passes/gradients/gradient_rules.h"

namespace dc {

namespace {

// Tensors that depend on `wrt` through float values: the ones that may need a gradient.
std::set<std::string> depends_on(const Graph& g, const std::set<std::string>& wrt) {
  std::set<std::string> dep = wrt;
  for (const Node& n : g.nodes) {
    bool reads = false;
    for (const auto& in : n.inputs) reads = reads || (!in.empty() && dep.count(in));
    if (!reads) continue;
    for (const auto& out : n.outputs)
      if (!out.empty() && is_float(g.info(out).dtype)) dep.insert(out);
  }
  return dep;
}

// Sums a tensor's gradient contributions into one tensor.
std::string total(grad::GradBuilder& b, const std::vector<std::string>& parts) {
  std::string sum = parts.at(0);
  for (size_t i = 1; i < parts.size(); ++i) sum = b.add(sum, parts[i]);
  return sum;
}

// Drops the backward nodes (those from index `first` on) whose outputs nothing reads: a
// rule's intermediate that a later rule looked through (GradBuilder::transpose cancels a
// Transpose of a Transpose) would otherwise be a kernel computing an unread tensor.
void drop_unread_backward_nodes(Graph& g, size_t first, const std::map<std::string, std::string>& gradients) {
  std::set<std::string> read(g.outputs.begin(), g.outputs.end());
  for (const auto& [t, grad] : gradients) read.insert(grad);
  for (size_t k = 0; k < first; ++k)
    for (const auto& in : g.nodes[k].inputs) read.insert(in);
  std::vector<bool> keep(g.nodes.size(), true);
  for (size_t k = g.nodes.size(); k-- > first;) {
    const Node& n = g.nodes[k];
    keep[k] = std::any_of(n.outputs.begin(), n.outputs.end(),
                          [&](const std::string& o) { return !o.empty() && read.count(o); });
    if (keep[k]) read.insert(n.inputs.begin(), n.inputs.end());
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (keep[k]) {
      kept.push_back(std::move(g.nodes[k]));
      continue;
    }
    for (const auto& o : g.nodes[k].outputs) g.tensors.erase(o);
  }
  g.nodes = std::move(kept);
}

}  // namespace

std::map<std::string, std::string> add_gradients(Graph& g, const std::string& loss,
                                                 const std::set<std::string>& wrt) {
  const TensorInfo lt = g.info(loss);
  DC_INTERNAL_CHECK(shape_numel(lt.shape) == 1, "the loss '", loss, "' is not a scalar");
  const std::string one = loss + "/grad_seed";
  DC_USER_CHECK(!g.tensors.count(one), "the model has a tensor named '", one, "'");
  g.initializers[one] = lt.dtype == DType::f64 ? Tensor::from_vector<double>(lt.shape, {1.0})
                                               : Tensor::from_vector<float>(lt.shape, {1.f});
  g.tensors[one] = lt;
  return add_vector_jacobian_product(g, {{loss, one}}, wrt);
}

std::map<std::string, std::string> add_vector_jacobian_product(
    Graph& g, const std::map<std::string, std::string>& seeds, const std::set<std::string>& wrt) {
  const std::set<std::string> dep = depends_on(g, wrt);
  std::map<std::string, std::vector<std::string>> parts;
  grad::GradBuilder b(g);
  for (const auto& [t, seed] : seeds) parts[t].push_back(seed);
  const size_t forward_nodes = g.nodes.size();
  for (size_t k = forward_nodes; k-- > 0;) {
    const Node node = g.nodes[k];  // a copy: the rules append to g.nodes
    grad::GradCall call{node, {}, {}};
    bool any_dy = false, any_want = false;
    b.set_context(node.name);
    for (const auto& out : node.outputs) {
      auto it = out.empty() ? parts.end() : parts.find(out);
      call.dy.push_back(it == parts.end() ? "" : total(b, it->second));
      any_dy = any_dy || !call.dy.back().empty();
    }
    for (const auto& in : node.inputs) {
      call.wants.push_back(!in.empty() && dep.count(in) && is_float(g.info(in).dtype));
      any_want = any_want || call.wants.back();
    }
    if (!any_dy || !any_want) continue;
    const grad::GradRuleDef* rule = grad::find_gradient_rule(node.op);
    DC_USER_CHECK(rule != nullptr, "node '", node.name, "' (", node.op, ") is on the path from a "
                  "trained weight to the loss, and dc has no gradient rule for ", node.op,
                  " (docs/training.md lists the ops it differentiates); --freeze the weights "
                  "before it to train the rest");
    const std::vector<std::string> grads = rule->rule(b, call);
    for (size_t i = 0; i < node.inputs.size() && i < grads.size(); ++i)
      if (call.wants[i] && !grads[i].empty()) parts[node.inputs[i]].push_back(grads[i]);
  }
  std::map<std::string, std::string> out;
  b.set_context("sum");
  for (const auto& t : wrt)
    if (auto it = parts.find(t); it != parts.end()) out[t] = total(b, it->second);
  grad::sum_biases_over_gemm_views(g, forward_nodes);
  drop_unread_backward_nodes(g, forward_nodes, out);
  return out;
}

}  // namespace dc
