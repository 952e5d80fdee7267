#include "ir/precision.h"

#include <regex>

#include "ir/error.h"
#include "ir/workload.h"

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

std::string_view math_unit_name(MathUnit u) {
  switch (u) {
    case MathUnit::fp32: return "fp32";
    case MathUnit::tf32: return "tf32";
    case MathUnit::fp16_bf16: return "fp16/bf16";
  }
  return "?";
}

MathUnit math_unit_of_path(std::string_view path) {
  if (path == "tf32") return MathUnit::tf32;
  if (path == "fp16" || path == "bf16") return MathUnit::fp16_bf16;
  return MathUnit::fp32;
}

MathUnit math_unit_of_key(std::string_view variant_key) {
  const size_t a = variant_key.find('/');
  if (a == std::string_view::npos) return MathUnit::fp32;
  const size_t b = variant_key.find('/', a + 1);
  return b == std::string_view::npos ? MathUnit::fp32
                                     : math_unit_of_path(variant_key.substr(a + 1, b - a - 1));
}

std::string precision_free_signature(const std::string& canonical) {
  static const std::regex kReduced(R"(\bb?f16\[)");
  static const std::regex kCast(R"(Cast\(to=(10|16)\))");
  std::string text = std::regex_replace(canonical, kReduced, "f32[");
  text = std::regex_replace(text, kCast, "Cast(to=1)");
  return fnv1a_hex(text);
}

Tolerance whole_model_tolerance(Precision p) {
  switch (p) {
    case Precision::fp32: return {1e-4, 1e-6};
    // Twice the worst measured model (ResNet-50), docs/precision.md "Whole model"; tf32 has
    // fp16's operand rounding without its storage rounding.
    case Precision::tf32: return {5e-2, 5e-4};
    case Precision::fp16: return {5e-2, 5e-4};
    case Precision::bf16: return {2.2e-1, 2.2e-3};
  }
  return {1e-4, 1e-6};
}

}  // namespace dc
