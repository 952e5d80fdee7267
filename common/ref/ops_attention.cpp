// Reference kernels of the training step's fused attention (docs/training.md, "Attention
// backward"): dc.Attention, the forward that also saves each row's log-sum-exp, and
// dc.AttentionGrad, FlashAttention-2's backward from it. Sums in double; f32 or f64 tensors.
#include <cmath>
#include <limits>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/kernel.h"
#include "ref/training_ops.h"

namespace dc::ref {

namespace {

// Q [B.., Sq, D], Kt [B.., D, Sk], V [B.., Sk, Dv] and an optional mask broadcasting to the
// scores [B.., Sq, Sk], read as doubles per (batch, row, column).
struct AttentionOperands {
  int64_t batch = 1, sq = 0, sk = 0, d = 0, dv = 0;
  std::vector<double> q, kt, v, mask;
  std::vector<int64_t> mask_strides;  // per scores dim, 0 where the mask broadcasts
  std::vector<int64_t> batch_offset;  // the mask's offset of each batch index
  double scale = 1;

  double qv(int64_t b, int64_t i, int64_t k) const { return q[(b * sq + i) * d + k]; }
  double ktv(int64_t b, int64_t k, int64_t j) const { return kt[(b * d + k) * sk + j]; }
  double vv(int64_t b, int64_t j, int64_t e) const { return v[(b * sk + j) * dv + e]; }
  double maskv(int64_t b, int64_t i, int64_t j) const {
    if (mask.empty()) return 0;
    const size_t r = mask_strides.size();
    const int64_t off = batch_offset[static_cast<size_t>(b)] + i * mask_strides[r - 2] + j * mask_strides[r - 1];
    return mask[static_cast<size_t>(off)];
  }
  // The scaled, masked score of (b, i, j).
  double score(int64_t b, int64_t i, int64_t j) const {
    double s = 0;
    for (int64_t k = 0; k < d; ++k) s += qv(b, i, k) * ktv(b, k, j);
    return s * scale + maskv(b, i, j);
  }
};

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<size_t>(i)] = t.dtype() == DType::f64 ? t.data<double>()[i] : t.data<float>()[i];
  return out;
}

Tensor from_doubles(DType dt, const Shape& s, const std::vector<double>& v) {
  Tensor t(dt, s);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::f64) t.mutable_data<double>()[i] = v[static_cast<size_t>(i)];
    else t.mutable_data<float>()[i] = static_cast<float>(v[static_cast<size_t>(i)]);
  }
  return t;
}

void require_float(const Node& node, const Tensor& t, DType dt, const char* what) {
  DC_USER_CHECK(t.defined() && t.dtype() == dt, node.op, ": ", what, " must be a ", dtype_name(dt),
                " tensor like Q");
}

AttentionOperands operands(const Node& node, const Tensor& q, const Tensor& kt, const Tensor& v, const Tensor* mask) {
  const DType dt = q.dtype();
  DC_USER_CHECK(dt == DType::f32 || dt == DType::f64, node.op, ": Q must be f32 or f64");
  require_float(node, kt, dt, "Kt");
  require_float(node, v, dt, "V");
  const Shape &qs = q.shape(), &ks = kt.shape(), &vs = v.shape();
  const size_t r = qs.size();
  DC_USER_CHECK(r >= 2 && ks.size() == r && vs.size() == r && std::equal(qs.begin(), qs.end() - 2, ks.begin()) &&
                    std::equal(qs.begin(), qs.end() - 2, vs.begin()) && ks[r - 2] == qs[r - 1] &&
                    vs[r - 2] == ks[r - 1],
                node.op, ": Q ", shape_str(qs), ", Kt ", shape_str(ks), " and V ", shape_str(vs),
                " are not [B.., Sq, D], [B.., D, Sk], [B.., Sk, Dv]");
  AttentionOperands a;
  a.sq = qs[r - 2], a.d = qs[r - 1], a.sk = ks[r - 1], a.dv = vs[r - 1];
  a.batch = shape_numel(Shape(qs.begin(), qs.end() - 2));
  a.q = as_doubles(q), a.kt = as_doubles(kt), a.v = as_doubles(v);
  a.scale = node.attrs.get_float("scale", 1.f);
  if (mask && mask->defined()) {
    require_float(node, *mask, dt, "the mask");
    Shape scores(qs.begin(), qs.end() - 1);
    scores.push_back(a.sk);
    const Shape& ms = mask->shape();
    DC_USER_CHECK(ms.size() <= r, node.op, ": the mask ", shape_str(ms), " has a higher rank than the scores");
    a.mask_strides.assign(r, 0);
    int64_t stride = 1;
    for (size_t k = 0; k < ms.size(); ++k) {
      const size_t md = ms.size() - 1 - k, sd = r - 1 - k;
      DC_USER_CHECK(ms[md] == 1 || ms[md] == scores[sd], node.op, ": the mask ", shape_str(ms),
                    " does not broadcast to the scores ", shape_str(scores));
      if (ms[md] != 1) a.mask_strides[sd] = stride;
      stride *= ms[md];
    }
    a.mask = as_doubles(*mask);
    a.batch_offset.assign(static_cast<size_t>(a.batch), 0);
    for (int64_t b = 0; b < a.batch; ++b) {
      int64_t rest = b, off = 0;
      for (size_t k = r - 2; k-- > 0;) {
        off += (rest % scores[k]) * a.mask_strides[k];
        rest /= scores[k];
      }
      a.batch_offset[static_cast<size_t>(b)] = off;
    }
  }
  return a;
}

// Row (b, i)'s log-sum-exp of the scores (-inf for a row masked entirely).
double row_lse(const AttentionOperands& a, int64_t b, int64_t i) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < a.sk; ++j) m = std::max(m, a.score(b, i, j));
  if (std::isinf(m) && m < 0) return m;
  double l = 0;
  for (int64_t j = 0; j < a.sk; ++j) l += std::exp(a.score(b, i, j) - m);
  return m + std::log(l);
}

// The probability of (b, i, j) from its row's log-sum-exp: 0 in a row masked entirely.
double probability(const AttentionOperands& a, int64_t b, int64_t i, int64_t j, double lse) {
  return std::isinf(lse) && lse < 0 ? 0.0 : std::exp(a.score(b, i, j) - lse);
}

// dc.Attention(Q, Kt, V[, mask]) {scale} -> (O [B.., Sq, Dv], LSE [B.., Sq]):
// O = softmax(Q Kt scale + mask) V, LSE the row's log-sum-exp of the softmax's input.
std::vector<Tensor> run_attention(const Node& node, const Inputs& in) {
  const Tensor* mask = in.size() > 3 ? &in[3] : nullptr;
  const AttentionOperands a = operands(node, in.at(0), in.at(1), in.at(2), mask);
  std::vector<double> o(static_cast<size_t>(a.batch * a.sq * a.dv)), lse(static_cast<size_t>(a.batch * a.sq));
  parallel_for(a.batch * a.sq, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t b = row / a.sq, i = row % a.sq;
      const double l = row_lse(a, b, i);
      lse[static_cast<size_t>(row)] = l;
      for (int64_t j = 0; j < a.sk; ++j) {
        const double p = probability(a, b, i, j, l);
        for (int64_t e = 0; e < a.dv; ++e) o[static_cast<size_t>(row * a.dv + e)] += p * a.vv(b, j, e);
      }
    }
  });
  Shape os = in[0].shape(), ls = in[0].shape();
  os.back() = a.dv;
  ls.pop_back();
  return {from_doubles(in[0].dtype(), os, o), from_doubles(in[0].dtype(), ls, lse)};
}

// dc.AttentionGrad(Q, Kt, V, O, dO, LSE[, mask]) {scale} -> (dQ, dKt, dV), with
// P = exp(S - LSE), D = rowsum(dO * O), dS = P (dO V^T - D):
// dV = P^T dO, dQ = scale dS Kt^T, dKt = scale Q^T dS.
std::vector<Tensor> run_attention_grad(const Node& node, const Inputs& in) {
  const Tensor* mask = in.size() > 6 ? &in[6] : nullptr;
  const AttentionOperands a = operands(node, in.at(0), in.at(1), in.at(2), mask);
  const DType dt = in[0].dtype();
  require_float(node, in.at(3), dt, "O");
  require_float(node, in.at(4), dt, "dO");
  require_float(node, in.at(5), dt, "LSE");
  Shape os = in[0].shape();
  os.back() = a.dv;
  DC_USER_CHECK(in[3].shape() == os && in[4].shape() == os, node.op, ": O and dO must be ", shape_str(os));
  DC_USER_CHECK(in[5].numel() == a.batch * a.sq, node.op, ": LSE must hold one value per query row");
  const std::vector<double> o = as_doubles(in[3]), dout = as_doubles(in[4]), lse = as_doubles(in[5]);
  std::vector<double> dq(a.q.size()), dkt(a.kt.size()), dv(a.v.size());
  parallel_for(a.batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b)
      for (int64_t i = 0; i < a.sq; ++i) {
        const int64_t row = b * a.sq + i;
        double drow = 0;
        for (int64_t e = 0; e < a.dv; ++e)
          drow += dout[static_cast<size_t>(row * a.dv + e)] * o[static_cast<size_t>(row * a.dv + e)];
        for (int64_t j = 0; j < a.sk; ++j) {
          const double p = probability(a, b, i, j, lse[static_cast<size_t>(row)]);
          double dp = 0;
          for (int64_t e = 0; e < a.dv; ++e) {
            const double g = dout[static_cast<size_t>(row * a.dv + e)];
            dv[static_cast<size_t>((b * a.sk + j) * a.dv + e)] += p * g;
            dp += g * a.vv(b, j, e);
          }
          const double ds = p * (dp - drow) * a.scale;
          for (int64_t k = 0; k < a.d; ++k) {
            dq[static_cast<size_t>(row * a.d + k)] += ds * a.ktv(b, k, j);
            dkt[static_cast<size_t>((b * a.d + k) * a.sk + j)] += ds * a.qv(b, i, k);
          }
        }
      }
  });
  return {from_doubles(dt, in[0].shape(), dq), from_doubles(dt, in[1].shape(), dkt),
          from_doubles(dt, in[2].shape(), dv)};
}

const OpDef kOps[] = {
    {"dc.Attention", run_attention, nullptr},
    {"dc.AttentionGrad", run_attention_grad, nullptr},
};

}  // namespace

std::span<const OpDef> attention_ops() { return kOps; }

}  // namespace dc::ref
