#include "passes/training/fuse_training_attention.h"

#include <algorithm>
#include <optional>

#include "ir/error.h"

namespace dc {

namespace {

// Tensors that depend on `wrt` through float values (as add_gradients marks them).
std::set<std::string> float_dependents(const Graph& g, const std::set<std::string>& wrt) {
  std::set<std::string> dep = wrt;
  for (const Node& n : g.nodes) {
    const bool reads = std::any_of(n.inputs.begin(), n.inputs.end(),
                                   [&](const std::string& in) { return !in.empty() && dep.count(in); });
    if (!reads) continue;
    for (const auto& out : n.outputs)
      if (!out.empty() && is_float(g.info(out).dtype)) dep.insert(out);
  }
  return dep;
}

struct Site {
  size_t qk = 0, pv = 0;
  std::vector<size_t> removed;  // QK MatMul, scale, mask Add, Softmax
  std::string q, kt, v, mask;
  double scale = 1.0;
};

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), readers_(g.consumers()) {
    outputs_.insert(g.outputs.begin(), g.outputs.end());
  }

  // The pattern ending at MatMul node `pv`, or nullopt.
  std::optional<Site> match(size_t pv) const {
    const Node& mm = g_.nodes[pv];
    if (mm.op != "MatMul") return std::nullopt;
    Site s;
    s.pv = pv;
    s.v = mm.input(1);
    const auto sm = sole_producer(mm.input(0), "Softmax");
    if (!sm) return std::nullopt;
    const Node& softmax = g_.nodes[*sm];
    const int64_t rank = static_cast<int64_t>(g_.info(softmax.input(0)).shape.size());
    int64_t axis = softmax.attrs.get_int("axis", softmax.attrs.get_int("dc_legacy_flatten", 0) ? 1 : -1);
    if (axis < 0) axis += rank;
    if (axis != rank - 1) return std::nullopt;
    s.removed.push_back(*sm);
    const std::string& t = softmax.input(0);
    std::optional<Scores> sc = scores(t);
    if (!sc) {
      const auto add = sole_producer(t, "Add");  // the additive mask, either operand
      if (!add) return std::nullopt;
      const Node& a = g_.nodes[*add];
      for (size_t i = 0; i < 2 && !sc; ++i) {
        sc = scores(a.input(i));
        if (sc) s.mask = a.input(1 - i);
      }
      if (!sc) return std::nullopt;
      s.removed.push_back(*add);
    }
    s.removed.insert(s.removed.end(), sc->nodes.begin(), sc->nodes.end());
    s.scale = sc->scale;
    s.qk = sc->nodes.back();
    s.q = g_.nodes[s.qk].input(0);
    s.kt = g_.nodes[s.qk].input(1);
    return shapes_fit(s) ? std::optional<Site>(s) : std::nullopt;
  }

 private:
  struct Scores {
    std::vector<size_t> nodes;  // [the scale's Mul or Div,] the QK MatMul (last)
    double scale = 1.0;
  };
  // `t` as MatMul(Q, Kt), optionally times (or divided by) a scalar constant.
  std::optional<Scores> scores(const std::string& t) const {
    Scores s;
    std::string raw = t;
    const auto mul = sole_producer(t, "Mul");
    const auto div = sole_producer(t, "Div");
    if (mul || div) {
      const Node& n = g_.nodes[mul ? *mul : *div];
      int c = -1;  // the constant's input slot
      if (scalar_constant(n.input(1))) c = 1;
      else if (mul && scalar_constant(n.input(0))) c = 0;
      if (c < 0) return std::nullopt;
      const double value = g_.initializers.at(n.input(static_cast<size_t>(c))).to_float_vector().at(0);
      if (div && value == 0.0) return std::nullopt;
      s.scale = div ? 1.0 / value : value;
      raw = n.input(static_cast<size_t>(1 - c));
      s.nodes.push_back(mul ? *mul : *div);
    }
    const auto qk = sole_producer(raw, "MatMul");
    if (!qk) return std::nullopt;
    s.nodes.push_back(*qk);
    return s;
  }
  // The producer of `t` if it is an `op` node whose only output `t` has one reader and is
  // no graph output.
  std::optional<size_t> sole_producer(const std::string& t, const char* op) const {
    const auto p = g_.producer(t);
    if (!p || g_.nodes[*p].op != op || g_.nodes[*p].outputs.size() != 1 || outputs_.count(t)) return std::nullopt;
    const auto r = readers_.find(t);
    if (r == readers_.end() || r->second.size() != 1) return std::nullopt;
    return p;
  }
  bool scalar_constant(const std::string& t) const {
    const auto it = g_.initializers.find(t);
    return it != g_.initializers.end() && it->second.numel() == 1 && is_float(it->second.dtype());
  }
  // Q [B.., Sq, D], Kt [B.., D, Sk], V [B.., Sk, Dv] of one batch shape, all f32; a mask
  // broadcasting to the scores [B.., Sq, Sk].
  bool shapes_fit(const Site& s) const {
    const Shape &q = g_.info(s.q).shape, &kt = g_.info(s.kt).shape, &v = g_.info(s.v).shape;
    if (q.size() < 2 || q.size() != kt.size() || q.size() != v.size()) return false;
    for (const auto* t : {&s.q, &s.kt, &s.v})
      if (g_.info(*t).dtype != DType::f32) return false;
    const size_t r = q.size();
    if (!std::equal(q.begin(), q.end() - 2, kt.begin()) || !std::equal(q.begin(), q.end() - 2, v.begin()))
      return false;
    if (kt[r - 2] != q[r - 1] || v[r - 2] != kt[r - 1]) return false;
    if (s.mask.empty()) return true;
    const TensorInfo& m = g_.info(s.mask);
    if (m.dtype != DType::f32 || m.shape.size() > r) return false;
    Shape scores(q.begin(), q.end() - 1);
    scores.push_back(kt[r - 1]);
    for (size_t i = 0; i < m.shape.size(); ++i) {
      const int64_t e = m.shape[m.shape.size() - 1 - i];
      if (e != 1 && e != scores[r - 1 - i]) return false;
    }
    return true;
  }

  const Graph& g_;
  std::map<std::string, std::vector<size_t>> readers_;
  std::set<std::string> outputs_;
};

std::string fresh(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.tensors.count(name); ++k) name = base + "." + std::to_string(k);
  return name;
}

}  // namespace

int fuse_training_attention(Graph& g, const std::set<std::string>& trained) {
  const std::set<std::string> dep = float_dependents(g, trained);
  const Matcher matcher(g);
  std::vector<Site> sites;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    auto s = matcher.match(k);
    if (!s || (!s->mask.empty() && dep.count(s->mask))) continue;  // a trained bias: op by op
    if (dep.count(s->q) || dep.count(s->kt) || dep.count(s->v)) sites.push_back(std::move(*s));
  }
  if (sites.empty()) return 0;
  std::set<size_t> removed;
  std::map<size_t, Node> replacement;
  for (const Site& s : sites) {
    const Node& pv = g.nodes[s.pv];
    Node n;
    n.name = pv.name + "/attention";
    n.op = "dc.Attention";
    n.inputs = {s.q, s.kt, s.v};
    if (!s.mask.empty()) n.inputs.push_back(s.mask);
    n.attrs.set("scale", static_cast<float>(s.scale));
    Shape lse = g.info(s.q).shape;
    lse.pop_back();
    const std::string lse_name = fresh(g, pv.name + "/lse");
    g.tensors[lse_name] = TensorInfo{DType::f32, lse};
    n.outputs = {pv.outputs[0], lse_name};
    for (size_t k : s.removed) {
      removed.insert(k);
      for (const auto& o : g.nodes[k].outputs) g.tensors.erase(o);
    }
    replacement[s.pv] = std::move(n);
  }
  std::vector<Node> nodes;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (auto it = replacement.find(k); it != replacement.end()) nodes.push_back(std::move(it->second));
    else if (!removed.count(k)) nodes.push_back(std::move(g.nodes[k]));
  }
  g.nodes = std::move(nodes);
  return static_cast<int>(sites.size());
}

}  // namespace dc
