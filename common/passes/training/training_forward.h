// The forward pass of a training step: BatchNormalization uses batch statistics and
// updates its running mean and variance; Dropout is active.
#pragma once

#include "ir/graph.h"

namespace dc {

// Adds the step counter (training_state.h) if missing, and rewrites
//   BatchNormalization(X, scale, B, mean, var) -> the batch mean and biased variance per
//     channel (ReduceMean of X, ReduceMean of its centred squares) and
//     dc.BatchNormTrain(X, scale, B, mean, var, batch mean, batch var), whose outputs 1 and 2
//     are mean@next and var@next (graph outputs: the running statistics' update, with the
//     node's momentum) and 3, 4 the saved batch mean and inverse std for the backward pass;
//   Dropout(X, ratio) -> dc.Dropout(X, train.step) with its ratio, a per-node seed and a
//     mask output for the backward pass (Philox, ref/philox.h);
//   LayerNormalization gains its Mean and InvStdDev outputs where it has none: the saved
//     statistics of the backward pass.
// UserError for a BatchNormalization whose running statistics are not initializers, and for
// a Dropout whose ratio is not a constant or whose mask output is used.
Graph use_training_forward(Graph g);

}  // namespace dc
