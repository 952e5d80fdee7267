// Gradients of pooling: MaxPool (dc.MaxPoolGrad: to the first maximum of each window),
// AveragePool (dc.AveragePoolGrad) and GlobalAveragePool (the gradient spread evenly).
#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

Grads max_pool_rule(GradBuilder& b, const GradCall& c) {
  DC_USER_CHECK(c.dy.size() < 2 || c.dy[1].empty(), "node '", c.node.name,
                "' (MaxPool): its Indices output has no gradient");
  const std::string& x = c.node.inputs[0];
  return {b.node1("dc.MaxPoolGrad", {c.dy[0], x}, b.info(x), c.node.attrs)};
}

Grads average_pool_rule(GradBuilder& b, const GradCall& c) {
  const std::string& x = c.node.inputs[0];
  Attributes a = c.node.attrs;
  a.set("input_shape", std::vector<int64_t>(b.shape(x).begin(), b.shape(x).end()));
  return {b.node1("dc.AveragePoolGrad", {c.dy[0]}, b.info(x), a)};
}

Grads global_average_pool_rule(GradBuilder& b, const GradCall& c) {
  const std::string& x = c.node.inputs[0];
  const Shape& s = b.shape(x);
  int64_t plane = 1;
  for (size_t d = 2; d < s.size(); ++d) plane *= s[d];
  return {b.scale(b.expand(c.dy[0], s), 1.0 / static_cast<double>(plane))};
}

const GradRuleDef kRules[] = {
    {"MaxPool", max_pool_rule},
    {"AveragePool", average_pool_rule},
    {"GlobalAveragePool", global_average_pool_rule},
};

}  // namespace

std::span<const GradRuleDef> pool_gradients() { return kRules; }

}  // namespace dc::grad
