#include "candidates.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "candidates_generator.h"
#include "ir/error.h"
#include "ir/gemm_operand_sum.h"
#include "ir/glu.h"

namespace dc {

namespace candidate_rules {

namespace {

// "conv", "add", "layernorm": the op in a pattern string.
std::string short_name(const std::string& op) {
  std::string s;
  for (char c : op) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string long_form = "normalization";
  const size_t at = s.find(long_form);
  if (at != std::string::npos) s.replace(at, long_form.size(), "norm");
  return s;
}

// Node j may follow a heavy op (or a previous epilogue op) whose output is t: a bias /
// scale / shift with a constant, a residual Add of a same-shape tensor, an activation, a
// Cast. Never changes t's shape.
bool is_epilogue(const Context& c, size_t j, const std::string& t) {
  const Node& n = c.node(j);
  if (c.uses_of(j, t) != 1 || !c.preserves_shape(j, t)) return false;
  const EpilogueForm form = op_traits(n.op).epilogue;
  if (form == EpilogueForm::unary) {
    if (n.input(0) != t) return false;
    for (size_t s = 1; s < n.inputs.size(); ++s)
      if (n.has_input(s) && !c.is_constant(n.inputs[s])) return false;  // Clip bounds
    return true;
  }
  if (form == EpilogueForm::none || n.inputs.size() != 2) return false;
  const bool first = n.inputs[0] == t;
  const std::string& other = first ? n.inputs[1] : n.inputs[0];
  if (form == EpilogueForm::commutative) {
    if (c.is_constant(other)) return true;
    // Residual: a computed tensor of t's shape (not one that broadcasts).
    return n.op == "Add" && c.g.tensors.count(other) && c.shape(other) == c.shape(t);
  }
  return first && c.is_constant(other);  // ordered: Sub / Div by a constant
}

bool is_compare(const std::string& op) {
  return op == "Greater" || op == "Less" || op == "GreaterOrEqual" || op == "LessOrEqual" ||
         op == "Equal";
}

// Node j is a Where choosing between chain tensor t and a constant under a condition of
// exactly t's shape: the ReLU gradient's mask, Where(y > 0, dX, 0) after a convolution's
// data gradient (passes/gradients/grad_activation.cpp). Returns the nodes of the epilogue
// step: the Where, after the compare computing its condition when only the Where reads that
// and its operands are constants or tensors of t's shape (the kernel then reads y, not a
// bool mask that a kernel of its own would write). Empty when j is no such Where.
std::vector<size_t> select_epilogue(const Context& c, size_t j, const std::string& t) {
  const Node& n = c.node(j);
  if (n.op != "Where" || n.inputs.size() != 3 || c.uses_of(j, t) != 1 || !c.preserves_shape(j, t))
    return {};
  const std::string& cond = n.inputs[0];
  const std::string& other = n.inputs[1] == t ? n.inputs[2] : n.inputs[1];
  if (cond == t || !c.is_constant(other)) return {};
  // A broadcasting condition (an attention mask) stops the chain, as a broadcasting residual.
  if (!c.g.tensors.count(cond) || c.shape(cond) != c.shape(t)) return {};
  const auto p = c.producer_of(cond);
  if (!p || c.sole_next(*p) != j || !is_compare(c.node(*p).op)) return {j};
  for (const auto& in : c.node(*p).inputs)
    if (!c.is_constant(in) && (!c.g.tensors.count(in) || c.shape(in) != c.shape(t))) return {j};
  return {*p, j};
}

// Node p may be computed inside heavy op h's operand load: a Transpose (MatMul/Gemm
// operands), a scale by a constant, a Cast. Its output must be read by h alone.
bool is_prologue(const Context& c, size_t p, size_t h) {
  if (c.sole_next(p) != h) return false;
  const Node& n = c.node(p);
  if (!op_traits(n.op).prologue) return false;
  if (n.op == "Transpose")
    return c.node(h).op != "Conv" && c.node(h).op != "ConvTranspose";
  if (n.op == "Cast") return true;
  // Padding and resampling in front of a convolution: read through in its gather.
  if (n.op == "Pad" || n.op == "Resize" || n.op == "Upsample")
    return c.node(h).op == "Conv" || c.node(h).op == "ConvTranspose";
  if ((n.op == "Mul" || n.op == "Div") && n.inputs.size() == 2) {
    const bool const0 = c.is_constant(n.inputs[0]), const1 = c.is_constant(n.inputs[1]);
    if (const0 == const1) return false;
    if (n.op == "Div" && !const1) return false;
    return c.preserves_shape(p, const0 ? n.inputs[1] : n.inputs[0]);
  }
  return false;
}

}  // namespace

bool Context::is_legal(const std::vector<size_t>& nodes_in, const std::set<std::string>& exposed) const {
  if (nodes_in.empty()) return false;
  std::vector<size_t> nodes = nodes_in;
  std::sort(nodes.begin(), nodes.end());
  DC_INTERNAL_CHECK(std::adjacent_find(nodes.begin(), nodes.end()) == nodes.end(),
                    "is_legal: a node is listed twice");
  DC_INTERNAL_CHECK(nodes.back() < g.nodes.size(), "is_legal: node index ", nodes.back(),
                    " out of range");
  const std::set<size_t> inside(nodes.begin(), nodes.end());
  // Hidden intermediates: produced and read inside; then nobody outside may read them.
  for (size_t i : nodes)
    for (const auto& in : node(i).inputs) {
      const auto p = producer_of(in);
      if (!p || !inside.count(*p) || exposed.count(in)) continue;
      if (uses.outputs.count(in)) return false;
      for (size_t u : uses.of(in))
        if (!inside.count(u)) return false;
    }
  // Convexity: walk the nodes between the cluster's first and last in topological order,
  // marking the outside ones that depend on the cluster; none of them may feed it.
  std::vector<bool> depends(g.nodes.size(), false);
  for (size_t k = nodes.front() + 1; k <= nodes.back(); ++k) {
    const bool in_cluster = inside.count(k) != 0;
    for (const auto& in : node(k).inputs) {
      const auto p = producer_of(in);
      if (!p) continue;
      if (in_cluster && !inside.count(*p) && depends[*p]) return false;
      if (!in_cluster && (inside.count(*p) || depends[*p])) depends[k] = true;
    }
  }
  return true;
}

std::vector<Candidate> Generator::run() {
  for (size_t i = 0; i < c_.g.nodes.size(); ++i) add({i}, singleton_kind(c_.node(i)));
  for (size_t i = 0; i < c_.g.nodes.size(); ++i)
    if (classify_op(c_.node(i)) == OpClass::heavy) heavy(i);
  for (size_t i = 0; i < c_.g.nodes.size(); ++i)
    if (c_.node(i).op == "MatMul") attention(i);
  for (size_t i = 0; i < c_.g.nodes.size(); ++i)
    if (classify_op(c_.node(i)) == OpClass::reduction) reduction(i);
  for (size_t i = 0; i < c_.g.nodes.size(); ++i)
    if (classify_op(c_.node(i)) == OpClass::reduction) sibling_sums(i);
  elementwise_chains();
  return std::move(out_);
}

ClusterKind Generator::singleton_kind(const Node& n) {
  switch (classify_op(n)) {
    case OpClass::heavy: return heavy_kind(n);
    case OpClass::reduction: return ClusterKind::reduction;
    case OpClass::injective: return ClusterKind::elementwise;
    case OpClass::opaque: return ClusterKind::opaque;
  }
  return ClusterKind::opaque;
}

void Generator::add(std::vector<size_t> nodes, ClusterKind kind, const std::set<std::string>& exposed) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  if (seen_.count(nodes) || !c_.is_legal(nodes, exposed)) return;
  seen_.insert(nodes);
  Candidate cand;
  for (size_t i : nodes) {
    if (!cand.pattern.empty()) cand.pattern += '+';
    cand.pattern += short_name(c_.node(i).op);
  }
  cand.nodes = std::move(nodes);
  cand.kind = kind;
  out_.push_back(std::move(cand));
}

std::vector<std::vector<size_t>> Generator::epilogue_chain(size_t i) const {
  std::vector<std::vector<size_t>> chain;
  size_t cur = i;
  while (chain.size() < kMaxEpilogue) {
    const auto next = c_.sole_next(cur);
    if (!next) break;
    const std::string t = *c_.single_output(cur);
    std::vector<size_t> step = select_epilogue(c_, *next, t);
    if (step.empty() && is_epilogue(c_, *next, t)) step = {*next};
    if (step.empty()) break;
    chain.push_back(std::move(step));
    cur = *next;
  }
  return chain;
}

void Generator::heavy(size_t h) {
  const ClusterKind kind = heavy_kind(c_.node(h));
  const auto chain = epilogue_chain(h);
  std::vector<size_t> prologues;
  const Node& n = c_.node(h);
  // A convolution's weights are constant, but for the weight gradient's swapped Conv, whose
  // filters are dY with batch and channels swapped by a Transpose.
  const bool conv = n.op == "Conv" || n.op == "ConvTranspose";
  // The weight gradient's mode reads X and dY by address: no prologues.
  const size_t operands = n.op == "dc.ConvGradWeight" ? 0 : 2;
  for (size_t s = 0; s < operands && s < n.inputs.size(); ++s) {
    const auto p = c_.producer_of(n.inputs[s]);
    if (conv && s == 1 && !(p && n.op == "Conv" && c_.node(*p).op == "Transpose")) continue;
    if (p && !c_.is_constant(n.inputs[s]) && is_prologue(c_, *p, h) &&
        std::find(prologues.begin(), prologues.end(), *p) == prologues.end())
      prologues.push_back(*p);
  }
  std::vector<std::vector<size_t>> prologue_sets;
  for (size_t mask = 0; mask < (size_t{1} << prologues.size()); ++mask) {
    std::vector<size_t> set;
    for (size_t b = 0; b < prologues.size(); ++b)
      if (mask & (size_t{1} << b)) set.push_back(prologues[b]);
    prologue_sets.push_back(std::move(set));
  }
  // MatMul's or Gemm's A computed by injective ops only it reads (SwiGLU's silu(gate) * up
  // over the gate/up GEMM's split output, a GELU, views): the kernel computes A as it loads it.
  // Likewise a Conv's X (a training step's BatchNorm-apply + ReLU): the im2col gather and the
  // depthwise staging compute X only at taps inside the input and write 0 at padded ones
  // (f(0), ReLU(BN(0)), would be wrong; conv_gather_value, template_depthwise.cpp).
  if ((n.op == "MatMul" || n.op == "Gemm" || n.op == "Conv") && !c_.is_constant(n.input(0))) {
    auto cone = operand_cones({h}, {n.input(0)});
    if (cone.size() > 1) prologue_sets.push_back(std::move(cone));
  }
  const auto sums = operand_sums(h);
  for (const auto& set : prologue_sets) {
    std::vector<size_t> nodes = {h};
    nodes.insert(nodes.end(), set.begin(), set.end());
    add(nodes, kind);
    add_with_sums(nodes, set, sums, kind);
    for (const auto& step : chain) {
      nodes.insert(nodes.end(), step.begin(), step.end());
      add(nodes, kind);
      add_with_sums(nodes, set, sums, kind);
    }
  }
  // GLU epilogue: the interleaved gate/up halves of this MatMul's output and act(gate) * up
  // (ir/glu.h), each prologue set, every epilogue prefix after the product.
  const auto glu = glu_epilogue(h);
  if (glu.empty()) return;
  const auto glu_chain = epilogue_chain(glu.back());
  for (const auto& set : prologue_sets) {
    std::vector<size_t> nodes = {h};
    nodes.insert(nodes.end(), set.begin(), set.end());
    nodes.insert(nodes.end(), glu.begin(), glu.end());
    add(nodes, kind);
    for (const auto& step : glu_chain) {
      nodes.insert(nodes.end(), step.begin(), step.end());
      add(nodes, kind);
    }
  }
}

std::vector<Generator::OperandSum> Generator::operand_sums(size_t h) const {
  std::vector<OperandSum> sums;
  const Node& n = c_.node(h);
  const bool gemm = n.op == "MatMul" || n.op == "Gemm";
  if ((!gemm && n.op != "dc.ConvGradWeight") || !glu_epilogue(h).empty()) return sums;
  std::set<size_t> readers;
  for (size_t s = 0; s < 2; ++s) {
    const std::string& t = n.input(s);
    for (size_t u : c_.uses.of(t)) readers.insert(u);
    if (const auto p = c_.producer_of(t); p && c_.node(*p).op == "Transpose")
      for (size_t u : c_.uses.of(c_.node(*p).input(0))) readers.insert(u);
  }
  for (size_t r : readers) {
    const auto form = gemm_operand_sum(c_.g, n, c_.node(r));
    if (!form) continue;
    std::optional<size_t> transpose;
    if (form->through_transpose) transpose = c_.producer_of(n.input(form->operand));
    sums.push_back({r, transpose});
  }
  return sums;
}

void Generator::add_with_sums(const std::vector<size_t>& nodes, const std::vector<size_t>& set,
                              const std::vector<OperandSum>& sums, ClusterKind kind) {
  for (const auto& s : sums) {
    if (s.transpose && std::find(set.begin(), set.end(), *s.transpose) == set.end()) continue;
    std::vector<size_t> with = nodes;
    with.push_back(s.sum);
    add(with, kind);
  }
}

std::vector<size_t> Generator::glu_epilogue(size_t h) const {
  const auto split = glu_split(c_.g, h);
  if (!split) return {};
  const auto comb = glu_combiner(c_.g, c_.node(split->even).outputs[0], c_.node(split->odd).outputs[0]);
  if (!comb) return {};
  std::vector<size_t> nodes = {split->even, split->odd};
  for (size_t i : comb->nodes)
    if (c_.node(i).outputs[0] != comb->out) nodes.push_back(i);
  nodes.push_back(*c_.producer_of(comb->out));
  return nodes;
}

void Generator::attention(size_t m2) {
  std::vector<size_t> post;  // between the Softmax and m2
  const auto s = probabilities_source(m2, post);
  if (!s) return;
  const std::string& x = c_.node(*s).input(0);
  if (!c_.g.tensors.count(x)) return;
  const auto rank = static_cast<int64_t>(c_.shape(x).size());
  const int64_t axis = c_.node(*s).attrs.get_int("axis", -1);
  if (axis != -1 && axis != rank - 1) {
    explain(m2, fmt::format("Softmax '{}' is over axis {}, not the keys (last axis)", c_.node(*s).name, axis));
    return;
  }
  std::vector<size_t> nodes;
  const auto m1 = score_chain(*s, c_.shape(x), nodes);
  if (!m1) return;
  nodes.push_back(*s);
  nodes.push_back(m2);
  nodes.insert(nodes.end(), post.begin(), post.end());
  std::vector<size_t> k_transpose;  // the Transpose producing Kt
  if (const auto k = c_.producer_of(c_.node(*m1).input(1)); k && c_.node(*k).op == "Transpose" &&
                                                           c_.sole_next(*k) == *m1)
    k_transpose.push_back(*k);
  std::vector<size_t> operands;  // Transposes read by Q (m1 input 0) and V (m2 input 1)
  for (const auto& [mm, slot] : {std::pair{*m1, size_t{0}}, std::pair{m2, size_t{1}}}) {
    const auto t = c_.producer_of(c_.node(mm).input(slot));
    if (t && c_.node(*t).op == "Transpose" && c_.sole_next(*t) == mm) operands.push_back(*t);
  }
  std::vector<size_t> output;  // the Transpose that alone reads the attention output
  if (const auto next = c_.sole_next(m2); next && c_.node(*next).op == "Transpose")
    output.push_back(*next);
  const size_t before = out_.size();
  auto with = [&](std::vector<size_t> base, const std::vector<size_t>& more) {
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  const auto core = with(nodes, k_transpose);
  add(core, ClusterKind::attention);
  add(with(core, operands), ClusterKind::attention);
  add(with(core, output), ClusterKind::attention);
  add(with(with(core, operands), output), ClusterKind::attention);
  const auto cones = with(core, operand_cones(core, {c_.node(*m1).input(0), c_.node(*m1).input(1),
                                                     c_.node(m2).input(1)}));
  add(cones, ClusterKind::attention);
  add(with(cones, output), ClusterKind::attention);
  if (out_.size() == before)
    explain(m2, fmt::format("the attention cluster from MatMul '{}' to MatMul '{}' is not legal: {}",
                            c_.node(*m1).name, c_.node(m2).name, illegal_reason(core)));
}

std::optional<size_t> Generator::probabilities_source(size_t m2, std::vector<size_t>& post) const {
  std::string t = c_.node(m2).input(0);
  for (int step = 0; step < 6; ++step) {
    const auto p = c_.producer_of(t);
    if (!p) return std::nullopt;
    const Node& n = c_.node(*p);
    if (n.op == "Softmax") return p;
    if (n.op == "Cast" && c_.g.tensors.count(t) && is_float(c_.g.info(t).dtype)) {
      post.push_back(*p);
      t = n.input(0);
      continue;
    }
    if (n.op != "Where" || n.inputs.size() != 3) return std::nullopt;
    const auto cond = c_.producer_of(n.input(0));
    const auto fill = match::scalar_constant(c_.g, n.input(1));
    if (!cond || c_.node(*cond).op != "IsNaN" || c_.node(*cond).input(0) != n.input(2) || fill != 0.0)
      return std::nullopt;
    post.push_back(*p);
    post.push_back(*cond);
    t = n.input(2);
  }
  return std::nullopt;
}

std::optional<size_t> Generator::score_chain(size_t softmax, const Shape& scores,
                                             std::vector<size_t>& nodes) {
  size_t cur = softmax;
  for (size_t step = 0; step <= 8; ++step) {
    const Node& n = c_.node(cur);
    std::optional<size_t> next;
    const size_t first = cur == softmax ? 0 : n.op == "Where" ? 1 : 0;
    const size_t last = cur == softmax ? 1 : n.inputs.size();
    for (size_t slot = first; slot < last && !next; ++slot) {
      const auto p = c_.producer_of(n.input(slot));
      if (!p || c_.is_constant(n.input(slot))) continue;
      const Node& pn = c_.node(*p);
      if (pn.op == "MatMul" && c_.shape(n.input(slot)) == scores) {
        if (c_.sole_next(*p) != cur) {
          explain(*p, fmt::format("the scores of MatMul '{}' are read by another node than '{}' "
                                  "(a mask computed from the scores?)", pn.name, n.name));
          return std::nullopt;
        }
        nodes.push_back(*p);
        return p;
      }
      const bool score_op = is_elementwise_math(pn) || pn.op == "Where";
      if (score_op && c_.preserves_shape(*p, n.input(slot)) && c_.shape(n.input(slot)) == scores &&
          reaches_matmul(*p, 8 - step)) {
        if (c_.sole_next(*p) != cur) {
          explain(*p, fmt::format("score op '{}' ({}) is read by another node than '{}'", pn.name, pn.op, n.name));
          return std::nullopt;
        }
        next = p;
      }
    }
    if (!next) return std::nullopt;
    nodes.push_back(*next);
    cur = *next;
  }
  return std::nullopt;
}

bool Generator::reaches_matmul(size_t i, size_t depth) const {
  for (const auto& in : c_.node(i).inputs) {
    const auto p = c_.producer_of(in);
    if (!p) continue;
    if (c_.node(*p).op == "MatMul") return true;
    if (depth > 0 && classify_op(c_.node(*p)) == OpClass::injective && reaches_matmul(*p, depth - 1))
      return true;
  }
  return false;
}

std::vector<size_t> Generator::operand_cones(const std::vector<size_t>& core,
                                             const std::vector<std::string>& tensors) const {
  std::set<size_t> inside(core.begin(), core.end());
  std::vector<size_t> cone;
  std::vector<std::string> todo = tensors;
  std::set<std::string> seen;
  for (bool grew = true; grew && cone.size() < kMaxOperandCone;) {
    grew = false;
    for (size_t k = 0; k < todo.size() && cone.size() < kMaxOperandCone; ++k) {
      const auto p = c_.producer_of(todo[k]);
      if (p && inside.count(*p) && c_.node(*p).op == "Transpose") {  // Kt's Transpose: look past it
        const std::string& in = c_.node(*p).input(0);
        if (!c_.is_constant(in) && seen.insert(in).second) todo.push_back(in);
        continue;
      }
      if (!p || inside.count(*p) || classify_op(c_.node(*p)) != OpClass::injective) continue;
      bool read_inside = true;
      for (const auto& o : c_.node(*p).outputs) {
        if (o.empty()) continue;
        if (c_.uses.outputs.count(o)) read_inside = false;
        for (size_t u : c_.uses.of(o)) read_inside = read_inside && inside.count(u);
      }
      if (!read_inside) continue;
      inside.insert(*p);
      cone.push_back(*p);
      grew = true;
      for (const auto& in : c_.node(*p).inputs)
        if (!in.empty() && !c_.is_constant(in) && seen.insert(in).second) todo.push_back(in);
    }
  }
  return cone;
}

std::string Generator::illegal_reason(const std::vector<size_t>& nodes) const {
  const std::set<size_t> inside(nodes.begin(), nodes.end());
  for (size_t i : nodes)
    for (const auto& in : c_.node(i).inputs) {
      const auto p = c_.producer_of(in);
      if (!p || !inside.count(*p)) continue;
      if (c_.uses.outputs.count(in)) return fmt::format("'{}' is a graph output", in);
      for (size_t u : c_.uses.of(in))
        if (!inside.count(u))
          return fmt::format("node '{}' ({}) reads '{}' from inside it", c_.node(u).name, c_.node(u).op, in);
    }
  return "a path leaves the cluster and comes back";
}

void Generator::explain(size_t node, std::string why) {
  notes_.push_back(fmt::format("attention at '{}' not fused: {}", c_.node(node).name, why));
}

void Generator::elementwise_chains() {
  const size_t n = c_.g.nodes.size();
  std::vector<std::optional<size_t>> pred(n), succ(n);
  for (size_t v = 0; v < n; ++v) {
    if (classify_op(c_.node(v)) != OpClass::injective) continue;
    for (const auto& in : c_.node(v).inputs) {
      const auto u = c_.producer_of(in);
      if (u && classify_op(c_.node(*u)) == OpClass::injective && c_.sole_next(*u) == v) {
        pred[v] = u;
        succ[*u] = v;
        break;
      }
    }
  }
  for (size_t head = 0; head < n; ++head) {
    if (pred[head] || !succ[head]) continue;
    std::vector<size_t> chain = {head};
    while (succ[chain.back()]) chain.push_back(*succ[chain.back()]);
    const size_t len = chain.size();
    auto sub = [&](size_t from, size_t to) {  // [from, to)
      add(std::vector<size_t>(chain.begin() + static_cast<long>(from),
                              chain.begin() + static_cast<long>(to)),
          ClusterKind::elementwise);
    };
    if (len <= kMaxAllSubchainsLength) {
      for (size_t a = 0; a < len; ++a)
        for (size_t b = a + 2; b <= len; ++b) sub(a, b);
    } else {
      for (size_t b = 2; b <= len; ++b) sub(0, b);
      for (size_t a = 1; a + 2 <= len; ++a) sub(a, len);
    }
    std::vector<std::string> operands;
    for (size_t i : chain)
      for (const auto& in : c_.node(i).inputs)
        if (!in.empty() && !c_.is_constant(in)) operands.push_back(in);
    const std::vector<size_t> cone = operand_cones(chain, operands);
    if (cone.empty()) continue;
    std::vector<size_t> nodes = chain;
    nodes.insert(nodes.end(), cone.begin(), cone.end());
    add(nodes, ClusterKind::elementwise);
  }
}

}  // namespace candidate_rules

using candidate_rules::Context;
using candidate_rules::Generator;

OpClass classify_op(const Node& n) { return op_class(n.op); }

ClusterKind heavy_kind(const Node& n) {
  DC_INTERNAL_CHECK(classify_op(n) == OpClass::heavy, "heavy_kind of ", n.op);
  if (n.op == "ConvTranspose") return ClusterKind::conv;  // groups: the GEMM batch
  if (n.op == "dc.ConvGradWeight") return ClusterKind::conv;  // the weight-gradient mode
  if (n.op != "Conv") return ClusterKind::gemm;
  return n.attrs.get_int("group", 1) > 1 ? ClusterKind::depthwise : ClusterKind::conv;
}

bool is_legal(const Graph& g, const std::vector<size_t>& nodes) {
  return Context(g).is_legal(nodes);
}

std::vector<Candidate> generate_candidates(const Graph& g) { return Generator(g).run(); }

std::vector<Candidate> generate_candidates(const Graph& g, std::vector<std::string>* notes) {
  Generator gen(g);
  auto out = gen.run();
  if (notes) *notes = std::move(gen.notes_);
  return out;
}

WorkloadSet dedupe_workloads(const Graph& g, const std::vector<Candidate>& candidates) {
  WorkloadSet set;
  std::map<std::string, size_t> by_signature;
  set.candidate_workload.reserve(candidates.size());
  const auto consumers = g.consumers();
  for (const auto& cand : candidates) {
    Workload w = make_workload(g, cand.nodes, cand.kind, &consumers);
    auto [it, fresh] = by_signature.emplace(w.signature, set.workloads.size());
    if (fresh) set.workloads.push_back(std::move(w));
    set.candidate_workload.push_back(it->second);
  }
  return set;
}

}  // namespace dc
