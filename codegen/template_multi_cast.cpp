#include "template_multi_cast.h"

#include <algorithm>

#include <fmt/format.h>

#include "ir/error.h"
#include "value_emitter.h"

namespace dc {

namespace {

// out<t>[index] = in<t>[index] as the output's type: the Cast's one rounding.
std::string cast_store(const Graph& sub, size_t t, const std::string& index, const std::string& value) {
  return fmt::format("out{}[{}] = {};", t, index, store_value(sub.info(sub.outputs[t]).dtype, value));
}

// Tensor t one element a thread, from element `begin` on.
std::string scalar_loop(const Graph& sub, size_t t, int64_t begin, int64_t elements) {
  return fmt::format("  for (dc_i64 e = {} + dc_first; e < {}; e += dc_stride) {}\n", begin, elements,
                     cast_store(sub, t, "e", fmt::format("in{}[e]", t)));
}

// Tensor t a float4 a thread, then its last elements one a thread.
std::string vector_loop(const Graph& sub, size_t t, int64_t elements) {
  const int64_t vectors = elements / 4;
  std::string code;
  if (vectors > 0) {
    code += fmt::format("  for (dc_i64 q = dc_first; q < {}; q += dc_stride) {{\n", vectors);
    code += fmt::format("    const float4 dc_q = reinterpret_cast<const float4*>(in{})[q];\n", t);
    const char* lanes[] = {"x", "y", "z", "w"};
    for (int j = 0; j < 4; ++j)
      code += "    " + cast_store(sub, t, fmt::format("4 * q + {}", j), fmt::format("dc_q.{}", lanes[j])) + "\n";
    code += "  }\n";
  }
  if (elements % 4 != 0) code += scalar_loop(sub, t, vectors * 4, elements);
  return code;
}

}  // namespace

int64_t multi_cast_threads_wanted(const Graph& sub, const Node& n, bool vectorised) {
  int64_t most = 1;
  for (const auto& in : n.inputs) {
    const int64_t elements = shape_numel(sub.info(in).shape);
    most = std::max(most, vectorised ? (elements + 3) / 4 : elements);
  }
  return most;
}

std::string multi_cast_body(const Graph& sub, const Node& n, bool vectorised) {
  // The kernel names inputs in<k> and outputs out<k> in the node's order: none may be a
  // constant or repeat.
  DC_INTERNAL_CHECK(sub.inputs.size() == n.inputs.size() && sub.outputs.size() == n.outputs.size() &&
                        n.inputs.size() == n.outputs.size(),
                    n.op, " node '", n.name, "': every weight and copy must be a distinct buffer");
  std::string code =
      "  const dc_i64 dc_first = (dc_i64)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  const dc_i64 dc_stride = (dc_i64)gridDim.x * blockDim.x;\n";
  for (size_t t = 0; t < sub.inputs.size(); ++t) {
    const int64_t elements = shape_numel(sub.info(sub.inputs[t]).shape);
    DC_INTERNAL_CHECK(shape_numel(sub.info(sub.outputs[t]).shape) == elements, n.op, " node '", n.name,
                      "': copy ", t, " is not its weight's shape");
    code += fmt::format("  // tensor {}: {} elements\n", t, elements);
    code += vectorised ? vector_loop(sub, t, elements) : scalar_loop(sub, t, 0, elements);
  }
  return code;
}

}  // namespace dc
