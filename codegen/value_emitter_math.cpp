#include "value_emitter_math.h"

#include <cmath>

#include <fmt/format.h>

#include "ir/error.h"
#include "value_emitter.h"

namespace dc {

namespace {

// Literals and math functions of one compute dtype: expf in f32, exp in f64.
struct Math {
  DType t;
  bool f32() const { return t == DType::f32; }
  std::string lit(double v) const {
    if (t == DType::f32) return float_literal(v);
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  std::string fn(const char* name, const std::string& x) const {
    return fmt::format("{}{}({})", name, f32() ? "f" : "", x);
  }
  // Softplus as the reference computes it: max(x, 0) + log1p(exp(-|x|)).
  std::string softplus(const std::string& x) const {
    return fmt::format("(({0} > {1} ? {0} : {1}) + {2})", x, lit(0),
                       fn("log1p", fn("exp", "-" + fn("fabs", x))));
  }
};

}  // namespace

std::optional<std::string> math_expression(const Node& n, const std::vector<std::string>& x,
                                           DType compute) {
  const Math m{compute};
  const bool integral = compute != DType::f32 && compute != DType::f64;
  const std::string& op = n.op;
  auto alpha = [&](float d) { return m.lit(n.attrs.get_float("alpha", d)); };
  auto need_float = [&] {
    DC_INTERNAL_CHECK(!integral, op, " on an integer tensor in the ValueEmitter");
  };
  if (op == "Sign") {
    if (integral) return fmt::format("({0} > 0) - ({0} < 0)", x[0]);
    return fmt::format("{0} > {1} ? {2} : ({0} < {1} ? {3} : {0})", x[0], m.lit(0), m.lit(1), m.lit(-1));
  }
  if (op == "Mod") {
    if (!integral) return m.fn("fmod", fmt::format("{}, {}", x[0], x[1]));
    // C's % (fmod=1) or Python's (fmod=0: the divisor's sign); MIN % -1 would trap.
    const std::string r = fmt::format("({1} == -1 ? 0 : {0} % {1})", x[0], x[1]);
    if (n.attrs.get_int("fmod", 0) == 1) return r;
    return fmt::format("({0} != 0 && (({0} < 0) != ({1} < 0)) ? {0} + {1} : {0})", r, x[1]);
  }
  if (op == "Elu" || op == "Selu" || op == "Celu" || op == "Softplus" || op == "Softsign" ||
      op == "Mish" || op == "ThresholdedRelu" || op == "Floor" || op == "Ceil" ||
      op == "Round" || op == "Sin" || op == "Cos" || op == "IsNaN" || op == "IsInf" ||
      op == "PRelu")
    need_float();
  else
    return std::nullopt;
  const std::string& v = x[0];
  if (op == "Elu") return fmt::format("{0} < {1} ? {2} * ({3} - {4}) : {0}", v, m.lit(0), alpha(1.f), m.fn("exp", v), m.lit(1));
  if (op == "Selu") {
    const std::string a = alpha(1.67326319217681884765625f);
    const std::string g = m.lit(n.attrs.get_float("gamma", 1.05070102214813232421875f));
    return fmt::format("{0} <= {1} ? {2} * ({3} * {4} - {3}) : {2} * {0}", v, m.lit(0), g, a, m.fn("exp", v));
  }
  if (op == "Celu") {
    const std::string a = alpha(1.f);
    return fmt::format("{0} > {1} ? {0} : {2} * ({3} - {4})", v, m.lit(0), a,
                       m.fn("exp", fmt::format("{} / {}", v, a)), m.lit(1));
  }
  if (op == "Softplus") return m.softplus(v);
  if (op == "Softsign") return fmt::format("{0} / ({1} + {2})", v, m.lit(1), m.fn("fabs", v));
  if (op == "Mish") return fmt::format("{} * {}", v, m.fn("tanh", m.softplus(v)));
  if (op == "ThresholdedRelu") return fmt::format("{0} > {1} ? {0} : {2}", v, alpha(1.f), m.lit(0));
  if (op == "Floor") return m.fn("floor", v);
  if (op == "Ceil") return m.fn("ceil", v);
  if (op == "Round") return m.fn("rint", v);  // half to even
  if (op == "Sin") return m.fn("sin", v);
  if (op == "Cos") return m.fn("cos", v);
  if (op == "IsNaN") return fmt::format("{0} != {0}", v);
  if (op == "IsInf") {
    const bool pos = n.attrs.get_int("detect_positive", 1) != 0;
    const bool neg = n.attrs.get_int("detect_negative", 1) != 0;
    const std::string inf = compute == DType::f32 ? float_literal(HUGE_VAL)
                                                  : "__longlong_as_double(0x7ff0000000000000LL)";
    return fmt::format("({} || {})", pos ? fmt::format("{} == {}", v, inf) : "false",
                       neg ? fmt::format("{} == -{}", v, inf) : "false");
  }
  return fmt::format("{0} < {1} ? {2} * {0} : {0}", v, m.lit(0), x[1]);  // PRelu
}

}  // namespace dc
