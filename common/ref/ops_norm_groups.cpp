// Normalisations over channel groups and windows (issue 14): InstanceNormalization,
// GroupNormalization (opset 18: scale/bias per group; opset 21: per channel),
// LpNormalization and LRN. f32, statistics in double, variances in two passes, like the
// LayerNormalization of ops_norm.cpp. The compiler lowers them to LayerNormalization,
// Reduce*, AveragePool and elementwise ops (passes/lower_norms.h); these kernels are the
// oracle those lowerings are checked against.
#include <algorithm>
#include <cmath>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/checked_op.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

const TensorInfo& f32_input(const Node& n, const std::vector<const TensorInfo*>& in, size_t i,
                            const char* what) {
  DC_USER_CHECK(i < in.size() && in[i] != nullptr, n.op, ": required input ", what, " (input ",
                i, ") is missing");
  DC_USER_CHECK(in[i]->dtype == DType::f32, n.op, ": input ", what, " has dtype ",
                dtype_name(in[i]->dtype), ", supported: f32");
  return *in[i];
}

float epsilon_of(const Node& n) {
  const float eps = n.attrs.get_float("epsilon", 1e-5f);
  DC_USER_CHECK(eps >= 0.f && std::isfinite(eps), n.op, ": attribute 'epsilon' must be >= 0, got ", eps);
  return eps;
}

int64_t inner_of(const Shape& x) {
  int64_t p = 1;
  for (size_t i = 2; i < x.size(); ++i) p *= x[i];
  return p;
}

// Normalises each of `groups` consecutive runs of `len` values of x in place into y, then
// y = y * scale[channel] + bias[channel], channel = (element / inner) % channels.
void normalise_runs(const float* x, float* y, int64_t groups, int64_t len, double eps,
                    const float* scale, const float* bias, int64_t inner, int64_t channels) {
  parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const float* xs = x + g * len;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < len; ++i) mean += xs[i];
      mean /= static_cast<double>(len);
      for (int64_t i = 0; i < len; ++i) var += (xs[i] - mean) * (xs[i] - mean);
      var /= static_cast<double>(len);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t c = ((g * len + i) / inner) % channels;
        y[g * len + i] = static_cast<float>(static_cast<float>((xs[i] - mean) * inv) * scale[c] + bias[c]);
      }
    }
  });
}

void check_instance_norm(const Node& n, const std::vector<const TensorInfo*>& in) {
  const TensorInfo& x = f32_input(n, in, 0, "input");
  DC_USER_CHECK(x.shape.size() >= 3, n.op, ": input must have rank >= 3 (N x C x D...), got ",
                shape_str(x.shape));
  for (size_t i = 1; i < 3; ++i)
    DC_USER_CHECK(f32_input(n, in, i, i == 1 ? "scale" : "B").shape == Shape{x.shape[1]}, n.op,
                  ": input ", i == 1 ? "scale" : "B", " must have shape [", x.shape[1], "]");
  epsilon_of(n);
}

std::vector<Tensor> run_instance_norm(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  Tensor y(DType::f32, x.shape());
  const int64_t inner = inner_of(x.shape());
  normalise_runs(x.data<float>(), y.mutable_data<float>(), x.dim(0) * x.dim(1), inner,
                 epsilon_of(n), in[1].data<float>(), in[2].data<float>(), inner, x.dim(1));
  return {y};
}

void check_group_norm(const Node& n, const std::vector<const TensorInfo*>& in) {
  const TensorInfo& x = f32_input(n, in, 0, "X");
  DC_USER_CHECK(x.shape.size() >= 3, n.op, ": input must have rank >= 3 (N x C x D...), got ",
                shape_str(x.shape));
  const int64_t g = n.attrs.get_int("num_groups");
  DC_USER_CHECK(g > 0 && x.shape[1] % g == 0, n.op, ": num_groups ", g,
                " does not divide the channel count ", x.shape[1]);
  for (size_t i = 1; i < 3; ++i) {
    const Shape& s = f32_input(n, in, i, i == 1 ? "scale" : "bias").shape;
    DC_USER_CHECK(s == Shape{g} || s == Shape{x.shape[1]}, n.op, ": input ",
                  i == 1 ? "scale" : "bias", " has shape ", shape_str(s), ", expected [", g,
                  "] (opset 18) or [", x.shape[1], "] (opset 21)");
  }
  DC_USER_CHECK(n.attrs.get_int("stash_type", 1) == 1, n.op, ": unsupported stash_type ",
                n.attrs.get_int("stash_type", 1), " (statistics are fp32)");
  epsilon_of(n);
}

std::vector<Tensor> run_group_norm(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const int64_t c = x.dim(1), g = n.attrs.get_int("num_groups"), inner = inner_of(x.shape());
  // Per-channel scale and bias (a per-group one repeated over its channels).
  std::vector<float> scale(static_cast<size_t>(c)), bias(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) {
    const int64_t s = in[1].numel() == c ? i : i / (c / g), b = in[2].numel() == c ? i : i / (c / g);
    scale[static_cast<size_t>(i)] = in[1].data<float>()[s];
    bias[static_cast<size_t>(i)] = in[2].data<float>()[b];
  }
  Tensor y(DType::f32, x.shape());
  normalise_runs(x.data<float>(), y.mutable_data<float>(), x.dim(0) * g, c / g * inner,
                 epsilon_of(n), scale.data(), bias.data(), inner, c);
  return {y};
}

void check_lp_norm(const Node& n, const std::vector<const TensorInfo*>& in) {
  const TensorInfo& x = f32_input(n, in, 0, "input");
  normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(x.shape.size()), "axis");
  const int64_t p = n.attrs.get_int("p", 2);
  DC_USER_CHECK(p == 1 || p == 2, n.op, ": attribute 'p' must be 1 or 2, got ", p);
}

// y = x / ||x||_p along the axis (a zero norm gives NaN or inf, as numpy does).
std::vector<Tensor> run_lp_norm(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const Shape& s = x.shape();
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(s.size()), "axis"));
  const bool l1 = n.attrs.get_int("p", 2) == 1;
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < axis; ++i) outer *= s[i];
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t len = s[axis];
  Tensor y(DType::f32, s);
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  parallel_for(outer * inner, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = (r / inner) * len * inner + r % inner;
      double acc = 0;
      for (int64_t i = 0; i < len; ++i) {
        const double v = xp[base + i * inner];
        acc += l1 ? std::fabs(v) : v * v;
      }
      const float norm = static_cast<float>(l1 ? acc : std::sqrt(acc));
      for (int64_t i = 0; i < len; ++i) yp[base + i * inner] = xp[base + i * inner] / norm;
    }
  });
  return {y};
}

void check_lrn(const Node& n, const std::vector<const TensorInfo*>& in) {
  const TensorInfo& x = f32_input(n, in, 0, "X");
  DC_USER_CHECK(x.shape.size() >= 3, n.op, ": input must have rank >= 3 (N x C x D...), got ",
                shape_str(x.shape));
  DC_USER_CHECK(n.attrs.get_int("size") > 0, n.op, ": attribute 'size' must be positive");
}

// y = x / (bias + alpha / size * sum of x^2 over channels [c - (size-1)/2, c + ceil((size-1)/2)])^beta
std::vector<Tensor> run_lrn(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const int64_t size = n.attrs.get_int("size"), c = x.dim(1), inner = inner_of(x.shape());
  const double alpha = n.attrs.get_float("alpha", 1e-4f), beta = n.attrs.get_float("beta", 0.75f),
               bias = n.attrs.get_float("bias", 1.f);
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  Tensor y(DType::f32, x.shape());
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  parallel_for(x.numel(), 1024, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t ch = (e / inner) % c, base = e - ch * inner;
      double sq = 0;
      for (int64_t k = std::max<int64_t>(0, ch - lo); k <= std::min(c - 1, ch + hi); ++k) {
        const double v = xp[base + k * inner];
        sq += v * v;
      }
      yp[e] = static_cast<float>(xp[e] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta));
    }
  });
  return {y};
}

const OpDef kOps[] = {
    op_def<check_instance_norm, run_instance_norm>("InstanceNormalization"),
    op_def<check_group_norm, run_group_norm>("GroupNormalization"),
    op_def<check_lp_norm, run_lp_norm>("LpNormalization"),
    op_def<check_lrn, run_lrn>("LRN"),
};

}  // namespace

std::span<const OpDef> norm_group_ops() { return kOps; }

}  // namespace dc::ref
