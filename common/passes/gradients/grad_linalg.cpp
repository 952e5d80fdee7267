// Gradients of the GEMM ops (Conv's: grad_conv.cpp): Gemm (Gemms with the transposes swapped) and MatMul
// (batched and broadcast: MatMuls against transposed operands, summed over broadcast
// batch dims).
#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

const std::string& in(const GradCall& c, size_t i) { return c.node.inputs.at(i); }

Attributes gemm_attrs(double alpha, bool trans_a, bool trans_b) {
  Attributes a;
  a.set("alpha", static_cast<float>(alpha));
  a.set("transA", int64_t{trans_a ? 1 : 0});
  a.set("transB", int64_t{trans_b ? 1 : 0});
  return a;
}

// Y = alpha op(A) op(B) + beta C.
Grads gemm_rule(GradBuilder& b, const GradCall& c) {
  const double alpha = c.node.attrs.get_float("alpha", 1.f), beta = c.node.attrs.get_float("beta", 1.f);
  const bool ta = c.node.attrs.get_int("transA", 0) != 0, tb = c.node.attrs.get_int("transB", 0) != 0;
  const std::string &a = in(c, 0), &bm = in(c, 1), &dy = c.dy[0];
  Grads g(c.node.inputs.size());
  if (c.want(0))
    g[0] = ta ? b.node1("Gemm", {bm, dy}, b.info(a), gemm_attrs(alpha, tb, true))
              : b.node1("Gemm", {dy, bm}, b.info(a), gemm_attrs(alpha, false, !tb));
  if (c.want(1))
    g[1] = tb ? b.node1("Gemm", {dy, a}, b.info(bm), gemm_attrs(alpha, true, ta))
              : b.node1("Gemm", {a, dy}, b.info(bm), gemm_attrs(alpha, !ta, false));
  if (c.want(2)) {
    const std::string scaled = beta == 1.0 ? dy : b.scale(dy, beta);
    g[2] = b.sum_to(scaled, b.shape(in(c, 2)));
  }
  return g;
}

// Swaps the last two dims (rank >= 2).
std::string swap_last(GradBuilder& b, const std::string& x) {
  const size_t r = b.shape(x).size();
  std::vector<int64_t> perm;
  for (size_t d = 0; d < r; ++d) perm.push_back(static_cast<int64_t>(d));
  std::swap(perm[r - 1], perm[r - 2]);
  return b.transpose(x, perm);
}

Shape matmul_shape(const Shape& a, const Shape& bs) {
  Shape batch = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(bs.begin(), bs.end() - 2));
  batch.push_back(a[a.size() - 2]);
  batch.push_back(bs.back());
  return batch;
}

std::string matmul(GradBuilder& b, const std::string& x, const std::string& y) {
  return b.node1("MatMul", {x, y}, TensorInfo{b.info(x).dtype, matmul_shape(b.shape(x), b.shape(y))});
}

// numpy matmul: 1-D operands are promoted to matrices ([k] -> [1, k] on the left, [k, 1] on
// the right), the gradients computed on the promoted forms and reshaped back.
Grads matmul_rule(GradBuilder& b, const GradCall& c) {
  const Shape as = b.shape(in(c, 0)), bs = b.shape(in(c, 1));
  const std::string a2 = b.reshape(in(c, 0), as.size() == 1 ? Shape{1, as[0]} : as);
  const std::string b2 = b.reshape(in(c, 1), bs.size() == 1 ? Shape{bs[0], 1} : bs);
  const std::string dy = b.reshape(c.dy[0], matmul_shape(b.shape(a2), b.shape(b2)));
  Grads g(2);
  if (c.want(0)) g[0] = b.reshape(b.sum_to(matmul(b, dy, swap_last(b, b2)), b.shape(a2)), as);
  if (c.want(1)) g[1] = b.reshape(b.sum_to(matmul(b, swap_last(b, a2), dy), b.shape(b2)), bs);
  return g;
}

const GradRuleDef kRules[] = {
    {"Gemm", gemm_rule},
    {"MatMul", matmul_rule},
};

}  // namespace

std::span<const GradRuleDef> linalg_gradients() { return kRules; }

}  // namespace dc::grad
