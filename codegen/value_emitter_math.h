// C expressions of the activations and math ops the ValueEmitter computes with one formula
// each (Elu, Selu, Celu, Softplus, Softsign, Mish, ThresholdedRelu, Floor, Ceil, Round,
// Sign, Sin, Cos, IsNaN, IsInf, PRelu, Mod): the same formulas as the CPU reference
// (common/ref/ops_elementwise.cpp), in the compute dtype.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/graph.h"

namespace dc {

// The expression of `n` over operand expressions `x` (locals or literals, each read any
// number of times) computed in `compute` (f32, f64, or the integer output dtype), or
// nullopt if `n.op` is not one of these ops.
std::optional<std::string> math_expression(const Node& n, const std::vector<std::string>& x,
                                           DType compute);

}  // namespace dc
