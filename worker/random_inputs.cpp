#include "random_inputs.h"

#include <algorithm>
#include <random>

namespace dc {
namespace {

// Exclusive upper bound of an integer input: the indexed dimension when a Gather or
// GatherElements reads it as indices (the smallest over several readers), else 2.
int64_t integer_bound(const Graph& g, const std::string& name) {
  int64_t bound = 0;
  for (const auto& n : g.nodes) {
    if ((n.op != "Gather" && n.op != "GatherElements") || !n.has_input(1) || n.inputs[1] != name)
      continue;
    const Shape& data = g.info(n.inputs[0]).shape;
    int64_t axis = n.attrs.get_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(data.size());
    if (axis < 0 || axis >= static_cast<int64_t>(data.size())) continue;
    const int64_t dim = data[static_cast<size_t>(axis)];
    if (dim > 0) bound = bound == 0 ? dim : std::min(bound, dim);
  }
  return bound > 0 ? bound : 2;
}

// Uniform in [-1, 1) from the top 24 bits: exact in float, the same on every platform.
float unit_float(std::mt19937& rng) {
  const uint32_t bits = rng() >> 8;
  return static_cast<float>(bits) * (2.0f / 16777216.0f) - 1.0f;
}

template <class T>
void fill_integers(Tensor& t, std::mt19937& rng, int64_t bound) {
  T* p = t.mutable_data<T>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<T>(static_cast<int64_t>(rng() % static_cast<uint64_t>(bound)));
}

Tensor random_tensor(const Graph& g, const std::string& name, uint32_t seed) {
  const TensorInfo& info = g.info(name);
  std::mt19937 rng(seed);
  Tensor t(info.dtype, info.shape);
  const int64_t n = t.numel();
  switch (info.dtype) {
    case DType::f32: {
      float* p = t.mutable_data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] = unit_float(rng);
      break;
    }
    case DType::f64: {
      double* p = t.mutable_data<double>();
      for (int64_t i = 0; i < n; ++i) p[i] = unit_float(rng);
      break;
    }
    case DType::f16:
    case DType::bf16: {
      // No typed accessor for halves: write the bits through the raw buffer.
      auto* p = reinterpret_cast<uint16_t*>(t.raw_mutable());
      for (int64_t i = 0; i < n; ++i)
        p[i] = info.dtype == DType::f16 ? float_to_half(unit_float(rng))
                                        : float_to_bf16(unit_float(rng));
      break;
    }
    case DType::boolean: {
      bool* p = t.mutable_data<bool>();
      for (int64_t i = 0; i < n; ++i) p[i] = (rng() & 1u) != 0;
      break;
    }
    case DType::i64: fill_integers<int64_t>(t, rng, integer_bound(g, name)); break;
    case DType::i32: fill_integers<int32_t>(t, rng, integer_bound(g, name)); break;
    case DType::i16: fill_integers<int16_t>(t, rng, integer_bound(g, name)); break;
    case DType::i8: fill_integers<int8_t>(t, rng, std::min<int64_t>(integer_bound(g, name), 128)); break;
    case DType::u8: fill_integers<uint8_t>(t, rng, std::min<int64_t>(integer_bound(g, name), 256)); break;
    case DType::u16: fill_integers<uint16_t>(t, rng, integer_bound(g, name)); break;
    case DType::u32: fill_integers<uint32_t>(t, rng, integer_bound(g, name)); break;
    case DType::u64: fill_integers<uint64_t>(t, rng, integer_bound(g, name)); break;
    case DType::undefined:
      throw_internal_error("workload input ", name, " has no dtype");
  }
  return t;
}

}  // namespace

std::vector<Tensor> random_workload_inputs(const Workload& w, uint32_t seed) {
  std::vector<Tensor> out;
  out.reserve(w.graph.inputs.size());
  // Each input its own stream: adding an input does not change the others' values.
  for (size_t i = 0; i < w.graph.inputs.size(); ++i)
    out.push_back(random_tensor(w.graph, w.graph.inputs[i],
                                seed * 1000003u + static_cast<uint32_t>(i)));
  return out;
}

}  // namespace dc
