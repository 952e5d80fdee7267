#include "passes/lower_einsum.h"

#include <numeric>
#include <set>

#include <fmt/format.h>

#include "ir/error.h"
#include "passes/match.h"
#include "ref/einsum.h"

namespace dc {

namespace {

// Emits the nodes replacing one Einsum node, each tensor and node named after it.
class EinsumLowering {
 public:
  EinsumLowering(Graph& g, const Node& n, std::vector<Node>& out, std::set<std::string>& names)
      : g_(g), n_(n), out_(out), names_(names), dtype_(g.info(n.inputs[0]).dtype) {}

  // x (with axis letters `from`) transposed to the letters `to`; x itself if in order.
  std::string transpose(const std::string& x, const std::string& from, const std::string& to) {
    if (from == to) return x;
    std::vector<int64_t> perm;
    Shape s;
    for (char c : to) {
      perm.push_back(static_cast<int64_t>(from.find(c)));
      s.push_back(g_.info(x).shape[from.find(c)]);
    }
    Attributes a;
    a.set("perm", perm);
    return add("Transpose", {x}, s, std::move(a));
  }
  std::string reshape(const std::string& x, const Shape& to) {
    if (g_.info(x).shape == to) return x;
    const std::string shape = match::unique_name(g_, fmt::format("{}_shape", n_.name));
    g_.tensors[shape] = TensorInfo{DType::i64, {static_cast<int64_t>(to.size())}};
    g_.initializers[shape] = Tensor::from_vector<int64_t>({static_cast<int64_t>(to.size())}, to);
    return add("Reshape", {x, shape}, to);
  }
  std::string add(const std::string& op, std::vector<std::string> in, const Shape& shape,
                  Attributes a = {}) {
    Node m;
    m.name = fmt::format("{}_{}", n_.name, op);
    for (int k = 2; names_.count(m.name); ++k) m.name = fmt::format("{}_{}_{}", n_.name, op, k);
    names_.insert(m.name);
    m.op = op;
    m.inputs = std::move(in);
    const std::string y = match::unique_name(g_, fmt::format("{}_{}", n_.name, op));
    g_.tensors[y] = TensorInfo{dtype_, shape};
    m.outputs = {y};
    m.attrs = std::move(a);
    out_.push_back(std::move(m));
    return y;
  }
  // The last node writes the Einsum's output tensor (an Identity if nothing was emitted).
  void finish(const std::string& y) {
    if (y == n_.inputs[0] || out_.empty() || out_.back().outputs[0] != y) {
      add("Identity", {y}, g_.info(n_.outputs[0]).shape);
    }
    g_.tensors.erase(out_.back().outputs[0]);
    out_.back().outputs[0] = n_.outputs[0];
  }

 private:
  Graph& g_;
  const Node& n_;
  std::vector<Node>& out_;
  std::set<std::string>& names_;
  DType dtype_;
};

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

std::string keep(const std::string& letters, auto pred) {
  std::string r;
  for (char c : letters)
    if (pred(c)) r += c;
  return r;
}

Shape extents(const ref::EinsumEquation& e, const std::string& letters) {
  Shape s;
  for (char c : letters) s.push_back(e.extent.at(c));
  return s;
}

int64_t product(const ref::EinsumEquation& e, const std::string& letters) {
  const Shape s = extents(e, letters);
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

[[noreturn]] void refuse(const Node& n, const std::string& why) {
  throw_user_error("Einsum node '", n.name, "': equation '", n.attrs.get_string("equation", ""),
                   "' is not supported (", why,
                   "; dc lowers one or two operands of distinct letters onto MatMul / Transpose / ReduceSum)");
}

void lower_one(Graph& g, const Node& n, std::vector<Node>& out, std::set<std::string>& names) {
  std::vector<Shape> shapes;
  for (const auto& i : n.inputs) shapes.push_back(g.info(i).shape);
  const ref::EinsumEquation e = ref::parse_einsum(n, shapes);
  for (const auto& t : e.inputs)
    for (char c : t)
      if (std::count(t.begin(), t.end(), c) > 1) refuse(n, fmt::format("letter '{}' repeats in '{}': a diagonal", c, t));
  EinsumLowering l(g, n, out, names);
  const std::string& o = e.output;
  if (e.inputs.size() == 1) {
    const std::string& a = e.inputs[0];
    std::string x = n.inputs[0], kept = keep(a, [&](char c) { return has(o, c); });
    if (kept != a) {
      std::vector<int64_t> axes;
      for (size_t k = 0; k < a.size(); ++k)
        if (!has(o, a[k])) axes.push_back(static_cast<int64_t>(k));
      Attributes at;
      at.set("axes", axes);
      at.set("keepdims", int64_t{0});
      x = l.add("ReduceSum", {x}, extents(e, kept), std::move(at));
    }
    l.finish(l.transpose(x, kept, o));
    return;
  }
  if (e.inputs.size() != 2) refuse(n, fmt::format("{} operands", e.inputs.size()));
  const std::string &a = e.inputs[0], &b = e.inputs[1];
  for (char c : a + b)
    if (!has(o, c) && !(has(a, c) && has(b, c)))
      refuse(n, fmt::format("letter '{}' is summed inside one operand", c));
  const std::string batch = keep(o, [&](char c) { return has(a, c) && has(b, c); });
  const std::string fa = keep(o, [&](char c) { return has(a, c) && !has(b, c); });
  const std::string fb = keep(o, [&](char c) { return has(b, c) && !has(a, c); });
  const std::string k = keep(a, [&](char c) { return has(b, c) && !has(o, c); });
  if (batch.empty() && k.size() == 1 && fb.size() == 1 && !fa.empty()) {
    // [free A..., K] x [K, N]: MatMul broadcasts A's leading letters, no reshapes ("bnd,dh").
    const std::string y = l.add("MatMul", {l.transpose(n.inputs[0], a, fa + k), l.transpose(n.inputs[1], b, k + fb)},
                                extents(e, fa + fb));
    l.finish(l.transpose(y, fa + fb, o));
    return;
  }
  Shape sa = extents(e, batch), sb = sa, sy = sa;
  sa.insert(sa.end(), {product(e, fa), product(e, k)});
  sb.insert(sb.end(), {product(e, k), product(e, fb)});
  sy.insert(sy.end(), {product(e, fa), product(e, fb)});
  const std::string xa = l.reshape(l.transpose(n.inputs[0], a, batch + fa + k), sa);
  const std::string xb = l.reshape(l.transpose(n.inputs[1], b, batch + k + fb), sb);
  const std::string y = l.add("MatMul", {xa, xb}, sy);
  l.finish(l.transpose(l.reshape(y, extents(e, batch + fa + fb)), batch + fa + fb, o));
}

}  // namespace

Graph lower_einsum(Graph g) {
  std::vector<Node> out;
  const std::vector<Node> nodes = std::move(g.nodes);
  std::set<std::string> names;
  for (const Node& n : nodes) names.insert(n.name);
  for (const Node& n : nodes) {
    if (n.op == "Einsum") lower_one(g, n, out, names);
    else out.push_back(n);
  }
  g.nodes = std::move(out);
  return g;
}

}  // namespace dc
