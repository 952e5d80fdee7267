// The bytes of a tensor that are read or computed only when needed: a file region
// (file_bytes.h: weights on disk) or a conversion of another tensor (converted_bytes.h:
// an fp16/bf16 plan's weights). Tensors hold one through a shared pointer, so every copy
// of a tensor sees the same bytes, made resident at most once.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>

namespace dc {

class LazyBytes {
 public:
  virtual ~LazyBytes() = default;
  virtual size_t size() const = 0;
  // False until the first bytes() call.
  virtual bool resident() const = 0;
  // The whole region in memory (once, thread-safe).
  virtual std::byte* bytes() = 0;
  // Bytes [from, from + n) into dst, without making the whole region resident.
  virtual void copy_to(size_t from, size_t n, void* dst) const = 0;
};

// LazyBytes computed from other tensors (a pass's new weight layout: concatenated or
// interleaved columns). Subclasses write bytes [from, from + n) in compute(); bytes()
// computes the whole region once, thread-safe, and copy_to reads it once it is resident.
class ComputedBytes : public LazyBytes {
 public:
  bool resident() const final { return data_.load(std::memory_order_acquire) != nullptr; }
  std::byte* bytes() final;
  void copy_to(size_t from, size_t n, void* dst) const final;

 protected:
  virtual void compute(size_t from, size_t n, std::byte* dst) const = 0;

 private:
  std::mutex mu_;
  std::shared_ptr<std::byte[]> holder_;
  std::atomic<std::byte*> data_{nullptr};
};

}  // namespace dc
