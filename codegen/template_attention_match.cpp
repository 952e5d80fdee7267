#include "template_attention_match.h"

#include <algorithm>

#include <fmt/format.h>

#include "ir/error.h"
#include "template_text.h"
#include "template_util.h"

namespace dc {

std::vector<std::string> AttentionMatch::with_batch(std::vector<std::string> tail) const {
  std::vector<std::string> c = bc;
  c.insert(c.end(), tail.begin(), tail.end());
  return c;
}

std::optional<std::vector<int64_t>> output_permutation(const Graph& g, const AttentionMatch& m,
                                                       const std::string& tensor) {
  const auto p = g.producer(tensor);
  if (!p || g.nodes[*p].op != "Transpose" || g.nodes[*p].input(0) != m.pv->outputs[0]) return std::nullopt;
  const size_t rank = g.info(tensor).shape.size();
  std::vector<int64_t> perm = g.nodes[*p].attrs.get_ints("perm", {});
  if (perm.empty())
    for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
  return perm;
}

bool reads_probabilities(const Graph& g, const Node& mm, const Node& softmax, bool* guarded) {
  std::string t = mm.input(0);
  for (int step = 0; step < 8; ++step) {
    if (t == softmax.outputs[0]) return true;
    const auto p = g.producer(t);
    if (!p) return false;
    const Node& n = g.nodes[*p];
    if (n.op == "Cast" && is_float(g.info(t).dtype)) {
      t = n.input(0);
      continue;
    }
    if (n.op != "Where" || n.inputs.size() != 3) return false;
    const auto c = g.producer(n.input(0));
    const auto fill = g.initializers.find(n.input(1));
    if (!c || g.nodes[*c].op != "IsNaN" || g.nodes[*c].input(0) != n.input(2) ||
        fill == g.initializers.end() || fill->second.numel() != 1 || fill->second.to_float_vector()[0] != 0.f)
      return false;
    *guarded = true;
    t = n.input(2);
  }
  return false;
}

AttentionMatch match_attention(const Workload& w) {
  const Graph& g = w.graph;
  AttentionMatch m;
  std::vector<const Node*> matmuls;
  for (const auto& n : g.nodes) {
    if (n.op == "MatMul") matmuls.push_back(&n);
    else if (n.op == "Softmax") m.softmax = &n;
    else DC_INTERNAL_CHECK(ValueEmitter::supports(n), "attention_fused: cannot fuse ", n.op);
  }
  DC_INTERNAL_CHECK(m.softmax != nullptr && matmuls.size() == 2,
                    "attention_fused: expected two MatMul and one Softmax");
  bool guarded0 = false, guarded1 = false;
  const bool first = reads_probabilities(g, *matmuls[0], *m.softmax, &guarded0);
  m.pv = first ? matmuls[0] : matmuls[1];
  m.qk = first ? matmuls[1] : matmuls[0];
  DC_INTERNAL_CHECK(first || reads_probabilities(g, *matmuls[1], *m.softmax, &guarded1),
                    "attention_fused: the second MatMul does not read the Softmax output as A");
  m.guarded = first ? guarded0 : guarded1;
  for (const auto& o : g.outputs)
    DC_INTERNAL_CHECK(o != m.softmax->outputs[0] && o != m.qk->outputs[0],
                      "attention_fused: an intermediate (", o, ") is a workload output");
  m.q = m.qk->input(0);
  m.kt = m.qk->input(1);
  m.v = m.pv->input(1);

  const Shape& qs = g.info(m.q).shape;
  const Shape& kts = g.info(m.kt).shape;
  const Shape& vs = g.info(m.v).shape;
  const Shape& ss = g.info(m.qk->outputs[0]).shape;
  const Shape& os = g.info(m.pv->outputs[0]).shape;
  DC_INTERNAL_CHECK(qs.size() >= 2 && kts.size() >= 2 && vs.size() >= 2 && ss.size() >= 2,
                    "attention_fused: operands of rank < 2");
  for (const auto* t : {&m.q, &m.kt, &m.v}) {
    const DType dt = g.info(*t).dtype;
    DC_INTERNAL_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16,
                      "attention_fused: operand ", *t, " of dtype ", dtype_name(dt),
                      " (f32, f16 or bf16 only)");
  }
  const int64_t rank = static_cast<int64_t>(g.info(m.softmax->input(0)).shape.size());
  const bool legacy = m.softmax->attrs.get_int("dc_legacy_flatten", 0) != 0;
  const int64_t axis =
      normalize_axis(m.softmax->attrs.get_int("axis", legacy ? 1 : -1), rank, "axis");
  DC_INTERNAL_CHECK(axis == rank - 1, "attention_fused: Softmax over axis ", axis,
                    ", not the last axis");
  m.sq = qs[qs.size() - 2];
  m.d = qs.back();
  m.sk = kts.back();
  m.dv = vs.back();
  DC_INTERNAL_CHECK(kts[kts.size() - 2] == m.d && vs[vs.size() - 2] == m.sk,
                    "attention_fused: inconsistent Q/K/V shapes");
  m.batch_shape = Shape(ss.begin(), ss.end() - 2);
  Shape want_out = m.batch_shape;
  want_out.push_back(m.sq);
  want_out.push_back(m.dv);
  DC_INTERNAL_CHECK(os == want_out, "attention_fused: output ", shape_str(os),
                    " does not have the scores' batch dims ", shape_str(want_out));
  for (const auto& o : g.outputs)
    if (!g.producer(o)) m.lse = o;  // expand_training_attention's log-sum-exp
  if (!m.lse.empty())
    DC_INTERNAL_CHECK(g.info(m.lse).shape == Shape(os.begin(), os.end() - 1) && g.info(m.lse).dtype == DType::f32,
                      "attention_fused: log-sum-exp output '", m.lse, "' of shape ", shape_str(g.info(m.lse).shape));
  for (const auto& o : g.outputs)
    DC_INTERNAL_CHECK(o == m.lse || g.info(o).shape == os || output_permutation(g, m, o), "attention_fused: output '", o,
                      "' is neither elementwise with the attention output nor a Transpose of it");
  m.batch = shape_numel(m.batch_shape);
  m.score_dtype = g.info(m.qk->outputs[0]).dtype;
  m.out_dtype = g.info(m.pv->outputs[0]).dtype;
  for (size_t i = 0; i < m.batch_shape.size(); ++i) m.bc.push_back(fmt::format("dc_bc{}", i));
  return m;
}

// The graph input that `tensor` reshapes (Reshape, Flatten, Squeeze, Unsqueeze: the same
// row-major bytes), or nullopt.
std::optional<std::string> contiguous_view_of_input(const Graph& g, const std::string& tensor) {
  const auto p = g.producer(tensor);
  if (!p) return std::nullopt;
  const Node& n = g.nodes[*p];
  if (n.op != "Reshape" && n.op != "Flatten" && n.op != "Squeeze" && n.op != "Unsqueeze") return std::nullopt;
  const std::string& in = n.input(0);
  if (std::find(g.inputs.begin(), g.inputs.end(), in) == g.inputs.end()) return std::nullopt;
  return in;
}

AttentionView attention_view(const Graph& g, const ValueEmitter& ve, const std::string& tensor) {
  AttentionView v;
  const Shape& s = g.info(tensor).shape;
  auto is_input = [&](const std::string& t) {
    return std::find(g.inputs.begin(), g.inputs.end(), t) != g.inputs.end();
  };
  std::vector<int64_t> strides;
  if (is_input(tensor)) {
    strides = shape_strides(s);
    v.pointer = ve.param_name(tensor);
    v.dtype = g.info(tensor).dtype;
    v.direct = true;
  } else if (const auto src = contiguous_view_of_input(g, tensor)) {
    strides = shape_strides(s);  // a Reshape of an input: the input's bytes in s's shape
    v.pointer = ve.param_name(*src);
    v.dtype = g.info(*src).dtype;
    v.direct = true;
  } else if (auto p = g.producer(tensor); p && g.nodes[*p].op == "Transpose" &&
                                          (is_input(g.nodes[*p].input(0)) ||
                                           contiguous_view_of_input(g, g.nodes[*p].input(0)))) {
    const Node& tr = g.nodes[*p];
    const Shape& in = g.info(tr.input(0)).shape;
    const auto r = contiguous_view_of_input(g, tr.input(0));
    std::vector<int64_t> perm = tr.attrs.get_ints("perm", {});
    if (perm.empty())
      for (size_t i = 0; i < in.size(); ++i) perm.push_back(static_cast<int64_t>(in.size() - 1 - i));
    const auto in_strides = shape_strides(in);
    for (size_t i = 0; i < s.size(); ++i) strides.push_back(in_strides[static_cast<size_t>(perm[i])]);
    v.pointer = ve.param_name(r ? *r : tr.input(0));
    v.dtype = g.info(r ? *r : tr.input(0)).dtype;
    v.direct = true;
  }
  if (!v.direct) return v;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == 1) strides[i] = 0;
  v.strides = strides;
  return v;
}

std::string attention_batch_setup(const AttentionMatch& m, const std::string& lin) {
  std::string stmts;
  emit_unravel(m.batch_shape, lin, "dc_bc", stmts);
  std::string out = dedent(stmts);
  for (const auto& c : m.bc) out += fmt::format("(void){};\n", c);
  return out;
}

std::string attention_view_base(const AttentionMatch& m, const AttentionView& v,
                                const std::string& name) {
  const size_t r = v.strides.size();
  std::string terms;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (v.strides[i] == 0) continue;
    terms += fmt::format(" + dc_bc{} * {}", m.batch_shape.size() - (r - 2) + i, v.strides[i]);
  }
  return fmt::format("const dc_i64 dc_{}_base = 0{};\n", name, terms);
}

std::string attention_score(ValueEmitter& ve, const AttentionMatch& m, const std::string& raw,
                            std::string& code) {
  ve.reset_locals();
  // A score tensor stored as f16/bf16 (not what the precision policy does) would hold the
  // rounded value.
  ve.bind(m.qk->outputs[0], round_to_storage(m.score_dtype, raw));
  const std::string score =
      ve.value(m.softmax->input(0), m.with_batch({"dc_qr", "dc_kc"}), code);
  ve.unbind(m.qk->outputs[0]);
  ve.reset_locals();
  return score;
}

std::string attention_epilogue(ValueEmitter& ve, const Workload& w, const AttentionMatch& m,
                               const std::string& h) {
  const Graph& g = w.graph;
  std::string epi;
  ve.reset_locals();
  // The attention output, rounded once to its dtype (the IR's rule) before the epilogue
  // reads it; every output stored in its own dtype.
  // Where(IsNaN(P), 0, P) after the Softmax: a row masked entirely (0 / 0 here) gives 0.
  const std::string hv = m.guarded ? fmt::format("({0} != {0} ? 0.f : {0})", h) : h;
  ve.bind(m.pv->outputs[0], round_to_storage(m.out_dtype, hv));
  const auto oc = m.with_batch({"dc_qr", "dc_e"});
  for (const auto& o : g.outputs) {
    if (o == m.lse) continue;  // written from the row statistics, not per element
    // A Transpose of the attention output is stored at the permuted coordinates (its
    // element at y reads the attention output at x with x[perm[i]] = y[i], i.e. here).
    std::vector<std::string> yc = oc;
    if (const auto perm = output_permutation(g, m, o)) {
      DC_INTERNAL_CHECK(perm->size() == oc.size(), "attention_fused: Transpose of rank ", perm->size());
      for (size_t i = 0; i < perm->size(); ++i) yc[i] = oc.at(static_cast<size_t>((*perm)[i]));
    }
    const std::string val = ve.value_dedented(o, yc, epi);
    epi += fmt::format("{}[{}] = {};\n", ve.param_name(o), ve.offset(o, yc),
                       store_value(g.info(o).dtype, val));
  }
  ve.unbind(m.pv->outputs[0]);
  ve.reset_locals();
  return epi;
}

}  // namespace dc
