#include "ref/storage_dtypes.h"

#include <algorithm>
#include <set>
#include <string>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/broadcast.h"

namespace dc::ref {

namespace {

bool is_reduced(DType t) { return t == DType::f16 || t == DType::bf16; }

// Value of element i of a float tensor as double (exact for every float dtype).
template <class Read>
void convert_loop(int64_t n, Read&& read_write) {
  parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) read_write(i);
  });
}

double read_element(const std::byte* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return reinterpret_cast<const float*>(p)[i];
    case DType::f64: return reinterpret_cast<const double*>(p)[i];
    case DType::f16: return half_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    default: throw_internal_error("read_element: dtype ", dtype_name(t));
  }
}

void write_element(std::byte* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DType::f64: reinterpret_cast<double*>(p)[i] = v; return;
    case DType::f16: reinterpret_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v)); return;
    case DType::bf16: reinterpret_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); return;
    default: throw_internal_error("write_element: dtype ", dtype_name(t));
  }
}

// Input positions whose elements a data movement op moves (the others are indices, shapes,
// conditions or attributes-as-inputs and are never converted).
std::vector<size_t> data_inputs(const Node& n, size_t count) {
  if (n.op == "Where") return {1, 2};
  if (n.op == "Shape" || n.op == "Size" || n.op == "Constant" || n.op == "ConstantOfShape")
    return {};
  if (n.op == "Concat") {
    std::vector<size_t> all(count);
    for (size_t i = 0; i < count; ++i) all[i] = i;
    return all;
  }
  return {0};
}

bool is_float_tensor(const Tensor& t) { return t.defined() && is_float(t.dtype()); }

// First float input of a computing op; its dtype is the op's own type in ONNX's sense.
std::optional<DType> first_float_input(const std::vector<Tensor>& in) {
  for (const Tensor& t : in)
    if (is_float_tensor(t)) return t.dtype();
  return std::nullopt;
}

}  // namespace

Tensor convert_float(const Tensor& t, DType to) {
  DC_INTERNAL_CHECK(is_float(t.dtype()) && is_float(to), "convert_float: ", dtype_name(t.dtype()),
                    " to ", dtype_name(to));
  if (t.dtype() == to) return t;
  Tensor out(to, t.shape());
  const std::byte* src = t.raw();
  std::byte* dst = out.raw_mutable();
  const DType from = t.dtype();
  convert_loop(t.numel(), [&](int64_t i) { write_element(dst, to, i, read_element(src, from, i)); });
  return out;
}

bool moves_data_only(std::string_view op) {
  static const std::set<std::string, std::less<>> kMoves = {
      "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Concat",
      "Split",   "Slice",   "Gather",    "Shape",   "Size",      "Constant",
      "ConstantOfShape", "Identity", "Dropout", "Expand", "Tile", "Where"};
  return kMoves.count(op) != 0;
}

std::vector<Tensor> compute_inputs(const Node& node, const std::vector<Tensor>& inputs,
                                   const std::vector<DType>& out_dtypes) {
  std::vector<Tensor> in = inputs;
  if (node.op == "Cast") return in;  // converts between any dtypes itself
  if (moves_data_only(node.op)) {
    const auto data = data_inputs(node, in.size());
    std::optional<DType> target;
    if (!out_dtypes.empty() && is_float(out_dtypes[0])) target = out_dtypes[0];
    std::set<DType> seen;
    for (size_t i : data)
      if (i < in.size() && is_float_tensor(in[i])) seen.insert(in[i].dtype());
    if (!target) {
      if (seen.size() <= 1) return in;  // one dtype: the bits move unchanged
      target = seen.count(DType::f64) ? DType::f64 : DType::f32;
    }
    for (size_t i : data)
      if (i < in.size() && is_float_tensor(in[i])) in[i] = convert_float(in[i], *target);
    return in;
  }
  // Pow's exponent has its own type (ONNX): it never decides the base's compute dtype.
  const bool pow = node.op == "Pow";
  bool wide = std::any_of(out_dtypes.begin(), out_dtypes.end(),
                          [](DType t) { return t == DType::f64; });
  for (size_t i = 0; i < in.size(); ++i)
    if (is_float_tensor(in[i]) && !(pow && i == 1)) wide = wide || in[i].dtype() == DType::f64;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!is_float_tensor(in[i])) continue;
    if (pow && i == 1) {
      if (is_reduced(in[i].dtype())) in[i] = convert_float(in[i], DType::f32);
      continue;
    }
    if (wide) in[i] = convert_float(in[i], DType::f64);
    else if (is_reduced(in[i].dtype())) in[i] = convert_float(in[i], DType::f32);
  }
  return in;
}

std::vector<DType> output_dtypes(const Node& node, const std::vector<Tensor>& inputs,
                                 const std::vector<DType>& out_dtypes) {
  std::vector<DType> out(node.outputs.size(), DType::undefined);
  for (size_t k = 0; k < out.size() && k < out_dtypes.size(); ++k) out[k] = out_dtypes[k];
  if (!out_dtypes.empty() || node.op == "Cast" || moves_data_only(node.op)) return out;
  const auto first = first_float_input(inputs);
  if (first && is_reduced(*first)) std::fill(out.begin(), out.end(), *first);
  return out;
}

void round_outputs(std::vector<Tensor>& outputs, const std::vector<DType>& dtypes) {
  for (size_t k = 0; k < outputs.size() && k < dtypes.size(); ++k) {
    Tensor& t = outputs[k];
    if (!is_float_tensor(t) || !is_float(dtypes[k]) || t.dtype() == dtypes[k]) continue;
    t = convert_float(t, dtypes[k]);
  }
}

}  // namespace dc::ref
