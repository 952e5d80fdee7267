#include "ir/lazy_bytes.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "ir/error.h"

namespace dc {

namespace {
constexpr size_t kAlignment = 64;  // ir/tensor.h's buffer alignment
}  // namespace

std::byte* ComputedBytes::bytes() {
  if (std::byte* p = data_.load(std::memory_order_acquire)) return p;
  std::lock_guard<std::mutex> lock(mu_);
  if (std::byte* p = data_.load(std::memory_order_relaxed)) return p;
  auto* p = static_cast<std::byte*>(::operator new[](std::max<size_t>(size(), 1), std::align_val_t{kAlignment}));
  holder_ = std::shared_ptr<std::byte[]>(p, [](std::byte* q) { ::operator delete[](q, std::align_val_t{kAlignment}); });
  compute(0, size(), p);
  data_.store(p, std::memory_order_release);
  return p;
}

void ComputedBytes::copy_to(size_t from, size_t n, void* dst) const {
  DC_INTERNAL_CHECK(from <= size() && n <= size() - from, "ComputedBytes: bytes outside the tensor");
  if (const std::byte* p = data_.load(std::memory_order_acquire)) {
    std::memcpy(dst, p + from, n);
    return;
  }
  compute(from, n, static_cast<std::byte*>(dst));
}

}  // namespace dc
