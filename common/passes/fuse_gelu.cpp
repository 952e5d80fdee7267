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
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

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

// The shared tail of both forms: a = Add(f, 1) read by one of
//   Mul(Mul(x, a), 0.5)      Mul(Mul(x, 0.5), a)      Mul(Mul(a, 0.5), x)
// where f (Erf's or Tanh's output) is the output of the last node in m.nodes.
bool match_tail(const Context& c, const std::string& f, Match& m) {
  size_t i = 0;
  const Node* add = c.sole_user(f, "Add", &i);
  if (!add || !c.other_is(*add, f, 1.0)) return false;
  m.nodes.push_back(i);
  const std::string& a = add->outputs[0];
  const Node* mul = c.sole_user(a, "Mul", &i);
  if (!mul) return false;
  m.nodes.push_back(i);
  const auto other = match::other_input(*mul, a);
  if (!other) return false;

  if (*other == m.x) {  // (x * a) * 0.5
    const Node* half = c.sole_user(mul->outputs[0], "Mul", &i);
    if (!half || !c.other_is(*half, mul->outputs[0], 0.5)) return false;
    m.nodes.push_back(i);
    m.out = half->outputs[0];
  } else if (c.is_constant(*other, 0.5)) {  // (a * 0.5) * x
    const Node* by_x = c.sole_user(mul->outputs[0], "Mul", &i);
    if (!by_x || match::other_input(*by_x, mul->outputs[0]) != m.x) return false;
    m.nodes.push_back(i);
    m.out = by_x->outputs[0];
  } else {  // (x * 0.5) * a
    size_t h = 0;
    const Node* half_x = c.made_by(*other, "Mul", &h);
    if (!half_x || c.uses.sole_consumer(*other) != m.nodes.back() || !c.other_is(*half_x, m.x, 0.5))
      return false;
    m.nodes.push_back(h);
    m.out = mul->outputs[0];
  }
  return true;
}

std::optional<Match> match_erf(Context& c, size_t erf_index) {
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
  if (!match_tail(c, erf.outputs[0], m)) return std::nullopt;
  return m;
}

// The binary node producing `t` (read by `reader` alone) if its op is `op`; its index is
// appended to `nodes`.
const Node* inner(const Context& c, const std::string& t, const char* op, size_t reader,
                  std::vector<size_t>& nodes) {
  size_t i = 0;
  const Node* n = c.made_by(t, op, &i);
  if (!n || n->inputs.size() != 2 || c.uses.sole_consumer(t) != reader) return nullptr;
  nodes.push_back(i);
  return n;
}

// x from x^3 written as Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x)) at tensor `p`,
// read by `reader` alone.
std::optional<std::string> cubed(Context& c, const std::string& p, size_t reader,
                                 std::vector<size_t>& nodes) {
  size_t i = 0;
  if (const Node* pow = c.made_by(p, "Pow", &i)) {
    if (pow->inputs.size() != 2 || c.uses.sole_consumer(p) != reader) return std::nullopt;
    auto xi = c.g.tensors.find(pow->inputs[0]);
    if (xi == c.g.tensors.end()) return std::nullopt;
    c.rank = static_cast<int64_t>(xi->second.shape.size());
    if (!c.is_constant(pow->inputs[1], 3.0)) return std::nullopt;
    nodes.push_back(i);
    return pow->inputs[0];
  }
  const Node* outer = inner(c, p, "Mul", reader, nodes);
  if (!outer) return std::nullopt;
  const size_t outer_index = nodes.back();
  for (size_t k = 0; k < 2; ++k) {
    const std::string& sq = outer->inputs[k];
    const std::string& x = outer->inputs[1 - k];
    size_t j = 0;
    const Node* square = c.made_by(sq, "Mul", &j);
    if (!square || square->inputs.size() != 2 || square->inputs[0] != x || square->inputs[1] != x ||
        c.uses.sole_consumer(sq) != outer_index)
      continue;
    nodes.push_back(j);
    return x;
  }
  return std::nullopt;
}

// tanh form, anchored at the Tanh: t = Tanh(Mul(Add(x, Mul(x^3, 0.044715)), sqrt(2/pi))),
// then the erf form's tail.
std::optional<Match> match_tanh(Context& c, size_t tanh_index) {
  const Graph& g = c.g;
  const Node& tanh = g.nodes[tanh_index];
  if (tanh.op != "Tanh" || !tanh.has_input(0)) return std::nullopt;
  Match m;
  m.nodes = {tanh_index};
  const Node* scale = inner(c, tanh.inputs[0], "Mul", tanh_index, m.nodes);
  if (!scale) return std::nullopt;
  const size_t scale_index = m.nodes.back();
  for (size_t k = 0; k < 2 && m.x.empty(); ++k) {
    std::vector<size_t> nodes = m.nodes;
    const std::string& sum = scale->inputs[k];
    auto si = g.tensors.find(sum);
    if (si == g.tensors.end() || si->second.dtype != DType::f32) continue;
    c.rank = static_cast<int64_t>(si->second.shape.size());
    if (!c.is_constant(scale->inputs[1 - k], kSqrt2OverPi)) continue;
    const Node* add = inner(c, sum, "Add", scale_index, nodes);
    if (!add) continue;
    const size_t add_index = nodes.back();
    for (size_t a = 0; a < 2 && m.x.empty(); ++a) {
      std::vector<size_t> more = nodes;
      const std::string& x = add->inputs[a];
      const Node* cubic = inner(c, add->inputs[1 - a], "Mul", add_index, more);
      if (!cubic) continue;
      const size_t cubic_index = more.back();
      for (size_t b = 0; b < 2 && m.x.empty(); ++b) {
        std::vector<size_t> all = more;
        c.rank = static_cast<int64_t>(si->second.shape.size());
        if (!c.is_constant(cubic->inputs[1 - b], kGeluCubic)) continue;
        const auto cx = cubed(c, cubic->inputs[b], cubic_index, all);
        if (cx != x) continue;
        m.x = x;
        m.nodes = std::move(all);
      }
    }
  }
  if (m.x.empty() || !match_tail(c, tanh.outputs[0], m)) return std::nullopt;
  return m;
}

std::optional<Match> match_at(Context& c, size_t i, std::string& approximate) {
  if (auto m = match_erf(c, i)) {
    approximate = "none";
    return m;
  }
  approximate = "tanh";
  return match_tanh(c, i);
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
    std::string approximate;
    auto m = match_at(c, i, approximate);
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
    gelu.attrs.set("approximate", approximate);
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
