// Folds inference-mode BatchNormalization into the Conv or Gemm that feeds it.
#pragma once

#include "ir/graph.h"

namespace dc {

// For BatchNormalization(X, scale, B, mean, var) whose X comes from a Conv (or a Gemm) that
// feeds nothing else, with every weight, bias and BN statistic an f32 initializer of one
// value per output channel: the producer takes new weights W * f and bias
// (b - mean) * f + B, with f = scale / sqrt(var + epsilon) computed in double, and the BN
// node disappears. New initializers get fresh names (<node>_bn_folded_W / _B); the old
// ones are never modified, since another node may share them. Refused (the BN stays):
// training_mode=1, used extra BN outputs, legacy spatial=0 statistics, non-f32 types,
// non-constant weights, ConvTranspose and MatMul producers.
Graph fold_batch_norm(Graph g);

}  // namespace dc
