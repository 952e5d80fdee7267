// How far a mixed-precision training step may lie from the fp32 step (docs/precision.md,
// "Mixed-precision training").
#pragma once

#include "ir/precision.h"

namespace dc {

// A mixed-precision training step (fp16/bf16 AMP) against the fp32 step of the same model and
// batch: the loss of each step (relative) and the step's updates taken as one vector (rel-L2
// over every weight's, optimizer state's and running statistic's change). Measured on
// tiny_cnn (SGD x1, AdamW x3) with margin 2; fp32 and tf32: verify --train's 1e-3 for both.
struct StepTolerance {
  double loss = 1e-3;
  double step = 1e-3;
};
StepTolerance mixed_precision_step_tolerance(Precision p);

}  // namespace dc
