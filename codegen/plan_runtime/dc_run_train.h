// dc-run --train: runs training steps of a training plan (docs/training.md, "dc-run --train").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/tensor.h"
#include "onnx/test_data.h"
#include "runtime.h"

namespace dc {

struct TrainRunOptions {
  int steps = 1;
  std::string save_weights;  // write the source model with the trained weights here
  std::string model;         // the source model ("" = the path the plan records)
  int bench = 0;             // time this many further steps (GPU)
  int warmup = 3;
  // The update check's tolerances (verify --train's defaults, docs/precision.md).
  double rtol = 1e-3;
  double atol = 1e-7;
};

// `inputs` are the values bound to the plan's inputs (in order): the labels are checked
// against the logits' classes before a step. With `data` holding outputs, compares the
// last step's loss with output_0.pb and each further output_K.pb, named after a state
// tensor, by its update over the steps (as `dc-coordinator verify --train`). Prints `step
// K loss X` per step. Returns the exit code: 0, or 1 when a comparison fails.
int run_training(rt::Runtime& r, const std::vector<Tensor>& inputs, const TestData* data,
                 const TrainRunOptions& o);

}  // namespace dc
