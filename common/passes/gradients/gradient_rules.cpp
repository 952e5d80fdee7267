#include "passes/gradients/gradient_rules.h"

#include <algorithm>

#include "ir/error.h"

namespace dc::grad {

std::span<const GradRuleDef> all_gradient_rules() {
  static const std::vector<GradRuleDef> table = [] {
    std::vector<GradRuleDef> t;
    for (auto fam : {elementwise_gradients(), activation_gradients(), conv_gradients(), conv_transpose_gradients(),
                     linalg_gradients(), norm_gradients(), pool_gradients(), shape_gradients(),
                     resample_gradients(), attention_gradients(), training_op_gradients()})
      t.insert(t.end(), fam.begin(), fam.end());
    return t;
  }();
  return table;
}

void no_gradient(const GradCall& c, const std::string& why) {
  throw_user_error("node '", c.node.name, "' (", c.node.op, "): no gradient: ", why);
}

const GradRuleDef* find_gradient_rule(std::string_view op) {
  const auto rules = all_gradient_rules();
  auto it = std::find_if(rules.begin(), rules.end(), [&](const GradRuleDef& r) { return r.op == op; });
  return it == rules.end() ? nullptr : &*it;
}

}  // namespace dc::grad
