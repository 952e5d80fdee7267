// build_training_graph: the joint training-step graph of an inference graph
// (docs/training.md).
#pragma once

#include "ir/graph.h"
#include "passes/training_spec.h"

namespace dc {

// forward (BatchNorm on batch statistics with running-statistic updates, Dropout active)
// -> loss -> reverse-mode gradients of the trainable weights -> optimizer update.
// The result's inputs are the model's runtime inputs and then the labels (spec.labels;
// none for LossKind::none); its outputs are the loss, the model's outputs, and then one
// STATE@next per piece of state (training_state.h): weights, optimizer state, BatchNorm
// running statistics, the step counter (and for fp16 mixed precision the loss scale and its
// growth counter). spec.mixed_precision f16/bf16 builds the AMP step
// (training/mixed_precision.h); apply_precision then stores its tensors. UserError for a
// model or spec it cannot train (messages name the node, op or flag).
Graph build_training_graph(Graph g, const TrainingSpec& spec);

}  // namespace dc
