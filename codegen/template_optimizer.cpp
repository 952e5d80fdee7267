#include "template_optimizer.h"

#include <cctype>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/optimizer_update.h"
#include "value_emitter.h"

namespace dc {

namespace {

std::string in(const OptimizerUpdateLayout& l, size_t tensor, size_t k) {
  return fmt::format("in{}[e]", l.input(tensor, k));
}
// out<k>[e] = value; gated: the state input unchanged when the step is skipped (`finite`
// false), as mixed precision's overflow check wants.
std::string store(const OptimizerUpdateLayout& l, size_t tensor, size_t k, const std::string& value) {
  const size_t state_input = k == 0 ? 0 : k + 1;  // W, G, M... -> W', M'...
  if (!l.gated) return fmt::format("      out{}[e] = {};\n", l.output(tensor, k), value);
  return fmt::format("      out{}[e] = finite ? {} : {};\n", l.output(tensor, k), value, in(l, tensor, state_input));
}

// PyTorch's SGD (dampening 0, no Nesterov), in float as the reference.
std::string sgd_element(const Node& n, const OptimizerUpdateLayout& l, size_t t) {
  const std::string lr = float_literal(n.attrs.get_float("lr"));
  const std::string mu = float_literal(n.attrs.get_float("momentum", 0.f));
  const std::string wd = float_literal(n.attrs.get_float("weight_decay", 0.f));
  std::string c = fmt::format("      const float w = {};\n      const float g = {} + {} * w;\n", in(l, t, 0),
                              in(l, t, 1), wd);
  if (l.inputs_per_tensor == 3) {
    c += fmt::format("      const float m = {} * {} + g;\n", mu, in(l, t, 2));
    return c + store(l, t, 1, "m") + store(l, t, 0, fmt::format("w - {} * m", lr));
  }
  return c + store(l, t, 0, fmt::format("w - {} * g", lr));
}

// PyTorch's AdamW (amsgrad off) in double; the bias corrections are the loop's constants.
std::string adamw_element(const Node& n, const OptimizerUpdateLayout& l, size_t t) {
  const double lr = n.attrs.get_float("lr"), b1 = n.attrs.get_float("beta1"), b2 = n.attrs.get_float("beta2");
  const double eps = n.attrs.get_float("epsilon"), wd = n.attrs.get_float("weight_decay", 0.f);
  std::string c = fmt::format(
      "      const double g = {g};\n"
      "      const double m = {b1} * {m} + {c1} * g;\n"
      "      const double v = {b2} * {v} + {c2} * g * g;\n"
      "      const double denom = sqrt(v) / bc2_sqrt + {eps};\n",
      fmt::arg("g", in(l, t, 1)), fmt::arg("b1", double_literal(b1)), fmt::arg("m", in(l, t, 2)),
      fmt::arg("c1", double_literal(1 - b1)), fmt::arg("b2", double_literal(b2)), fmt::arg("v", in(l, t, 3)),
      fmt::arg("c2", double_literal(1 - b2)), fmt::arg("eps", double_literal(eps)));
  c += store(l, t, 0, fmt::format("(float)({} * {} - {} / bc1 * m / denom)", in(l, t, 0), double_literal(1 - lr * wd),
                                  double_literal(lr)));
  return c + store(l, t, 1, "(float)m") + store(l, t, 2, "(float)v");
}

}  // namespace

std::string naive_kernel_name(const std::string& template_name, size_t index, const std::string& op) {
  std::string lower;
  for (char c : op)  // "dc.SgdUpdate" -> "dc_sgdupdate"
    lower += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : '_';
  return fmt::format("{}_n{}_{}", template_name == "reference" ? "ref" : "naive", index, lower);
}

bool is_optimizer_update_kernel(const GeneratedKernel& k) {
  if (k.launches.size() != 1) return false;
  for (const char* op : {"dc.SgdUpdate", "dc.AdamWUpdate"})
    if (k.launches[0].kernel == naive_kernel_name(k.template_name, 0, op)) return true;
  return false;
}

std::string optimizer_update_body(const Graph& sub, const Node& n) {
  const OptimizerUpdateLayout l = optimizer_update_layout(n);
  // The kernel names inputs in<k> in the node's order: no input may be a constant or repeat.
  DC_INTERNAL_CHECK(sub.inputs.size() == n.inputs.size() && sub.outputs.size() == n.outputs.size(),
                    n.op, " node '", n.name, "': every input and output must be a distinct buffer");
  const bool adamw = n.op == "dc.AdamWUpdate";
  std::string code;
  if (l.gated) code += fmt::format("  const bool finite = in{}[0] != 0;\n", l.finite());
  if (adamw) {
    const double b1 = n.attrs.get_float("beta1"), b2 = n.attrs.get_float("beta2");
    code += fmt::format("  const double t = (double)(in{}[0] + 1);\n", l.step());
    code += fmt::format("  const double bc1 = 1.0 - pow({}, t), bc2_sqrt = sqrt(1.0 - pow({}, t));\n", double_literal(b1),
                        double_literal(b2));
  }
  code += fmt::format(
      "  for (dc_i64 i = (dc_i64)blockIdx.x * blockDim.x + threadIdx.x; i < {}; "
      "i += (dc_i64)gridDim.x * blockDim.x) {{\n",
      updated_elements(sub, n));
  int64_t begin = 0;
  for (size_t t = 0; t < l.tensors; ++t) {
    const int64_t end = begin + shape_numel(sub.info(n.input(l.input(t, 0))).shape);
    code += fmt::format("    {}if (i < {}) {{\n      const dc_i64 e = i - {};\n", t == 0 ? "" : "else ", end, begin);
    code += adamw ? adamw_element(n, l, t) : sgd_element(n, l, t);
    code += "    }\n";
    begin = end;
  }
  return code + "  }\n";
}

}  // namespace dc
