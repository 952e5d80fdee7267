// How a training graph names the state it carries from one step to the next
// (passes/training_state.h builds on these; ir/workload.cpp reads them so that a step's
// state is never baked into a kernel as a constant).
#pragma once

#include <string>
#include <string_view>

namespace dc {

// STATE + kNextSuffix: the graph output holding STATE's value after the step.
inline constexpr std::string_view kNextSuffix = "@next";
// The step counter: an i64 scalar, 0 before the first step. Dropout seeds from it and
// AdamW's bias correction reads it.
inline constexpr std::string_view kStepTensor = "train.step";

inline std::string next_name(const std::string& state) { return state + std::string(kNextSuffix); }

}  // namespace dc
