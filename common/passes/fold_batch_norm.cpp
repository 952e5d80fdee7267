#include "passes/fold_batch_norm.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/converted_bytes.h"
#include "passes/match.h"

namespace dc {

namespace {

// BN as y = x * factor[c] + shift[c].
struct Affine {
  std::vector<double> factor, shift;
};

const Tensor* f32_constant(const Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.dtype() != DType::f32) return nullptr;
  return &it->second;
}

// A rank-1 f32 initializer of `channels` values, widened to double.
std::optional<std::vector<double>> channel_vector(const Graph& g, const std::string& name,
                                                  int64_t channels) {
  const Tensor* t = f32_constant(g, name);
  if (t == nullptr || t->rank() != 1 || t->dim(0) != channels) return std::nullopt;
  const float* p = t->data<float>();
  return std::vector<double>(p, p + channels);
}

bool extra_outputs_unused(const Node& bn, const match::Uses& uses) {
  for (size_t k = 1; k < bn.outputs.size(); ++k) {
    const std::string& o = bn.outputs[k];
    if (!o.empty() && (!uses.of(o).empty() || uses.outputs.count(o))) return false;
  }
  return true;
}

std::optional<Affine> bn_affine(const Graph& g, const Node& bn, int64_t channels) {
  if (bn.inputs.size() != 5 || bn.attrs.get_int("training_mode", 0) != 0) return std::nullopt;
  if (bn.attrs.get_int("spatial", 1) != 1) return std::nullopt;
  auto scale = channel_vector(g, bn.inputs[1], channels);
  auto bias = channel_vector(g, bn.inputs[2], channels);
  auto mean = channel_vector(g, bn.inputs[3], channels);
  auto var = channel_vector(g, bn.inputs[4], channels);
  if (!scale || !bias || !mean || !var) return std::nullopt;
  const double eps = bn.attrs.get_float("epsilon", 1e-5f);
  Affine a;
  for (int64_t c = 0; c < channels; ++c) {
    const size_t i = static_cast<size_t>(c);
    const double f = (*scale)[i] / std::sqrt((*var)[i] + eps);
    a.factor.push_back(f);
    a.shift.push_back((*bias)[i] - (*mean)[i] * f);
  }
  return a;
}

// Stores `t` under a fresh name derived from `base` and returns that name.
std::string add_initializer(Graph& g, const std::string& base, Tensor t) {
  std::string name = match::unique_name(g, base);
  g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  g.initializers[name] = std::move(t);
  return name;
}

// Output channels of the producer (the BN's channel axis 1), or nullopt if the producer
// is not one this pass can rewrite.
std::optional<int64_t> producer_channels(const Graph& g, const Node& p) {
  if (p.op == "Conv") {
    const Tensor* w = f32_constant(g, p.input(1));
    if (w == nullptr || w->rank() < 3) return std::nullopt;
    if (p.has_input(2) && f32_constant(g, p.inputs[2]) == nullptr) return std::nullopt;
    return w->dim(0);
  }
  if (p.op == "Gemm") {
    const Tensor* b = f32_constant(g, p.input(1));
    if (b == nullptr || b->rank() != 2) return std::nullopt;
    if (p.has_input(2) && f32_constant(g, p.inputs[2]) == nullptr) return std::nullopt;
    return p.attrs.get_int("transB", 0) ? b->dim(0) : b->dim(1);
  }
  return std::nullopt;
}

// Conv: W'[m, ...] = W[m, ...] * f[m];  b'[m] = b[m] * f[m] + shift[m].
void fold_into_conv(Graph& g, Node& conv, const Affine& a) {
  const Tensor& w = g.initializers.at(conv.inputs[1]);
  const int64_t channels = w.dim(0);
  const int64_t per_channel = w.numel() / channels;
  // A weight still on disk is folded lazily (computed chunk by chunk when the plan is
  // written), the same products in the same rounding.
  Tensor nw = w.resident() ? Tensor(DType::f32, w.shape()) : scale_lazily(w, a.factor, std::max<int64_t>(per_channel, 1));
  if (nw.resident()) {
    const float* src = w.data<float>();
    float* dst = nw.mutable_data<float>();
    for (int64_t m = 0; m < channels; ++m)
      for (int64_t j = 0; j < per_channel; ++j) {
        const int64_t i = m * per_channel + j;
        dst[i] = static_cast<float>(src[i] * a.factor[static_cast<size_t>(m)]);
      }
  }
  Tensor nb(DType::f32, {channels});
  const float* old_b = conv.has_input(2) ? g.initializers.at(conv.inputs[2]).data<float>() : nullptr;
  for (int64_t m = 0; m < channels; ++m) {
    const size_t c = static_cast<size_t>(m);
    const double b = old_b ? old_b[m] : 0.0;
    nb.mutable_data<float>()[m] = static_cast<float>(b * a.factor[c] + a.shift[c]);
  }
  conv.inputs.resize(3);
  conv.inputs[1] = add_initializer(g, conv.name + "_bn_folded_W", std::move(nw));
  conv.inputs[2] = add_initializer(g, conv.name + "_bn_folded_B", std::move(nb));
}

// Gemm: Y = alpha * A' B' + beta * C over columns n. Scaling column n of B' by f[n] and
// taking C'' = beta * f * C + shift with beta = 1 gives f * Y + shift.
void fold_into_gemm(Graph& g, Node& gemm, const Affine& a) {
  const Tensor& b = g.initializers.at(gemm.inputs[1]);
  const bool trans_b = gemm.attrs.get_int("transB", 0) != 0;
  const int64_t rows = b.dim(0), cols = b.dim(1);
  Tensor nb = b.resident() ? Tensor(DType::f32, b.shape()) : scale_lazily(b, a.factor, trans_b ? std::max<int64_t>(cols, 1) : 1);
  if (nb.resident())
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t n = static_cast<size_t>(trans_b ? r : c);
        const int64_t i = r * cols + c;
        nb.mutable_data<float>()[i] = static_cast<float>(b.data<float>()[i] * a.factor[n]);
      }

  const int64_t channels = static_cast<int64_t>(a.factor.size());
  const double beta = gemm.attrs.get_float("beta", 1.f);
  Tensor c_old = gemm.has_input(2) ? g.initializers.at(gemm.inputs[2]) : Tensor();
  const Shape c_shape = c_old.defined() ? broadcast_shapes(c_old.shape(), {channels})
                                        : Shape{channels};
  const auto c_strides = c_old.defined() ? broadcast_strides(c_old.shape(), c_shape)
                                         : std::vector<int64_t>(c_shape.size(), 0);
  Tensor nc(DType::f32, c_shape);
  for (int64_t i = 0; i < nc.numel(); ++i) {
    int64_t rest = i, offset = 0;
    for (size_t d = c_shape.size(); d-- > 0;) {
      offset += (rest % c_shape[d]) * c_strides[d];
      rest /= c_shape[d];
    }
    const size_t n = static_cast<size_t>(i % channels);
    const double c = c_old.defined() ? c_old.data<float>()[offset] : 0.0;
    nc.mutable_data<float>()[i] = static_cast<float>(beta * c * a.factor[n] + a.shift[n]);
  }
  gemm.inputs.resize(3);
  gemm.inputs[1] = add_initializer(g, gemm.name + "_bn_folded_W", std::move(nb));
  gemm.inputs[2] = add_initializer(g, gemm.name + "_bn_folded_B", std::move(nc));
  gemm.attrs.set("beta", 1.f);
}

}  // namespace

Graph fold_batch_norm(Graph g) {
  const match::Uses uses(g);
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;

  std::vector<bool> removed(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& bn = g.nodes[i];
    if (bn.op != "BatchNormalization" || !bn.has_input(0) || !extra_outputs_unused(bn, uses))
      continue;
    auto p = producer.find(bn.inputs[0]);
    if (p == producer.end() || uses.sole_consumer(bn.inputs[0]) != i) continue;
    Node& prod = g.nodes[p->second];
    if (prod.outputs.size() != 1) continue;
    const auto channels = producer_channels(g, prod);
    if (!channels) continue;
    const auto affine = bn_affine(g, bn, *channels);
    if (!affine) continue;

    if (prod.op == "Conv") {
      fold_into_conv(g, prod, *affine);
    } else {
      fold_into_gemm(g, prod, *affine);
    }
    g.tensors.erase(prod.outputs[0]);
    prod.outputs[0] = bn.outputs[0];
    for (size_t k = 1; k < bn.outputs.size(); ++k)
      if (!bn.outputs[k].empty()) g.tensors.erase(bn.outputs[k]);
    removed[i] = true;
  }
  g.nodes = match::rebuild_nodes(g.nodes, removed, {});
  return g;
}

}  // namespace dc
