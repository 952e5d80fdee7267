// Gradients of elementwise arithmetic and math: Add, Sub, Mul, Div, Neg, Pow, Sqrt,
// Reciprocal, Exp, Log, Abs, Identity, Cast and Clip. Broadcast inputs get their gradient
// summed back to their own shape (GradBuilder::sum_to).
#include <cmath>
#include <numbers>

#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

const std::string& in(const GradCall& c, size_t i) { return c.node.inputs.at(i); }
const std::string& out(const GradCall& c) { return c.node.outputs.at(0); }

Grads add_rule(GradBuilder& b, const GradCall& c) {
  Grads g(2);
  for (size_t i = 0; i < 2; ++i)
    if (c.want(i)) g[i] = b.sum_to(c.dy[0], b.shape(in(c, i)));
  return g;
}

Grads sub_rule(GradBuilder& b, const GradCall& c) {
  Grads g(2);
  if (c.want(0)) g[0] = b.sum_to(c.dy[0], b.shape(in(c, 0)));
  if (c.want(1)) g[1] = b.sum_to(b.neg(c.dy[0]), b.shape(in(c, 1)));
  return g;
}

Grads mul_rule(GradBuilder& b, const GradCall& c) {
  Grads g(2);
  if (c.want(0)) g[0] = b.sum_to(b.mul(c.dy[0], in(c, 1)), b.shape(in(c, 0)));
  if (c.want(1)) g[1] = b.sum_to(b.mul(c.dy[0], in(c, 0)), b.shape(in(c, 1)));
  return g;
}

// y = a / b: da = dy / b, db = -dy * y / b.
Grads div_rule(GradBuilder& b, const GradCall& c) {
  Grads g(2);
  if (c.want(0)) g[0] = b.sum_to(b.div(c.dy[0], in(c, 1)), b.shape(in(c, 0)));
  if (c.want(1))
    g[1] = b.sum_to(b.neg(b.div(b.mul(c.dy[0], out(c)), in(c, 1))), b.shape(in(c, 1)));
  return g;
}

Grads neg_rule(GradBuilder& b, const GradCall& c) { return {b.neg(c.dy[0])}; }

// y = x^e: dx = dy * e * x^(e-1), de = dy * y * log(x).
Grads pow_rule(GradBuilder& b, const GradCall& c) {
  Grads g(2);
  if (c.want(0)) {
    const std::string em1 = b.sub(in(c, 1), b.scalar(1.0, b.info(in(c, 1)).dtype));
    const std::string d = b.mul(b.mul(c.dy[0], in(c, 1)), b.binary("Pow", in(c, 0), em1));
    g[0] = b.sum_to(d, b.shape(in(c, 0)));
  }
  if (c.want(1))
    g[1] = b.sum_to(b.mul(b.mul(c.dy[0], out(c)), b.unary("Log", in(c, 0))), b.shape(in(c, 1)));
  return g;
}

Grads sqrt_rule(GradBuilder& b, const GradCall& c) {
  return {b.div(b.scale(c.dy[0], 0.5f), out(c))};
}

// y = 1/x: dx = -dy * y^2.
Grads reciprocal_rule(GradBuilder& b, const GradCall& c) {
  return {b.neg(b.mul(c.dy[0], b.mul(out(c), out(c))))};
}

Grads exp_rule(GradBuilder& b, const GradCall& c) { return {b.mul(c.dy[0], out(c))}; }
Grads log_rule(GradBuilder& b, const GradCall& c) { return {b.div(c.dy[0], in(c, 0))}; }
Grads abs_rule(GradBuilder& b, const GradCall& c) {
  return {b.mul(c.dy[0], b.unary("Sign", in(c, 0)))};
}
Grads identity_rule(GradBuilder&, const GradCall& c) { return {c.dy[0]}; }

// Cast between float dtypes: the gradient is cast back. A cast from an integer or bool has
// no gradient to pass on.
Grads cast_rule(GradBuilder& b, const GradCall& c) {
  const DType from = b.info(in(c, 0)).dtype;
  if (!is_float(from)) return {""};
  Attributes a;
  a.set("to", static_cast<int64_t>(from));
  return {b.node1("Cast", {c.dy[0]}, TensorInfo{from, b.shape(in(c, 0))}, a)};
}

// Clip: the gradient passes where min <= x <= max (PyTorch's hardtanh/clamp convention).
Grads clip_rule(GradBuilder& b, const GradCall& c) {
  DC_USER_CHECK(!c.node.attrs.has("min") && !c.node.attrs.has("max"), "node '", c.node.name,
                "' (Clip): the gradient of a Clip with bounds as attributes (opset < 11) is "
                "not supported");
  std::string pass;
  if (c.node.has_input(1)) pass = b.compare("GreaterOrEqual", in(c, 0), in(c, 1));
  if (c.node.has_input(2)) {
    const std::string le = b.compare("LessOrEqual", in(c, 0), in(c, 2));
    pass = pass.empty() ? le : b.compare("And", pass, le);
  }
  if (pass.empty()) return {c.dy[0]};
  return {b.where(pass, c.dy[0], b.zero(c.dy[0]))};
}

const GradRuleDef kRules[] = {
    {"Add", add_rule},         {"Sub", sub_rule},
    {"Mul", mul_rule},         {"Div", div_rule},
    {"Neg", neg_rule},         {"Pow", pow_rule},
    {"Sqrt", sqrt_rule},       {"Reciprocal", reciprocal_rule},
    {"Exp", exp_rule},         {"Log", log_rule},
    {"Abs", abs_rule},         {"Identity", identity_rule},
    {"Cast", cast_rule},       {"Clip", clip_rule},
};

}  // namespace

std::span<const GradRuleDef> elementwise_gradients() { return kRules; }

}  // namespace dc::grad
