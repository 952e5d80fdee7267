#include "template_nonfinite_check.h"

#include <fmt/format.h>

#include "ir/error.h"

namespace dc {

int64_t nonfinite_check_threads_wanted(const Node& n) { return n.attrs.get_int("lanes", 1); }

std::string nonfinite_check_body(const Graph& sub, const Node& n) {
  // The kernel names inputs in<k> in the node's order: no input may be a constant or repeat.
  DC_INTERNAL_CHECK(sub.inputs.size() == n.inputs.size() && sub.outputs.size() == 1, n.op, " node '", n.name,
                    "': every gradient must be a distinct buffer");
  const int64_t lanes = nonfinite_check_threads_wanted(n);
  DC_INTERNAL_CHECK(shape_numel(sub.info(sub.outputs[0]).shape) == lanes, n.op, " node '", n.name,
                    "': the flags are not [lanes]");
  std::string code = fmt::format(
      "  for (dc_i64 f = (dc_i64)blockIdx.x * blockDim.x + threadIdx.x; f < {}; "
      "f += (dc_i64)gridDim.x * blockDim.x) {{\n"
      "    int bad = 0;\n",
      lanes);
  // bad |= ..., not bad = bad || ...: no branch between the loads, which the compiler may batch.
  for (size_t t = 0; t < sub.inputs.size(); ++t) {
    const int64_t elements = shape_numel(sub.info(sub.inputs[t]).shape);
    code += fmt::format("    for (dc_i64 e = f; e < {}; e += {}) bad |= !isfinite(in{}[e]);\n", elements,
                        lanes, t);
  }
  return code + "    out0[f] = bad != 0 ? 1.f : 0.f;\n  }\n";
}

}  // namespace dc
