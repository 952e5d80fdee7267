#include "ir/converted_bytes.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <vector>

namespace dc {

namespace {

constexpr size_t kChunkElems = size_t{1} << 20;  // 4 MiB of f32 read at a time
constexpr size_t kAlignment = 64;                // ir/tensor.h's buffer alignment

// What a lazy tensor computes from chunks of its f32 source: elements [first, first + k)
// of the result from the source's values in[0, k), written to out.
using ChunkMap = std::function<void(size_t first, const float* in, size_t k, std::byte* out)>;

// Calls fn(first element, count, result bytes) for consecutive chunks of the result's
// elements [e0, e1), each computed by `map` from the same elements of `src`.
template <class Fn>
void map_chunks(const Tensor& src, const ChunkMap& map, size_t out_elem, size_t e0, size_t e1, Fn fn) {
  std::vector<float> in(std::min(kChunkElems, e1 - e0));
  std::vector<std::byte> out(in.size() * out_elem);
  for (size_t e = e0; e < e1; e += in.size()) {
    const size_t k = std::min(in.size(), e1 - e);
    src.copy_bytes(e * sizeof(float), k * sizeof(float), in.data());
    map(e, in.data(), k, out.data());
    fn(e, k, out.data());
  }
}

// The bytes of map(src), computed chunk by chunk when needed (elementwise: element i of the
// result depends only on element i of the source and its index).
class MappedBytes : public LazyBytes {
 public:
  MappedBytes(Tensor src, size_t out_elem, ChunkMap map)
      : src_(std::move(src)), out_elem_(out_elem), map_(std::move(map)) {}

  size_t size() const override { return static_cast<size_t>(src_.numel()) * out_elem_; }
  bool resident() const override { return data_.load(std::memory_order_acquire) != nullptr; }

  std::byte* bytes() override {
    if (std::byte* p = data_.load(std::memory_order_acquire)) return p;
    std::lock_guard<std::mutex> lock(mu_);
    if (std::byte* p = data_.load(std::memory_order_relaxed)) return p;
    const size_t n = std::max<size_t>(size(), 1);
    auto* p = static_cast<std::byte*>(::operator new[](n, std::align_val_t{kAlignment}));
    holder_ = std::shared_ptr<std::byte[]>(p, [](std::byte* q) { ::operator delete[](q, std::align_val_t{kAlignment}); });
    map_chunks(src_, map_, out_elem_, 0, static_cast<size_t>(src_.numel()),
               [&](size_t e, size_t k, const std::byte* v) { std::memcpy(p + e * out_elem_, v, k * out_elem_); });
    data_.store(p, std::memory_order_release);
    return p;
  }

  void copy_to(size_t from, size_t n, void* dst) const override {
    DC_INTERNAL_CHECK(from <= size() && n <= size() - from, "MappedBytes::copy_to: [", from, ", ",
                      from + n, ") outside ", size(), " bytes");
    if (const std::byte* p = data_.load(std::memory_order_acquire)) {
      std::memcpy(dst, p + from, n);
      return;
    }
    // The elements that hold bytes [from, from + n); the first and last may be cut.
    auto* out = static_cast<std::byte*>(dst);
    const size_t w = out_elem_;
    map_chunks(src_, map_, w, from / w, (from + n + w - 1) / w, [&](size_t e, size_t k, const std::byte* v) {
      const size_t lo = std::max(from, e * w), hi = std::min(from + n, (e + k) * w);
      std::memcpy(out + (lo - from), v + (lo - e * w), hi - lo);
    });
  }

 private:
  Tensor src_;
  size_t out_elem_;
  ChunkMap map_;
  std::mutex mu_;
  std::shared_ptr<std::byte[]> holder_;
  std::atomic<std::byte*> data_{nullptr};
};

ChunkMap storage_map(DType to, ClampStats* stats) {
  return [to, stats](size_t, const float* in, size_t k, std::byte* out) {
    convert_to_storage(in, k, to, reinterpret_cast<uint16_t*>(out), stats);
  };
}

void check_conversion(const Tensor& src, DType to) {
  DC_INTERNAL_CHECK(src.dtype() == DType::f32, "storage conversion of a ", dtype_name(src.dtype()), " tensor");
  DC_INTERNAL_CHECK(to == DType::f16 || to == DType::bf16, "storage conversion to ", dtype_name(to));
}

}  // namespace

double storage_finite_max(DType to) { return to == DType::f16 ? 65504.0 : 3.3895313892515355e38; }

void convert_to_storage(const float* src, size_t n, DType to, uint16_t* dst, ClampStats* stats) {
  const float hi = static_cast<float>(storage_finite_max(to));
  for (size_t i = 0; i < n; ++i) {
    float v = src[i];
    if (!std::isnan(v) && std::fabs(v) > hi) {
      if (stats) {
        stats->lo = stats->clamped == 0 ? v : std::min(stats->lo, v);
        stats->hi = stats->clamped == 0 ? v : std::max(stats->hi, v);
        ++stats->clamped;
      }
      v = v > 0 ? hi : -hi;
    }
    dst[i] = to == DType::f16 ? float_to_half(v) : float_to_bf16(v);
  }
}

Tensor convert_lazily(const Tensor& src, DType to) {
  check_conversion(src, to);
  return Tensor::from_lazy(to, src.shape(), std::make_shared<MappedBytes>(src, sizeof(uint16_t), storage_map(to, nullptr)));
}

ClampStats scan_clamps(const Tensor& src, DType to) {
  check_conversion(src, to);
  ClampStats stats;
  map_chunks(src, storage_map(to, &stats), sizeof(uint16_t), 0, static_cast<size_t>(src.numel()),
             [](size_t, size_t, const std::byte*) {});
  return stats;
}

Tensor scale_lazily(const Tensor& src, std::vector<double> factors, int64_t inner) {
  DC_INTERNAL_CHECK(src.dtype() == DType::f32 && !factors.empty() && inner > 0, "scale_lazily of a ",
                    dtype_name(src.dtype()), " tensor");
  const auto stride = static_cast<size_t>(inner);
  auto map = [factors = std::move(factors), stride](size_t first, const float* in, size_t k, std::byte* out) {
    auto* o = reinterpret_cast<float*>(out);
    for (size_t j = 0; j < k; ++j)
      o[j] = static_cast<float>(in[j] * factors[(first + j) / stride % factors.size()]);
  };
  return Tensor::from_lazy(DType::f32, src.shape(), std::make_shared<MappedBytes>(src, sizeof(float), std::move(map)));
}

}  // namespace dc
