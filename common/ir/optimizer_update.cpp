#include "ir/optimizer_update.h"

#include "ir/error.h"

namespace dc {

bool is_optimizer_update(const std::string& op) { return op == "dc.SgdUpdate" || op == "dc.AdamWUpdate"; }

OptimizerUpdateLayout optimizer_update_layout(const Node& n) {
  OptimizerUpdateLayout l;
  if (n.op == "dc.SgdUpdate") {
    const bool momentum = n.attrs.get_float("momentum", 0.f) != 0.f;
    l.inputs_per_tensor = momentum ? 3 : 2;
    l.outputs_per_tensor = momentum ? 2 : 1;
  } else {
    DC_INTERNAL_CHECK(n.op == "dc.AdamWUpdate", "not an optimizer update: ", n.op);
    l.inputs_per_tensor = 4;
    l.outputs_per_tensor = 3;
    l.step_input = true;
  }
  l.scaled = n.attrs.get_int("scaled", 0) != 0;
  l.gated = n.attrs.get_int("gated", 0) != 0;
  const size_t extra = (l.step_input ? 1 : 0) + (l.scaled ? 1 : 0) + (l.gated ? 1 : 0);
  DC_INTERNAL_CHECK(n.inputs.size() > extra, n.op, " node '", n.name, "' has no tensor to update");
  const size_t groups = n.inputs.size() - extra;
  l.tensors = groups / l.inputs_per_tensor;
  DC_INTERNAL_CHECK(l.tensors >= 1 && groups % l.inputs_per_tensor == 0 &&
                        n.outputs.size() == l.tensors * l.outputs_per_tensor,
                    n.op, " node '", n.name, "' has ", n.inputs.size(), " inputs and ", n.outputs.size(),
                    " outputs, not groups of ", l.inputs_per_tensor, " and ", l.outputs_per_tensor);
  return l;
}

int64_t updated_elements(const Graph& g, const Node& n) {
  const OptimizerUpdateLayout l = optimizer_update_layout(n);
  int64_t total = 0;
  for (size_t t = 0; t < l.tensors; ++t) total += shape_numel(g.info(n.input(l.input(t, 0))).shape);
  return total;
}

}  // namespace dc
