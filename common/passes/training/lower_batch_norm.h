// BatchNorm's normalisation as elementwise ops, once its gradient is built.
#pragma once

#include <string>

#include "ir/graph.h"

namespace dc {

// Name prefix of the nodes and intermediates of BatchNorm `name`'s chain (a forward
// quantity: recompute and the plan's notes tell it from the backward pass's "grad/").
inline std::string batch_norm_apply_prefix(const std::string& name) { return name + "/apply/"; }

// Every dc.BatchNormTrain becomes dc.BatchNormStats, its per-channel outputs alone (the
// running statistics' update and the inverse std; the saved mean is the batch mean itself),
// and Y the chain ((X - mean) * invstd) * scale + B over [C, 1, ...] views of the per-channel
// operands. The candidate generator fuses that chain with the ReLU or the residual Add that
// reads Y: one pass over the activations instead of two, and no kernel that reads X only to
// write Y. Run after the gradients: BatchNorm's rule (grad_training_ops.cpp) reads the saved
// statistics, X and scale, never Y. Under AMP training_fp32_tensors keeps the chain's
// intermediates f32, so only Y is stored in the reduced type.
void lower_batch_norm_apply(Graph& g);

}  // namespace dc
