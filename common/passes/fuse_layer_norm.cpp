#include "passes/fuse_layer_norm.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "passes/match.h"

namespace dc {

namespace {

// The graph and its uses, plus the node producing each tensor.
struct Context {
  const Graph& g;
  const match::Uses& uses;
  std::map<std::string, size_t> producer;

  const Node* sole_user(const std::string& t, const char* op, size_t* index) const {
    auto u = uses.sole_consumer(t);
    if (!u || g.nodes[*u].op != op) return nullptr;
    *index = *u;
    return &g.nodes[*u];
  }
};

std::optional<std::vector<int64_t>> reduce_axes(const Graph& g, const Node& n) {
  if (n.attrs.has("axes")) return n.attrs.get_ints("axes");
  if (n.has_input(1)) {
    auto it = g.initializers.find(n.inputs[1]);
    if (it == g.initializers.end()) return std::nullopt;
    return it->second.to_int64_vector();
  }
  return std::vector<int64_t>{};  // all axes
}

// ReduceMean over the last axis of a rank-`rank` tensor only, keeping the reduced dim.
bool mean_over_last_axis(const Graph& g, const Node& n, int64_t rank) {
  if (n.op != "ReduceMean" || n.attrs.get_int("keepdims", 1) != 1) return false;
  const auto axes = reduce_axes(g, n);
  if (!axes) return false;
  if (axes->empty()) return rank == 1;
  return axes->size() == 1 && ((*axes)[0] == -1 || (*axes)[0] == rank - 1);
}

// A one-element constant that does not raise the rank of a rank-`rank` operand.
std::optional<double> small_scalar(const Graph& g, const std::string& name, int64_t rank) {
  auto v = match::scalar_constant(g, name);
  if (!v || g.initializers.at(name).rank() > rank) return std::nullopt;
  return v;
}

// gamma/beta as a [K] f32 tensor, if it is an initializer varying along the last axis only.
std::optional<Tensor> last_axis_vector(const Graph& g, const std::string& name, int64_t rank,
                                       int64_t k) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.dtype() != DType::f32) return std::nullopt;
  const Tensor& t = it->second;
  if (t.rank() > rank) return std::nullopt;
  for (int64_t d = 0; d + 1 < t.rank(); ++d)
    if (t.dim(d) != 1) return std::nullopt;
  if (t.numel() == k) return t.reshaped({k});
  if (t.numel() != 1) return std::nullopt;
  return Tensor::from_vector<float>({k}, std::vector<float>(static_cast<size_t>(k),
                                                             t.data<float>()[0]));
}

// A Cast to f32 of an f32 tensor (torch's `.to(torch.float32)` in an f32 model).
bool is_f32_cast(const Graph& g, const Node& n) {
  if (n.op != "Cast" || !n.has_input(0) || n.attrs.get_int("to", 0) != 1) return false;
  auto it = g.tensors.find(n.input(0));
  return it != g.tensors.end() && it->second.dtype == DType::f32;
}

// The node dividing `d` by s = Sqrt(v + eps): Div(d, s), or Mul(d, r) with r = Reciprocal(s)
// or Div(1, s) (the nodes on the way are appended to `nodes`).
std::optional<size_t> normalizer(const Context& c, const std::string& s, const std::string& d,
                                 std::vector<size_t>& nodes) {
  const auto u = c.uses.sole_consumer(s);
  if (!u) return std::nullopt;
  const Node& n = c.g.nodes[*u];
  if (n.op == "Div" && n.inputs.size() == 2 && n.inputs[0] == d && n.inputs[1] == s) return *u;
  const bool recip = n.op == "Reciprocal" ||
                     (n.op == "Div" && n.inputs.size() == 2 && n.inputs[1] == s &&
                      match::scalar_constant(c.g, n.inputs[0]) == 1.0);
  if (!recip) return std::nullopt;
  nodes.push_back(*u);
  size_t m = 0;
  const Node* mul = c.sole_user(n.outputs[0], "Mul", &m);
  if (!mul || match::other_input(*mul, n.outputs[0]) != d) return std::nullopt;
  return m;
}

struct Match {
  std::vector<size_t> nodes;  // every matched node; the last one is replaced
  std::string x, out;
  float epsilon = 0.f;
  std::optional<std::string> scale_name, bias_name;  // tensors used as they are
  std::optional<Tensor> scale, bias;                   // tensors needing a new [K] initializer
  int64_t k = 0;
};

std::optional<Match> match_at(const Context& c, size_t first) {
  const Graph& g = c.g;
  const Node& mean = g.nodes[first];
  if (mean.op != "ReduceMean" || !mean.has_input(0)) return std::nullopt;
  Match m;
  m.x = mean.inputs[0];
  auto xi = g.tensors.find(m.x);
  if (xi == g.tensors.end() || xi->second.dtype != DType::f32 || xi->second.shape.empty())
    return std::nullopt;
  const int64_t rank = static_cast<int64_t>(xi->second.shape.size());
  m.k = xi->second.shape.back();
  if (!mean_over_last_axis(g, mean, rank)) return std::nullopt;
  m.nodes.push_back(first);

  size_t i = 0;
  const Node* sub = c.sole_user(mean.outputs[0], "Sub", &i);
  if (!sub || sub->inputs.size() != 2 || sub->inputs[0] != m.x) return std::nullopt;
  m.nodes.push_back(i);
  const std::string& d = sub->outputs[0];

  // d feeds exactly the squaring node and the Div.
  if (c.uses.outputs.count(d)) return std::nullopt;
  std::optional<size_t> square, div;
  for (size_t u : c.uses.of(d)) {
    const Node& n = g.nodes[u];
    if (n.op == "Div" && n.inputs.size() == 2 && n.inputs[0] == d && n.inputs[1] != d &&
        (!div || *div == u)) {
      div = u;
    } else if (n.op == "Mul" && match::other_input(n, d) && (!div || *div == u)) {
      div = u;  // d * Reciprocal(Sqrt(v + eps)): checked below
    } else if (n.op == "Pow" && n.inputs.size() == 2 && n.inputs[0] == d &&
               small_scalar(g, n.inputs[1], rank) == 2.0 && (!square || *square == u)) {
      square = u;
    } else if (n.op == "Mul" && n.inputs.size() == 2 && n.inputs[0] == d && n.inputs[1] == d &&
               (!square || *square == u)) {
      square = u;
    } else {
      return std::nullopt;
    }
  }
  if (!square || !div) return std::nullopt;
  m.nodes.push_back(*square);

  const Node* var = c.sole_user(g.nodes[*square].outputs[0], "ReduceMean", &i);
  if (!var || !mean_over_last_axis(g, *var, rank)) return std::nullopt;
  m.nodes.push_back(i);
  const Node* add_eps = c.sole_user(var->outputs[0], "Add", &i);
  if (!add_eps) return std::nullopt;
  const auto eps_name = match::other_input(*add_eps, var->outputs[0]);
  const auto eps = eps_name ? small_scalar(g, *eps_name, rank) : std::nullopt;
  if (!eps) return std::nullopt;
  m.epsilon = static_cast<float>(*eps);
  m.nodes.push_back(i);
  const Node* sqrt = c.sole_user(add_eps->outputs[0], "Sqrt", &i);
  if (!sqrt) return std::nullopt;
  m.nodes.push_back(i);
  const auto norm = normalizer(c, sqrt->outputs[0], d, m.nodes);
  if (!norm || *norm != *div) return std::nullopt;
  m.nodes.push_back(*norm);
  m.out = g.nodes[*norm].outputs[0];
  // x.to(float32) before and .to(float32) after, as torch writes them for an f32 model.
  if (const auto cp = g.producer(m.x); cp && is_f32_cast(g, g.nodes[*cp])) {
    bool only_ours = !c.uses.outputs.count(m.x);
    for (size_t u : c.uses.of(m.x)) only_ours = only_ours && (u == m.nodes[0] || u == m.nodes[1]);
    if (only_ours) {
      m.nodes.push_back(*cp);
      m.x = g.nodes[*cp].input(0);
    }
  }
  if (const Node* cast = c.sole_user(m.out, "Cast", &i); cast && is_f32_cast(g, *cast)) {
    m.nodes.push_back(i);
    m.out = cast->outputs[0];
  }

  // Optional affine tail: absorbed only where gamma/beta qualify.
  if (const Node* mul = c.sole_user(m.out, "Mul", &i)) {
    const auto gamma = match::other_input(*mul, m.out);
    auto t = gamma ? last_axis_vector(g, *gamma, rank, m.k) : std::nullopt;
    if (t) {
      if (t->shape() == g.initializers.at(*gamma).shape()) m.scale_name = *gamma;
      else m.scale = std::move(t);
      m.nodes.push_back(i);
      m.out = mul->outputs[0];
    }
  }
  if (const Node* add = c.sole_user(m.out, "Add", &i)) {
    const auto beta = match::other_input(*add, m.out);
    auto t = beta ? last_axis_vector(g, *beta, rank, m.k) : std::nullopt;
    if (t) {
      if (t->shape() == g.initializers.at(*beta).shape()) m.bias_name = *beta;
      else m.bias = std::move(t);
      m.nodes.push_back(i);
      m.out = add->outputs[0];
    }
  }
  return m;
}

std::string add_initializer(Graph& g, const std::string& base, Tensor t) {
  std::string name = match::unique_name(g, base);
  g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  g.initializers[name] = std::move(t);
  return name;
}

}  // namespace

Graph fuse_layer_norm(Graph g) {
  const match::Uses uses(g);
  Context c{g, uses, {}};
  std::vector<Match> matches;
  std::vector<bool> removed(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (removed[i]) continue;
    auto m = match_at(c, i);
    if (!m) continue;
    bool overlap = false;
    for (size_t n : m->nodes) overlap = overlap || removed[n];
    if (overlap) continue;
    for (size_t n : m->nodes) removed[n] = true;
    matches.push_back(std::move(*m));
  }

  std::map<size_t, Node> replaced;
  for (auto& m : matches) {
    size_t last = m.nodes[0];
    for (size_t n : m.nodes) last = std::max(last, n);
    Node ln;
    ln.name = g.nodes[last].name;
    ln.op = "LayerNormalization";
    ln.attrs.set("axis", int64_t{-1});
    ln.attrs.set("epsilon", m.epsilon);
    std::string scale = m.scale_name ? *m.scale_name : "";
    if (scale.empty()) {
      Tensor t = m.scale ? std::move(*m.scale)
                         : Tensor::from_vector<float>({m.k},
                                                      std::vector<float>(static_cast<size_t>(m.k), 1.f));
      scale = add_initializer(g, ln.name + "_ln_scale", std::move(t));
    }
    ln.inputs = {m.x, scale};
    if (m.bias_name) ln.inputs.push_back(*m.bias_name);
    else if (m.bias) ln.inputs.push_back(add_initializer(g, ln.name + "_ln_bias", std::move(*m.bias)));
    ln.outputs = {m.out};
    // The intermediates are gone; the last output keeps its name and type.
    for (size_t n : m.nodes)
      for (const auto& o : g.nodes[n].outputs)
        if (o != m.out) g.tensors.erase(o);
    replaced.emplace(last, std::move(ln));
  }
  g.nodes = match::rebuild_nodes(g.nodes, removed, std::move(replaced));
  return g;
}

}  // namespace dc
