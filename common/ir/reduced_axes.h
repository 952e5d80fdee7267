// The axes a reduction node reduces, computed once for every compile-time reader: the
// parameter space's row shape, the row_reduce and reference templates, and the gradient
// rules (the reference executor reads the run-time axes input instead).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace dc {

struct ReducedAxes {
  std::vector<int64_t> axes;  // sorted, unique, in [0, rank)
  bool noop = false;          // Reduce* with no axes and noop_with_empty_axes = 1: the identity
  bool runtime_axes = false;  // Reduce*'s axes input is computed at run time (axes: every axis)
};

// By the op's ReduceAxes (ir/op_traits.h): Reduce* from its `axes` attribute (older opsets)
// or constant second input, every axis when none is given (none with noop_with_empty_axes);
// Softmax/LogSoftmax/Hardmax `axis` (with the opset < 13 flatten, `axis` to the end);
// LayerNorm/RMSNorm `axis` to the end; Global*Pool/InstanceNorm axes 2 to the end;
// LpNormalization `axis`. An axis out of range is a UserError; InternalError for an op that
// is no reduction.
ReducedAxes reduced_axes(const Graph& g, const Node& n);

// ReduceSum/ReduceMean nodes a and b reduce the same axes of inputs of one shape (keepdims
// alike): sibling sums, which one row_reduce kernel computes in one pass over the rows
// (BatchNorm's and LayerNorm's backward sums).
bool are_sibling_sums(const Graph& g, const Node& a, const Node& b);

}  // namespace dc
