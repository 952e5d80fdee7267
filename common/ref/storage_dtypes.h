// The executor's rule for float storage dtypes (docs/precision.md, "Where rounding happens").
//
// After the precision pass a float op may read inputs of different float dtypes (f32, f16,
// bf16, f64). It computes in fp32 (f64 when an input or its output is f64) from the inputs'
// values and rounds its result once, to nearest even, to its OUTPUT tensor's dtype. Data
// movement ops (Reshape, Transpose, Concat, Gather, Where, ...) move the bits of their data
// inputs unchanged; a data input of another float dtype is first rounded to the output's.
//
// The op kernels themselves stay single-dtype (f32/f64): run_node converts the inputs to the
// compute dtype before the kernel and rounds the outputs after it, with these functions.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace dc::ref {

// `t` converted to float dtype `to`, rounding to nearest even (NaN stays NaN, values beyond
// the range become inf). f64 to f16/bf16 goes through f32, as Cast does. `t` itself if it
// already has dtype `to`; InternalError unless both dtypes are float.
Tensor convert_float(const Tensor& t, DType to);

// True for ops that only move or select elements of their data inputs (no arithmetic).
bool moves_data_only(std::string_view op);

// The inputs an op kernel sees: for a data movement op, float data inputs rounded to the
// output dtype; for any other op (Cast excepted), every f16/bf16 input widened to f32 and,
// when an input or output is f64, every float input widened to f64. `out_dtypes` are the
// declared dtypes of the node's outputs (empty: not known, see output_dtypes).
std::vector<Tensor> compute_inputs(const Node& node, const std::vector<Tensor>& inputs,
                                   const std::vector<DType>& out_dtypes);

// The dtypes to store the node's outputs in: `out_dtypes` where given; otherwise, for an op
// whose first float input is f16/bf16, that dtype for its float outputs (ONNX's "same type
// as the input"), undefined (keep what the kernel produced) for the rest.
std::vector<DType> output_dtypes(const Node& node, const std::vector<Tensor>& inputs,
                                 const std::vector<DType>& out_dtypes);

// Rounds each float output to its dtype in `dtypes` (undefined or non-float: unchanged).
void round_outputs(std::vector<Tensor>& outputs, const std::vector<DType>& dtypes);

}  // namespace dc::ref
