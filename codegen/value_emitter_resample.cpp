// Pad and Resize/Upsample as index maps of ValueEmitter, over the geometry of
// ref/resample.h (the same tables the CPU reference uses, so both read the same elements
// with the same weights). Pad: per padded axis the source index (reflected, clamped,
// wrapped) or, in constant mode, the fill outside the input. Resize: per resized axis a
// table of tap indices and weights (static const arrays of the kernel), summed over every
// combination of taps in the reference's order.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/error.h"
#include "ref/resample.h"
#include "value_emitter.h"

namespace dc {

namespace {

// The fill of constant-mode Pad as a literal of the data's value type.
std::string fill_literal(DType t, double v) {
  if (t == DType::f32 || t == DType::f16 || t == DType::bf16) return float_literal(v);
  if (t == DType::f64) return fmt::format("(double){}", float_literal(v));
  if (t == DType::boolean) return v != 0 ? "1" : "0";
  return fmt::format("({}){}LL", value_type(t), static_cast<long long>(v));
}

template <class T>
std::string table(const std::vector<T>& v) {
  std::vector<std::string> items;
  items.reserve(v.size());
  for (const T& x : v) {
    if constexpr (std::is_same_v<T, float>) items.push_back(float_literal(x));
    else items.push_back(fmt::format("{}", static_cast<long long>(x)));
  }
  return fmt::format("{}", fmt::join(items, ", "));
}

}  // namespace

std::vector<Tensor> ValueEmitter::param_values(const Node& n) const {
  std::vector<Tensor> p(n.inputs.size());
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (!n.has_input(i)) continue;
    auto it = g_.initializers.find(n.input(i));
    DC_INTERNAL_CHECK(it != g_.initializers.end(), n.op, " input ", i, " ('", n.input(i),
                      "') is not a constant: cannot emit it as an index map");
    p[i] = it->second;
  }
  return p;
}

std::string ValueEmitter::emit_pad(const Node& n, const std::vector<std::string>& oc,
                                   std::string& code) {
  const TensorInfo& xi = g_.info(n.input(0));
  const ref::PadSpec p = ref::pad_spec(n, xi.shape, param_values(n));
  std::vector<std::string> ic, inside;
  for (size_t d = 0; d < xi.shape.size(); ++d) {
    const int64_t len = xi.shape[d];
    if (p.begin[d] == 0 && p.end[d] <= 0) {  // cropped at the end at most: same index
      ic.push_back(oc[d]);
      continue;
    }
    const std::string i = fresh("pi");
    code += fmt::format("  const dc_i64 {} = (dc_i64)({}) - {};\n", i, oc[d], p.begin[d]);
    if (p.mode == ref::PadMode::constant) {
      if (p.begin[d] > 0) inside.push_back(fmt::format("{} >= 0", i));
      if (p.end[d] > 0) inside.push_back(fmt::format("{} < {}", i, len));
      ic.push_back(i);
      continue;
    }
    const std::string s = fresh("ps");
    if (p.mode == ref::PadMode::edge) {
      code += fmt::format("  const dc_i64 {0} = {1} < 0 ? 0 : ({1} >= {2} ? {2} - 1 : {1});\n", s,
                          i, len);
    } else if (p.mode == ref::PadMode::wrap) {
      code += fmt::format("  const dc_i64 {0} = (({1} % {2}) + {2}) % {2};\n", s, i, len);
    } else if (len == 1) {  // reflect of a single element
      code += fmt::format("  const dc_i64 {} = 0;\n", s);
    } else {
      const int64_t period = 2 * (len - 1);
      const std::string m = fresh("pm");
      code += fmt::format("  const dc_i64 {0} = (({1} % {2}) + {2}) % {2};\n", m, i, period);
      code += fmt::format("  const dc_i64 {0} = {1} < {2} ? {1} : {3} - {1};\n", s, m, len, period);
    }
    ic.push_back(s);
  }
  if (inside.empty()) return value(n.input(0), ic, code);
  // Constant mode: read the input only inside it (locals made in the branch stay there).
  const std::string v = fresh("pad");
  const auto outer = memo_;
  std::string branch;
  const std::string x = value(n.input(0), ic, branch);
  memo_ = outer;
  code += fmt::format("  {0} {1} = {2};\n  if ({3}) {{\n{4}  {1} = {5};\n  }}\n",
                      value_type(xi.dtype), v, fill_literal(xi.dtype, p.value),
                      fmt::join(inside, " && "), branch, x);
  return v;
}

std::string ValueEmitter::emit_resize(const Node& n, const std::vector<std::string>& oc,
                                      std::string& code) {
  const TensorInfo& xi = g_.info(n.input(0));
  const ref::ResizeSpec s = ref::resize_spec(n, xi.shape, param_values(n));
  DC_INTERNAL_CHECK(s.out_shape == g_.info(n.outputs.at(0)).shape, "Resize '", n.name,
                    "': the geometry gives ", shape_str(s.out_shape), ", the graph says ",
                    shape_str(g_.info(n.outputs.at(0)).shape));
  // Tables of the resized axes, and the loops over their taps.
  std::vector<std::string> ic, weights, outside;
  std::string open, close;
  for (size_t d = 0; d < s.axes.size(); ++d) {
    const ref::ResizeAxis& a = s.axes[d];
    if (a.taps == 0) {
      ic.push_back(oc[d]);
      continue;
    }
    const std::string t = fresh("rz");
    code += fmt::format("  static const int {}_i[{}] = {{{}}};\n", t, a.idx.size(), table(a.idx));
    if (a.taps > 1)
      code += fmt::format("  static const float {}_w[{}] = {{{}}};\n", t, a.weight.size(),
                          table(a.weight));
    bool any = false;
    for (char c : a.outside) any = any || c;
    if (any) {
      code += fmt::format("  static const unsigned char {}_o[{}] = {{{}}};\n", t, a.outside.size(),
                          table(std::vector<int>(a.outside.begin(), a.outside.end())));
      outside.push_back(fmt::format("{}_o[{}]", t, oc[d]));
    }
    const std::string k = a.taps > 1 ? fmt::format("(dc_i64)({}) * {} + {}_t", oc[d], a.taps, t)
                                     : fmt::format("(dc_i64)({})", oc[d]);
    if (a.taps > 1) {
      open += fmt::format("  for (int {0}_t = 0; {0}_t < {1}; ++{0}_t) {{\n", t, a.taps);
      close += "  }\n";
      weights.push_back(fmt::format("{}_w[{}]", t, k));
    }
    ic.push_back(fmt::format("{}_i[{}]", t, k));
  }
  const auto outer = memo_;
  std::string body;
  const std::string x = value(n.input(0), ic, body);
  memo_ = outer;
  const std::string v = fresh("rs");
  std::string sum;
  if (weights.empty()) {  // nearest: one tap per axis
    sum = fmt::format("{}{}  {} = {};\n", open, body, v, x);
  } else {
    sum = fmt::format("  {} = 0.f;\n{}{}  {} += {} * {};\n{}", v, open, body, v,
                      fmt::join(weights, " * "), x, close);
  }
  code += fmt::format("  float {};\n", v);
  if (outside.empty()) {
    code += "  {\n" + sum + "  }\n";
  } else {
    code += fmt::format("  if ({}) {{\n  {} = {};\n  }} else {{\n{}  }}\n", fmt::join(outside, " || "),
                        v, float_literal(s.extrapolation_value), sum);
  }
  return v;
}

}  // namespace dc
