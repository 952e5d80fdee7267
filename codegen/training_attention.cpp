#include "training_attention.h"

#include <algorithm>

#include <fmt/format.h>

namespace dc {

namespace {

// One node `op` whose operands are workload inputs (read from memory) of float storage, and
// whose log-sum-exp (`lse`: an output or an input) is f32.
bool one_attention_node(const Graph& g, const char* op, size_t outputs, const std::string& (*lse)(const Node&)) {
  if (g.nodes.size() != 1 || g.nodes[0].op != op || g.nodes[0].outputs.size() != outputs) return false;
  const Node& n = g.nodes[0];
  for (const auto& t : n.inputs) {
    if (t.empty() || std::find(g.inputs.begin(), g.inputs.end(), t) == g.inputs.end()) return false;
    const DType dt = g.info(t).dtype;
    if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16) return false;
  }
  return g.info(lse(n)).dtype == DType::f32;
}

}  // namespace

bool is_training_attention(const Workload& w) {
  return one_attention_node(w.graph, "dc.Attention", 2, [](const Node& n) -> const std::string& { return n.outputs[1]; });
}

bool is_attention_grad_on_template(const Workload& w) {
  return w.graph.nodes.size() == 1 && w.graph.nodes[0].inputs.size() >= 6 &&
         one_attention_node(w.graph, "dc.AttentionGrad", 3, [](const Node& n) -> const std::string& { return n.inputs[5]; });
}

Workload expand_training_attention(const Workload& w) {
  if (!is_training_attention(w)) return w;
  Workload x = w;
  Graph& g = x.graph;
  const Node a = g.nodes[0];
  g.nodes.clear();
  const Shape& q = g.info(a.inputs[0]).shape;
  Shape scores(q.begin(), q.end() - 1);
  scores.push_back(g.info(a.inputs[1]).shape.back());
  const auto tensor = [&](const std::string& name, DType dt, const Shape& s) {
    g.tensors[name] = TensorInfo{dt, s};
    return name;
  };
  const auto node = [&](const char* op, std::vector<std::string> in, const std::string& out) {
    Node n;
    n.name = fmt::format("{}/{}", a.name, g.nodes.size());
    n.op = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    g.nodes.push_back(std::move(n));
    return out;
  };
  const std::string scale = "dc_attention_scale", zero = "dc_attention_zero";
  g.initializers[scale] = Tensor::scalar<float>(a.attrs.get_float("scale", 1.f));
  g.initializers[zero] = Tensor::scalar<float>(0.f);
  tensor(scale, DType::f32, {});
  tensor(zero, DType::f32, {});
  std::string s = node("MatMul", {a.inputs[0], a.inputs[1]}, tensor("dc_attention_qk", DType::f32, scores));
  s = node("Mul", {s, scale}, tensor("dc_attention_scaled", DType::f32, scores));
  if (a.has_input(3)) s = node("Add", {s, a.inputs[3]}, tensor("dc_attention_masked", DType::f32, scores));
  const std::string p = node("Softmax", {s}, tensor("dc_attention_p", DType::f32, scores));
  g.nodes.back().attrs.set("axis", int64_t{-1});
  const std::string nan = node("IsNaN", {p}, tensor("dc_attention_nan", DType::boolean, scores));
  const std::string guarded = node("Where", {nan, zero, p}, tensor("dc_attention_pg", DType::f32, scores));
  node("MatMul", {guarded, a.inputs[2]}, a.outputs[0]);
  x.kind = ClusterKind::attention;
  return x;
}

}  // namespace dc
