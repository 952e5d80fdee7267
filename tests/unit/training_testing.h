// Training steps of the examples for the training tests: the step graph as `plan --train`
// builds it (the ONNX file's own float initializers train), before recompute
// (coordinator/train_recompute.h), which the memory tests apply themselves.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "onnx/import.h"
#include "passes/build_training_graph.h"
#include "passes/simplify_for_training.h"

namespace dc::testing {

// examples/<model>/model.onnx's training step: SGD (momentum 0.9) or AdamW, weight decay
// 0.01; cross-entropy for tiny_cnn, mse for tiny_transformer (its output has no class axis).
// `freeze`: initializers without a gradient (a conv bias before a BatchNorm has a gradient
// of rounding noise only, which AdamW normalises into updates no two devices agree on).
// `adjust` changes the spec further (mixed precision, the loss scale's test hooks).
inline Graph training_step(const std::string& model, OptimizerKind optimizer,
                           const std::set<std::string>& freeze = {},
                           const std::function<void(TrainingSpec&)>& adjust = {}) {
  const Graph imported = import_onnx_file(std::string(DC_SOURCE_DIR) + "/examples/" + model + "/model.onnx");
  TrainingSpec spec;
  spec.optimizer = optimizer;
  spec.momentum = optimizer == OptimizerKind::sgd ? 0.9 : 0.0;
  spec.weight_decay = 0.01;
  if (optimizer == OptimizerKind::adamw) spec.lr = 1e-3;
  spec.parameters.emplace();
  for (const auto& [name, t] : imported.initializers)
    if (is_float(t.dtype()) && t.rank() >= 1) spec.parameters->insert(name);
  if (model == "tiny_transformer") spec.loss = LossKind::mse;
  spec.freeze = freeze;
  if (adjust) adjust(spec);
  return build_training_graph(simplify_for_training(imported), spec);
}

}  // namespace dc::testing
