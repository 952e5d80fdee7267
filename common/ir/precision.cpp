#include "ir/precision.h"

#include "ir/error.h"

namespace dc {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

std::optional<Precision> precision_from_name(std::string_view name) {
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16})
    if (precision_name(p) == name) return p;
  return std::nullopt;
}

Precision parse_precision(std::string_view name) {
  const auto p = precision_from_name(name);
  DC_USER_CHECK(p.has_value(), "unknown precision '", std::string(name),
                "' (use fp32, tf32, fp16 or bf16)");
  return *p;
}

DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::fp16: return DType::f16;
    case Precision::bf16: return DType::bf16;
    default: return DType::f32;
  }
}

std::vector<std::string> math_paths(Precision p) {
  if (p == Precision::fp32) return {"fp32"};
  return {std::string(precision_name(p)), "fp32"};
}

}  // namespace dc
