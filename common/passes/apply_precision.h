// The precision policy: rewrites a simplified graph's float dtypes for a plan's precision
// (docs/passes.md "apply_precision", CONTRACT "IR rule for mixed float dtypes").
//
// fp32 and tf32 return the graph unchanged. For fp16/bf16 every f32 tensor is stored in the
// reduced type except: model inputs and outputs (the first/last kernels read and write
// them directly, no Cast nodes); tensors whose every consumer leads, through elementwise or
// view ops only, into a numerically sensitive op (Softmax, LayerNorm, reductions, pooling
// averages): attention scores, the residual sum entering LayerNorm (computed tensors only:
// weights such as an additive mask or an embedding table are stored reduced); one-element float
// constants (epsilons, exponents: nothing to save, and an epsilon would underflow). View
// ops output their data input's dtype. Weights are converted once, here (after BatchNorm
// folding in fp32); values outside the storage type's finite range are clamped to it and
// reported in `notes`. Integer, bool and f64 tensors are never touched.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/precision.h"

namespace dc {

// `notes` (optional) receives one line per clamped constant; each is also logged (warn).
Graph apply_precision(Graph g, Precision p, std::vector<std::string>* notes = nullptr);

}  // namespace dc
