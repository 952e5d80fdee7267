#include "template_util.h"

#include <fmt/format.h>

#include "prelude.h"

namespace dc {

std::vector<KernelBuffer> workload_buffers(const Workload& w) {
  std::vector<KernelBuffer> out;
  for (const auto& name : w.graph.inputs) {
    const auto& info = w.graph.info(name);
    out.push_back({name, BufferRole::input, info.dtype, info.shape, false});
  }
  for (const auto& name : w.graph.outputs) {
    const auto& info = w.graph.info(name);
    out.push_back({name, BufferRole::output, info.dtype, info.shape, false});
  }
  return out;
}

std::string kernel_params(const Workload& w, const std::vector<std::string>& extra) {
  std::vector<std::string> p;
  for (size_t i = 0; i < w.graph.inputs.size(); ++i)
    p.push_back(fmt::format("const {}* DC_RESTRICT in{}", cuda_type(w.graph.info(w.graph.inputs[i]).dtype), i));
  for (size_t i = 0; i < w.graph.outputs.size(); ++i)
    p.push_back(fmt::format("{}* DC_RESTRICT out{}", cuda_type(w.graph.info(w.graph.outputs[i]).dtype), i));
  p.insert(p.end(), extra.begin(), extra.end());
  std::string s;
  for (size_t i = 0; i < p.size(); ++i) s += (i ? ", " : "") + p[i];
  return s;
}

GeneratedKernel start_kernel(const Workload& w, const Variant& v) {
  GeneratedKernel k;
  k.template_name = v.template_name;
  k.variant_key = v.key();
  k.buffers = workload_buffers(w);
  return k;
}

std::vector<int> all_workload_args(const Workload& w) {
  std::vector<int> a;
  for (size_t i = 0; i < w.graph.inputs.size() + w.graph.outputs.size(); ++i) a.push_back(static_cast<int>(i));
  return a;
}

std::string source_header(const Workload& w, const std::string& template_name,
                          const std::string& variant_key) {
  std::string text = fmt::format("// dc generated kernel\n// template: {}\n// variant:  {}\n// workload: {} ({})\n",
                                 template_name, variant_key, w.signature, cluster_kind_name(w.kind));
  // The workload's canonical text, as comments, so that a reader sees what is computed.
  size_t b = 0;
  while (b < w.canonical.size()) {
    size_t e = w.canonical.find('\n', b);
    if (e == std::string::npos) e = w.canonical.size();
    text += "//   " + w.canonical.substr(b, e - b) + "\n";
    b = e + 1;
  }
  return text + "\n" + cuda_prelude() + "\n";
}

std::vector<std::string> emit_unravel(const Shape& shape, const std::string& lin,
                                      const std::string& prefix, std::string& code) {
  std::vector<std::string> names;
  const auto strides = shape_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    names.push_back(fmt::format("{}{}", prefix, d));
    if (shape[d] == 1) code += fmt::format("  const dc_i64 {} = 0;\n", names.back());
    else if (d == 0) code += fmt::format("  const dc_i64 {} = {} / {};\n", names.back(), lin, strides[d]);
    else code += fmt::format("  const dc_i64 {} = ({} / {}) % {};\n", names.back(), lin, strides[d], shape[d]);
  }
  return names;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace dc
