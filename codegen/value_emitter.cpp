#include "value_emitter.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "ir/error.h"
#include "kernel.h"

namespace dc {

namespace {

const std::set<std::string> kUnary = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg",
                                      "Reciprocal", "Abs", "Erf", "Gelu", "LeakyRelu",
                                      "HardSigmoid", "HardSwish", "Clip", "Cast", "Identity",
                                      "Not", "Dropout"};
const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min",
                                       "Equal", "Greater", "Less", "And", "Or"};
const std::set<std::string> kIndexMaps = {"Transpose", "Reshape", "Flatten", "Squeeze",
                                          "Unsqueeze", "Expand", "Slice", "Concat", "Gather",
                                          "Split"};

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// Scalar value of a constant initializer as a literal of its C type.
std::string scalar_literal(const Tensor& t) {
  if (is_float(t.dtype())) return float_literal(t.to_float_vector().at(0));
  if (t.dtype() == DType::boolean) return t.to_int64_vector().at(0) ? "1" : "0";
  return fmt::format("{}LL", t.to_int64_vector().at(0));
}

}  // namespace

std::string float_literal(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::string s = fmt::format("{}", static_cast<float>(v));  // shortest round-trip text
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s + "f";
}

ValueEmitter::ValueEmitter(const Graph& g) : g_(g) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer_[o] = i;
  for (size_t i = 0; i < g.inputs.size(); ++i) params_[g.inputs[i]] = fmt::format("in{}", i);
  for (size_t i = 0; i < g.outputs.size(); ++i)
    if (!params_.count(g.outputs[i])) params_[g.outputs[i]] = fmt::format("out{}", i);
}

bool ValueEmitter::supports(const Node& n) {
  if (kUnary.count(n.op) || kBinary.count(n.op) || kIndexMaps.count(n.op) || n.op == "Where")
    return true;
  return false;
}

void ValueEmitter::bind(const std::string& tensor, const std::string& var) { bound_[tensor] = var; }

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
  if (auto w = g_.initializers.find(tensor); w != g_.initializers.end()) {
    DC_INTERNAL_CHECK(w->second.numel() == 1, "only scalar constants are inlined; '", tensor,
                      "' has ", w->second.numel(), " elements");
    return scalar_literal(w->second);
  }
  const std::string v = fresh("v");
  code += fmt::format("  const {} {} = {}[{}];\n", cuda_type(g_.info(tensor).dtype), v,
                      param_name(tensor), offset(tensor, coords));
  return v;
}

std::string ValueEmitter::value(const std::string& tensor, const std::vector<std::string>& coords,
                                std::string& code) {
  if (auto b = bound_.find(tensor); b != bound_.end()) return b->second;
  const std::string key = tensor + "@" + join(coords, ",");
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

std::string ValueEmitter::emit_node(const Node& n, size_t out_index,
                                    const std::vector<std::string>& coords, std::string& code) {
  const std::string& out = n.outputs[out_index];
  const TensorInfo& oi = g_.info(out);
  const auto oc = broadcast_coords(out, coords);  // coordinates in the output's own rank
  const std::string ctype = cuda_type(oi.dtype);
  auto in = [&](size_t i, const std::vector<std::string>& c) { return value(n.input(i), c, code); };
  auto define = [&](const std::string& expr) {
    const std::string v = fresh("t");
    code += fmt::format("  const {} {} = {};\n", ctype, v, expr);
    return v;
  };

  if (kUnary.count(n.op)) {
    const std::string x = in(0, oc);
    if (n.op == "Identity" || n.op == "Dropout") return x;
    if (n.op == "Relu") return define(fmt::format("dc_relu({})", x));
    if (n.op == "Sigmoid") return define(fmt::format("dc_sigmoid({})", x));
    if (n.op == "Tanh") return define(fmt::format("tanhf({})", x));
    if (n.op == "Exp") return define(fmt::format("expf({})", x));
    if (n.op == "Log") return define(fmt::format("logf({})", x));
    if (n.op == "Sqrt") return define(fmt::format("sqrtf({})", x));
    if (n.op == "Neg") return define(fmt::format("-{}", x));
    if (n.op == "Reciprocal") return define(fmt::format("1.0f / {}", x));
    if (n.op == "Abs") return define(fmt::format("fabsf({})", x));
    if (n.op == "Erf") return define(fmt::format("erff({})", x));
    if (n.op == "Not") return define(fmt::format("!{}", x));
    if (n.op == "Gelu")
      return define(n.attrs.get_string("approximate", "none") == "tanh"
                        ? fmt::format("dc_gelu_tanh({})", x)
                        : fmt::format("dc_gelu({})", x));
    if (n.op == "LeakyRelu")
      return define(fmt::format("dc_leaky_relu({}, {})", x, float_literal(n.attrs.get_float("alpha", 0.01f))));
    if (n.op == "HardSigmoid")
      return define(fmt::format("dc_hard_sigmoid({}, {}, {})", x,
                                float_literal(n.attrs.get_float("alpha", 0.2f)),
                                float_literal(n.attrs.get_float("beta", 0.5f))));
    if (n.op == "HardSwish") return define(fmt::format("dc_hard_swish({})", x));
    if (n.op == "Cast") return define(fmt::format("({})({})", ctype, x));
    if (n.op == "Clip") {
      std::string lo = "-__int_as_float(0x7f800000)", hi = "__int_as_float(0x7f800000)";
      if (n.attrs.has("min")) lo = float_literal(n.attrs.get_float("min"));
      if (n.attrs.has("max")) hi = float_literal(n.attrs.get_float("max"));
      if (n.has_input(1)) lo = in(1, {});
      if (n.has_input(2)) hi = in(2, {});
      return define(fmt::format("dc_clip({}, {}, {})", x, lo, hi));
    }
  }
  if (kBinary.count(n.op)) {
    const std::string a = in(0, oc), b = in(1, oc);
    if (n.op == "Add") return define(fmt::format("{} + {}", a, b));
    if (n.op == "Sub") return define(fmt::format("{} - {}", a, b));
    if (n.op == "Mul") return define(fmt::format("{} * {}", a, b));
    if (n.op == "Div") return define(fmt::format("{} / {}", a, b));
    if (n.op == "Pow") {
      const auto* e = g_.initializers.count(n.input(1)) ? &g_.initializers.at(n.input(1)) : nullptr;
      if (e && e->numel() == 1 && e->to_float_vector()[0] == 2.0f) return define(fmt::format("{0} * {0}", a));
      return define(fmt::format("powf({}, {})", a, b));
    }
    if (n.op == "Max") return define(fmt::format("dc_max({}, {})", a, b));
    if (n.op == "Min") return define(fmt::format("dc_min({}, {})", a, b));
    if (n.op == "Equal") return define(fmt::format("{} == {}", a, b));
    if (n.op == "Greater") return define(fmt::format("{} > {}", a, b));
    if (n.op == "Less") return define(fmt::format("{} < {}", a, b));
    if (n.op == "And") return define(fmt::format("{} && {}", a, b));
    if (n.op == "Or") return define(fmt::format("{} || {}", a, b));
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
  if (n.op == "Slice" || n.op == "Split") {
    const Shape& is = g_.info(n.input(0)).shape;
    std::vector<int64_t> start(is.size(), 0), step(is.size(), 1);
    if (n.op == "Slice") {
      // Starts/steps must be constants; compute the effective start per ONNX's clamping.
      auto ints = [&](size_t i, const char* attr) -> std::vector<int64_t> {
        if (n.has_input(i)) return g_.initializers.at(n.input(i)).to_int64_vector();
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
      if (start[d] == 0 && step[d] == 1) ic.push_back(oc[d]);
      else ic.push_back(fmt::format("({} + ({}) * {})", start[d], oc[d], step[d]));
    }
    return in(0, ic);
  }
  if (n.op == "Concat") {
    const int64_t axis = normalize_axis(n.attrs.get_int("axis"), static_cast<int64_t>(os.size()), "Concat");
    const std::string v = fresh("cat");
    code += fmt::format("  {} {};\n", ctype, v);
    int64_t begin = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int64_t extent = g_.info(n.input(i)).shape[static_cast<size_t>(axis)];
      std::vector<std::string> ic = oc;
      ic[static_cast<size_t>(axis)] = fmt::format("(({}) - {})", oc[static_cast<size_t>(axis)], begin);
      std::string branch;
      const std::string x = value(n.input(i), ic, branch);
      const bool last = i + 1 == n.inputs.size();
      code += fmt::format("  {}{} {{\n{}  {} = {};\n  }}", i ? " else " : "  ",
                          last ? "" : fmt::format("if (({}) < {})", oc[static_cast<size_t>(axis)], begin + extent),
                          branch, v, x);
      if (last) code += "\n";
      begin += extent;
      // Locals made inside a branch are not visible after it.
      memo_.clear();
    }
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
  throw_internal_error("ValueEmitter cannot emit op ", n.op);
}

}  // namespace dc
