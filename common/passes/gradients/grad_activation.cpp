// Gradients of activations: Relu, LeakyRelu, Sigmoid, Tanh, Gelu (erf and tanh forms, one
// dc.GeluGrad node), Erf, HardSigmoid and HardSwish. SiLU/Swish arrives as x * Sigmoid(x)
// and is differentiated through Mul and Sigmoid.
#include <cmath>
#include <numbers>

#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

const std::string& x_of(const GradCall& c) { return c.node.inputs.at(0); }
const std::string& y_of(const GradCall& c) { return c.node.outputs.at(0); }

// dx = dy where x > 0, else 0 (PyTorch's: 0 at x == 0). The mask reads y (y > 0 exactly
// where x > 0), as PyTorch's does: y is kept for the next layer's gradient anyway, so x need
// not be kept for the backward pass.
Grads relu_rule(GradBuilder& b, const GradCall& c) {
  const std::string pos = b.compare("Greater", y_of(c), b.zero(y_of(c)));
  return {b.where(pos, c.dy[0], b.zero(c.dy[0]))};
}

Grads leaky_relu_rule(GradBuilder& b, const GradCall& c) {
  const double alpha = c.node.attrs.get_float("alpha", 0.01f);
  const std::string pos = b.compare("Greater", x_of(c), b.zero(x_of(c)));
  return {b.where(pos, c.dy[0], b.scale(c.dy[0], alpha))};
}

// dx = dy * y * (1 - y).
Grads sigmoid_rule(GradBuilder& b, const GradCall& c) {
  const std::string one_minus = b.sub(b.scalar(1.0, b.info(y_of(c)).dtype), y_of(c));
  return {b.mul(c.dy[0], b.mul(y_of(c), one_minus))};
}

// dx = dy * (1 - y^2).
Grads tanh_rule(GradBuilder& b, const GradCall& c) {
  const std::string one_minus = b.sub(b.scalar(1.0, b.info(y_of(c)).dtype), b.mul(y_of(c), y_of(c)));
  return {b.mul(c.dy[0], one_minus)};
}

Grads gelu_rule(GradBuilder& b, const GradCall& c) {
  Attributes a;
  a.set("approximate", c.node.attrs.get_string("approximate", "none"));
  return {b.node1("dc.GeluGrad", {c.dy[0], x_of(c)}, b.info(x_of(c)), a)};
}

// dx = dy * 2/sqrt(pi) * exp(-x^2).
Grads erf_rule(GradBuilder& b, const GradCall& c) {
  const std::string e = b.unary("Exp", b.neg(b.mul(x_of(c), x_of(c))));
  return {b.mul(c.dy[0], b.scale(e, 2.0 / std::sqrt(std::numbers::pi)))};
}

// y = clamp(alpha x + beta, 0, 1): dx = alpha dy where 0 < y < 1.
Grads hard_sigmoid_rule(GradBuilder& b, const GradCall& c) {
  const double alpha = c.node.attrs.get_float("alpha", 0.2f);
  const DType dt = b.info(y_of(c)).dtype;
  const std::string inside = b.compare("And", b.compare("Greater", y_of(c), b.zero(y_of(c))),
                                       b.compare("Less", y_of(c), b.scalar(1.0, dt)));
  return {b.where(inside, b.scale(c.dy[0], alpha), b.zero(c.dy[0]))};
}

// y = x * clamp(x/6 + 1/2, 0, 1): dx = 0 below -3, dy above 3, dy * (x/3 + 1/2) between.
Grads hard_swish_rule(GradBuilder& b, const GradCall& c) {
  const DType dt = b.info(x_of(c)).dtype;
  const std::string mid = b.mul(c.dy[0], b.add(b.scale(x_of(c), 1.0 / 3.0), b.scalar(0.5, dt)));
  const std::string upper = b.where(b.compare("Greater", x_of(c), b.scalar(3.0, dt)), c.dy[0], mid);
  return {b.where(b.compare("Less", x_of(c), b.scalar(-3.0, dt)), b.zero(c.dy[0]), upper)};
}

const GradRuleDef kRules[] = {
    {"Relu", relu_rule},
    {"LeakyRelu", leaky_relu_rule},
    {"Sigmoid", sigmoid_rule},
    {"Tanh", tanh_rule},
    {"Gelu", gelu_rule},
    {"Erf", erf_rule},
    {"HardSigmoid", hard_sigmoid_rule},
    {"HardSwish", hard_swish_rule},
};

}  // namespace

std::span<const GradRuleDef> activation_gradients() { return kRules; }

}  // namespace dc::grad
