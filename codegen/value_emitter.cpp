#include "value_emitter.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/kernel.h"
#include "variant.h"
#include "template_text.h"
#include "value_emitter_math.h"

namespace dc {

namespace {

EmitForm form_of(const std::string& op) { return op_traits(op).emit; }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string int_literal(int64_t v) {
  if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";  // the literal alone overflows
  return fmt::format("{}LL", v);
}

std::string double_literal(double v) {
  if (std::isnan(v)) return "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(v)) return v > 0 ? "__longlong_as_double(0x7ff0000000000000LL)"
                                  : "__longlong_as_double(0xfff0000000000000LL)";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
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

// Literal of the constant `name` (only f32/f64 scalars or integer values are constants).
double scalar_value(const Tensor& t) { return t.to_float_vector().at(0); }

}  // namespace

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

std::string ValueEmitter::emit_op(const Node& n, size_t out_index,
                                  const std::vector<std::string>& coords, std::string& code) {
  const std::string& out = n.outputs[out_index];
  const TensorInfo& oi = g_.info(out);
  check_emittable(oi.dtype, out);
  const auto oc = broadcast_coords(out, coords);  // coordinates in the output's own rank
  // Float ops compute in f32 (f64 where f64 is involved) whatever their storage dtypes,
  // as the CPU reference does; emit_node rounds the result to the output's dtype.
  const DType cd = compute_dtype(n, oi.dtype);
  const std::string ctype = is_float(oi.dtype) ? cuda_type(cd) : cuda_type(oi.dtype);
  const bool f32 = cd == DType::f32, f64 = cd == DType::f64;
  const bool integral = !f32 && !f64;
  auto in = [&](size_t i, const std::vector<std::string>& c) { return value(n.input(i), c, code); };
  auto define_as = [&](const std::string& type, const std::string& expr) {
    const std::string v = fresh("t");
    code += fmt::format("  const {} {} = {};\n", type, v, expr);
    return v;
  };
  auto define = [&](const std::string& expr) { return define_as(ctype, expr); };
  // A math function of the compute type: expf for f32, exp for f64.
  auto fn = [&](const char* name, const std::string& x) {
    DC_INTERNAL_CHECK(!integral, n.op, " on integer tensor '", out, "'");
    return fmt::format("{}{}({})", name, f32 ? "f" : "", x);
  };
  auto lit = [&](double v) { return element_literal(cd, v, static_cast<int64_t>(v)); };

  if (form_of(n.op) == EmitForm::unary) {
    const std::string x = in(0, oc);
    if (n.op == "Identity" || n.op == "Dropout") return x;
    if (auto e = math_expression(n, {x}, cd)) return define(*e);
    // x < 0 ? 0 : x, as the reference: NaN passes through (dc_relu would make it 0).
    if (n.op == "Relu") return define(fmt::format("{0} < {1} ? {1} : {0}", x, lit(0)));
    if (n.op == "Sigmoid")
      return define(f32 ? fmt::format("dc_sigmoid({})", x)
                        : fmt::format("1.0 / (1.0 + {})", fn("exp", "-" + x)));
    if (n.op == "Tanh") return define(fn("tanh", x));
    if (n.op == "Exp") return define(fn("exp", x));
    if (n.op == "Log") return define(fn("log", x));
    if (n.op == "Sqrt") return define(fn("sqrt", x));
    if (n.op == "Erf") return define(fn("erf", x));
    if (n.op == "Neg") return define(fmt::format("-{}", x));
    if (n.op == "Reciprocal") return define(fmt::format("{} / {}", lit(1), x));
    if (n.op == "Abs")
      return define(integral ? fmt::format("{0} < 0 ? -{0} : {0}", x) : fn("fabs", x));
    if (n.op == "Not") return define(fmt::format("!{}", x));
    if (n.op == "Gelu") {
      const bool tanh_form = n.attrs.get_string("approximate", "none") == "tanh";
      if (f32) return define(fmt::format("{}({})", tanh_form ? "dc_gelu_tanh" : "dc_gelu", x));
      return define(tanh_form
                        ? fmt::format("0.5 * {0} * (1.0 + tanh(0.79788456080286535588 * ({0} + 0.044715 * {0} * {0} * {0})))", x)
                        : fmt::format("0.5 * {0} * (1.0 + erf({0} * 0.70710678118654752440))", x));
    }
    if (n.op == "LeakyRelu") {
      const std::string a = lit(n.attrs.get_float("alpha", 0.01f));
      if (f32) return define(fmt::format("dc_leaky_relu({}, {})", x, a));
      return define(fmt::format("{0} < 0 ? {1} * {0} : {0}", x, a));
    }
    if (n.op == "HardSigmoid") {
      const std::string a = lit(n.attrs.get_float("alpha", 0.2f));
      const std::string b = lit(n.attrs.get_float("beta", 0.5f));
      if (f32) return define(fmt::format("dc_hard_sigmoid({}, {}, {})", x, a, b));
      return define(fmt::format("fmax(0.0, fmin(1.0, {} * {} + {}))", a, x, b));
    }
    if (n.op == "HardSwish") {
      if (f32) return define(fmt::format("dc_hard_swish({})", x));
      return define(fmt::format("{0} * fmax(0.0, fmin(1.0, {0} / 6.0 + 0.5))", x));
    }
    if (n.op == "Cast") {
      const DType from = g_.info(n.input(0)).dtype;
      if (from == oi.dtype) return x;
      const std::string to = value_type(oi.dtype);
      if (oi.dtype == DType::boolean) return define_as(to, fmt::format("{} != 0", x));
      if (is_integer(oi.dtype) && is_float(from))  // truncation toward zero; NaN gives 0
        return define_as(to, fmt::format("{0} != {0} ? ({1})0 : ({1})({0})", x, to));
      // To f16/bf16: through float (as the reference's Cast), then rounded once.
      return define_as(to, round_to_storage(oi.dtype, fmt::format("({})({})", to, x)));
    }
    if (n.op == "Clip") {
      // As the reference: v < lo ? lo : v, then > hi ? hi; NaN passes through.
      std::string lo, hi;
      if (n.attrs.has("min")) lo = lit(n.attrs.get_float("min"));
      if (n.attrs.has("max")) hi = lit(n.attrs.get_float("max"));
      if (n.has_input(1)) lo = in(1, {});
      if (n.has_input(2)) hi = in(2, {});
      std::string v = x;
      if (!lo.empty()) v = define(fmt::format("{0} < {1} ? {1} : {0}", v, lo));
      if (!hi.empty()) v = define(fmt::format("{0} > {1} ? {1} : {0}", v, hi));
      return v == x ? define(x) : v;
    }
  }
  if (form_of(n.op) == EmitForm::binary) {
    const std::string a = in(0, oc), b = in(1, oc);
    if (auto e = math_expression(n, {a, b}, cd)) return define(*e);
    if (n.op == "Add") return define(fmt::format("{} + {}", a, b));
    if (n.op == "Sub") return define(fmt::format("{} - {}", a, b));
    if (n.op == "Mul") return define(fmt::format("{} * {}", a, b));
    if (n.op == "Div") return define(fmt::format("{} / {}", a, b));
    if (n.op == "Pow") {
      // The exponent as the reference's kernel sees it: f16/bf16 widened to f32.
      DType et = g_.info(n.input(1)).dtype;
      if (et == DType::f16 || et == DType::bf16) et = DType::f32;
      const auto* e = g_.initializers.count(n.input(1)) ? &g_.initializers.at(n.input(1)) : nullptr;
      if (e && e->numel() == 1 && !integral && et == cd && scalar_value(*e) == 2.0)
        return define(fmt::format("{0} * {0}", a));
      if (f32 && et == DType::f32) return define(fmt::format("powf({}, {})", a, b));
      // Mixed dtypes: in double, then to the base's type (the reference's rule).
      return define(fmt::format("({})pow((double)({}), (double)({}))", ctype, a, b));
    }
    if (n.op == "Max" || n.op == "Min") {
      const bool mx = n.op == "Max";
      std::string acc = a;
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        const std::string y = i == 1 ? b : in(i, oc);
        if (f32) acc = define(fmt::format("{}({}, {})", mx ? "dc_max" : "dc_min", acc, y));
        else if (f64) acc = define(fmt::format("({0} {2} {1} || {0} != {0}) ? {0} : {1}", acc, y, mx ? ">" : "<"));
        else acc = define(fmt::format("{0} {2} {1} ? {0} : {1}", acc, y, mx ? ">" : "<"));
      }
      return acc;
    }
    if (n.op == "Equal") return define(fmt::format("{} == {}", a, b));
    if (n.op == "Greater") return define(fmt::format("{} > {}", a, b));
    if (n.op == "Less") return define(fmt::format("{} < {}", a, b));
    if (n.op == "GreaterOrEqual") return define(fmt::format("{} >= {}", a, b));
    if (n.op == "LessOrEqual") return define(fmt::format("{} <= {}", a, b));
    if (n.op == "And") return define(fmt::format("{} && {}", a, b));
    if (n.op == "Or") return define(fmt::format("{} || {}", a, b));
    if (n.op == "Xor") return define(fmt::format("({} != 0) != ({} != 0)", a, b));
  }
  if (n.op == "Where") {
    const std::string c = in(0, oc), a = in(1, oc), b = in(2, oc);
    return define(fmt::format("{} ? {} : {}", c, a, b));
  }

  // Index maps: compute the input coordinates of this output element.
  const Shape& os = oi.shape;
  if (n.op == "Transpose") {
    const size_t r = os.size();
    std::vector<int64_t> perm = n.attrs.get_ints("perm", {});
    if (perm.empty())
      for (size_t d = 0; d < r; ++d) perm.push_back(static_cast<int64_t>(r - 1 - d));
    std::vector<std::string> ic(r);
    for (size_t d = 0; d < r; ++d) ic[static_cast<size_t>(perm[d])] = oc[d];
    return in(0, ic);
  }
  if (n.op == "Reshape" || n.op == "Flatten" || n.op == "Squeeze" || n.op == "Unsqueeze") {
    const Shape& is = g_.info(n.input(0)).shape;
    const auto ostr = shape_strides(os);
    std::vector<std::string> terms;
    for (size_t d = 0; d < os.size(); ++d)
      if (os[d] != 1) terms.push_back(fmt::format("(dc_i64)({}) * {}", oc[d], ostr[d]));
    const std::string lin = fresh("lin");
    code += fmt::format("  const dc_i64 {} = {};\n", lin, terms.empty() ? "0" : join(terms, " + "));
    const auto istr = shape_strides(is);
    std::vector<std::string> ic;
    for (size_t d = 0; d < is.size(); ++d)
      ic.push_back(is[d] == 1 ? "0" : fmt::format("({} / {}) % {}", lin, istr[d], is[d]));
    return in(0, ic);
  }
  if (n.op == "Expand") return in(0, oc);  // numpy broadcasting of the input
  if (n.op == "Tile") {
    const Shape& is = g_.info(n.input(0)).shape;
    std::vector<std::string> ic;
    for (size_t d = 0; d < is.size(); ++d)
      ic.push_back(is[d] == 1 ? "0" : is[d] == os[d] ? oc[d] : fmt::format("({}) % {}", oc[d], is[d]));
    return in(0, ic);
  }
  if (n.op == "Slice" || n.op == "Split") {
    const Shape& is = g_.info(n.input(0)).shape;
    std::vector<int64_t> start(is.size(), 0), step(is.size(), 1);
    if (n.op == "Slice") {
      // Starts/steps must be constants; compute the effective start per ONNX's clamping.
      auto ints = [&](size_t i, const char* attr) -> std::vector<int64_t> {
        if (n.has_input(i)) {
          DC_INTERNAL_CHECK(g_.is_constant(n.input(i)), "Slice input ", i,
                            " is not a constant: cannot emit it as an index map");
          return g_.initializers.at(n.input(i)).to_int64_vector();
        }
        return n.attrs.get_ints(attr, {});
      };
      const auto starts = ints(1, "starts");
      auto axes = ints(3, "axes");
      const auto steps = ints(4, "steps");
      if (axes.empty())
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
      for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t ax = axes[i] < 0 ? axes[i] + static_cast<int64_t>(is.size()) : axes[i];
        const int64_t dim = is[static_cast<size_t>(ax)];
        const int64_t st = steps.empty() ? 1 : steps[i];
        int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
        s = st > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
        start[static_cast<size_t>(ax)] = s;
        step[static_cast<size_t>(ax)] = st;
      }
    } else {
      const int64_t axis = normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(is.size()), "Split");
      int64_t before = 0;
      for (size_t k = 0; k < out_index; ++k) before += g_.info(n.outputs[k]).shape[static_cast<size_t>(axis)];
      start[static_cast<size_t>(axis)] = before;
    }
    std::vector<std::string> ic;
    for (size_t d = 0; d < is.size(); ++d) {
      if (is[d] == 1) ic.push_back("0");
      else if (start[d] == 0 && step[d] == 1) ic.push_back(oc[d]);
      else ic.push_back(fmt::format("({} + ({}) * {})", start[d], oc[d], step[d]));
    }
    return in(0, ic);
  }
  if (n.op == "Concat") {
    const int64_t axis = normalize_axis(n.attrs.get_int("axis"), static_cast<int64_t>(os.size()), "Concat");
    const std::string v = fresh("cat");
    code += fmt::format("  {} {};\n", ctype, v);
    int64_t begin = 0;
    bool first = true;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int64_t extent = g_.info(n.input(i)).shape[static_cast<size_t>(axis)];
      if (extent == 0) continue;  // an empty input contributes nothing
      std::vector<std::string> ic = oc;
      ic[static_cast<size_t>(axis)] = fmt::format("(({}) - {})", oc[static_cast<size_t>(axis)], begin);
      // Locals made inside a branch are not visible after it, nor in the next branch.
      const auto outer = memo_;
      std::string branch;
      const std::string x = value(n.input(i), ic, branch);
      memo_ = outer;
      const bool last = begin + extent >= os[static_cast<size_t>(axis)];
      code += fmt::format("  {}{} {{\n{}  {} = {};\n  }}", first ? "" : " else ",
                          last ? "" : fmt::format("if (({}) < {})", oc[static_cast<size_t>(axis)], begin + extent),
                          branch, v, x);
      first = false;
      begin += extent;
      if (last) break;
    }
    code += "\n";
    return v;
  }
  if (n.op == "Gather") {
    const Shape& ds = g_.info(n.input(0)).shape;
    const Shape& xs = g_.info(n.input(1)).shape;
    const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(ds.size()), "Gather"));
    std::vector<std::string> idx_coords(oc.begin() + static_cast<long>(axis),
                                        oc.begin() + static_cast<long>(axis + xs.size()));
    const std::string raw = value(n.input(1), idx_coords, code);
    const std::string idx = fresh("gi");
    code += fmt::format("  const dc_i64 {0} = (dc_i64)({1}) < 0 ? (dc_i64)({1}) + {2} : (dc_i64)({1});\n",
                        idx, raw, ds[axis]);
    std::vector<std::string> ic(oc.begin(), oc.begin() + static_cast<long>(axis));
    ic.push_back(idx);
    ic.insert(ic.end(), oc.begin() + static_cast<long>(axis + xs.size()), oc.end());
    return in(0, ic);
  }
  if (n.op == "ArgMax" || n.op == "ArgMin") {
    // A loop over the axis at this output element: first (or last) extreme's index.
    const Shape& xs = g_.info(n.input(0)).shape;
    const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(xs.size()), n.op.c_str()));
    const bool keep = n.attrs.get_int("keepdims", 1) == 1, last = n.attrs.get_int("select_last_index", 0) == 1;
    const std::string k = fresh("ak"), best = fresh("best"), arg = fresh("arg");
    std::vector<std::string> ic;
    for (size_t d = 0, o = 0; d < xs.size(); ++d) {
      if (d == axis) {
        ic.push_back(k);
        if (keep) ++o;
      } else {
        ic.push_back(oc[o++]);
      }
    }
    const auto outer = memo_;  // locals of the loop body stay in it
    std::string body;
    const std::string v = value(n.input(0), ic, body);
    memo_ = outer;
    const char* cmp = n.op == "ArgMax" ? (last ? ">=" : ">") : (last ? "<=" : "<");
    code += fmt::format("  {0} {1} = 0;\n  dc_i64 {2} = 0;\n  for (dc_i64 {3} = 0; {3} < {4}; ++{3}) {{\n{5}"
                        "  if ({3} == 0 || {6} {7} {1}) {{ {1} = {6}; {2} = {3}; }}\n  }}\n",
                        value_type(g_.info(n.input(0)).dtype), best, arg, k, xs[axis], body, v, cmp);
    return arg;
  }
  if (n.op == "CumSum") {
    // A loop over the axis at this output element, summing in increasing order as the
    // reference does.
    DC_USER_CHECK(g_.is_constant(n.input(1)), "CumSum node '", n.name,
                  "': the axis must be a constant to generate code");
    const auto axis = static_cast<size_t>(normalize_axis(g_.initializers.at(n.input(1)).to_int64_vector().at(0), static_cast<int64_t>(os.size()), "CumSum"));
    const bool ex = n.attrs.get_int("exclusive", 0) != 0, rev = n.attrs.get_int("reverse", 0) != 0;
    const std::string k = fresh("ck"), acc = fresh("cum");
    std::vector<std::string> ic = oc;
    ic[axis] = k;
    const auto outer = memo_;
    std::string body;
    const std::string v = value(n.input(0), ic, body);
    memo_ = outer;
    const std::string cond = fmt::format("{} {} (dc_i64)({})", k, rev ? (ex ? ">" : ">=") : (ex ? "<" : "<="), oc[axis]);
    code += fmt::format("  {0} {1} = 0;\n  for (dc_i64 {2} = 0; {2} < {3}; ++{2}) {{\n  if ({4}) {{\n{5}  {1} = {1} + {6};\n  }}\n  }}\n",
                        ctype, acc, k, os[axis], cond, body, v);
    return acc;
  }
  if (n.op == "GatherElements") {
    const Shape& ds = g_.info(n.input(0)).shape;
    const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(ds.size()), "GatherElements"));
    const std::string raw = value(n.input(1), oc, code);
    const std::string idx = fresh("gi");
    code += fmt::format("  const dc_i64 {0} = (dc_i64)({1}) < 0 ? (dc_i64)({1}) + {2} : (dc_i64)({1});\n",
                        idx, raw, ds[axis]);
    std::vector<std::string> ic = oc;
    ic[axis] = idx;
    return in(0, ic);
  }
  if (n.op == "DepthToSpace" || n.op == "SpaceToDepth") {
    // Input coordinates of output (n, c, h, w) (the reference's formulas, ops_index.cpp).
    const int64_t b = n.attrs.get_int("blocksize");
    const int64_t ic = g_.info(n.input(0)).shape[1];
    std::string c, h, w;
    if (n.op == "DepthToSpace") {
      const std::string i = fmt::format("(({}) % {})", oc[2], b), j = fmt::format("(({}) % {})", oc[3], b);
      c = n.attrs.get_string("mode", "DCR") == "CRD"
              ? fmt::format("(({}) * {} + {}) * {} + {}", oc[1], b, i, b, j)
              : fmt::format("({} * {} + {}) * {} + ({})", i, b, j, ic / (b * b), oc[1]);
      h = fmt::format("({}) / {}", oc[2], b);
      w = fmt::format("({}) / {}", oc[3], b);
    } else {
      c = fmt::format("({}) % {}", oc[1], ic);
      h = fmt::format("({}) * {} + ({}) / {} / {}", oc[2], b, oc[1], ic, b);
      w = fmt::format("({}) * {} + ({}) / {} % {}", oc[3], b, oc[1], ic, b);
    }
    return in(0, {oc[0], c, h, w});
  }
  if (n.op == "Trilu") {
    const size_t r = oc.size();
    std::string k = "0LL";
    if (n.has_input(1)) {
      const std::vector<std::string> k0(g_.info(n.input(1)).shape.size(), "0");  // [] or [1]
      k = fmt::format("(dc_i64)({})", in(1, k0));
    }
    const std::string diag = fmt::format("(dc_i64)({}) - (dc_i64)({})", oc[r - 1], oc[r - 2]);
    const bool upper = n.attrs.get_int("upper", 1) == 1;
    const std::string x = in(0, oc);
    return define(fmt::format("({} {} {}) ? {} : ({})0", diag, upper ? ">=" : "<=", k, x, ctype));
  }
  if (n.op == "Pad") return emit_pad(n, oc, code);
  if (n.op == "Resize" || n.op == "Upsample") return emit_resize(n, oc, code);
  if (is_index_search_op(n.op)) return emit_index_search(n, out_index, oc, code);
  throw_internal_error("ValueEmitter cannot emit op ", n.op);
}

}  // namespace dc
