// dc.MultiCast(W1, ..., Wn) -> (w1, ..., wn), attribute `to`: the AMP step's compute Casts of
// its master weights (docs/training.md, "Mixed precision") in one multi-tensor kernel, as the
// optimizer's update and dc.NonFiniteCheck are, in place of a launch per weight.
//
// Each output wi is exactly Cast(Wi, to): Wi is f32, wi has Wi's shape and dtype `to` (an ONNX
// dtype number, f16 or bf16 once apply_precision has stored the copies; f32 before), every
// element rounded once to nearest even (NaN stays NaN, values beyond the range become inf),
// the reference's Cast (ref/storage_dtypes.h convert_float). On the device the grid sweeps
// the tensors one after another (template_multi_cast.h).
#pragma once

#include <cstddef>

namespace dc {

inline constexpr const char* kMultiCast = "dc.MultiCast";

// Weights one node casts at most: its kernel's arguments, an input and an output pointer per
// weight, stay within 128 pointers (1 KiB, OpenCL's smallest CL_DEVICE_MAX_PARAMETER_SIZE).
inline constexpr size_t kMultiCastMaxInputs = 64;

}  // namespace dc
