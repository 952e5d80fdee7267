// A dense, row-major tensor value: dtype, static shape and a shared, 64-byte aligned buffer.
// Copies share the buffer (cheap to pass around); kernels write only into tensors they
// created, so a shared buffer is never mutated behind another holder's back.
// A lazy tensor (from_file: weights on disk; from_lazy: an fp16/bf16 conversion of one)
// reads or computes its bytes at the first data() or raw() call, once for all its copies;
// copy_bytes() reads any part of them without doing so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ir/dtype.h"
#include "ir/error.h"
#include "ir/file_bytes.h"
#include "ir/shape.h"

namespace dc {

// Maps C++ element types to DType for the typed accessors.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::i8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::i16; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::u16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = DType::u32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint64_t> { static constexpr DType value = DType::u64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };

class Tensor {
 public:
  Tensor() = default;  // undefined: an absent optional input
  // Zero-filled tensor.
  Tensor(DType dtype, Shape shape);

  template <class T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values) {
    Tensor t(dtype_of<T>::value, std::move(shape));
    DC_INTERNAL_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: ",
                      values.size(), " values for shape ", shape_str(t.shape()));
    T* p = t.mutable_data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    return t;
  }
  template <class T>
  static Tensor scalar(T v) { return from_vector<T>({}, {v}); }
  // Bytes [offset, offset + nbytes) of `path`, read when first needed. The caller has
  // checked that the file holds them (onnx/external_data.h, plan/plan_io.h).
  static Tensor from_file(DType dtype, Shape shape, const std::string& path, uint64_t offset);
  // A tensor whose bytes `lazy` reads or computes when first needed (converted_bytes.h).
  static Tensor from_lazy(DType dtype, Shape shape, std::shared_ptr<LazyBytes> lazy);

  bool defined() const { return dtype_ != DType::undefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  template <class T>
  const T* data() const {
    check_type(dtype_of<T>::value);
    return reinterpret_cast<const T*>(bytes());
  }
  template <class T>
  T* mutable_data() {
    check_type(dtype_of<T>::value);
    return reinterpret_cast<T*>(bytes());
  }
  const std::byte* raw() const { return bytes(); }
  std::byte* raw_mutable() { return bytes(); }
  // False only for a lazy tensor whose bytes have not been read or computed yet.
  bool resident() const { return !lazy_ || lazy_->resident(); }
  // Bytes [from, from + n) into dst, without making the rest of a lazy tensor resident.
  void copy_bytes(size_t from, size_t n, void* dst) const;

  // Same buffer, new shape of equal element count.
  Tensor reshaped(Shape shape) const;
  // Deep copy.
  Tensor clone() const;
  // Values of an integer tensor (any integer dtype) as int64; UserError for other dtypes.
  std::vector<int64_t> to_int64_vector() const;
  // Values as float for any numeric or bool dtype (f16/bf16 converted).
  std::vector<float> to_float_vector() const;

  // True if dtype, shape and bytes are identical.
  bool bitwise_equal(const Tensor& other) const;

 private:
  void check_type(DType want) const {
    DC_INTERNAL_CHECK(dtype_ == want, "tensor of dtype ", dtype_name(dtype_), " accessed as ",
                      dtype_name(want));
  }
  std::byte* bytes() const { return lazy_ ? lazy_->bytes() : buf_.get(); }
  DType dtype_ = DType::undefined;
  Shape shape_;
  std::shared_ptr<std::byte[]> buf_;
  std::shared_ptr<LazyBytes> lazy_;  // set instead of buf_ for a lazy tensor
};

// IEEE half and bfloat16 conversions (round to nearest even).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace dc
