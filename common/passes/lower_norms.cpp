#include "passes/lower_norms.h"

#include <set>

#include <fmt/format.h>

#include "passes/match.h"

namespace dc {

namespace {

// Appends the lowered nodes of one normalisation node, naming new tensors after it.
class Lowering {
 public:
  Lowering(Graph& g, const Node& n, std::vector<Node>& out, std::set<std::string>& node_names)
      : g_(g), n_(n), out_(out), node_names_(node_names) {}

  // A new value tensor of `shape` (f32).
  std::string value(const std::string& what, Shape shape) {
    std::string t = match::unique_name(g_, fmt::format("{}_{}", n_.name, what));
    g_.tensors[t] = TensorInfo{DType::f32, std::move(shape)};
    return t;
  }
  std::string constant(const std::string& what, Tensor c) {
    std::string t = match::unique_name(g_, fmt::format("{}_{}", n_.name, what));
    g_.tensors[t] = TensorInfo{c.dtype(), c.shape()};
    g_.initializers[t] = std::move(c);
    return t;
  }
  std::string shape_constant(const Shape& s) {
    return constant("shape", Tensor::from_vector<int64_t>({static_cast<int64_t>(s.size())}, s));
  }
  void node(const std::string& op, std::vector<std::string> in, std::vector<std::string> outs,
            Attributes a = {}) {
    Node m;
    // Node names must be unique too (plans name their nodes): <node>_<op>, <node>_<op>_2, ...
    m.name = fmt::format("{}_{}", n_.name, op);
    for (int k = 2; node_names_.count(m.name); ++k) m.name = fmt::format("{}_{}_{}", n_.name, op, k);
    node_names_.insert(m.name);
    m.op = op;
    m.inputs = std::move(in);
    m.outputs = std::move(outs);
    m.attrs = std::move(a);
    out_.push_back(std::move(m));
  }
  std::string reshape(const std::string& x, const Shape& to) {
    const std::string y = value("reshaped", to);
    node("Reshape", {x, shape_constant(to)}, {y});
    return y;
  }

  // `p` ([C], or [G] repeated over C / G channels each) as a [C, 1, ...] tensor of rank r.
  std::string per_channel(const std::string& p, int64_t c, size_t rank) {
    Shape to(rank - 1, 1);
    to[0] = c;
    const int64_t n = shape_numel(g_.info(p).shape);
    if (g_.is_constant(p)) {
      const std::vector<float> v = g_.initializers.at(p).to_float_vector();
      std::vector<float> w(static_cast<size_t>(c));
      for (int64_t i = 0; i < c; ++i) w[static_cast<size_t>(i)] = v[static_cast<size_t>(n == c ? i : i / (c / n))];
      return constant("per_channel", Tensor::from_vector<float>(to, w));
    }
    std::string q = p;
    if (n != c) {  // [G] -> [G, 1] -> [G, C / G] -> [C]
      q = reshape(p, {n, 1});
      const std::string e = value("expanded", {n, c / n});
      node("Expand", {q, shape_constant({n, c / n})}, {e});
      q = e;
    }
    return reshape(q, to);
  }

  // out = LayerNormalization(x, axis 2, scale 1) * scale[C] + bias[C], x of shape `shape`.
  void normalise_then_affine(const std::string& x, const Shape& shape, const Shape& ln_shape,
                             const std::string& scale, const std::string& bias) {
    const std::string ln_in = ln_shape == shape ? x : reshape(x, ln_shape);
    const std::string ln_out = value("normalised", ln_shape);
    Attributes a;
    a.set("axis", int64_t{2});
    a.set("epsilon", n_.attrs.get_float("epsilon", 1e-5f));
    node("LayerNormalization",
         {ln_in, constant("ones", Tensor::from_vector<float>({1}, {1.f}))}, {ln_out}, a);
    const std::string normed = ln_shape == shape ? ln_out : reshape(ln_out, shape);
    const std::string scaled = value("scaled", shape);
    node("Mul", {normed, per_channel(scale, shape[1], shape.size())}, {scaled});
    node("Add", {scaled, per_channel(bias, shape[1], shape.size())}, {n_.outputs[0]});
  }

  void lp_norm(const Shape& shape) {
    const int64_t axis = normalize_axis(n_.attrs.get_int("axis", -1), static_cast<int64_t>(shape.size()), "axis");
    Shape kept = shape;
    kept[static_cast<size_t>(axis)] = 1;
    const std::string norm = value("norm", kept);
    Attributes a;
    a.set("axes", std::vector<int64_t>{axis});
    a.set("keepdims", int64_t{1});
    node(n_.attrs.get_int("p", 2) == 1 ? "ReduceL1" : "ReduceL2", {n_.inputs[0]}, {norm}, a);
    node("Div", {n_.inputs[0], norm}, {n_.outputs[0]});
  }

  void lrn(const Shape& shape) {
    const std::string& x = n_.inputs[0];
    const int64_t size = n_.attrs.get_int("size"), c = shape[1];
    const std::string sq = value("squared", shape);
    node("Mul", {x, x}, {sq});
    const Shape pool_shape = {shape[0], 1, c, shape_numel(shape) / (shape[0] * c)};
    const std::string pooled = value("window_mean", pool_shape);
    Attributes a;
    a.set("kernel_shape", std::vector<int64_t>{size, 1});
    const int64_t lo = (size - 1) / 2;
    a.set("pads", std::vector<int64_t>{lo, 0, size - 1 - lo, 0});
    a.set("count_include_pad", int64_t{1});
    node("AveragePool", {reshape(sq, pool_shape)}, {pooled}, a);
    const std::string mean = reshape(pooled, shape);
    auto scalar = [&](const char* what, float v) { return constant(what, Tensor::scalar<float>(v)); };
    const std::string scaled = value("scaled", shape), shifted = value("shifted", shape),
                      powed = value("denominator", shape);
    node("Mul", {mean, scalar("alpha", n_.attrs.get_float("alpha", 1e-4f))}, {scaled});
    node("Add", {scaled, scalar("bias", n_.attrs.get_float("bias", 1.f))}, {shifted});
    node("Pow", {shifted, scalar("beta", n_.attrs.get_float("beta", 0.75f))}, {powed});
    node("Div", {x, powed}, {n_.outputs[0]});
  }

 private:
  Graph& g_;
  const Node& n_;
  std::vector<Node>& out_;
  std::set<std::string>& node_names_;
};

bool lowerable(const Graph& g, const Node& n) {
  if (n.op != "InstanceNormalization" && n.op != "GroupNormalization" &&
      n.op != "LpNormalization" && n.op != "LRN")
    return false;
  if (n.inputs.empty() || n.outputs.size() != 1 || !g.tensors.count(n.inputs[0])) return false;
  const TensorInfo& x = g.info(n.inputs[0]);
  return x.dtype == DType::f32 && (n.op == "LpNormalization" || x.shape.size() >= 3);
}

}  // namespace

Graph lower_norms(Graph g) {
  std::vector<Node> out;
  const std::vector<Node> nodes = std::move(g.nodes);
  std::set<std::string> node_names;
  for (const Node& n : nodes) node_names.insert(n.name);
  for (const Node& n : nodes) {
    if (!lowerable(g, n)) {
      out.push_back(n);
      continue;
    }
    Lowering l(g, n, out, node_names);
    const Shape shape = g.info(n.inputs[0]).shape;
    if (n.op == "InstanceNormalization") {
      l.normalise_then_affine(n.inputs[0], shape, shape, n.inputs[1], n.inputs[2]);
    } else if (n.op == "GroupNormalization") {
      const int64_t groups = n.attrs.get_int("num_groups");
      l.normalise_then_affine(n.inputs[0], shape, {shape[0], groups, shape_numel(shape) / (shape[0] * groups)},
                              n.inputs[1], n.inputs[2]);
    } else if (n.op == "LpNormalization") {
      l.lp_norm(shape);
    } else {
      l.lrn(shape);
    }
  }
  g.nodes = std::move(out);
  return g;
}

}  // namespace dc
