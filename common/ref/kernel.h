// Interface of the CPU reference executor's op kernels.
//
// Each op is an OpDef: a kernel computing outputs from input values, and a check that
// validates attributes and input types at import time (so that a bad model is refused
// with a clear message before anything runs). The table of all ops is explicit
// (ref/op_table.cpp), not a static-init registry.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace dc::ref {

// Input values in node order; an absent optional input is an undefined Tensor.
using Inputs = std::vector<Tensor>;

// Computes the node's outputs (one Tensor per node output, in order).
using KernelFn = std::vector<Tensor> (*)(const Node& node, const Inputs& inputs);

// Validates the node's attributes against its input types (shapes are static here):
// throws UserError naming the attribute and the allowed range. May be null.
// `inputs[i]` is null for an absent optional input.
using CheckFn = void (*)(const Node& node, const std::vector<const TensorInfo*>& inputs);

struct OpDef {
  std::string_view op;
  KernelFn run;
  CheckFn check;
};

// Every op the reference executor implements.
std::span<const OpDef> all_ops();
// The OpDef for an ONNX op type, or nullptr if dc does not support it.
const OpDef* find_op(std::string_view op);

// Per-family tables, concatenated by all_ops(). Each lives in its own ops_*.cpp.
std::span<const OpDef> elementwise_ops();  // ops_elementwise.cpp: unary/binary math, activations, Where, Cast, ...
std::span<const OpDef> shape_ops();        // ops_shape.cpp: Reshape, Transpose, Concat, Slice, Gather, ...
std::span<const OpDef> linalg_ops();       // ops_linalg.cpp: Conv, Gemm, MatMul
std::span<const OpDef> pool_ops();         // ops_pool.cpp: MaxPool, AveragePool, GlobalAveragePool
std::span<const OpDef> norm_ops();         // ops_norm.cpp: BatchNormalization, LayerNormalization, Softmax, Reduce*
std::span<const OpDef> index_ops();        // ops_index.cpp: DepthToSpace, SpaceToDepth, Trilu, GatherElements
std::span<const OpDef> norm_group_ops();   // ops_norm_groups.cpp: InstanceNorm, GroupNorm, LpNorm, LRN
std::span<const OpDef> resample_ops();     // ops_resample.cpp: Pad, Resize, Upsample
std::span<const OpDef> conv_transpose_ops();  // ops_conv_transpose.cpp: ConvTranspose
std::span<const OpDef> scatter_ops();     // ops_scatter.cpp: GatherND, ScatterND, ScatterElements
std::span<const OpDef> search_ops();      // ops_search.cpp: TopK, OneHot
std::span<const OpDef> einsum_ops();      // ops_einsum.cpp: Einsum

}  // namespace dc::ref
