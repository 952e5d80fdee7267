#include "value_emitter.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/join.h"
#include "ir/kernel.h"
#include "variant.h"
#include "template_text.h"
#include "value_emitter_math.h"
#include "value_emitter_op.h"

namespace dc {

namespace {

EmitForm form_of(const std::string& op) { return op_traits(op).emit; }

std::string int_literal(int64_t v) {
  if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";  // the literal alone overflows
  return fmt::format("{}LL", v);
}


// Literal of one element of a constant, in its C type (float for f16/bf16: their values
// are exact in float).
std::string element_literal(DType t, double f, int64_t i) {
  if (t == DType::f32 || t == DType::f16 || t == DType::bf16) return float_literal(f);
  if (t == DType::f64) return double_literal(f);
  if (t == DType::boolean) return i ? "1" : "0";
  return int_literal(i);
}

void check_emittable(DType t, const std::string& tensor) {
  DC_INTERNAL_CHECK(t != DType::undefined, "ValueEmitter cannot emit tensor '", tensor,
                    "' of dtype ", dtype_name(t));
}


}  // namespace

std::string double_literal(double v) {
  if (std::isnan(v)) return "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(v)) return v > 0 ? "__longlong_as_double(0x7ff0000000000000LL)"
                                  : "__longlong_as_double(0xfff0000000000000LL)";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string float_literal(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::string s = fmt::format("{}", static_cast<float>(v));  // shortest round-trip text
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s + "f";
}

const char* value_type(DType t) {
  return t == DType::f16 || t == DType::bf16 ? "float" : cuda_type(t);
}

std::string round_to_storage(DType t, const std::string& expr) {
  if (t == DType::f16) return fmt::format("dc_round_f16({})", expr);
  if (t == DType::bf16) return fmt::format("dc_round_bf16({})", expr);
  return expr;
}

std::string load_value(DType t, const std::string& element) {
  if (t == DType::f16 || t == DType::bf16) return fmt::format("dc_to_f32({})", element);
  return element;
}

std::string store_value(DType t, const std::string& expr) {
  if (t == DType::f16 || t == DType::bf16) return fmt::format("dc_from_f32<{}>({})", cuda_type(t), expr);
  return expr;
}

std::set<std::string> vector_loadable_inputs(const Graph& g, const std::vector<std::string>& roots,
                                             int64_t inner, bool halves) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  std::set<std::string> direct, remapped;
  std::function<void(const std::string&, bool)> visit = [&](const std::string& t, bool remap) {
    if (!(remap ? remapped : direct).insert(t).second) return;
    auto p = producer.find(t);
    if (p == producer.end()) return;
    const Node& n = g.nodes[p->second];
    const bool pointwise = is_pointwise_op(n.op);
    for (const auto& in : n.inputs)
      if (!in.empty()) visit(in, remap || !pointwise);
  };
  for (const auto& r : roots) visit(r, false);
  std::set<std::string> out;
  if (inner <= 1) return out;
  for (const auto& in : g.inputs) {
    if (!direct.count(in) || remapped.count(in) || g.is_constant(in)) continue;
    const TensorInfo& info = g.info(in);
    const bool loadable = info.dtype == DType::f32 ||
                          (halves && (info.dtype == DType::f16 || info.dtype == DType::bf16));
    if (loadable && !info.shape.empty() && info.shape.back() == inner)
      out.insert(in);
  }
  return out;
}

ValueEmitter::ValueEmitter(const Graph& g) : g_(g) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer_[o] = i;
  for (size_t i = 0; i < g.inputs.size(); ++i) params_[g.inputs[i]] = fmt::format("in{}", i);
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (!params_.count(g.outputs[i])) params_[g.outputs[i]] = fmt::format("out{}", i);
}

bool ValueEmitter::supports(const Node& n) { return is_emittable(n.op); }

void ValueEmitter::bind(const std::string& tensor, const std::string& var) { bound_[tensor] = var; }

void ValueEmitter::unbind(const std::string& tensor) { bound_.erase(tensor); }

void ValueEmitter::reset_locals() { memo_.clear(); }

std::string ValueEmitter::fresh(const char* prefix) { return fmt::format("{}{}", prefix, counter_++); }

std::string ValueEmitter::param_name(const std::string& tensor) const {
  auto it = params_.find(tensor);
  DC_INTERNAL_CHECK(it != params_.end(), "tensor '", tensor, "' is not a kernel parameter");
  return it->second;
}

std::vector<std::string> ValueEmitter::broadcast_coords(const std::string& tensor,
                                                        const std::vector<std::string>& coords) const {
  const Shape& s = g_.info(tensor).shape;
  DC_INTERNAL_CHECK(s.size() <= coords.size(), "rank of '", tensor, "' exceeds coordinates");
  std::vector<std::string> out;
  const size_t off = coords.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d) out.push_back(s[d] == 1 ? "0" : coords[off + d]);
  return out;
}

std::string ValueEmitter::offset(const std::string& tensor, const std::vector<std::string>& coords) const {
  const auto c = broadcast_coords(tensor, coords);
  const auto strides = shape_strides(g_.info(tensor).shape);
  std::vector<std::string> terms;
  for (size_t d = 0; d < c.size(); ++d) {
    if (c[d] == "0") continue;
    terms.push_back(strides[d] == 1 ? fmt::format("(dc_i64)({})", c[d])
                                    : fmt::format("(dc_i64)({}) * {}", c[d], strides[d]));
  }
  return terms.empty() ? "0" : join(terms, " + ");
}

std::string ValueEmitter::load(const std::string& tensor, const std::vector<std::string>& coords,
                               std::string& code) {
  const DType t = g_.info(tensor).dtype;
  check_emittable(t, tensor);
  if (auto w = g_.initializers.find(tensor); w != g_.initializers.end()) {
    const Tensor& c = w->second;
    const bool fl = is_float(c.dtype());
    const auto fv = fl ? c.to_float_vector() : std::vector<float>{};
    const auto iv = fl ? std::vector<int64_t>{} : c.to_int64_vector();
    auto lit = [&](size_t i) {
      return element_literal(t, fl ? fv[i] : static_cast<double>(iv[i]), fl ? 0 : iv[i]);
    };
    if (c.numel() == 1) return lit(0);
    // Small structural constants (Gather indices, ...): a local array of the values.
    std::vector<std::string> items;
    for (size_t i = 0; i < static_cast<size_t>(c.numel()); ++i) items.push_back(lit(i));
    const std::string arr = fresh("k"), v = fresh("v");
    code += fmt::format("  const {0} {1}[{2}] = {{{3}}};\n  const {0} {4} = {1}[{5}];\n",
                        value_type(t), arr, c.numel(), join(items, ", "), v, offset(tensor, coords));
    return v;
  }
  const std::string v = fresh("v");
  code += fmt::format("  const {} {} = {};\n", value_type(t), v,
                      load_value(t, fmt::format("{}[{}]", param_name(tensor), offset(tensor, coords))));
  return v;
}

std::string ValueEmitter::value_dedented(const std::string& tensor,
                                         const std::vector<std::string>& coords, std::string& code) {
  std::string stmts;
  const std::string v = value(tensor, coords, stmts);
  code += dedent(stmts);
  return v;
}

std::string ValueEmitter::value(const std::string& tensor, const std::vector<std::string>& coords,
                                std::string& code) {
  if (auto b = bound_.find(tensor); b != bound_.end()) return b->second;
  // A tensor's value depends only on its own coordinates: elements that differ only where
  // it broadcasts share one local (a per-channel scale loaded once for a float4's lanes).
  const std::string key = tensor + "@" + join(broadcast_coords(tensor, coords), ",");
  if (auto m = memo_.find(key); m != memo_.end()) return m->second;
  std::string result;
  auto p = producer_.find(tensor);
  if (p == producer_.end()) {
    result = load(tensor, coords, code);
  } else {
    const Node& n = g_.nodes[p->second];
    size_t out_index = 0;
    while (n.outputs[out_index] != tensor) ++out_index;
    result = emit_node(n, out_index, coords, code);
  }
  memo_[key] = result;
  return result;
}

namespace {

// Ops whose value is one of their data inputs' values, unchanged (index maps, selections):
// the result needs no rounding when those inputs already have the output's dtype.
bool passes_value(const std::string& op) { return op_traits(op).passes_value; }

}  // namespace

std::string ValueEmitter::emit_node(const Node& n, size_t out_index,
                                    const std::vector<std::string>& coords, std::string& code) {
  const std::string r = emit_op(n, out_index, coords, code);
  const DType od = g_.info(n.outputs[out_index]).dtype;
  if (!is_float(od) || n.op == "Cast") return r;  // Cast rounds itself
  // The dtype `r` is exact in: the data inputs' for value-passing ops when they all share
  // one dtype, else the compute dtype (float, or double where f64 is involved).
  DType from = compute_dtype(n, od);
  if (passes_value(n.op)) {
    std::set<DType> in_types;
    const size_t first = n.op == "Where" ? 1 : 0;
    const size_t last = n.op == "Where" ? 3 : (n.op == "Concat" ? n.inputs.size() : 1);
    for (size_t i = first; i < last; ++i) in_types.insert(g_.info(n.input(i)).dtype);
    if (in_types.size() == 1) from = *in_types.begin();
  }
  // Values of the output's dtype already (a computed f16/bf16 value is not: it is a float).
  if (from == od && (passes_value(n.op) || (od != DType::f16 && od != DType::bf16))) return r;
  // Round once to the output's storage type (or convert f64 <-> f32).
  const std::string v = fresh("t");
  code += fmt::format("  const {} {} = {};\n", value_type(od), v,
                      round_to_storage(od, fmt::format("({})({})", value_type(od), r)));
  return v;
}

DType ValueEmitter::compute_dtype(const Node& n, DType out) const {
  bool any_float = is_float(out), wide = out == DType::f64;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty() || (n.op == "Pow" && i == 1)) continue;  // Pow's exponent: own type
    const DType t = g_.info(n.inputs[i]).dtype;
    any_float = any_float || is_float(t);
    wide = wide || t == DType::f64;
  }
  if (!any_float) return out;
  return wide ? DType::f64 : DType::f32;
}

std::string ValueEmitter::Op::define_as(const std::string& type, const std::string& expr) {
  const std::string v = e.fresh("t");
  code += fmt::format("  const {} {} = {};\n", type, v, expr);
  return v;
}

std::string ValueEmitter::Op::fn(const char* name, const std::string& arg) const {
  DC_INTERNAL_CHECK(!integral, n.op, " on integer tensor '", n.outputs[out_index], "'");
  return fmt::format("{}{}({})", name, f32 ? "f" : "", arg);
}

std::string ValueEmitter::Op::lit(double v) const { return element_literal(cd, v, static_cast<int64_t>(v)); }

// The op's row of the table (value_emitter_ops.cpp), its operands computed first for the
// unary and binary forms, whose shared math functions (value_emitter_math.cpp) come first.
std::string ValueEmitter::emit_op(const Node& n, size_t out_index,
                                  const std::vector<std::string>& coords, std::string& code) {
  const std::string& out = n.outputs[out_index];
  const TensorInfo& oi = g_.info(out);
  check_emittable(oi.dtype, out);
  // Float ops compute in f32 (f64 where f64 is involved) whatever their storage dtypes,
  // as the CPU reference does; emit_node rounds the result to the output's dtype.
  const DType cd = compute_dtype(n, oi.dtype);
  const bool f32 = cd == DType::f32, f64 = cd == DType::f64;
  Op o{*this, n, out_index, broadcast_coords(out, coords), code, oi.dtype, cd,
       is_float(oi.dtype) ? cuda_type(cd) : cuda_type(oi.dtype), f32, f64, !f32 && !f64, {}};
  const EmitForm form = form_of(n.op);
  if (form == EmitForm::unary || form == EmitForm::binary) {
    o.x.push_back(o.in(0, o.oc));
    if (form == EmitForm::binary) o.x.push_back(o.in(1, o.oc));
    if (auto e = math_expression(n, o.x, cd)) return o.define(*e);
  }
  if (const OpRow row = op_row(n.op)) return row(o);
  if (is_index_search_op(n.op)) return emit_index_search(n, out_index, o.oc, code);
  throw_internal_error("ValueEmitter cannot emit op ", n.op);
}

}  // namespace dc
