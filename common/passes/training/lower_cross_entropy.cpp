#include "passes/training/lower_cross_entropy.h"

#include "ir/error.h"

namespace dc {

namespace {

std::string fresh(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.tensors.count(name) || g.initializers.count(name); ++k) name = base + "." + std::to_string(k);
  return name;
}

// The nodes of one loss, in order, named after it.
std::vector<Node> lowered(Graph& g, const Node& ce) {
  DC_INTERNAL_CHECK(ce.inputs.size() == 2 && ce.outputs.size() == 2, ce.op, " '", ce.name,
                    "' needs (logits, labels) -> (loss, log_probs)");
  const std::string &logits = ce.inputs[0], &labels = ce.inputs[1];
  std::string log_probs = ce.outputs[1];
  if (log_probs.empty()) {
    log_probs = fresh(g, ce.name + "/log_probs");
    g.tensors[log_probs] = g.info(logits);
  }
  const TensorInfo lp = g.info(log_probs);
  Shape column = g.info(labels).shape;
  column.push_back(1);
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out, TensorInfo type,
                  Attributes a = {}) {
    const std::string name = out.empty() ? fresh(g, ce.name + "/" + op) : out;
    if (!g.tensors.count(name)) g.tensors[name] = std::move(type);
    return Node{ce.name + "/" + op, op, std::move(a), std::move(in), {name}};
  };
  Attributes last_axis;
  last_axis.set("axis", int64_t{-1});
  Attributes all;
  all.set("keepdims", int64_t{0});
  const std::string shape = fresh(g, ce.name + "/label_column_shape");
  g.initializers[shape] = Tensor::from_vector<int64_t>({static_cast<int64_t>(column.size())}, column);
  g.tensors[shape] = TensorInfo{DType::i64, {static_cast<int64_t>(column.size())}};
  std::vector<Node> out;
  out.push_back(node("LogSoftmax", {logits}, log_probs, lp, last_axis));
  out.push_back(node("Reshape", {labels, shape}, "", TensorInfo{g.info(labels).dtype, column}));
  out.push_back(node("GatherElements", {log_probs, out.back().outputs[0]}, "", TensorInfo{lp.dtype, column},
                     last_axis));
  out.push_back(node("Neg", {out.back().outputs[0]}, "", TensorInfo{lp.dtype, column}));
  std::string loss = ce.outputs[0];
  if (loss.empty()) loss = fresh(g, ce.name + "/loss");
  out.push_back(node("ReduceMean", {out.back().outputs[0]}, loss, TensorInfo{lp.dtype, {}}, all));
  return out;
}

}  // namespace

void lower_cross_entropy(Graph& g) {
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (Node& n : g.nodes) {
    if (n.op != "dc.SoftmaxCrossEntropy") {
      nodes.push_back(std::move(n));
      continue;
    }
    for (Node& m : lowered(g, n)) nodes.push_back(std::move(m));
  }
  g.nodes = std::move(nodes);
}

}  // namespace dc
