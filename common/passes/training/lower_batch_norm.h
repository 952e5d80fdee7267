// BatchNorm's normalisation as elementwise ops, once its gradient is built.
#pragma once

#include "ir/graph.h"

namespace dc {

// Every dc.BatchNormTrain becomes dc.BatchNormStats, its per-channel outputs alone (the
// running statistics' update and the inverse std; the saved mean is the batch mean itself),
// and Y the chain ((X - mean) * invstd) * scale + B over [C, 1, ...] views of the per-channel
// operands. The candidate generator fuses that chain with the ReLU or the residual Add that
// reads Y: one pass over the activations instead of two, and no kernel that reads X only to
// write Y. Run after the gradients: BatchNorm's rule (grad_training_ops.cpp) reads the saved
// statistics, X and scale, never Y.
void lower_batch_norm_apply(Graph& g);

}  // namespace dc
