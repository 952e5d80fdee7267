// Static shapes for the tensors ONNX's shape inference leaves open (exported transformers:
// Reshape/Slice operands computed by Shape -> Gather -> Concat chains), found without
// running the model. Internal to common/onnx (includes ONNX headers).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "ir/graph.h"

namespace dc {

// Tensors of at most this many elements are "small": only they are ever computed.
inline constexpr int64_t kMaxShapeValueElements = int64_t{1} << 16;

// The dtype and static shape of a value's type; nullopt if it is not a tensor, its dtype is
// one dc cannot hold, or a dimension is unknown.
std::optional<TensorInfo> static_tensor_info(const onnx::TypeProto& type);

// Operand positions that determine output shapes rather than carry data (Reshape's shape,
// Slice's starts/ends/axes/steps, ...): the shape subgraph is what feeds them.
const std::map<std::string, std::vector<int>>& shape_operands();

// Fills g.tensors for every node output that lacks a static shape. Walks the nodes once in
// topological order: the shape subgraph (Shape, Gather, Concat, Slice, Unsqueeze, arithmetic,
// Cast, ConstantOfShape, Range, ... that feed shape operands, on known small values) is evaluated with
// the reference kernels; every other output shape comes from the op's ONNX shape function,
// given the input shapes and the values known so far. No op ever reads a tensor larger than
// kMaxShapeValueElements, so the cost follows the node count, not the FLOPs.
// `proto` is the graph g was converted from (its NodeProtos drive the shape functions).
// Returns the outputs still without a static shape (data-dependent ones), in node order.
std::vector<std::string> infer_static_shapes(Graph& g, const onnx::GraphProto& proto);

}  // namespace dc
