// Reference kernels of dc-internal gradient ops that need more than an elementwise
// composition (docs/training.md): dc.GeluGrad and dc.GatherGrad (an embedding's
// scatter-add). Reductions accumulate in double.
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
    {"dc.GeluGrad", run_gelu_grad, nullptr},
    {"dc.GatherGrad", run_gather_grad, nullptr},
};

}  // namespace

std::span<const OpDef> grad_ops() { return kOps; }

}  // namespace dc::ref
