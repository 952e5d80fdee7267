// The layout of an optimizer update node (docs/training.md, "Optimizers"). One dc.SgdUpdate or
// dc.AdamWUpdate node updates one or more tensors, a bucket of them (one fused multi-tensor
// kernel on the device): per tensor a group of inputs and a group of outputs, in order,
//   dc.SgdUpdate:   inputs  (W, G[, M])... outputs (W'[, M'])...   M only with momentum != 0
//   dc.AdamWUpdate: inputs  (W, G, m, v)... step                    outputs (W', m', v')...
// then, with attribute scaled = 1 (fp16's loss scaling), an input `scale`, the loss scale S (an
// f32 of one element): each G is the scaled gradient, and the update reads G * (1/S), rounded
// to f32 as PyTorch's unscale_ stores it; and, with attribute gated = 1 (mixed precision's
// overflow check), a last input `finite`, a bool scalar: when it is false every output is its
// state input unchanged (a skipped step).
// The reference executor, the device kernels and the passes read nodes through this one view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace dc {

struct OptimizerUpdateLayout {
  size_t inputs_per_tensor = 0;   // W, G and the optimizer's state of one tensor
  size_t outputs_per_tensor = 0;  // W' and the state's next values
  bool step_input = false;        // AdamW: train.step, after the last group
  bool scaled = false;            // the loss scale S, after the step
  bool gated = false;             // the `finite` flag, the last input
  size_t tensors = 0;             // tensors the node updates

  size_t input(size_t tensor, size_t k) const { return tensor * inputs_per_tensor + k; }
  size_t output(size_t tensor, size_t k) const { return tensor * outputs_per_tensor + k; }
  size_t step() const { return tensors * inputs_per_tensor; }
  size_t scale() const { return step() + (step_input ? 1 : 0); }
  size_t finite() const { return scale() + (scaled ? 1 : 0); }
};

bool is_optimizer_update(const std::string& op);

// InternalError for a node whose inputs and outputs do not divide into the groups of its op.
OptimizerUpdateLayout optimizer_update_layout(const Node& n);

// The elements of every tensor the node updates: the multi-tensor kernel's loop.
int64_t updated_elements(const Graph& g, const Node& n);

}  // namespace dc
