// Gated linear units over one GEMM (SwiGLU, GeGLU, ReGLU, ...): the queries shared by the
// pass that interleaves a merged gate/up projection's weight columns
// (passes/interleave_glu_weights.h), the candidate generator (a GEMM cluster whose epilogue
// computes act(gate) * up) and the GEMM template (which pairs the two columns in one thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace dc {

// One Slice along the last axis with constant operands, clamped as ONNX clamps them.
struct LastAxisSlice {
  int64_t start = 0, end = 0, step = 1;
};
// The slice node `n` reads from its input `in_shape`, if it slices the last axis alone
// (positive step) with constant starts/ends/axes/steps.
std::optional<LastAxisSlice> last_axis_slice(const Graph& g, const Node& n);

// A MatMul whose output y [.., 2F] is read only by two Slices taking its even and its odd
// columns (Slice(y, 0, 2F, -1, 2) and Slice(y, 1, 2F, -1, 2): the interleaved halves), and
// is not a graph output.
struct GluSplit {
  size_t matmul = 0;
  size_t even = 0, odd = 0;  // the Slice nodes
  std::string y;             // the MatMul's output
};
std::optional<GluSplit> glu_split(const Graph& g, size_t matmul);

// The elementwise nodes combining two [.., F] tensors `a` and `b` into one tensor: every node
// reads only a, b, the set's own outputs and constants, is elementwise math the code
// generators emit inline, and keeps the [.., F] shape; exactly one of the set's outputs
// (`out`) is read outside the set or is a graph output, every reader of a and b is in the
// set, and the set reads both. silu(a) * b, gelu(a) * b (a Gelu node or its erf/tanh
// decompositions), relu(a) * b, a * b. Nodes in graph order; at most 24.
struct GluCombiner {
  std::vector<size_t> nodes;
  std::string out;
};
std::optional<GluCombiner> glu_combiner(const Graph& g, const std::string& a, const std::string& b);

}  // namespace dc
