// Reference kernels of dc-internal gradient ops that need more than an elementwise
// composition (docs/training.md): dc.LayerNormGrad, dc.GeluGrad and
// dc.GatherGrad (an embedding's scatter-add). Reductions accumulate in double.
#include <cmath>
#include <numbers>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/kernel.h"
#include "ref/training_ops.h"

namespace dc::ref {

namespace {

void require_f32(const Node& node, const Tensor& t, const char* what) {
  DC_USER_CHECK(t.defined() && t.dtype() == DType::f32, node.op, ": ", what,
                " must be an f32 tensor");
}

// dc.LayerNormGrad(dY, X, scale) -> (dX, dscale, dB). attrs axis, epsilon: as the forward
// LayerNormalization (normalised over dims [axis, rank), statistics recomputed from X).
std::vector<Tensor> run_layer_norm_grad(const Node& node, const Inputs& in) {
  for (size_t i = 0; i < 3; ++i) require_f32(node, in.at(i), "every input");
  const Tensor &dy = in[0], &x = in[1], &scale = in[2];
  DC_USER_CHECK(dy.shape() == x.shape(), node.op, ": dY and X must match");
  int64_t axis = node.attrs.get_int("axis", -1);
  if (axis < 0) axis += x.rank();
  DC_USER_CHECK(axis >= 0 && axis < x.rank(), node.op, ": bad axis");
  int64_t cols = 1;
  for (int64_t d = axis; d < x.rank(); ++d) cols *= x.dim(d);
  DC_USER_CHECK(scale.numel() == cols, node.op, ": scale must have one value per normalised "
                "element (", cols, "), got shape ", shape_str(scale.shape()));
  const int64_t rows = cols > 0 ? x.numel() / cols : 0;
  const double eps = node.attrs.get_float("epsilon", 1e-5f);
  Tensor dx(DType::f32, x.shape()), dscale(DType::f32, scale.shape()), db(DType::f32, scale.shape());
  std::vector<double> ds(static_cast<size_t>(cols)), dbs(static_cast<size_t>(cols));
  const float *dyp = dy.data<float>(), *xp = x.data<float>(), *sp = scale.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = xp + r * cols, *dyr = dyp + r * cols;
    double mu = 0, var = 0;
    for (int64_t k = 0; k < cols; ++k) mu += xr[k];
    mu /= static_cast<double>(cols);
    for (int64_t k = 0; k < cols; ++k) var += (xr[k] - mu) * (xr[k] - mu);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(cols) + eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const double xhat = (xr[k] - mu) * inv, g = static_cast<double>(dyr[k]) * sp[k];
      mean_g += g;
      mean_gx += g * xhat;
      ds[static_cast<size_t>(k)] += dyr[k] * xhat;
      dbs[static_cast<size_t>(k)] += dyr[k];
    }
    mean_g /= static_cast<double>(cols);
    mean_gx /= static_cast<double>(cols);
    float* dxr = dx.mutable_data<float>() + r * cols;
    for (int64_t k = 0; k < cols; ++k) {
      const double xhat = (xr[k] - mu) * inv, g = static_cast<double>(dyr[k]) * sp[k];
      dxr[k] = static_cast<float>(inv * (g - mean_g - xhat * mean_gx));
    }
  }
  for (int64_t k = 0; k < cols; ++k) {
    dscale.mutable_data<float>()[k] = static_cast<float>(ds[static_cast<size_t>(k)]);
    db.mutable_data<float>()[k] = static_cast<float>(dbs[static_cast<size_t>(k)]);
  }
  return {dx, dscale, db};
}

// dc.GeluGrad(dY, X) -> dX. attr approximate: "none" (erf form) or "tanh".
std::vector<Tensor> run_gelu_grad(const Node& node, const Inputs& in) {
  require_f32(node, in.at(0), "dY");
  require_f32(node, in.at(1), "X");
  DC_USER_CHECK(in[0].shape() == in[1].shape(), node.op, ": dY and X must match");
  const std::string approx = node.attrs.get_string("approximate", "none");
  DC_USER_CHECK(approx == "none" || approx == "tanh", node.op, ": approximate must be 'none' or "
                "'tanh', got '", approx, "'");
  const bool tanh_form = approx == "tanh";
  Tensor dx(DType::f32, in[1].shape());
  const float *dy = in[0].data<float>(), *x = in[1].data<float>();
  float* d = dx.mutable_data<float>();
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    const double v = x[i];
    double g;
    if (tanh_form) {
      const double t = std::tanh(k * (v + 0.044715 * v * v * v));
      g = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
    } else {
      g = 0.5 * (1 + std::erf(v / std::numbers::sqrt2)) +
          v * std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
    }
    d[i] = static_cast<float>(dy[i] * g);
  }
  return {dx};
}

// dc.GatherGrad(dY, indices) -> dData. attrs axis, data_shape. The adjoint of Gather:
// every row of dY is added into the data row its index names (duplicates summed).
std::vector<Tensor> run_gather_grad(const Node& node, const Inputs& in) {
  require_f32(node, in.at(0), "dY");
  const Shape data_shape = node.attrs.get_ints("data_shape");
  const auto idx = in.at(1).to_int64_vector();
  int64_t axis = node.attrs.get_int("axis", 0);
  const auto rank = static_cast<int64_t>(data_shape.size());
  if (axis < 0) axis += rank;
  DC_USER_CHECK(axis >= 0 && axis < rank, node.op, ": bad axis");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data_shape[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= data_shape[static_cast<size_t>(d)];
  const int64_t extent = data_shape[static_cast<size_t>(axis)];
  const auto count = static_cast<int64_t>(idx.size());
  DC_USER_CHECK(in[0].numel() == outer * count * inner, node.op, ": dY has shape ",
                shape_str(in[0].shape()), ", which does not match the indices");
  Tensor dd(DType::f32, data_shape);
  const float* dy = in[0].data<float>();
  float* d = dd.mutable_data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      int64_t i = idx[static_cast<size_t>(j)];
      if (i < 0) i += extent;
      DC_USER_CHECK(i >= 0 && i < extent, node.op, ": index ", idx[static_cast<size_t>(j)],
                    " is outside [-", extent, ", ", extent, ")");
      const float* src = dy + (o * count + j) * inner;
      float* dst = d + (o * extent + i) * inner;
      for (int64_t k = 0; k < inner; ++k) dst[k] += src[k];
    }
  return {dd};
}

const OpDef kOps[] = {
    {"dc.LayerNormGrad", run_layer_norm_grad, nullptr},
    {"dc.GeluGrad", run_gelu_grad, nullptr},
    {"dc.GatherGrad", run_gather_grad, nullptr},
};

}  // namespace

std::span<const OpDef> grad_ops() { return kOps; }

}  // namespace dc::ref
