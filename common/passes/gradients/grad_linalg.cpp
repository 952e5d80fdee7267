// Gradients of the GEMM ops (Conv's: grad_conv.cpp): Gemm (Gemms with the transposes swapped, reading
// a transposed operand's source in place) and MatMul
// (batched and broadcast: MatMuls against transposed operands, summed over broadcast
// batch dims; a weight without batch dims gets one 2-D GEMM over all of A's rows).
#include <algorithm>
#include <map>

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

// The input of the 2-D Transpose (perm [1, 0]) that computes `t`; "" if none does.
std::string transposed_2d_source(GradBuilder& b, const std::string& t) {
  const auto p = b.graph().producer(t);
  if (!p || b.shape(t).size() != 2) return "";
  const Node& n = b.graph().nodes[*p];
  if (n.op != "Transpose") return "";
  const std::vector<int64_t> perm = n.attrs.get_ints("perm", {});
  return perm.empty() || perm == std::vector<int64_t>{1, 0} ? n.input(0) : "";
}

bool read_once(GradBuilder& b, const std::string& t) {
  const auto readers = b.graph().consumers();
  const auto it = readers.find(t);
  return it != readers.end() && it->second.size() == 1;
}

// Y = alpha op(A) op(B) + beta C. An operand that a 2-D Transpose computes (X^T) is read
// as that Transpose's input with its flag flipped, the same op(): no gradient GEMM reads the
// Transpose, so the forward Gemm alone does, in place (gemm_tiled, matmul_swapped_source).
// When only the Gemm reads X^T, its gradient is the GEMM of dX (X's own shape) transposed,
// which the Transpose rule's inverse cancels (GradBuilder::transpose): dX is that GEMM's
// output, with no Transpose kernel after it.
Grads gemm_rule(GradBuilder& b, const GradCall& c) {
  const double alpha = c.node.attrs.get_float("alpha", 1.f), beta = c.node.attrs.get_float("beta", 1.f);
  const bool ta = c.node.attrs.get_int("transA", 0) != 0, tb = c.node.attrs.get_int("transB", 0) != 0;
  const std::string &a = in(c, 0), &bm = in(c, 1), &dy = c.dy[0];
  const std::string xa = transposed_2d_source(b, a), xb = transposed_2d_source(b, bm);
  // What the gradient GEMMs read for A and B, and their flags.
  const std::string& ra = xa.empty() ? a : xa;
  const std::string& rb = xb.empty() ? bm : xb;
  const bool fa = xa.empty() ? ta : !ta, fb = xb.empty() ? tb : !tb;
  // The gradient of A read with flag `t` (of B: `u`), stored as `out`.
  const auto grad_a = [&](bool t, const TensorInfo& out) {
    return t ? b.node1("Gemm", {rb, dy}, out, gemm_attrs(alpha, fb, true))
             : b.node1("Gemm", {dy, rb}, out, gemm_attrs(alpha, false, !fb));
  };
  const auto grad_b = [&](bool u, const TensorInfo& out) {
    return u ? b.node1("Gemm", {dy, ra}, out, gemm_attrs(alpha, true, fa))
             : b.node1("Gemm", {ra, dy}, out, gemm_attrs(alpha, !fa, false));
  };
  Grads g(c.node.inputs.size());
  if (c.want(0))
    g[0] = !xa.empty() && read_once(b, a) ? b.transpose(grad_a(!ta, b.info(xa)), {1, 0}) : grad_a(ta, b.info(a));
  if (c.want(1))
    g[1] = !xb.empty() && read_once(b, bm) ? b.transpose(grad_b(!tb, b.info(xb)), {1, 0}) : grad_b(tb, b.info(bm));
  if (c.want(2)) {
    const std::string scaled = beta == 1.0 ? dy : b.scale(dy, beta);
    g[2] = b.sum_to(scaled, b.shape(in(c, 2)));
  }
  return g;
}

// Swaps the last two dims (rank >= 2). A MatMul reading the swap reads its input in place
// (gemm_tiled, matmul_swapped_source); a Transpose it undoes (a Linear layer's W^T, as torch
// exports it) is looked through (GradBuilder::transpose).
std::string swap_last(GradBuilder& b, const std::string& x) {
  const size_t r = b.shape(x).size();
  std::vector<int64_t> perm;
  for (size_t d = 0; d < r; ++d) perm.push_back(static_cast<int64_t>(d));
  std::swap(perm[r - 1], perm[r - 2]);
  return b.transpose(x, perm);
}

// B is W^T computed by a Transpose that only this MatMul reads (torch's Linear layers): its
// gradient goes to the Transpose's rule alone, which transposes it back.
bool transposed_weight(GradBuilder& b, const std::string& bm) {
  const auto p = b.graph().producer(bm);
  return p && b.graph().nodes[*p].op == "Transpose" && b.shape(bm).size() == 2 && read_once(b, bm);
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
  if (c.want(1)) {
    const Shape& a2s = b.shape(a2);
    if (b.shape(b2).size() == 2 && a2s.size() > 2) {
      // B without batch dims (a Linear layer's weight): A's rows fold into one 2-D GEMM's
      // K, dB = A^T dY over every row at once, not a batched product summed by a kernel
      // of its own (A's and dY's reshapes are views).
      const int64_t k = a2s.back(), n = b.shape(b2).back();
      const int64_t rows = shape_numel(a2s) / std::max<int64_t>(k, 1);
      const std::string af = b.reshape(a2, {rows, k}), dyf = b.reshape(dy, {rows, n});
      // For B = W^T, dB as (dY^T A)^T: the Transpose rule's dW = dB^T is then dY^T A
      // itself, written by the GEMM, with no Transpose kernel after it.
      g[1] = transposed_weight(b, in(c, 1)) ? swap_last(b, matmul(b, swap_last(b, dyf), af))
                                            : b.reshape(matmul(b, swap_last(b, af), dyf), bs);
    } else {
      g[1] = b.reshape(b.sum_to(matmul(b, swap_last(b, a2), dy), b.shape(b2)), bs);
    }
  }
  return g;
}

const GradRuleDef kRules[] = {
    {"Gemm", gemm_rule},
    {"MatMul", matmul_rule},
};

}  // namespace

std::span<const GradRuleDef> linalg_gradients() { return kRules; }

}  // namespace dc::grad
