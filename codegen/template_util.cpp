#include "template_util.h"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "ir/error.h"
#include "prelude.h"
#include "template_text.h"
#include "value_emitter.h"

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
  return text + "\n" + cuda_prelude() + "\n" + template_macros() + "\n";
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

int64_t grid_blocks(int64_t items, int64_t per_block) {
  return std::clamp<int64_t>(ceil_div(items, per_block), 1, INT_MAX);
}

GeneratedKernel one_launch_kernel(const Workload& w, const Variant& v, std::string source,
                                  const std::string& kernel, std::array<int64_t, 3> grid,
                                  int64_t threads, int64_t dynamic_smem_bytes) {
  GeneratedKernel k = start_kernel(w, v);
  k.source = std::move(source);
  Launch l;
  l.kernel = kernel;
  l.grid = grid;
  l.block = {threads, 1, 1};
  l.dynamic_smem_bytes = dynamic_smem_bytes;
  l.args = all_workload_args(w);
  k.launches.push_back(std::move(l));
  return k;
}

std::string kernel_definition(const Workload& w, const std::string& name, int64_t threads,
                              const std::string& body) {
  DC_INTERNAL_CHECK(threads > 0 && threads <= 1024, name, ": ", threads, " threads per block");
  return fmt::format(
      "extern \"C\" __global__ void DC_LAUNCH_BOUNDS({3}) {0}({1}) {{\n{2}}}\nDC_EXPORT_KERNEL({0})\n",
      name, kernel_params(w), body, threads);
}

std::string grid_stride_chunks(int64_t chunks, int64_t ept, int64_t vec, const std::string& body) {
  return fmt::format(
      "  for (dc_i64 base = (dc_i64)blockIdx.x * blockDim.x * {0} + threadIdx.x; base < {1};\n"
      "       base += (dc_i64)gridDim.x * blockDim.x * {0}) {{\n"
      "    for (int e = 0; e < {0}; ++e) {{\n"
      "    const dc_i64 q = base + (dc_i64)e * blockDim.x;\n"
      "    if (q >= {1}) break;\n"
      "    const dc_i64 i = q * {2};\n{3}"
      "    }}\n  }}\n",
      ept, chunks, vec, body);
}

std::string store_chunk(const std::string& param, DType dtype, const std::vector<std::string>& lanes) {
  const auto vec = static_cast<int64_t>(lanes.size());
  if (vec > 1 && dtype == DType::f32) {
    std::string items;
    for (size_t k = 0; k < lanes.size(); ++k) items += (k ? ", " : "") + lanes[k];
    return fmt::format("  *reinterpret_cast<{0}*>({1} + i) = make_{0}({2});\n", float_vector_type(vec),
                       param, items);
  }
  std::string code;
  if (vec > 1 && vec % 2 == 0 && (dtype == DType::f16 || dtype == DType::bf16)) {
    // Pairs packed with round to nearest even (exact for values already rounded), one
    // 32-bit store each.
    const char* pack = dtype == DType::f16 ? "dc_pack_f16x2" : "dc_pack_bf16x2";
    for (size_t k = 0; k + 1 < lanes.size(); k += 2)
      code += fmt::format("  reinterpret_cast<unsigned*>({} + i)[{}] = {}({}, {});\n", param, k / 2, pack,
                          lanes[k], lanes[k + 1]);
    return code;
  }
  for (size_t k = 0; k < lanes.size(); ++k)
    code += fmt::format("  {}[i + {}] = {};\n", param, k, store_value(dtype, lanes[k]));
  return code;
}

const char* float_vector_type(int64_t vec) { return vec == 4 ? "float4" : "float2"; }

std::string tap_position(const std::string& o, int64_t stride, int64_t pad, const std::string& k,
                         int64_t dilation) {
  std::string e = stride == 1 ? fmt::format("(dc_i64)({})", o) : fmt::format("(dc_i64)({}) * {}", o, stride);
  if (pad != 0) e += fmt::format(" - {}", pad);
  return e + (dilation == 1 ? fmt::format(" + {}", k) : fmt::format(" + {} * {}", k, dilation));
}

void check_variant(const Variant& v, const std::string& name, bool fp32_only) {
  DC_INTERNAL_CHECK(v.template_name == name, name, ": got a variant of template '", v.template_name, "'");
  DC_INTERNAL_CHECK(!fp32_only || v.precision == "fp32", name, ": only the fp32 path exists, not ",
                    v.precision);
}

const Node& single_main_node(const Workload& w, const std::string& template_name,
                             const std::string& what, const std::function<bool(const Node&)>& is_main) {
  const Node* found = nullptr;
  for (const auto& n : w.graph.nodes) {
    if (is_main(n)) {
      DC_INTERNAL_CHECK(found == nullptr, template_name, ": more than one ", what, " in workload ",
                        w.signature);
      found = &n;
    } else {
      DC_INTERNAL_CHECK(ValueEmitter::supports(n), template_name, ": op ", n.op, " is neither a ",
                        what, " nor injective (workload ", w.signature, ")");
    }
  }
  DC_INTERNAL_CHECK(found != nullptr, template_name, ": no ", what, " in workload ", w.signature);
  return *found;
}

}  // namespace dc
