#include "variant_tolerance.h"

#include <algorithm>

namespace dc {

namespace {

// The sum length behind one output element of a node (1 for pointwise and index ops).
// The training ops (docs/training.md): the longest sum behind one of their output elements.
int64_t training_reduction_length(const Graph& g, const Node& n) {
  auto numel = [&](size_t i) { return shape_numel(g.info(n.input(i)).shape); };
  auto dim = [&](size_t i, size_t d) {
    const Shape& s = g.info(n.input(i)).shape;
    return d < s.size() ? std::max<int64_t>(s[d], 1) : 1;
  };
  if (n.op == "dc.ConvGradData") {  // filters of a group times the taps
    const Shape& wt = g.info(n.input(1)).shape;
    return std::max<int64_t>(1, shape_numel(wt) / dim(1, 1) / std::max<int64_t>(1, n.attrs.get_int("group", 1)));
  }
  if (n.op == "dc.ConvGradWeight") return std::max<int64_t>(1, numel(1) / dim(1, 1));  // batch x positions
  if (n.op == "dc.SoftmaxCrossEntropy") return std::max<int64_t>(1, numel(0));  // every row's classes
  if (n.op == "dc.GatherGrad") return std::max<int64_t>(1, numel(1));
  if (n.op == "dc.Attention") return dim(1, g.info(n.input(1)).shape.size() - 1) + dim(0, g.info(n.input(0)).shape.size() - 1);
  if (n.op == "dc.AttentionGrad") {  // the query or key loop of dot products
    const Shape& q = g.info(n.input(0)).shape;
    return std::max(dim(0, q.size() - 2), dim(1, q.size() - 1)) + std::max(dim(0, q.size() - 1), dim(2, q.size() - 1));
  }
  if (n.op == "dc.MaxPoolGrad" || n.op == "dc.AveragePoolGrad")
    return std::max<int64_t>(1, shape_numel(n.attrs.get_ints("kernel_shape")));
  return 1;  // Dropout, the optimizers, GeluGrad, SoftmaxCrossEntropyGrad: per element
}

int64_t node_reduction_length(const Graph& g, const Node& n) {
  auto shape = [&](size_t i) -> const Shape& { return g.info(n.input(i)).shape; };
  if (n.op == "MatMul") return shape(0).empty() ? 1 : shape(0).back();
  if (n.op == "Gemm") {
    const Shape& a = shape(0);
    return a.size() == 2 ? a[n.attrs.get_int("transA", 0) ? 0 : 1] : 1;
  }
  if (n.op == "Conv") {
    const Shape& wt = shape(1);
    return wt.empty() || wt[0] == 0 ? 1 : shape_numel(wt) / wt[0];
  }
  if (n.op == "ConvTranspose") {  // input channels of a group times the taps
    const Shape& wt = shape(1);
    const int64_t group = n.attrs.get_int("group", 1);
    return wt.size() < 3 || wt[0] == 0 || wt[1] == 0 ? 1 : wt[0] / std::max<int64_t>(group, 1) * shape_numel(wt) / wt[0] / wt[1];
  }
  if (n.op.starts_with("dc.")) return training_reduction_length(g, n);
  if (n.inputs.empty() || n.input(0).empty() || n.outputs.empty()) return 1;
  const int64_t in = shape_numel(shape(0)), out = shape_numel(g.info(n.outputs[0]).shape);
  // Reductions and pools: input elements per output element; the normalisations keep the
  // shape, their row is at most the largest extent.
  if (n.op == "Softmax" || n.op == "LogSoftmax" || n.op == "LayerNormalization" ||
      n.op == "RMSNormalization") {
    const Shape& x = shape(0);
    return x.empty() ? 1 : *std::max_element(x.begin(), x.end());
  }
  if (n.op.rfind("Reduce", 0) == 0 || n.op.find("Pool") != std::string::npos)
    return out > 0 ? std::max<int64_t>(1, in / out) : 1;
  return 1;
}

}  // namespace

int64_t reduction_length(const Workload& w, const WorkloadShape& s) {
  switch (s.family) {
    case Family::gemm: case Family::conv: return std::max<int64_t>(s.k, 1);
    case Family::depthwise: return std::max<int64_t>(s.kernel_h * s.kernel_w, 1);
    case Family::attention:  // the backward: sums over queries (dKt, dV) or keys (dQ) of dot products
      if (s.attention_backward) return std::max<int64_t>(s.m, s.n) + std::max<int64_t>(s.k, s.dv);
      return std::max<int64_t>({s.k, s.n, 1});
    case Family::reduction: return std::max<int64_t>(s.row_len, 1);
    case Family::pool_window: return std::max<int64_t>(s.window, 1);
    case Family::elementwise: return 1;
    case Family::opaque: break;
  }
  int64_t k = 1;
  for (const auto& n : w.graph.nodes) k = std::max(k, node_reduction_length(w.graph, n));
  return k;
}

Tolerance variant_tolerance(const std::string& precision, const Workload& w) {
  DType coarsest = DType::f32;
  for (const auto& n : w.graph.nodes)
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      const DType t = w.graph.info(o).dtype;
      if (unit_roundoff(t) > unit_roundoff(coarsest)) coarsest = t;
    }
  return kernel_tolerance(precision, coarsest, reduction_length(w, analyze_workload(w)));
}

}  // namespace dc
