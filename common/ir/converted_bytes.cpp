#include "ir/converted_bytes.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace dc {

namespace {

constexpr size_t kChunkElems = size_t{1} << 20;  // 4 MiB of f32 read at a time
constexpr size_t kAlignment = 64;                // ir/tensor.h's buffer alignment

// Calls fn(first element, count, converted values) for consecutive chunks of src's
// elements [e0, e1).
template <class Fn>
void convert_chunks(const Tensor& src, DType to, size_t e0, size_t e1, ClampStats* stats, Fn fn) {
  std::vector<float> in(std::min(kChunkElems, e1 - e0));
  std::vector<uint16_t> out(in.size());
  for (size_t e = e0; e < e1; e += in.size()) {
    const size_t k = std::min(in.size(), e1 - e);
    src.copy_bytes(e * sizeof(float), k * sizeof(float), in.data());
    convert_to_storage(in.data(), k, to, out.data(), stats);
    fn(e, k, out.data());
  }
}

class ConvertedBytes : public LazyBytes {
 public:
  ConvertedBytes(Tensor src, DType to) : src_(std::move(src)), to_(to) {}

  size_t size() const override { return static_cast<size_t>(src_.numel()) * sizeof(uint16_t); }
  bool resident() const override { return data_.load(std::memory_order_acquire) != nullptr; }

  std::byte* bytes() override {
    if (std::byte* p = data_.load(std::memory_order_acquire)) return p;
    std::lock_guard<std::mutex> lock(mu_);
    if (std::byte* p = data_.load(std::memory_order_relaxed)) return p;
    const size_t n = std::max<size_t>(size(), 1);
    auto* p = static_cast<std::byte*>(::operator new[](n, std::align_val_t{kAlignment}));
    holder_ = std::shared_ptr<std::byte[]>(p, [](std::byte* q) { ::operator delete[](q, std::align_val_t{kAlignment}); });
    convert_chunks(src_, to_, 0, static_cast<size_t>(src_.numel()), nullptr,
                   [&](size_t e, size_t k, const uint16_t* v) { std::memcpy(p + e * 2, v, k * 2); });
    data_.store(p, std::memory_order_release);
    return p;
  }

  void copy_to(size_t from, size_t n, void* dst) const override {
    DC_INTERNAL_CHECK(from <= size() && n <= size() - from, "ConvertedBytes::copy_to: [", from, ", ",
                      from + n, ") outside ", size(), " bytes");
    if (const std::byte* p = data_.load(std::memory_order_acquire)) {
      std::memcpy(dst, p + from, n);
      return;
    }
    // The elements that hold bytes [from, from + n); the first and last may be cut.
    auto* out = static_cast<std::byte*>(dst);
    convert_chunks(src_, to_, from / 2, (from + n + 1) / 2, nullptr, [&](size_t e, size_t k, const uint16_t* v) {
      const size_t lo = std::max(from, e * 2), hi = std::min(from + n, (e + k) * 2);
      std::memcpy(out + (lo - from), reinterpret_cast<const std::byte*>(v) + (lo - e * 2), hi - lo);
    });
  }

 private:
  Tensor src_;
  DType to_;
  std::mutex mu_;
  std::shared_ptr<std::byte[]> holder_;
  std::atomic<std::byte*> data_{nullptr};
};

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
  return Tensor::from_lazy(to, src.shape(), std::make_shared<ConvertedBytes>(src, to));
}

ClampStats scan_clamps(const Tensor& src, DType to) {
  check_conversion(src, to);
  ClampStats stats;
  convert_chunks(src, to, 0, static_cast<size_t>(src.numel()), &stats, [](size_t, size_t, const uint16_t*) {});
  return stats;
}

}  // namespace dc
