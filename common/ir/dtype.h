// Element types of tensors. Numeric codes are ONNX's TensorProto.DataType values so that
// import and export are a cast; the set is what dc can hold, not only what it computes in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dc {

enum class DType : int32_t {
  undefined = 0,
  f32 = 1,
  u8 = 2,
  i8 = 3,
  u16 = 4,
  i16 = 5,
  i32 = 6,
  i64 = 7,
  boolean = 9,
  f16 = 10,
  f64 = 11,
  u32 = 12,
  u64 = 13,
  bf16 = 16,
};

// Size of one element in bytes; 0 for undefined.
size_t dtype_size(DType t);
// Short readable name: "f32", "i64", "bool", ...
std::string_view dtype_name(DType t);
// From ONNX's TensorProto.DataType code; nullopt for types dc cannot hold (string, complex, ...).
std::optional<DType> dtype_from_onnx(int32_t code);
// ONNX's name of a TensorProto.DataType code, for messages ("STRING", "COMPLEX64").
std::string_view onnx_dtype_name(int32_t code);

inline bool is_float(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
inline bool is_integer(DType t) {
  return t == DType::u8 || t == DType::i8 || t == DType::u16 || t == DType::i16 ||
         t == DType::i32 || t == DType::i64 || t == DType::u32 || t == DType::u64;
}

}  // namespace dc
