#include "passes/fuse_rms_norm.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "passes/match.h"

namespace dc {

namespace {

struct Context {
  const Graph& g;
  const match::Uses& uses;

  // The one node reading `t` (not a graph output), if its op is `op`.
  const Node* sole_user(const std::string& t, const char* op, size_t* index) const {
    auto u = uses.sole_consumer(t);
    if (!u || g.nodes[*u].op != op) return nullptr;
    *index = *u;
    return &g.nodes[*u];
  }

  bool is_f32(const std::string& t) const {
    auto it = g.tensors.find(t);
    return it != g.tensors.end() && it->second.dtype == DType::f32;
  }

  // A Cast to f32 of an f32 tensor: what torch writes for `x.to(torch.float32)`.
  bool is_f32_cast(const Node& n) const {
    return n.op == "Cast" && n.has_input(0) && n.attrs.get_int("to", 0) == 1 && is_f32(n.input(0));
  }
};

bool mean_over_last_axis(const Graph& g, const Node& n, int64_t rank) {
  if (n.op != "ReduceMean" || n.attrs.get_int("keepdims", 1) != 1) return false;
  std::vector<int64_t> axes;
  if (n.attrs.has("axes")) {
    axes = n.attrs.get_ints("axes");
  } else if (n.has_input(1)) {
    auto it = g.initializers.find(n.inputs[1]);
    if (it == g.initializers.end()) return false;
    axes = it->second.to_int64_vector();
  }
  if (axes.empty()) return rank == 1;
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

std::optional<double> small_scalar(const Graph& g, const std::string& name, int64_t rank) {
  auto v = match::scalar_constant(g, name);
  if (!v || g.initializers.at(name).rank() > rank) return std::nullopt;
  return v;
}

// The weight as a [K] f32 tensor, if it is an initializer varying along the last axis only.
std::optional<Tensor> last_axis_vector(const Graph& g, const std::string& name, int64_t rank, int64_t k) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.dtype() != DType::f32) return std::nullopt;
  const Tensor& t = it->second;
  if (t.rank() > rank) return std::nullopt;
  for (int64_t d = 0; d + 1 < t.rank(); ++d)
    if (t.dim(d) != 1) return std::nullopt;
  if (t.numel() == k) return t.reshaped({k});
  if (t.numel() != 1) return std::nullopt;
  return Tensor::from_vector<float>({k}, std::vector<float>(static_cast<size_t>(k), t.data<float>()[0]));
}

struct Match {
  std::vector<size_t> nodes;  // every matched node; the last one is replaced
  std::string x, out;
  float epsilon = 0.f;
  std::optional<std::string> scale_name;
  std::optional<Tensor> scale;
  int64_t k = 0;
};

// The square q of `c` at node `i`: Pow(c, 2) or Mul(c, c).
std::optional<std::string> squared(const Context& c, size_t i, int64_t rank) {
  const Node& n = c.g.nodes[i];
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.op == "Mul" && n.inputs[0] == n.inputs[1]) return n.inputs[0];
  if (n.op == "Pow" && small_scalar(c.g, n.inputs[1], rank) == 2.0) return n.inputs[0];
  return std::nullopt;
}

// From a = mean + eps: the node computing c * rsqrt(a) and the nodes on the way to it.
std::optional<size_t> normalizer(const Context& c, const std::string& a, const std::string& src,
                                 std::vector<size_t>& nodes) {
  size_t i = 0;
  const Node* sqrt = c.sole_user(a, "Sqrt", &i);
  if (!sqrt) return std::nullopt;
  nodes.push_back(i);
  const std::string& s = sqrt->outputs[0];
  const auto u = c.uses.sole_consumer(s);
  if (!u) return std::nullopt;
  const Node& n = c.g.nodes[*u];
  if (n.op == "Div" && n.inputs.size() == 2 && n.inputs[0] == src && n.inputs[1] == s) return *u;
  std::string r;
  if (n.op == "Reciprocal") {
    r = n.outputs[0];
  } else if (n.op == "Div" && n.inputs.size() == 2 && n.inputs[1] == s &&
             match::scalar_constant(c.g, n.inputs[0]) == 1.0) {
    r = n.outputs[0];
  } else {
    return std::nullopt;
  }
  nodes.push_back(*u);
  size_t m = 0;
  const Node* mul = c.sole_user(r, "Mul", &m);
  if (!mul || match::other_input(*mul, r) != src) return std::nullopt;
  return m;
}

std::optional<Match> match_at(const Context& c, size_t first) {
  const Graph& g = c.g;
  const Node& mean = g.nodes[first];
  if (mean.op != "ReduceMean" || !mean.has_input(0)) return std::nullopt;
  const auto qp = g.producer(mean.inputs[0]);
  if (!qp || c.uses.sole_consumer(mean.inputs[0]) != first) return std::nullopt;
  auto si = g.tensors.find(g.nodes[*qp].inputs.empty() ? "" : g.nodes[*qp].inputs[0]);
  if (si == g.tensors.end() || si->second.shape.empty() || !c.is_f32(si->first)) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(si->second.shape.size());
  const auto src = squared(c, *qp, rank);
  if (!src || !mean_over_last_axis(g, mean, rank)) return std::nullopt;
  Match m;
  m.k = si->second.shape.back();
  m.nodes = {*qp, first};
  size_t i = 0;
  const Node* add_eps = c.sole_user(mean.outputs[0], "Add", &i);
  if (!add_eps) return std::nullopt;
  const auto eps_name = match::other_input(*add_eps, mean.outputs[0]);
  const auto eps = eps_name ? small_scalar(g, *eps_name, rank) : std::nullopt;
  if (!eps) return std::nullopt;
  m.epsilon = static_cast<float>(*eps);
  m.nodes.push_back(i);
  const auto norm = normalizer(c, add_eps->outputs[0], *src, m.nodes);
  if (!norm) return std::nullopt;
  m.nodes.push_back(*norm);
  // src may have other readers (the pre-norm residual stream of an fp32 export, where the
  // optimizer dropped the no-op x.to(float32)): they keep reading src.
  m.x = *src;
  bool src_only_here = !c.uses.outputs.count(*src);
  for (size_t u : c.uses.of(*src)) src_only_here = src_only_here && (u == *qp || u == *norm);
  // A leading x.to(float32) whose output nothing else reads is absorbed.
  if (const auto cp = g.producer(*src); cp && src_only_here && c.is_f32_cast(g.nodes[*cp])) {
    m.x = g.nodes[*cp].input(0);
    m.nodes.push_back(*cp);
  }
  m.out = g.nodes[*norm].outputs[0];
  if (const Node* cast = c.sole_user(m.out, "Cast", &i); cast && c.is_f32_cast(*cast)) {
    m.nodes.push_back(i);
    m.out = cast->outputs[0];
  }
  if (const Node* mul = c.sole_user(m.out, "Mul", &i)) {
    const auto w = match::other_input(*mul, m.out);
    auto t = w ? last_axis_vector(g, *w, rank, m.k) : std::nullopt;
    if (t) {
      if (t->shape() == g.initializers.at(*w).shape()) m.scale_name = *w;
      else m.scale = std::move(t);
      m.nodes.push_back(i);
      m.out = mul->outputs[0];
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

Graph fuse_rms_norm(Graph g) {
  const match::Uses uses(g);
  const Context c{g, uses};
  std::vector<Match> matches;
  std::vector<bool> removed(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto m = match_at(c, i);
    if (!m) continue;
    if (std::any_of(m->nodes.begin(), m->nodes.end(), [&](size_t n) { return removed[n]; })) continue;
    for (size_t n : m->nodes) removed[n] = true;
    matches.push_back(std::move(*m));
  }
  std::map<size_t, Node> replaced;
  for (auto& m : matches) {
    const size_t last = *std::max_element(m.nodes.begin(), m.nodes.end());
    Node rn;
    rn.name = g.nodes[last].name;
    rn.op = "RMSNormalization";
    rn.attrs.set("axis", int64_t{-1});
    rn.attrs.set("epsilon", m.epsilon);
    std::string scale = m.scale_name ? *m.scale_name : "";
    if (scale.empty()) {
      Tensor t = m.scale ? std::move(*m.scale)
                         : Tensor::from_vector<float>({m.k}, std::vector<float>(static_cast<size_t>(m.k), 1.f));
      scale = add_initializer(g, rn.name + "_rms_scale", std::move(t));
    }
    rn.inputs = {m.x, scale};
    rn.outputs = {m.out};
    for (size_t n : m.nodes)
      for (const auto& o : g.nodes[n].outputs)
        if (o != m.out) g.tensors.erase(o);
    replaced.emplace(last, std::move(rn));
  }
  g.nodes = match::rebuild_nodes(g.nodes, removed, std::move(replaced));
  return g;
}

}  // namespace dc
