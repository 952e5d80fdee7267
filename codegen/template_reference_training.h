// The naive device kernels of the dc-internal training ops (docs/training.md, "dc-internal
// ops"): one thread per output element, written the plainest way that follows the CPU
// reference kernels (common/ref/ops_training.cpp, ops_grad.cpp, ops_grad_conv.cpp) step
// for step, double accumulators where they use them. template_reference.cpp calls these
// for every node whose op starts with "dc.", so the reference kernel and "opaque_generic"
// cover training steps as they cover inference.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace dc {

// What the emission of one node needs from the reference kernel's node emitter.
struct NaiveNodeContext {
  const Graph& g;  // the node's own graph (its inputs are graph inputs or constants)
  const Node& n;
  // A read of tensor `t` at `coords` (C expressions), statements appended to `code`.
  std::function<std::string(const std::string& t, const std::vector<std::string>& coords,
                            std::string& code)> read;
  std::function<std::string(const char* prefix)> fresh;  // a new C identifier
};

// True for the dc.* ops emit_training_element can emit (after split_training_ops).
bool naive_training_supports(const Node& n);

// Statements into `code`; returns the C expression of output `out` of `c.n` at `o`.
std::string emit_training_element(NaiveNodeContext& c, size_t out, const std::vector<std::string>& o,
                                  std::string& code);

// The workload graph with each training op whose outputs need a whole-channel statistic per
// element split in two nodes, so that the statistic is computed once per channel, not once
// per element: dc.BatchNormTrain (its per-channel outputs, then Y). New intermediates are
// named "<node>.<what>".
Graph split_training_ops(Graph g);

}  // namespace dc
