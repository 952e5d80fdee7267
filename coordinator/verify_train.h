// `dc-coordinator verify MODEL.onnx --train --data DIR [--steps N]`: training steps on the
// CPU reference against expected values (docs/training.md, "verify --train").
#pragma once

#include <string>
#include <vector>

#include "ir/precision.h"
#include "passes/training_spec.h"

namespace dc::cli {

struct TrainVerifyOptions {
  std::string model, data;
  std::vector<std::string> shapes;
  TrainingSpec spec;
  int steps = 1;
  double rtol = 1e-3, atol = 1e-7;  // docs/precision.md, "Training steps"
  // fp16/bf16: the mixed-precision step (docs/training.md "Mixed precision"), same defaults.
  Precision precision = Precision::fp32;
};

// DIR holds input_K.pb in the training graph's input order (the model's runtime inputs,
// then the labels), output_0.pb the loss of the last step, and optionally more output_K.pb
// each named after an initializer of the step (a weight, W@momentum, W@adam_m, a running
// statistic; a frozen weight too) holding its value after the steps, compared by its change
// over the steps.
// Prints `step K loss X` per step and a table; returns kExitOk iff everything passes.
int verify_train(const TrainVerifyOptions& o);

}  // namespace dc::cli
