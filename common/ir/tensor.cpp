#include "ir/tensor.h"
#include "ir/tensor_limit.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <new>
#include <string>

namespace dc {

namespace {

struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

std::shared_ptr<std::byte[]> allocate(size_t nbytes) {
  // At least one byte so that data() is never null, even for an empty tensor.
  const size_t n = nbytes == 0 ? 1 : nbytes;
  auto* p = static_cast<std::byte*>(::operator new[](n, std::align_val_t{64}));
  std::memset(p, 0, n);
  return std::shared_ptr<std::byte[]>(p, AlignedDelete{});
}

}  // namespace

// The most bytes a host tensor may hold (1 TiB, as tensor_proto.cpp allows a file's tensor):
// the byte count is checked before it is computed, so that a model's absurd shape (a OneHot
// depth of 2^58: a fuzz_onnx_import finding) is a UserError, not a size that wraps around
// into a small buffer overrun by the op that fills it.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;
thread_local int64_t t_max_tensor_bytes = kMaxTensorBytes;  // TensorByteLimit lowers it

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  DC_INTERNAL_CHECK(dtype != DType::undefined, "tensor of undefined dtype");
  for (int64_t d : shape_) DC_USER_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape_));
  const int64_t limit = t_max_tensor_bytes;
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t d : shape_) {
    DC_USER_CHECK(d == 0 || bytes <= limit / d, "a tensor of shape ", shape_str(shape_), " is too large (over ",
                  limit == kMaxTensorBytes ? std::string("1 TiB") : std::to_string(limit) + " bytes", ")");
    bytes *= d;
  }
  buf_ = allocate(nbytes());
}

TensorByteLimit::TensorByteLimit(int64_t bytes) : previous_(t_max_tensor_bytes) {
  t_max_tensor_bytes = std::min(bytes, previous_);
}
TensorByteLimit::~TensorByteLimit() { t_max_tensor_bytes = previous_; }

Tensor Tensor::from_file(DType dtype, Shape shape, const std::string& path, uint64_t offset) {
  DC_INTERNAL_CHECK(dtype != DType::undefined, "tensor of undefined dtype");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.lazy_ = std::make_shared<FileBytes>(path, offset, t.nbytes());
  return t;
}

Tensor Tensor::from_lazy(DType dtype, Shape shape, std::shared_ptr<LazyBytes> lazy) {
  DC_INTERNAL_CHECK(dtype != DType::undefined, "tensor of undefined dtype");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  DC_INTERNAL_CHECK(lazy && lazy->size() == t.nbytes(), "from_lazy: ", lazy ? lazy->size() : 0,
                    " bytes for a tensor of ", t.nbytes());
  t.lazy_ = std::move(lazy);
  return t;
}

void Tensor::copy_bytes(size_t from, size_t n, void* dst) const {
  DC_INTERNAL_CHECK(from <= nbytes() && n <= nbytes() - from, "copy_bytes beyond the tensor");
  if (n == 0) return;
  if (lazy_) lazy_->copy_to(from, n, dst);
  else std::memcpy(dst, buf_.get() + from, n);
}

Tensor Tensor::reshaped(Shape shape) const {
  DC_INTERNAL_CHECK(shape_numel(shape) == numel(), "reshape ", shape_str(shape_), " to ",
                    shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t(dtype_, shape_);
  copy_bytes(0, nbytes(), t.buf_.get());
  return t;
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  const int64_t n = numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  auto fill = [&](auto* p) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(p[i]);
  };
  switch (dtype_) {
    case DType::i64: fill(data<int64_t>()); break;
    case DType::i32: fill(data<int32_t>()); break;
    case DType::i16: fill(data<int16_t>()); break;
    case DType::i8: fill(data<int8_t>()); break;
    case DType::u8: fill(data<uint8_t>()); break;
    case DType::u16: fill(data<uint16_t>()); break;
    case DType::u32: fill(data<uint32_t>()); break;
    case DType::u64: fill(data<uint64_t>()); break;
    case DType::boolean: fill(data<bool>()); break;
    default: throw_user_error("expected an integer tensor, got ", dtype_name(dtype_));
  }
  return out;
}

std::vector<float> Tensor::to_float_vector() const {
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  auto fill = [&](auto* p) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  };
  switch (dtype_) {
    case DType::f32: fill(data<float>()); break;
    case DType::f64: fill(data<double>()); break;
    case DType::f16: {
      auto* p = reinterpret_cast<const uint16_t*>(raw());
      for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(p[i]);
      break;
    }
    case DType::bf16: {
      auto* p = reinterpret_cast<const uint16_t*>(raw());
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i]);
      break;
    }
    case DType::undefined: throw_internal_error("to_float_vector of undefined tensor");
    default: {
      auto v = to_int64_vector();
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(v[i]);
    }
  }
  return out;
}

bool Tensor::bitwise_equal(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         std::memcmp(raw(), other.raw(), nbytes()) == 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      const float f = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return sign | (absx > 0x7f800000u ? 0x7e00 : 0x7c00);  // nan / inf
  if (absx >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65520: overflow to inf
  if (absx < 0x38800000u) {  // below smallest normal half: subnormal or zero
    const float a = std::bit_cast<float>(absx);
    const float scaled = a * 16777216.0f;  // 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: round mantissa to 10 bits, nearest even.
  const uint32_t rounded = absx + 0xfffu + ((absx >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace dc
