#include "candidates.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/gemm_operand_sum.h"
#include "ir/glu.h"
#include "ir/reduced_axes.h"
#include "passes/match.h"

namespace dc {

namespace {

bool is_elementwise_math(const Node& n) { return dc::is_elementwise_math(n.op); }

// "conv", "add", "layernorm": the op in a pattern string.
std::string short_name(const std::string& op) {
  std::string s;
  for (char c : op) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string long_form = "normalization";
  const size_t at = s.find(long_form);
  if (at != std::string::npos) s.replace(at, long_form.size(), "norm");
  return s;
}

// Graph queries computed once per generator run.
struct Context {
  const Graph& g;
  match::Uses uses;
  std::map<std::string, size_t> producer;

  explicit Context(const Graph& graph) : g(graph), uses(graph) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer[o] = i;
  }

  const Node& node(size_t i) const { return g.nodes[i]; }

  std::optional<size_t> producer_of(const std::string& t) const {
    auto it = producer.find(t);
    if (t.empty() || it == producer.end()) return std::nullopt;
    return it->second;
  }

  // The node's only output, if it has exactly one.
  std::optional<std::string> single_output(size_t i) const {
    std::optional<std::string> out;
    for (const auto& o : node(i).outputs) {
      if (o.empty()) continue;
      if (out) return std::nullopt;
      out = o;
    }
    return out;
  }

  // The one node reading node i's only output, which no one else reads and which is not a
  // graph output: the condition for i's output to become a hidden intermediate.
  std::optional<size_t> sole_next(size_t i) const {
    const auto out = single_output(i);
    if (!out) return std::nullopt;
    return uses.sole_consumer(*out);
  }

  bool is_constant(const std::string& t) const { return g.is_constant(t); }

  const Shape& shape(const std::string& t) const { return g.info(t).shape; }

  // Node j reads chain tensor t and maps it elementwise to a tensor of the same shape.
  bool preserves_shape(size_t j, const std::string& t) const {
    const auto out = single_output(j);
    return out && g.tensors.count(*out) && g.tensors.count(t) && shape(*out) == shape(t);
  }

  // Number of j's input slots holding t.
  size_t uses_of(size_t j, const std::string& t) const {
    const auto& in = node(j).inputs;
    return static_cast<size_t>(std::count(in.begin(), in.end(), t));
  }

  // `exposed`: intermediates the cluster writes as outputs although it also reads them.
  bool is_legal(const std::vector<size_t>& nodes, const std::set<std::string>& exposed = {}) const;
};

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

// A Transpose that swaps dims 0 and 1 only: a grouped convolution weight gradient's dY with
// batch and channels swapped (passes/gradients/grad_conv.cpp).
bool swaps_leading_dims(const Node& n) {
  const std::vector<int64_t> perm = n.attrs.get_ints("perm", {});
  if (perm.size() < 3 || perm[0] != 1 || perm[1] != 0) return false;
  for (size_t d = 2; d < perm.size(); ++d)
    if (perm[d] != static_cast<int64_t>(d)) return false;
  return true;
}

// Node p may be computed inside heavy op h's operand load: a Transpose (MatMul/Gemm
// operands; a Conv's when it swaps dims 0 and 1, read through the gather), a scale by a
// constant, a Cast. Its output must be read by h alone.
bool is_prologue(const Context& c, size_t p, size_t h) {
  if (c.sole_next(p) != h) return false;
  const Node& n = c.node(p);
  if (!op_traits(n.op).prologue) return false;
  if (n.op == "Transpose")
    return c.node(h).op == "Conv" ? swaps_leading_dims(n) : c.node(h).op != "ConvTranspose";
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

class Generator {
 public:
  explicit Generator(const Graph& g) : c_(g) {}

  std::vector<Candidate> run() {
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

 private:
  static ClusterKind singleton_kind(const Node& n) {
    switch (classify_op(n)) {
      case OpClass::heavy: return heavy_kind(n);
      case OpClass::reduction: return ClusterKind::reduction;
      case OpClass::injective: return ClusterKind::elementwise;
      case OpClass::opaque: return ClusterKind::opaque;
    }
    return ClusterKind::opaque;
  }

  void add(std::vector<size_t> nodes, ClusterKind kind, const std::set<std::string>& exposed = {}) {
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

  // Epilogue steps after node i, following single-reader outputs: one op each, but for a
  // masking Where, which brings the compare computing its mask (select_epilogue).
  std::vector<std::vector<size_t>> epilogue_chain(size_t i) const {
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

  // Heavy op alone, with every prefix of its epilogue, and with every non-empty set of its
  // operand prologues combined with every epilogue prefix.
  void heavy(size_t h) {
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

  // A ReduceSum of GEMM h's operand over its k (a Linear layer's or a convolution's bias
  // gradient beside the weight gradient, ir/gemm_operand_sum.h), with the 2-D Transpose it
  // reads through (the operand's prologue), if any. The GEMM computes the sum as a row or
  // column of ones.
  struct OperandSum {
    size_t sum;
    std::optional<size_t> transpose;
  };
  std::vector<OperandSum> operand_sums(size_t h) const {
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

  // `nodes` (heavy op, prologue `set`, epilogue steps) with each operand sum whose Transpose,
  // if it reads through one, the set holds: the kernel's second output.
  void add_with_sums(const std::vector<size_t>& nodes, const std::vector<size_t>& set,
                     const std::vector<OperandSum>& sums, ClusterKind kind) {
    for (const auto& s : sums) {
      if (s.transpose && std::find(set.begin(), set.end(), *s.transpose) == set.end()) continue;
      std::vector<size_t> with = nodes;
      with.push_back(s.sum);
      add(with, kind);
    }
  }

  // The Slices and combiner nodes of MatMul h's GLU epilogue, the product's producer last;
  // empty if h has none.
  std::vector<size_t> glu_epilogue(size_t h) const {
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

  // MatMul(Q, Kt) -> score ops -> Softmax(last axis) -> [Cast, IsNaN/Where guard] ->
  // MatMul(P, V), as one cluster (the score ops: scale, masks, Casts; score_chain). The same
  // cluster is offered again with the Transposes feeding K, Q and V (strided views), with a
  // Transpose of the attention output (stored at the permuted coordinates), and with the
  // operand cones: every injective node computing Q, K or V that only the cluster reads
  // (sqrt(scale) on Q and K, RoPE, the GQA repeat, Reshape/Transpose/Slice views), which the
  // kernel computes as it loads its operands: no copy kernel before or after attention.
  void attention(size_t m2) {
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

  // The Softmax whose probabilities m2 reads as A, directly or through Casts and the guard
  // Where(IsNaN(P), 0, P) (its nodes appended to `post`).
  std::optional<size_t> probabilities_source(size_t m2, std::vector<size_t>& post) const {
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

  // Walking back from the Softmax to the first MatMul through the score ops: injective math,
  // Casts and Where (its value operands), each keeping the scores' shape; the other operands
  // (masks, position biases, the Where condition) stay outside. Appends the ops and returns
  // the MatMul. At most 8 ops.
  std::optional<size_t> score_chain(size_t softmax, const Shape& scores, std::vector<size_t>& nodes) {
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

  // Some input of node i, through at most `depth` injective ops, is produced by a MatMul.
  bool reaches_matmul(size_t i, size_t depth) const {
    for (const auto& in : c_.node(i).inputs) {
      const auto p = c_.producer_of(in);
      if (!p) continue;
      if (c_.node(*p).op == "MatMul") return true;
      if (depth > 0 && classify_op(c_.node(*p)) == OpClass::injective && reaches_matmul(*p, depth - 1))
        return true;
    }
    return false;
  }

  // Injective nodes computing `tensors` that nothing outside `core` and themselves reads:
  // grown backwards to a fixed point, at most kMaxOperandCone nodes.
  std::vector<size_t> operand_cones(const std::vector<size_t>& core, const std::vector<std::string>& tensors) const {
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

  // Why is_legal refuses `nodes`: the first hidden intermediate read outside, or convexity.
  std::string illegal_reason(const std::vector<size_t>& nodes) const {
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

  void explain(size_t node, std::string why) {
    notes_.push_back(fmt::format("attention at '{}' not fused: {}", c_.node(node).name, why));
  }

  // A reduction with up to kMaxReductionPrologue elementwise producers before it (following
  // the first input that has one) and kMaxReductionEpilogue elementwise consumers after it.
  void reduction(size_t r) {
    const std::vector<size_t> before = reduction_prologue(r);
    std::vector<size_t> after;
    size_t cur = r;
    while (after.size() < kMaxReductionEpilogue) {
      const auto next = c_.sole_next(cur);
      if (!next || !is_elementwise_math(c_.node(*next)) ||
          !c_.preserves_shape(*next, *c_.single_output(cur)))
        break;
      after.push_back(*next);
      cur = *next;
    }
    const std::vector<RowEpilogue> dags = row_epilogues(r);
    for (size_t a = 0; a <= before.size(); ++a) {
      for (size_t b = 0; b <= after.size(); ++b) {
        std::vector<size_t> nodes = {r};
        nodes.insert(nodes.end(), before.begin(), before.begin() + static_cast<long>(a));
        nodes.insert(nodes.end(), after.begin(), after.begin() + static_cast<long>(b));
        add(nodes, ClusterKind::reduction);
      }
      for (const RowEpilogue& dag : dags) {
        std::vector<size_t> nodes = dag.nodes;
        nodes.insert(nodes.end(), before.begin(), before.begin() + static_cast<long>(a));
        add(nodes, ClusterKind::reduction, dag.exposed);
      }
    }
    // The residual Add entering a norm whose sum the next residual also reads: fused, with
    // the sum written as a second output during the norm's first pass over the row.
    const std::string& op = c_.node(r).op;
    const bool norm = op == "LayerNormalization" || op == "RMSNormalization";
    if (!norm) {
      // row_reduce writes an input that others read during its pass (pools have no such output).
      if (op_traits(op).pattern == OpPattern::reduce) input_cone(r, after, false);
      return;
    }
    input_cone(r, after, true);
    const auto p = c_.producer_of(c_.node(r).input(0));
    if (!p || c_.sole_next(*p) || c_.node(*p).op != "Add" || c_.node(*p).inputs.size() != 2) return;
    const std::string& sum = c_.node(r).input(0);
    for (const auto& in : c_.node(*p).inputs)
      if (c_.is_constant(in) || !c_.g.tensors.count(in) || c_.shape(in) != c_.shape(sum)) return;
    for (size_t b = 0; b <= after.size(); ++b) {
      std::vector<size_t> nodes = {*p, r};
      nodes.insert(nodes.end(), after.begin(), after.begin() + static_cast<long>(b));
      add(nodes, ClusterKind::reduction, {sum});
    }
  }

  // Up to kMaxReductionPrologue elementwise producers of reduction r's data input, each read
  // by the next alone (following the first input that has one), nearest first.
  std::vector<size_t> reduction_prologue(size_t r) const {
    std::vector<size_t> before;
    size_t cur = r;
    while (before.size() < kMaxReductionPrologue) {
      std::optional<size_t> next;
      const Node& n = c_.node(cur);
      const size_t slots = cur == r ? 1 : n.inputs.size();  // a reduction's data input only
      for (size_t s = 0; s < slots && s < n.inputs.size() && !next; ++s) {
        const auto p = c_.producer_of(n.inputs[s]);
        // Broadcasting inside the prologue is fine: the reduction reads p's output.
        if (p && is_elementwise_math(c_.node(*p)) && c_.sole_next(*p) == cur) next = p;
      }
      if (!next) break;
      before.push_back(*next);
      cur = *next;
    }
    return before;
  }

  // Sibling sums: reduction r and a later ReduceSum/ReduceMean over the same rows
  // (are_sibling_sums) whose prologue reads a tensor that r's reads too, each with its whole
  // prologue, as one row_reduce kernel that reads the shared tensor once (BatchNorm's
  // backward: sum dY and sum dY x_hat; LayerNorm's: the two row means). Offered beside each
  // reduction's own candidates; the cover chooses.
  void sibling_sums(size_t r) {
    std::vector<size_t> mine = reduction_prologue(r);
    mine.push_back(r);
    const std::set<std::string> reads = tensors_read(mine);
    for (size_t s = r + 1; s < c_.g.nodes.size(); ++s) {
      if (classify_op(c_.node(s)) != OpClass::reduction || !are_sibling_sums(c_.g, c_.node(r), c_.node(s))) continue;
      std::vector<size_t> theirs = reduction_prologue(s);
      theirs.push_back(s);
      const std::set<std::string> other = tensors_read(theirs);
      // Not a statistic of r's (a decomposed LayerNorm's variance reads its mean): one pass
      // computes no value from another reduction of the same pass.
      if (std::any_of(c_.node(r).outputs.begin(), c_.node(r).outputs.end(),
                      [&](const std::string& o) { return other.count(o) != 0; }) ||
          std::none_of(reads.begin(), reads.end(), [&](const std::string& t) { return other.count(t) != 0; }))
        continue;
      std::vector<size_t> nodes = mine;
      nodes.insert(nodes.end(), theirs.begin(), theirs.end());
      add(nodes, ClusterKind::reduction);
      // With the chain computing r's input (the ReLU mask or BatchNorm's dX making dY, as
      // rule 5 offers it for r alone), which the kernel writes in its pass.
      const std::vector<size_t> cone = input_cone_nodes(r, false);
      if (cone.empty()) continue;
      nodes.insert(nodes.end(), cone.begin(), cone.end());
      add(nodes, ClusterKind::reduction, {c_.node(r).input(0)});
    }
  }

  // The non-constant tensors that `nodes` read from outside themselves.
  std::set<std::string> tensors_read(const std::vector<size_t>& nodes) const {
    const std::set<size_t> inside(nodes.begin(), nodes.end());
    std::set<std::string> reads;
    for (size_t i : nodes)
      for (const auto& in : c_.node(i).inputs) {
        const auto p = c_.producer_of(in);
        if (!in.empty() && !c_.is_constant(in) && !(p && inside.count(*p))) reads.insert(in);
      }
    return reads;
  }

  // Reduction r with the elementwise DAG over its result that row_reduce writes as row-space
  // outputs (codegen/template_reduction.cpp): the nodes of the result's shape that read it or
  // another node of the DAG, their other operands constants or free of computed inputs (a
  // running statistic times the momentum, fused as an operand cone when only the DAG reads
  // it). BatchNorm's running statistics and inverse std from the batch mean and variance
  // (lower_batch_norm.h): no kernel of their own. Nodes within kMaxRowEpilogueSpan of r in
  // topological order only: the backward pass's per-channel scalars from invstd belong to the
  // kernels that read them, and a cluster that spans far ties distant parts of the cover
  // together. One candidate per depth of the DAG. `exposed`: the tensors others read too.
  struct RowEpilogue {
    std::vector<size_t> nodes;
    std::set<std::string> exposed;
  };
  std::vector<RowEpilogue> row_epilogues(size_t r) const {
    const auto out = c_.single_output(r);
    // Row-space results only: a reduction's, not a norm's or a Softmax's (the input's shape).
    if (!out || c_.shape(*out) == c_.shape(c_.node(r).input(0))) return {};
    std::map<std::string, int> depth = {{*out, 0}};
    std::deque<std::string> todo = {*out};
    std::vector<std::pair<size_t, int>> dag;  // node, depth
    while (!todo.empty() && dag.size() < kMaxRowEpilogue) {
      const std::string t = todo.front();
      todo.pop_front();
      for (size_t u : c_.uses.of(t)) {
        const auto o = c_.single_output(u);
        if (!o || depth.count(*o) || u > r + kMaxRowEpilogueSpan || !is_elementwise_math(c_.node(u)) ||
            !c_.preserves_shape(u, *out))
          continue;
        int d = 0;
        bool ready = true;
        for (const auto& in : c_.node(u).inputs) {
          if (depth.count(in)) d = std::max(d, depth.at(in) + 1);
          else ready = ready && free_operand(in);
        }
        if (!ready) continue;
        dag.emplace_back(u, d);
        depth[*o] = d;
        todo.push_back(*o);
      }
    }
    std::vector<RowEpilogue> out_dags;
    const int deepest = dag.empty() ? 0 : std::max_element(dag.begin(), dag.end(), [](auto& x, auto& y) { return x.second < y.second; })->second;
    for (int k = 1; k <= deepest; ++k) {
      std::vector<size_t> nodes = {r};
      for (const auto& [u, d] : dag)
        if (d <= k) nodes.push_back(u);
      out_dags.push_back(row_epilogue(nodes));
    }
    return out_dags;
  }

  // Reduction `nodes[0]` with DAG nodes[1..] and the operand cones only they read.
  RowEpilogue row_epilogue(std::vector<size_t> nodes) const {
    std::set<std::string> made;
    for (size_t u : nodes) made.insert(c_.node(u).outputs.begin(), c_.node(u).outputs.end());
    std::vector<std::string> operands;
    for (size_t u : nodes)
      for (const auto& in : c_.node(u).inputs)
        if (!in.empty() && !made.count(in) && !c_.is_constant(in)) operands.push_back(in);
    const std::vector<size_t> cones = operand_cones(nodes, operands);
    nodes.insert(nodes.end(), cones.begin(), cones.end());
    RowEpilogue e{nodes, {}};
    const std::set<size_t> inside(nodes.begin(), nodes.end());
    for (const auto& t : made) {
      const auto& readers = c_.uses.of(t);
      if (c_.uses.outputs.count(t) || std::any_of(readers.begin(), readers.end(), [&](size_t u) { return !inside.count(u); }))
        e.exposed.insert(t);
    }
    return e;
  }

  // A constant, a graph input, or computed by an elementwise node from those alone.
  bool free_operand(const std::string& t) const {
    if (t.empty() || c_.is_constant(t)) return true;
    const auto p = c_.producer_of(t);
    if (!p) return true;
    const auto& ins = c_.node(*p).inputs;
    return is_elementwise_math(c_.node(*p)) &&
           std::all_of(ins.begin(), ins.end(), [&](const std::string& in) { return in.empty() || c_.is_constant(in) || !c_.producer_of(in); });
  }

  // The injective nodes computing reduction r's input, grown backwards like attention's
  // operand cones; the reduction computes its input as it loads the row, and when others read
  // that input too, the kernel writes it as a second output during its first pass, as for
  // the residual Add above. For a norm (`norm`): when one of them is a Gather (the embedding
  // in front of the first norm: the token lookup, with position or token-type Adds and index
  // Reshapes around it; no copy kernel for the lookup remains). For other row reductions:
  // when others read the input (a bias or BatchNorm gradient's ReduceSum of a dY that the
  // data and weight gradients read too, computed by the ReLU's mask or BatchNorm's dX: the
  // chain runs in the reduction's kernel, which writes dY, instead of a kernel of its own).
  void input_cone(size_t r, const std::vector<size_t>& after, bool norm) {
    const std::string& x = c_.node(r).input(0);
    const std::vector<size_t> cone = input_cone_nodes(r, norm);
    if (cone.empty()) return;
    if (norm && std::none_of(cone.begin(), cone.end(), [&](size_t i) { return c_.node(i).op == "Gather"; })) return;
    const auto p = c_.producer_of(x);
    std::set<std::string> exposed;
    if (c_.sole_next(*p) != r) exposed.insert(x);
    for (size_t b = 0; b <= after.size(); ++b) {
      std::vector<size_t> nodes = cone;
      nodes.push_back(r);
      nodes.insert(nodes.end(), after.begin(), after.begin() + static_cast<long>(b));
      add(nodes, ClusterKind::reduction, exposed);
    }
  }

  // input_cone's nodes (its producer last), or none.
  std::vector<size_t> input_cone_nodes(size_t r, bool norm) const {
    const std::string& x = c_.node(r).input(0);
    const auto p = c_.producer_of(x);
    if (!p || classify_op(c_.node(*p)) != OpClass::injective || c_.single_output(*p) != x) return {};
    if (!norm && (c_.sole_next(*p) == r || !is_elementwise_math(c_.node(*p)))) return {};
    std::vector<std::string> operands;
    for (const auto& in : c_.node(*p).inputs)
      if (!in.empty() && !c_.is_constant(in)) operands.push_back(in);
    std::vector<size_t> cone = operand_cones({r, *p}, operands);
    cone.push_back(*p);
    return cone;
  }

  // Chains of injective ops linked by single-reader outputs (a node with several linked
  // producers continues the chain of the first, by input slot). Every contiguous sub-chain
  // of a chain up to kMaxAllSubchainsLength long; of a longer chain, its prefixes and
  // suffixes only (about 2L instead of L^2/2). Then each maximal chain with its operand
  // cone: the injective nodes computing its operands that only it reads, the branches the
  // linear chain left out (BatchNorm's dX: the x_hat branch and the per-channel scalars
  // beside the dY chain), so a DAG of elementwise ops is one kernel, not one per branch.
  void elementwise_chains() {
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

  Context c_;
  std::set<std::vector<size_t>> seen_;
  std::vector<Candidate> out_;

 public:
  std::vector<std::string> notes_;  // why an attention site was not fused (plan --explain)
};

}  // namespace

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
