#include "random_inputs.h"

#include <algorithm>
#include <random>

#include "ir/index_bounds.h"

namespace dc {
namespace {

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

Tensor random_tensor(const RandomInput& info, uint32_t seed) {
  std::mt19937 rng(seed);
  // Integers read as indices: uniform over the indexed extent; other integers 0 or 1.
  const int64_t bound = info.index_bound > 0 ? info.index_bound : 2;
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
    case DType::i64: fill_integers<int64_t>(t, rng, bound); break;
    case DType::i32: fill_integers<int32_t>(t, rng, bound); break;
    case DType::i16: fill_integers<int16_t>(t, rng, bound); break;
    case DType::i8: fill_integers<int8_t>(t, rng, std::min<int64_t>(bound, 128)); break;
    case DType::u8: fill_integers<uint8_t>(t, rng, std::min<int64_t>(bound, 256)); break;
    case DType::u16: fill_integers<uint16_t>(t, rng, bound); break;
    case DType::u32: fill_integers<uint32_t>(t, rng, bound); break;
    case DType::u64: fill_integers<uint64_t>(t, rng, bound); break;
    case DType::undefined:
      throw_internal_error("a random input has no dtype");
  }
  return t;
}

}  // namespace

std::vector<Tensor> random_inputs(const std::vector<RandomInput>& inputs, uint32_t seed) {
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  // Each input its own stream: adding an input does not change the others' values.
  for (size_t i = 0; i < inputs.size(); ++i)
    out.push_back(random_tensor(inputs[i], seed * 1000003u + static_cast<uint32_t>(i)));
  return out;
}

std::vector<RandomInput> workload_random_inputs(const Workload& w) {
  const std::vector<int64_t> bounds = input_index_bounds(w.graph);
  std::vector<RandomInput> out;
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) {
    const TensorInfo& t = w.graph.info(w.graph.inputs[i]);
    out.push_back({t.dtype, t.shape, bounds[i]});
  }
  return out;
}

std::vector<Tensor> random_workload_inputs(const Workload& w, uint32_t seed) {
  return random_inputs(workload_random_inputs(w), seed);
}

}  // namespace dc
