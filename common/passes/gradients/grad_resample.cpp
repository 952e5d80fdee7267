// Gradients of Resize and Upsample (nearest, linear, cubic; every coordinate transformation).
// Resize is separable and linear in X: along each resized axis, output position o is
// sum_j weight[o, j] X[idx[o, j]] (ref/resample.h, the geometry the reference and the code
// generator share). Its gradient applies the transpose of each axis' interpolation matrix
// R [out, in] to dY, one axis at a time:
//  - nearest with an integer factor f that maps o to o / f (asymmetric or half-pixel upsampling
//    by 2, 4, ...): a Reshape to [.., in, f, ..] and a ReduceSum over f;
//  - otherwise a MatMul with the constant R (on the last axis, dY [.., out] x R) or R^T (on
//    another, R^T [in, out] x dY [pre, out, post]), which the tuned GEMM templates run. Its
//    work is in x out per row where the taps need 2 or 4: right for the feature maps that
//    detection and segmentation heads resize, wasteful for very large images.
// The scales, sizes and roi must be constants; the extrapolation value of tf_crop_and_resize
// has no gradient (its rows of R are 0).
#include <cmath>
#include <numeric>

#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"
#include "ref/resample.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

// The values of the node's parameter inputs (scales, sizes, roi): constants, or unsupported.
std::vector<Tensor> constant_params(const GradBuilder& b, const GradCall& c) {
  std::vector<Tensor> params(c.node.inputs.size());
  for (size_t i = 1; i < c.node.inputs.size(); ++i) {
    if (!c.node.has_input(i)) continue;
    const auto it = b.graph().initializers.find(c.node.inputs[i]);
    if (it == b.graph().initializers.end())
      no_gradient(c, str_cat("input ", i, " ('", c.node.inputs[i], "') is not a constant"));
    params[i] = it->second;
  }
  return params;
}

int64_t product(const Shape& s, size_t from, size_t to) {
  return std::accumulate(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(to),
                         int64_t{1}, std::multiplies<>());
}

// The integer factor f when nearest output position o reads input position o / f, else 0.
int64_t nearest_factor(const ref::ResizeAxis& a) {
  if (a.taps != 1 || a.out % a.in != 0) return 0;
  const int64_t f = a.out / a.in;
  for (int64_t o = 0; o < a.out; ++o) {
    const auto k = static_cast<size_t>(o);
    if (a.idx[k] != o / f || a.weight[k] != 1.f || (!a.outside.empty() && a.outside[k])) return 0;
  }
  return f;
}

// Output position o reads input position o alone, with weight 1 (an axis that keeps its
// extent may still carry taps, the others of weight 0).
bool is_identity(const ref::ResizeAxis& a) {
  if (a.taps == 0) return true;
  if (a.out != a.in) return false;
  for (int64_t o = 0; o < a.out; ++o) {
    if (!a.outside.empty() && a.outside[static_cast<size_t>(o)]) return false;
    float self = 0.f, other = 0.f;
    for (int j = 0; j < a.taps; ++j) {
      const auto k = static_cast<size_t>(o * a.taps + j);
      (a.idx[k] == o ? self : other) += std::abs(a.weight[k]);
    }
    if (self != 1.f || other != 0.f) return false;
  }
  return true;
}

// R [out, in] (transposed: [in, out]) of one axis, in dtype dt (f32 or f64).
Tensor interpolation_matrix(const ref::ResizeAxis& a, DType dt, bool transposed) {
  std::vector<double> r(static_cast<size_t>(a.out * a.in), 0.0);
  for (int64_t o = 0; o < a.out; ++o) {
    if (!a.outside.empty() && a.outside[static_cast<size_t>(o)]) continue;
    for (int j = 0; j < a.taps; ++j) {
      const auto k = static_cast<size_t>(o * a.taps + j);
      const int64_t i = a.idx[k];
      r[static_cast<size_t>(transposed ? i * a.out + o : o * a.in + i)] += a.weight[k];
    }
  }
  Tensor t(dt, transposed ? Shape{a.in, a.out} : Shape{a.out, a.in});
  for (size_t e = 0; e < r.size(); ++e) {
    if (dt == DType::f64) t.mutable_data<double>()[e] = r[e];
    else t.mutable_data<float>()[e] = static_cast<float>(r[e]);
  }
  return t;
}

// dY with axis d's extent taken from a.out back to a.in.
std::string axis_gradient(GradBuilder& b, const GradCall& c, const std::string& dy, size_t d,
                          const ref::ResizeAxis& a) {
  const Shape cur = b.shape(dy);
  const DType dt = b.info(dy).dtype;
  const int64_t pre = product(cur, 0, d), post = product(cur, d + 1, cur.size());
  Shape to = cur;
  to[d] = a.in;
  std::string g;
  if (const int64_t f = nearest_factor(a); f > 0) {
    g = b.reduce_sum(b.reshape(dy, {pre, a.in, f, post}), {2}, false);
  } else {
    if (dt != DType::f32 && dt != DType::f64)
      no_gradient(c, str_cat("a ", dtype_name(dt), " gradient (f32 or f64 only)"));
    const TensorInfo info{dt, post == 1 ? Shape{pre, a.in} : Shape{pre, a.in, post}};
    if (post == 1)
      g = b.node1("MatMul", {b.reshape(dy, {pre, a.out}), b.constant(interpolation_matrix(a, dt, false))}, info);
    else
      g = b.node1("MatMul", {b.constant(interpolation_matrix(a, dt, true)), b.reshape(dy, {pre, a.out, post})}, info);
  }
  return b.reshape(g, to);
}

Grads resize_rule(GradBuilder& b, const GradCall& c) {
  Grads g(c.node.inputs.size());
  if (!c.want(0)) return g;
  const Shape x = b.shape(c.node.inputs[0]);
  const ref::ResizeSpec spec = ref::resize_spec(c.node, x, constant_params(b, c));
  std::string dy = c.dy[0];
  for (size_t d = spec.axes.size(); d-- > 0;)
    if (!is_identity(spec.axes[d])) dy = axis_gradient(b, c, dy, d, spec.axes[d]);
  g[0] = dy == c.dy[0] ? b.reshape(dy, x) : dy;
  return g;
}

const GradRuleDef kRules[] = {
    {"Resize", resize_rule},
    {"Upsample", resize_rule},
};

}  // namespace

std::span<const GradRuleDef> resample_gradients() { return kRules; }

}  // namespace dc::grad
