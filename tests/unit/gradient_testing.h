// Finite-difference checks of the gradient rules (passes/gradients/) on the CPU reference.
//
// A test builds a graph whose tensors are all initializers, with output y. The check takes
// the loss L = sum(y * R) for a fixed random R (summed in double outside the graph, so that
// L's own rounding stays far below the finite difference's), differentiates it with
// add_vector_jacobian_product (R as y's gradient),
// and compares the directional derivative sum_t <dL/dt, V_t> along random directions V with
// the central difference (L(t + eps V) - L(t - eps V)) / (2 eps). The tolerance is the
// error model of docs/precision.md ("Gradient checks"): truncation eps^2 |L'''| / 6 plus the
// rounding of y, u sqrt(n) max|y| / eps, bounded by `rtol` of max(1, |directional derivative|).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>

#include "pass_testing.h"
#include "passes/training/add_gradients.h"
#include "ref/executor.h"

namespace dc::testing {

struct FdOptions {
  double eps = 1e-3;   // f32 graphs; f64 graphs use 1e-6
  double rtol = 1e-2;  // f32; f64 uses 1e-6
  int directions = 3;
};

inline FdOptions fd_f64() { return {1e-6, 1e-6, 3}; }

inline Tensor random_like(const Tensor& t, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor r(t.dtype(), t.shape());
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (t.dtype() == DType::f64) r.mutable_data<double>()[i] = dist(rng);
    else r.mutable_data<float>()[i] = static_cast<float>(dist(rng));
  }
  return r;
}

inline Tensor f64_tensor(Shape s, uint32_t seed, double lo = -1, double hi = 1) {
  return random_like(Tensor(DType::f64, std::move(s)), seed, lo, hi);
}

inline double value_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f64 ? t.data<double>()[i] : t.data<float>()[i];
}

// t + s * v, elementwise, in t's dtype.
inline Tensor axpy(const Tensor& t, double s, const Tensor& v) {
  Tensor r(t.dtype(), t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = value_at(t, i) + s * value_at(v, i);
    if (t.dtype() == DType::f64) r.mutable_data<double>()[i] = x;
    else r.mutable_data<float>()[i] = static_cast<float>(x);
  }
  return r;
}

// L = sum(y * R) in double, for the graph's output y.
inline double run_loss(const Graph& g, const std::string& y, const Tensor& r) {
  const Tensor out = ref::run_graph(g, {}).at(y);
  double l = 0;
  for (int64_t i = 0; i < out.numel(); ++i) l += value_at(out, i) * value_at(r, i);
  return l;
}

// Checks dL/dt for every t in `wrt` (initializers of g) against central differences.
inline void check_gradients(Graph g, const std::string& y, const std::set<std::string>& wrt,
                            const FdOptions& o = {}) {
  g.outputs = {y};
  g = with_types(g);
  const TensorInfo yt = g.info(y);
  const Tensor r = random_like(Tensor(yt.dtype, yt.shape), 1234);
  Graph gg = g;
  add_initializer(gg, "fd/R", r);
  const auto grads = add_vector_jacobian_product(gg, {{y, "fd/R"}}, wrt);
  expect_well_formed(gg);
  gg.outputs.clear();
  for (const auto& t : wrt) {
    ASSERT_TRUE(grads.count(t)) << "no gradient for " << t;
    gg.outputs.push_back(grads.at(t));
  }
  const auto analytic = ref::run_graph(gg, {});
  for (int d = 0; d < o.directions; ++d) {
    double directional = 0;
    Graph plus = g, minus = g;
    for (const auto& t : wrt) {
      const Tensor& x = g.initializers.at(t);
      const Tensor v = random_like(x, 100 + d * 17 + static_cast<uint32_t>(t.size()));
      plus.initializers[t] = axpy(x, o.eps, v);
      minus.initializers[t] = axpy(x, -o.eps, v);
      const Tensor& gr = analytic.at(grads.at(t));
      ASSERT_EQ(gr.shape(), x.shape()) << "gradient of " << t;
      ASSERT_EQ(gr.dtype(), x.dtype()) << "gradient of " << t;
      for (int64_t i = 0; i < x.numel(); ++i) directional += value_at(gr, i) * value_at(v, i);
    }
    const double fd = (run_loss(plus, y, r) - run_loss(minus, y, r)) / (2 * o.eps);
    EXPECT_NEAR(directional, fd, o.rtol * std::max(1.0, std::abs(fd)))
        << "direction " << d << ": analytic " << directional << ", finite difference " << fd;
  }
}

}  // namespace dc::testing
