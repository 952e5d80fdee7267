// A workload: one candidate cluster cut out of a model as a standalone graph, plus its
// canonical structural signature. Identical clusters (same ops, attributes, shapes, dtypes,
// layouts, wiring) share one signature within a model and across models: names and weight
// values never enter it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace dc {

// What kind of kernel template computes a cluster.
enum class ClusterKind {
  gemm,         // MatMul / Gemm (+ epilogue), 1x1 convolutions may also map here
  conv,         // Conv2d as implicit GEMM (+ epilogue)
  depthwise,    // depthwise / grouped convolution (+ epilogue)
  reduction,    // Softmax, LayerNorm, Reduce*, pooling, GlobalAveragePool (+ neighbours)
  elementwise,  // injective chains, Transpose/Reshape as index maps, Concat/Slice/Gather
  attention,    // MatMul -> scale/mask -> Softmax -> MatMul
  opaque,       // computed alone by a generic kernel; fusion cannot cross it
};

const char* cluster_kind_name(ClusterKind k);

struct Workload {
  ClusterKind kind = ClusterKind::opaque;
  // The cluster as a graph: its external inputs (activations AND weights, weights kept as
  // inputs without values, except tiny structural constants kept as initializers, see
  // make_workload) become graph inputs; tensors read outside the cluster become outputs.
  // Node and tensor names are canonical (n0, n1, ... / t0, t1, ...), assigned in a
  // canonical topological order: external tensors first, in order of first use.
  Graph graph;
  // Which graph inputs were weights (initializers) in the model: their layout role.
  std::vector<std::string> weights;
  // The model's names for graph.inputs and graph.outputs, position by position: how this
  // instance of the workload binds to the model (not part of the signature).
  std::vector<std::string> source_inputs;
  std::vector<std::string> source_outputs;
  std::string canonical;  // readable canonical text: one line per node
  std::string signature;  // 16 hex digits: FNV-1a 64 of `canonical`
  int64_t flops = 0;      // arithmetic work (ir/flops.h)
  int64_t bytes = 0;      // compulsory DRAM traffic: every input read once (of a table only
                          // gathered from, what the picks touch), outputs written once
};

// Cuts `nodes` (indices into g.nodes, any order) out of `g` as a Workload of the given kind.
// Initializers of g used by the cluster become inputs, except tiny structural constants,
// kept as initializers with their values: tensors of at most 16 elements that are either
// one element (an epsilon, a GELU constant, a Clip bound) or integer/bool (a Reshape
// target, axes, indices). A per-channel bias of 16 floats is a weight, not structure.
// Outputs: cluster tensors read outside the cluster, graph outputs, and tensors nobody reads.
// `consumers`: g.consumers(), when the caller cuts many clusters out of one graph (computing
// it per cluster made planning quadratic in the node count: docs/bench/scale.md).
Workload make_workload(const Graph& g, const std::vector<size_t>& nodes, ClusterKind kind,
                       const std::map<std::string, std::vector<size_t>>* consumers = nullptr);

// True if make_workload keeps this initializer as a constant (see above).
bool is_structural_constant(const Tensor& t);

// FNV-1a 64-bit, as 16 lowercase hex digits.
std::string fnv1a_hex(const std::string& text);

}  // namespace dc
