#include "template_optimizer.h"

#include <algorithm>
#include <cctype>
#include <functional>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/optimizer_update.h"
#include "value_emitter.h"

namespace dc {

namespace {

// Where one element's values come from and go to: the tensor's buffers at element e (the
// scalar loop), or lane j of a float4 read into registers (the vectorised loop).
struct ElementAccess {
  std::function<std::string(size_t k)> input;                              // the group's k-th input
  std::function<std::string(size_t k, const std::string& value)> output;  // a statement writing output k
};

ElementAccess scalar_access(const OptimizerUpdateLayout& l, size_t tensor) {
  return {[&l, tensor](size_t k) { return fmt::format("in{}[e]", l.input(tensor, k)); },
          [&l, tensor](size_t k, const std::string& v) { return fmt::format("out{}[e] = {};", l.output(tensor, k), v); }};
}

ElementAccess lane_access() {
  return {[](size_t k) { return fmt::format("dc_in{}[j]", k); },
          [](size_t k, const std::string& v) { return fmt::format("dc_out{}[j] = {};", k, v); }};
}

// Output k = value; gated: the state input unchanged when the step is skipped (`finite`
// false), as mixed precision's overflow check wants.
std::string store(const OptimizerUpdateLayout& l, const ElementAccess& a, size_t k, const std::string& value) {
  const size_t state_input = k == 0 ? 0 : k + 1;  // W, G, M... -> W', M'...
  if (!l.gated) return fmt::format("      {}\n", a.output(k, value));
  return fmt::format("      {}\n", a.output(k, fmt::format("finite ? {} : {}", value, a.input(state_input))));
}

// The gradient G, or G * (1/S) rounded to float for a scaled update (unscale_'s f32 tensor).
std::string gradient(const OptimizerUpdateLayout& l, const ElementAccess& a) {
  return l.scaled ? fmt::format("({} * inv_scale)", a.input(1)) : a.input(1);
}

// PyTorch's SGD (dampening 0, no Nesterov), in float as the reference.
std::string sgd_element(const Node& n, const OptimizerUpdateLayout& l, const ElementAccess& a) {
  const std::string lr = float_literal(n.attrs.get_float("lr"));
  const std::string mu = float_literal(n.attrs.get_float("momentum", 0.f));
  const std::string wd = float_literal(n.attrs.get_float("weight_decay", 0.f));
  std::string c = fmt::format("      const float w = {};\n      const float g = {} + {} * w;\n", a.input(0),
                              gradient(l, a), wd);
  if (l.inputs_per_tensor == 3) {
    c += fmt::format("      const float m = {} * {} + g;\n", mu, a.input(2));
    return c + store(l, a, 1, "m") + store(l, a, 0, fmt::format("w - {} * m", lr));
  }
  return c + store(l, a, 0, fmt::format("w - {} * g", lr));
}

// PyTorch's AdamW (amsgrad off) in double; the bias corrections are the loop's constants.
std::string adamw_element(const Node& n, const OptimizerUpdateLayout& l, const ElementAccess& a) {
  const double lr = n.attrs.get_float("lr"), b1 = n.attrs.get_float("beta1"), b2 = n.attrs.get_float("beta2");
  const double eps = n.attrs.get_float("epsilon"), wd = n.attrs.get_float("weight_decay", 0.f);
  std::string c = fmt::format(
      "      const double g = {g};\n"
      "      const double m = {b1} * {m} + {c1} * g;\n"
      "      const double v = {b2} * {v} + {c2} * g * g;\n"
      "      const double denom = sqrt(v) / bc2_sqrt + {eps};\n",
      fmt::arg("g", gradient(l, a)), fmt::arg("b1", double_literal(b1)), fmt::arg("m", a.input(2)),
      fmt::arg("c1", double_literal(1 - b1)), fmt::arg("b2", double_literal(b2)), fmt::arg("v", a.input(3)),
      fmt::arg("c2", double_literal(1 - b2)), fmt::arg("eps", double_literal(eps)));
  c += store(l, a, 0, fmt::format("(float)({} * {} - {} / bc1 * m / denom)", a.input(0), double_literal(1 - lr * wd),
                                  double_literal(lr)));
  return c + store(l, a, 1, "(float)m") + store(l, a, 2, "(float)v");
}

std::string element(const Node& n, const OptimizerUpdateLayout& l, const ElementAccess& a) {
  return n.op == "dc.AdamWUpdate" ? adamw_element(n, l, a) : sgd_element(n, l, a);
}

// The reference's loop: one element a thread, its tensor found by comparing its index with the
// tensors' running offsets.
std::string flat_loop(const Graph& sub, const Node& n, const OptimizerUpdateLayout& l) {
  std::string code = fmt::format(
      "  for (dc_i64 i = (dc_i64)blockIdx.x * blockDim.x + threadIdx.x; i < {}; "
      "i += (dc_i64)gridDim.x * blockDim.x) {{\n",
      updated_elements(sub, n));
  int64_t begin = 0;
  for (size_t t = 0; t < l.tensors; ++t) {
    const int64_t end = begin + shape_numel(sub.info(n.input(l.input(t, 0))).shape);
    code += fmt::format("    {}if (i < {}) {{\n      const dc_i64 e = i - {};\n", t == 0 ? "" : "else ", end, begin);
    code += element(n, l, scalar_access(l, t));
    code += "    }\n";
    begin = end;
  }
  return code + "  }\n";
}

// The tuned variant's loops: the grid sweeps each tensor in turn, a float4 of every input of
// the group a thread (the buffers start 16-byte aligned: plan offsets and allocations), the
// lanes' math from registers, then the elements past the last whole float4 one a thread. No
// index comparison per element, and loads and stores four wide.
std::string vector_loops(const Graph& sub, const Node& n, const OptimizerUpdateLayout& l) {
  std::string code =
      "  const dc_i64 dc_first = (dc_i64)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  const dc_i64 dc_stride = (dc_i64)gridDim.x * blockDim.x;\n";
  for (size_t t = 0; t < l.tensors; ++t) {
    const int64_t elements = shape_numel(sub.info(n.input(l.input(t, 0))).shape);
    const int64_t vectors = elements / 4;
    code += fmt::format("  // tensor {}: {} elements\n", t, elements);
    if (vectors > 0) {
      code += fmt::format("  for (dc_i64 q = dc_first; q < {}; q += dc_stride) {{\n", vectors);
      for (size_t k = 0; k < l.inputs_per_tensor; ++k)
        code += fmt::format(
            "    float dc_in{k}[4];\n"
            "    {{\n      const float4 dc_q = reinterpret_cast<const float4*>(in{b})[q];\n"
            "      dc_in{k}[0] = dc_q.x; dc_in{k}[1] = dc_q.y; dc_in{k}[2] = dc_q.z; dc_in{k}[3] = dc_q.w;\n    }}\n",
            fmt::arg("k", k), fmt::arg("b", l.input(t, k)));
      for (size_t k = 0; k < l.outputs_per_tensor; ++k) code += fmt::format("    float dc_out{}[4];\n", k);
      code += "    for (int j = 0; j < 4; ++j) {\n" + element(n, l, lane_access()) + "    }\n";
      for (size_t k = 0; k < l.outputs_per_tensor; ++k)
        code += fmt::format(
            "    {{\n      float4 dc_q;\n"
            "      dc_q.x = dc_out{k}[0]; dc_q.y = dc_out{k}[1]; dc_q.z = dc_out{k}[2]; dc_q.w = dc_out{k}[3];\n"
            "      reinterpret_cast<float4*>(out{b})[q] = dc_q;\n    }}\n",
            fmt::arg("k", k), fmt::arg("b", l.output(t, k)));
      code += "  }\n";
    }
    if (elements % 4 != 0)
      code += fmt::format("  for (dc_i64 e = {} + dc_first; e < {}; e += dc_stride) {{\n", vectors * 4, elements) +
              element(n, l, scalar_access(l, t)) + "  }\n";
  }
  return code;
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

int64_t optimizer_update_threads_wanted(const Graph& sub, const Node& n, bool vectorised) {
  if (!vectorised) return updated_elements(sub, n);
  const OptimizerUpdateLayout l = optimizer_update_layout(n);
  int64_t most = 1;  // the largest tensor's float4s (and a tail of three at most)
  for (size_t t = 0; t < l.tensors; ++t)
    most = std::max(most, (shape_numel(sub.info(n.input(l.input(t, 0))).shape) + 3) / 4);
  return most;
}

std::string optimizer_update_body(const Graph& sub, const Node& n, bool vectorised) {
  const OptimizerUpdateLayout l = optimizer_update_layout(n);
  // The kernel names inputs in<k> in the node's order: no input may be a constant or repeat.
  DC_INTERNAL_CHECK(sub.inputs.size() == n.inputs.size() && sub.outputs.size() == n.outputs.size(),
                    n.op, " node '", n.name, "': every input and output must be a distinct buffer");
  std::string code;
  if (l.scaled) code += fmt::format("  const float inv_scale = 1.f / in{}[0];\n", l.scale());
  if (l.gated) code += fmt::format("  const bool finite = in{}[0] != 0;\n", l.finite());
  if (n.op == "dc.AdamWUpdate") {
    const double b1 = n.attrs.get_float("beta1"), b2 = n.attrs.get_float("beta2");
    code += fmt::format("  const double t = (double)(in{}[0] + 1);\n", l.step());
    code += fmt::format("  const double bc1 = 1.0 - pow({}, t), bc2_sqrt = sqrt(1.0 - pow({}, t));\n", double_literal(b1),
                        double_literal(b2));
  }
  return code + (vectorised ? vector_loops(sub, n, l) : flat_loop(sub, n, l));
}

}  // namespace dc
