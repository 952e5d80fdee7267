#include "ir/flops.h"

#include <algorithm>

#include "ir/op_traits.h"

namespace dc {

namespace {

int64_t numel_of(const Graph& g, const std::string& t) {
  auto it = g.tensors.find(t);
  return it == g.tensors.end() ? 0 : shape_numel(it->second.shape);
}

const Shape* shape_of(const Graph& g, const std::string& t) {
  auto it = g.tensors.find(t);
  return it == g.tensors.end() ? nullptr : &it->second.shape;
}

}  // namespace

int64_t node_flops(const Graph& g, const Node& n) {
  // The convolution gradients (dc.ConvGradWeight, the implicit-GEMM template's weight-gradient
  // mode; the reference op dc.ConvGradData): the forward convolution's multiply-adds, 2 x dY x
  // (W / filters).
  if ((n.op == "dc.ConvGradData" || n.op == "dc.ConvGradWeight") && n.inputs.size() == 2 && !n.outputs.empty()) {
    const Shape* dy = shape_of(g, n.input(n.op == "dc.ConvGradData" ? 0 : 1));
    const Shape* w = shape_of(g, n.op == "dc.ConvGradData" ? n.input(1) : n.outputs[0]);
    if (!dy || !w || w->size() < 3 || (*w)[0] == 0) return 0;
    return 2 * shape_numel(*dy) * (shape_numel(*w) / (*w)[0]);
  }
  // The training step's fused attention (ref/ops_attention.cpp): Q Kt and P V forward; the
  // backward's five products (S and dP recomputed, dV, dKt, dQ), 2 x B x Sq x Sk each per
  // head-dimension element.
  if ((n.op == "dc.Attention" || n.op == "dc.AttentionGrad") && n.inputs.size() >= 3) {
    const Shape *q = shape_of(g, n.input(0)), *kt = shape_of(g, n.input(1)), *v = shape_of(g, n.input(2));
    if (!q || !kt || !v || q->size() < 2 || kt->empty() || v->empty()) return 0;
    const int64_t rows = shape_numel(*q) / std::max<int64_t>(q->back(), 1);  // B x Sq
    const int64_t d = q->back(), sk = kt->back(), dv = v->back();
    return 2 * rows * sk * (n.op == "dc.Attention" ? d + dv : 3 * d + 2 * dv);
  }
  const OpTraits& t = op_traits(n.op);
  if (t.flops == FlopsBasis::none || n.outputs.empty()) return 0;
  const int64_t out = numel_of(g, n.outputs[0]);
  switch (t.flops) {
    case FlopsBasis::none: return 0;
    case FlopsBasis::output: return t.flops_per_element * out;
    case FlopsBasis::input: return t.flops_per_element * numel_of(g, n.input(0));
    case FlopsBasis::window: {
      int64_t window = 1;
      for (int64_t k : n.attrs.get_ints("kernel_shape", {})) window *= k;
      return t.flops_per_element * out * window;
    }
    case FlopsBasis::contraction: break;
  }
  if (n.op == "Conv") {
    const Shape* w = shape_of(g, n.input(1));
    if (!w || w->size() < 3) return 0;
    int64_t per_out = 2;  // multiply-add per weight element of one output channel's filter
    for (size_t i = 1; i < w->size(); ++i) per_out *= (*w)[i];
    return out * per_out + (n.has_input(2) ? out : 0);
  }
  if (n.op == "ConvTranspose") {  // a multiply-add per input element and weight of its group
    const Shape* x = shape_of(g, n.input(0));
    const Shape* w = shape_of(g, n.input(1));
    if (!x || !w || w->size() < 3) return 0;
    return 2 * shape_numel(*x) * (shape_numel(*w) / std::max<int64_t>((*w)[0], 1)) +
           (n.has_input(2) ? out : 0);
  }
  const Shape* a = shape_of(g, n.input(0));  // Gemm, MatMul
  if (!a || a->empty()) return 0;
  int64_t k = a->back();
  if (n.op == "Gemm" && n.attrs.get_int("transA", 0) && a->size() == 2) k = (*a)[0];
  return 2 * out * k + (n.op == "Gemm" && n.has_input(2) ? out : 0);
}

int64_t graph_flops(const Graph& g) {
  int64_t total = 0;
  for (const auto& n : g.nodes) total += node_flops(g, n);
  return total;
}

}  // namespace dc
