#include "ir/dtype.h"

namespace dc {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::undefined: return 0;
    case DType::u8: case DType::i8: case DType::boolean: return 1;
    case DType::u16: case DType::i16: case DType::f16: case DType::bf16: return 2;
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::f64: case DType::i64: case DType::u64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::undefined: return "undefined";
    case DType::f32: return "f32";
    case DType::u8: return "u8";
    case DType::i8: return "i8";
    case DType::u16: return "u16";
    case DType::i16: return "i16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
    case DType::f16: return "f16";
    case DType::f64: return "f64";
    case DType::u32: return "u32";
    case DType::u64: return "u64";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::optional<DType> dtype_from_onnx(int32_t code) {
  switch (code) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 9: case 10: case 11:
    case 12: case 13: case 16:
      return static_cast<DType>(code);
    default:
      return std::nullopt;
  }
}

std::string_view onnx_dtype_name(int32_t code) {
  switch (code) {
    case 0: return "UNDEFINED";
    case 1: return "FLOAT";
    case 2: return "UINT8";
    case 3: return "INT8";
    case 4: return "UINT16";
    case 5: return "INT16";
    case 6: return "INT32";
    case 7: return "INT64";
    case 8: return "STRING";
    case 9: return "BOOL";
    case 10: return "FLOAT16";
    case 11: return "DOUBLE";
    case 12: return "UINT32";
    case 13: return "UINT64";
    case 14: return "COMPLEX64";
    case 15: return "COMPLEX128";
    case 16: return "BFLOAT16";
    default: return "UNKNOWN";
  }
}

}  // namespace dc
