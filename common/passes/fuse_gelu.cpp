#include "passes/fuse_gelu.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "passes/match.h"

namespace dc {

namespace {

constexpr double kSqrt2 = 1.4142135623730951;

struct Context {
  const Graph& g;
  const match::Uses& uses;
  std::map<std::string, size_t> producer;
  int64_t rank = 0;  // of the current x

  // True if `name` is a one-element constant near `want` that leaves x's shape alone.
  bool is_constant(const std::string& name, double want) const {
    auto v = match::scalar_constant(g, name);
    return v && g.initializers.at(name).rank() <= rank && match::near(*v, want);
  }
  // The node producing `t` if it is an `op` node.
  const Node* made_by(const std::string& t, const char* op, size_t* index) const {
    auto it = producer.find(t);
    if (it == producer.end() || g.nodes[it->second].op != op) return nullptr;
    *index = it->second;
    return &g.nodes[it->second];
  }
  const Node* sole_user(const std::string& t, const char* op, size_t* index) const {
    auto u = uses.sole_consumer(t);
    if (!u || g.nodes[*u].op != op || g.nodes[*u].inputs.size() != 2) return nullptr;
    *index = *u;
    return &g.nodes[*u];
  }
  // For a binary node reading `known`: is its other operand a constant near `want`?
  bool other_is(const Node& n, const std::string& known, double want) const {
    auto o = match::other_input(n, known);
    return o && is_constant(*o, want);
  }
};

struct Match {
  std::vector<size_t> nodes;  // the last one is replaced
  std::string x, out;
};

// x with u = x / sqrt(2) (Div, or Mul by 1/sqrt(2)), if `u` is such a scaled tensor.
std::optional<std::string> scaled_input(Context& c, const Node& n) {
  if (n.inputs.size() != 2) return std::nullopt;
  for (size_t k = 0; k < 2; ++k) {
    if (n.op == "Div" && k == 1) break;  // only x / c
    const std::string& x = n.inputs[k];
    auto xi = c.g.tensors.find(x);
    if (xi == c.g.tensors.end() || xi->second.dtype != DType::f32) continue;
    c.rank = static_cast<int64_t>(xi->second.shape.size());
    const std::string& k_other = n.inputs[1 - k];
    if (n.op == "Div" && c.is_constant(k_other, kSqrt2)) return x;
    if (n.op == "Mul" && c.is_constant(k_other, 1.0 / kSqrt2)) return x;
  }
  return std::nullopt;
}

std::optional<Match> match_at(Context& c, size_t erf_index) {
  const Graph& g = c.g;
  const Node& erf = g.nodes[erf_index];
  if (erf.op != "Erf" || !erf.has_input(0)) return std::nullopt;
  Match m;
  size_t i = 0;
  const Node* scale = c.made_by(erf.inputs[0], "Div", &i);
  if (!scale) scale = c.made_by(erf.inputs[0], "Mul", &i);
  if (!scale || c.uses.sole_consumer(erf.inputs[0]) != erf_index) return std::nullopt;
  auto x = scaled_input(c, *scale);
  if (!x) return std::nullopt;
  m.x = *x;
  m.nodes = {i, erf_index};

  const Node* add = c.sole_user(erf.outputs[0], "Add", &i);
  if (!add || !c.other_is(*add, erf.outputs[0], 1.0)) return std::nullopt;
  m.nodes.push_back(i);
  const std::string& a = add->outputs[0];
  const Node* mul = c.sole_user(a, "Mul", &i);
  if (!mul) return std::nullopt;
  m.nodes.push_back(i);
  const auto other = match::other_input(*mul, a);
  if (!other) return std::nullopt;

  if (*other == m.x) {  // (x * a) * 0.5
    const Node* half = c.sole_user(mul->outputs[0], "Mul", &i);
    if (!half || !c.other_is(*half, mul->outputs[0], 0.5)) return std::nullopt;
    m.nodes.push_back(i);
    m.out = half->outputs[0];
  } else if (c.is_constant(*other, 0.5)) {  // (a * 0.5) * x
    const Node* by_x = c.sole_user(mul->outputs[0], "Mul", &i);
    if (!by_x || match::other_input(*by_x, mul->outputs[0]) != m.x) return std::nullopt;
    m.nodes.push_back(i);
    m.out = by_x->outputs[0];
  } else {  // (x * 0.5) * a
    size_t h = 0;
    const Node* half_x = c.made_by(*other, "Mul", &h);
    if (!half_x || c.uses.sole_consumer(*other) != m.nodes.back() ||
        !c.other_is(*half_x, m.x, 0.5))
      return std::nullopt;
    m.nodes.push_back(h);
    m.out = mul->outputs[0];
  }
  return m;
}

}  // namespace

Graph fuse_gelu(Graph g) {
  const match::Uses uses(g);
  Context c{g, uses, {}};
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) c.producer[o] = i;

  std::vector<bool> removed(g.nodes.size(), false);
  std::map<size_t, Node> replaced;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto m = match_at(c, i);
    if (!m) continue;
    bool overlap = false;
    for (size_t n : m->nodes) overlap = overlap || removed[n];
    if (overlap) continue;
    size_t last = 0;
    for (size_t n : m->nodes) {
      removed[n] = true;
      last = std::max(last, n);
    }
    Node gelu;
    gelu.name = g.nodes[last].name;
    gelu.op = "Gelu";
    gelu.attrs.set("approximate", std::string("none"));
    gelu.inputs = {m->x};
    gelu.outputs = {m->out};
    replaced.emplace(last, std::move(gelu));
    for (size_t n : m->nodes)
      for (const auto& o : g.nodes[n].outputs)
        if (o != m->out) g.tensors.erase(o);
  }
  g.nodes = match::rebuild_nodes(g.nodes, removed, std::move(replaced));
  return g;
}

}  // namespace dc
