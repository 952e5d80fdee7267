#include "ir/kernel.h"

namespace dc {

const char* buffer_role_name(BufferRole r) {
  switch (r) {
    case BufferRole::input: return "input";
    case BufferRole::output: return "output";
    case BufferRole::scratch: return "scratch";
  }
  return "?";
}

const char* cuda_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i64: return "long long";
    case DType::i32: return "int";
    case DType::i16: return "short";
    case DType::i8: return "signed char";
    case DType::u8: case DType::boolean: return "unsigned char";
    case DType::u16: return "unsigned short";
    case DType::f16: return "dc_half";       // prelude storage types (2 bytes, no arithmetic)
    case DType::bf16: return "dc_bfloat16";
    case DType::u32: return "unsigned int";
    case DType::u64: return "unsigned long long";
    case DType::undefined: break;
  }
  return "void";
}

}  // namespace dc
