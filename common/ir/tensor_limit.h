// A scoped, per-thread bound on the bytes of each new Tensor (ir/tensor.h), for code that
// runs a model whose sizes nothing checked beforehand: import's fallback for
// data-dependent shapes. Without one, a tensor may hold up to 1 TiB.
#pragma once

#include <cstdint>

namespace dc {

// While one lives, a new Tensor of more than `bytes` (or of the limit already in force, when
// lower) on this thread is a UserError.
class TensorByteLimit {
 public:
  explicit TensorByteLimit(int64_t bytes);
  TensorByteLimit(const TensorByteLimit&) = delete;
  TensorByteLimit& operator=(const TensorByteLimit&) = delete;
  ~TensorByteLimit();

 private:
  int64_t previous_;
};

}  // namespace dc
