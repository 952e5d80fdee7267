// Recomputation in the backward pass (docs/training.md, "Memory"). A forward tensor that the
// backward pass reads, made by a cheap chain (Relu, LeakyRelu, Sigmoid, Tanh, Gelu, Neg,
// Add, Sub, Mul, Div, BatchNorm's apply affine, Transpose) whose inputs are live anyway at
// its first backward reader, is computed again just before that reader instead of being
// kept from the forward pass, when that does not raise the step's peak of live bytes; the
// whole set is kept only if it lowers the peak. Liveness is the arena planner's (a tensor
// lives from the node that writes it to the last node that reads it; plan/memory_plan.h),
// here over the step graph's node order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace dc::cli {

struct RecomputedTensor {
  std::string tensor;             // the forward tensor no longer kept for the backward pass
  int64_t bytes = 0;
  std::vector<std::string> ops;   // the chain computed again, first op first
};

struct RecomputeResult {
  std::vector<RecomputedTensor> tensors;
  int64_t peak_before = 0;  // the step graph's peak of live bytes, node order
  int64_t peak_after = 0;
};

// Rewrites the training step graph `g` (build_training_graph's) in place.
RecomputeResult recompute_cheap_chains(Graph& g);

// One line for `plan` / `tune`: which tensors are recomputed and the bytes saved.
std::string describe_recompute(const RecomputeResult& r);

}  // namespace dc::cli
