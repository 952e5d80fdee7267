// A plan's precision: the user's one choice for a whole plan (`--precision`).
//
//   fp32  tensors f32, every kernel on CUDA cores                       math paths {fp32}
//   tf32  tensors f32, GEMM/conv may use TF32 tensor cores               {tf32, fp32}
//   fp16  stored tensors f16 (apply_precision), tensor cores fp32 acc.   {fp16, fp32}
//   bf16  stored tensors bf16, likewise                                  {bf16, fp32}
//
// A math path is `Variant::precision`; families without a tensor-core template always use
// "fp32" (math in fp32 registers, whatever the storage dtype).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/dtype.h"
#include "ir/tolerance.h"

namespace dc {

enum class Precision { fp32, tf32, fp16, bf16 };

// "fp32", "tf32", "fp16", "bf16".
std::string_view precision_name(Precision p);
std::optional<Precision> precision_from_name(std::string_view name);
// UserError "unknown precision 'x' (use fp32, tf32, fp16 or bf16)" for other names.
Precision parse_precision(std::string_view name);
// Storage dtype of float tensors: f32 for fp32/tf32, f16, bf16.
DType storage_dtype(Precision p);
// The math paths (Variant::precision values) a plan of this precision may select, in the
// order they are enumerated: the tensor-core path first, then "fp32".
std::vector<std::string> math_paths(Precision p);

// The unit a math path runs on, which the estimator calibrates separately
// (docs/estimator.md "Calibration"): the CUDA cores (fp32), the tf32 tensor cores, and the
// fp16/bf16 tensor cores (one rate and one template for both 16-bit types).
enum class MathUnit { fp32, tf32, fp16_bf16 };
// "fp32", "tf32", "fp16/bf16".
std::string_view math_unit_name(MathUnit u);
// Of a math path (Variant::precision): "tf32"; "fp16" and "bf16"; any other is fp32.
MathUnit math_unit_of_path(std::string_view path);
// Of a variant key "template/path/params" (Variant::key); a key without a path: fp32.
MathUnit math_unit_of_key(std::string_view variant_key);

// A whole plan's outputs against the model's fp32 outputs (`dc-run --data`): measured on
// ResNet-50, MobileNetV2 and BERT-base, with margin (docs/precision.md "Whole model").
Tolerance whole_model_tolerance(Precision p);

// A workload's precision-free identity: the FNV-1a signature (ir/workload.h) of its
// canonical text with f16/bf16 types read as f32 and Cast targets 10/16 as 1, so that the
// fp32, fp16 and bf16 forms of one cluster share it.
std::string precision_free_signature(const std::string& canonical);

}  // namespace dc
