#include "ir/training_tolerance.h"

namespace dc {

StepTolerance mixed_precision_step_tolerance(Precision p) {
  // Twice the worst of tiny_cnn's SGD x1 and AdamW x3 steps on the CPU reference (fp16: loss
  // 9.6e-5, step 2.7e-2; bf16: 4.6e-4, 5.3e-2), docs/precision.md "Mixed-precision training".
  switch (p) {
    case Precision::fp32:
    case Precision::tf32: return {1e-3, 1e-3};
    case Precision::fp16: return {2e-4, 5.4e-2};
    case Precision::bf16: return {1e-3, 1.1e-1};
  }
  return {1e-3, 1e-3};
}

}  // namespace dc
