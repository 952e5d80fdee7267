// The ValueEmitter's op table: one row per op it computes inline, each the op's value at
// the output coordinates in the compute dtype, written as the CPU reference computes it
// (common/ref). Unary and binary rows find their operands computed (Op::x); math functions
// that the reference shares with the prelude are in value_emitter_math.cpp. Pad, Resize
// and the index searches have files of their own. docs/codegen.md, "ValueEmitter".
#include <algorithm>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "ir/error.h"
#include "value_emitter_op.h"

namespace dc {

namespace {

using Op = ValueEmitter::Op;

// ---- unary: x[0] computed ----

// x < 0 ? 0 : x, as the reference: NaN passes through (dc_relu would make it 0).
std::string relu(Op& o) { return o.define(fmt::format("{0} < {1} ? {1} : {0}", o.x[0], o.lit(0))); }

std::string sigmoid(Op& o) {
  return o.define(o.f32 ? fmt::format("dc_sigmoid({})", o.x[0])
                        : fmt::format("1.0 / (1.0 + {})", o.fn("exp", "-" + o.x[0])));
}

template <const char* kName>
std::string math_fn(Op& o) {
  return o.define(o.fn(kName, o.x[0]));
}
constexpr char kTanh[] = "tanh", kExp[] = "exp", kLog[] = "log", kSqrt[] = "sqrt", kErf[] = "erf";

std::string abs_value(Op& o) {
  return o.define(o.integral ? fmt::format("{0} < 0 ? -{0} : {0}", o.x[0]) : o.fn("fabs", o.x[0]));
}

std::string gelu(Op& o) {
  const std::string& x = o.x[0];
  const bool tanh_form = o.n.attrs.get_string("approximate", "none") == "tanh";
  if (o.f32) return o.define(fmt::format("{}({})", tanh_form ? "dc_gelu_tanh" : "dc_gelu", x));
  return o.define(tanh_form
                      ? fmt::format("0.5 * {0} * (1.0 + tanh(0.79788456080286535588 * ({0} + 0.044715 * {0} * {0} * {0})))", x)
                      : fmt::format("0.5 * {0} * (1.0 + erf({0} * 0.70710678118654752440))", x));
}

std::string leaky_relu(Op& o) {
  const std::string a = o.lit(o.n.attrs.get_float("alpha", 0.01f));
  if (o.f32) return o.define(fmt::format("dc_leaky_relu({}, {})", o.x[0], a));
  return o.define(fmt::format("{0} < 0 ? {1} * {0} : {0}", o.x[0], a));
}

std::string hard_sigmoid(Op& o) {
  const std::string a = o.lit(o.n.attrs.get_float("alpha", 0.2f));
  const std::string b = o.lit(o.n.attrs.get_float("beta", 0.5f));
  if (o.f32) return o.define(fmt::format("dc_hard_sigmoid({}, {}, {})", o.x[0], a, b));
  return o.define(fmt::format("fmax(0.0, fmin(1.0, {} * {} + {}))", a, o.x[0], b));
}

std::string hard_swish(Op& o) {
  if (o.f32) return o.define(fmt::format("dc_hard_swish({})", o.x[0]));
  return o.define(fmt::format("{0} * fmax(0.0, fmin(1.0, {0} / 6.0 + 0.5))", o.x[0]));
}

std::string cast(Op& o) {
  const std::string& x = o.x[0];
  const DType from = o.info(o.n.input(0)).dtype, to_t = o.out_dtype;
  if (from == to_t) return x;
  const std::string to = value_type(to_t);
  if (to_t == DType::boolean) return o.define_as(to, fmt::format("{} != 0", x));
  if (is_integer(to_t) && is_float(from))  // truncation toward zero; NaN gives 0
    return o.define_as(to, fmt::format("{0} != {0} ? ({1})0 : ({1})({0})", x, to));
  // To f16/bf16: through float (as the reference's Cast), then rounded once.
  return o.define_as(to, round_to_storage(to_t, fmt::format("({})({})", to, x)));
}

// As the reference: v < lo ? lo : v, then > hi ? hi; NaN passes through.
std::string clip(Op& o) {
  const Node& n = o.n;
  std::string lo, hi;
  if (n.attrs.has("min")) lo = o.lit(n.attrs.get_float("min"));
  if (n.attrs.has("max")) hi = o.lit(n.attrs.get_float("max"));
  if (n.has_input(1)) lo = o.in(1, {});
  if (n.has_input(2)) hi = o.in(2, {});
  std::string v = o.x[0];
  if (!lo.empty()) v = o.define(fmt::format("{0} < {1} ? {1} : {0}", v, lo));
  if (!hi.empty()) v = o.define(fmt::format("{0} > {1} ? {1} : {0}", v, hi));
  return v == o.x[0] ? o.define(o.x[0]) : v;
}

// ---- binary: x[0], x[1] computed ----

template <const char* kOperator>
std::string infix(Op& o) {
  return o.define(fmt::format("{} {} {}", o.x[0], kOperator, o.x[1]));
}
constexpr char kPlus[] = "+", kMinus[] = "-", kTimes[] = "*", kOver[] = "/", kEq[] = "==", kGt[] = ">",
               kLt[] = "<", kGe[] = ">=", kLe[] = "<=", kAnd[] = "&&", kOr[] = "||";

std::string pow_op(Op& o) {
  const Node& n = o.n;
  const std::string &a = o.x[0], &b = o.x[1];
  // The exponent as the reference's kernel sees it: f16/bf16 widened to f32.
  DType et = o.info(n.input(1)).dtype;
  if (et == DType::f16 || et == DType::bf16) et = DType::f32;
  const auto* e = o.g().initializers.count(n.input(1)) ? &o.g().initializers.at(n.input(1)) : nullptr;
  if (e && e->numel() == 1 && !o.integral && et == o.cd && e->to_float_vector().at(0) == 2.0)
    return o.define(fmt::format("{0} * {0}", a));
  if (o.f32 && et == DType::f32) return o.define(fmt::format("powf({}, {})", a, b));
  // Mixed dtypes: in double, then to the base's type (the reference's rule).
  return o.define(fmt::format("({})pow((double)({}), (double)({}))", o.ctype, a, b));
}

// Max / Min of any number of inputs, folded left to right; NaN wins as in the reference.
std::string extreme(Op& o) {
  const bool mx = o.n.op == "Max";
  std::string acc = o.x[0];
  for (size_t i = 1; i < o.n.inputs.size(); ++i) {
    const std::string y = i == 1 ? o.x[1] : o.in(i, o.oc);
    if (o.f32) acc = o.define(fmt::format("{}({}, {})", mx ? "dc_max" : "dc_min", acc, y));
    else if (o.f64) acc = o.define(fmt::format("({0} {2} {1} || {0} != {0}) ? {0} : {1}", acc, y, mx ? ">" : "<"));
    else acc = o.define(fmt::format("{0} {2} {1} ? {0} : {1}", acc, y, mx ? ">" : "<"));
  }
  return acc;
}

std::string xor_op(Op& o) { return o.define(fmt::format("({} != 0) != ({} != 0)", o.x[0], o.x[1])); }

std::string where(Op& o) {
  const std::string c = o.in(0, o.oc), a = o.in(1, o.oc), b = o.in(2, o.oc);
  return o.define(fmt::format("{} ? {} : {}", c, a, b));
}

}  // namespace

OpRow op_row(const std::string& op) {
  using namespace op_rows;
  static const std::map<std::string_view, OpRow> rows = {
      {"Identity", [](Op& o) { return o.x[0]; }}, {"Dropout", [](Op& o) { return o.x[0]; }},
      {"Relu", relu}, {"Sigmoid", sigmoid}, {"Tanh", math_fn<kTanh>}, {"Exp", math_fn<kExp>},
      {"Log", math_fn<kLog>}, {"Sqrt", math_fn<kSqrt>}, {"Erf", math_fn<kErf>},
      {"Neg", [](Op& o) { return o.define(fmt::format("-{}", o.x[0])); }},
      {"Reciprocal", [](Op& o) { return o.define(fmt::format("{} / {}", o.lit(1), o.x[0])); }},
      {"Abs", abs_value}, {"Not", [](Op& o) { return o.define(fmt::format("!{}", o.x[0])); }},
      {"Gelu", gelu}, {"LeakyRelu", leaky_relu}, {"HardSigmoid", hard_sigmoid}, {"HardSwish", hard_swish},
      {"Cast", cast}, {"Clip", clip},
      {"Add", infix<kPlus>}, {"Sub", infix<kMinus>}, {"Mul", infix<kTimes>}, {"Div", infix<kOver>},
      {"Pow", pow_op}, {"Max", extreme}, {"Min", extreme},
      {"Equal", infix<kEq>}, {"Greater", infix<kGt>}, {"Less", infix<kLt>}, {"GreaterOrEqual", infix<kGe>},
      {"LessOrEqual", infix<kLe>}, {"And", infix<kAnd>}, {"Or", infix<kOr>}, {"Xor", xor_op},
      {"Where", where},
      {"Transpose", transpose}, {"Reshape", reshape}, {"Flatten", reshape}, {"Squeeze", reshape},
      {"Unsqueeze", reshape}, {"Expand", expand}, {"Tile", tile}, {"Slice", slice_or_split},
      {"Split", slice_or_split}, {"Concat", concat}, {"Gather", gather}, {"ArgMax", arg_extreme},
      {"ArgMin", arg_extreme}, {"CumSum", cum_sum}, {"GatherElements", gather_elements},
      {"DepthToSpace", depth_space}, {"SpaceToDepth", depth_space}, {"Trilu", trilu},
      {"Pad", [](Op& o) { return o.pad(); }}, {"Resize", [](Op& o) { return o.resize(); }},
      {"Upsample", [](Op& o) { return o.resize(); }},
  };
  const auto it = rows.find(op);
  return it == rows.end() ? nullptr : it->second;
}

}  // namespace dc
