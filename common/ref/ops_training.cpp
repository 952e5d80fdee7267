// dc-internal ops of training graphs (passes/build_training_graph.h) that ONNX lacks: the
// step-seeded Dropout, BatchNormalization in training mode, the softmax cross-entropy loss
// and its gradient, the SGD and AdamW updates of a bucket of tensors, fp16's overflow check
// over many gradients and the AMP step's weight Casts as one node. Their gradients are in
// ops_grad.cpp; their semantics are PyTorch's (docs/training.md).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/error.h"
#include "ir/multi_cast.h"
#include "ir/nonfinite_check.h"
#include "ir/optimizer_update.h"
#include "ir/parallel.h"
#include "ref/kernel.h"
#include "ref/training_ops.h"
#include "ref/philox.h"
#include "ref/storage_dtypes.h"

namespace dc::ref {

namespace {

void require_f32(const Node& node, const Tensor& t, const char* what) {
  DC_USER_CHECK(t.defined() && t.dtype() == DType::f32, node.op, ": ", what,
                " must be an f32 tensor");
}

int64_t step_of(const Node& node, const Tensor& step) {
  DC_USER_CHECK(step.defined() && step.dtype() == DType::i64 && step.numel() == 1, node.op,
                ": the step input must be an i64 scalar");
  return step.data<int64_t>()[0];
}

// dc.Dropout(X, step) -> (Y, mask). attrs: ratio, seed. mask holds 0 or 1/(1-ratio), so
// that Y = X * mask and dX = dY * mask.
std::vector<Tensor> run_dropout(const Node& node, const Inputs& in) {
  require_f32(node, in.at(0), "X");
  const int64_t step = step_of(node, in.at(1));
  const float ratio = node.attrs.get_float("ratio", 0.5f);
  DC_USER_CHECK(ratio >= 0.f && ratio < 1.f, node.op, ": ratio must be in [0, 1), got ", ratio);
  const auto seed = static_cast<uint64_t>(node.attrs.get_int("seed", 0));
  const Tensor& x = in[0];
  Tensor y(DType::f32, x.shape()), mask(DType::f32, x.shape());
  const float keep_scale = 1.f / (1.f - ratio);
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  float* mp = mask.mutable_data<float>();
  parallel_for(x.numel(), 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const bool keep = philox_uniform(seed, static_cast<uint64_t>(step),
                                       static_cast<uint64_t>(i)) >= ratio;
      mp[i] = keep ? keep_scale : 0.f;
      yp[i] = xp[i] * mp[i];
    }
  });
  return {y, mask};
}

// A training-mode BatchNorm's per-channel outputs from its batch mean and biased variance,
// in double as PyTorch: the running statistics' update (ONNX's momentum: new = running *
// momentum + batch * (1 - momentum); the running variance takes the unbiased batch
// variance over `count` values a channel) and the inverse std.
struct ChannelStats {
  float mean_next, var_next, invstd;
};
ChannelStats channel_stats(double mu, double var, float running_mean, float running_var, double eps,
                           double momentum, int64_t count) {
  const double unbiased = count > 1 ? var * static_cast<double>(count) / static_cast<double>(count - 1) : var;
  return {static_cast<float>(running_mean * momentum + mu * (1 - momentum)),
          static_cast<float>(running_var * momentum + unbiased * (1 - momentum)),
          static_cast<float>(1.0 / std::sqrt(var + eps))};
}

// dc.BatchNormTrain(X, scale, B, running_mean, running_var, batch_mean, batch_var) -> (Y,
// new_running_mean, new_running_var, saved_mean, saved_invstd), the batch statistics computed
// before it (training_forward.h). attrs: epsilon, momentum. Y uses the biased batch
// variance, the running variance the unbiased one, as PyTorch does.
std::vector<Tensor> run_batch_norm_train(const Node& node, const Inputs& in) {
  for (size_t i = 0; i < 7; ++i) require_f32(node, in.at(i), "every input");
  const Tensor& x = in[0];
  DC_USER_CHECK(x.rank() >= 2, node.op, ": X must have rank >= 2, got ", shape_str(x.shape()));
  const int64_t n = x.dim(0), c = x.dim(1), inner = x.numel() / std::max<int64_t>(1, n * c);
  for (size_t i = 1; i < 7; ++i)
    DC_USER_CHECK(in[i].numel() == c, node.op, ": input ", i, " must have ", c, " values");
  const double eps = node.attrs.get_float("epsilon", 1e-5f);
  const double momentum = node.attrs.get_float("momentum", 0.9f);
  const int64_t count = n * inner;
  Tensor y(DType::f32, x.shape());
  Tensor rm(DType::f32, {c}), rv(DType::f32, {c}), mean(DType::f32, {c}), invstd(DType::f32, {c});
  const float *xp = x.data<float>(), *sc = in[1].data<float>(), *b = in[2].data<float>();
  parallel_for(c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      const double mu = in[5].data<float>()[ch], var = in[6].data<float>()[ch];
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < inner; ++j) {
          const int64_t k = (i * c + ch) * inner + j;
          y.mutable_data<float>()[k] = static_cast<float>((xp[k] - mu) * inv * sc[ch] + b[ch]);
        }
      const ChannelStats st =
          channel_stats(mu, var, in[3].data<float>()[ch], in[4].data<float>()[ch], eps, momentum, count);
      rm.mutable_data<float>()[ch] = st.mean_next;
      rv.mutable_data<float>()[ch] = st.var_next;
      mean.mutable_data<float>()[ch] = static_cast<float>(mu);
      invstd.mutable_data<float>()[ch] = st.invstd;
    }
  });
  return {y, rm, rv, mean, invstd};
}

// dc.BatchNormStats(running_mean, running_var, batch_mean, batch_var) -> (new_running_mean,
// new_running_var, saved_invstd): dc.BatchNormTrain's per-channel outputs alone, once its Y
// is elementwise ops (passes/training/lower_batch_norm.h). attrs: epsilon, momentum, count
// (the values a channel's statistics are over).
std::vector<Tensor> run_batch_norm_stats(const Node& node, const Inputs& in) {
  for (size_t i = 0; i < 4; ++i) require_f32(node, in.at(i), "every input");
  const int64_t c = in[0].numel();
  for (size_t i = 1; i < 4; ++i)
    DC_USER_CHECK(in[i].numel() == c, node.op, ": input ", i, " must have ", c, " values");
  const double eps = node.attrs.get_float("epsilon", 1e-5f);
  const double momentum = node.attrs.get_float("momentum", 0.9f);
  const int64_t count = node.attrs.get_int("count", 0);
  DC_USER_CHECK(count >= 1, node.op, ": attribute count must be >= 1, got ", count);
  Tensor rm(DType::f32, in[0].shape()), rv(DType::f32, in[0].shape()), invstd(DType::f32, in[0].shape());
  for (int64_t ch = 0; ch < c; ++ch) {
    const ChannelStats st = channel_stats(in[2].data<float>()[ch], in[3].data<float>()[ch], in[0].data<float>()[ch],
                                          in[1].data<float>()[ch], eps, momentum, count);
    rm.mutable_data<float>()[ch] = st.mean_next;
    rv.mutable_data<float>()[ch] = st.var_next;
    invstd.mutable_data<float>()[ch] = st.invstd;
  }
  return {rm, rv, invstd};
}

// Rows of the last axis: (rows, classes) of a logits tensor and its labels.
struct CrossEntropyShape {
  int64_t rows = 0, classes = 0;
};
CrossEntropyShape ce_shape(const Node& node, const Tensor& logits, const Tensor& labels) {
  DC_USER_CHECK(logits.rank() >= 1, node.op, ": logits need a class axis");
  DC_USER_CHECK(labels.dtype() == DType::i64, node.op, ": labels must be i64, got ",
                dtype_name(labels.dtype()));
  Shape want(logits.shape().begin(), logits.shape().end() - 1);
  DC_USER_CHECK(labels.shape() == want, node.op, ": labels have shape ", shape_str(labels.shape()),
                ", expected ", shape_str(want), " (the logits' shape without the class axis)");
  const int64_t classes = logits.shape().back();
  return {classes > 0 ? logits.numel() / classes : 0, classes};
}

int64_t checked_label(const Node& node, const int64_t* labels, int64_t r, int64_t classes) {
  const int64_t l = labels[r];
  DC_USER_CHECK(l >= 0 && l < classes, node.op, ": label ", l, " at position ", r,
                " is outside [0, ", classes, ")");
  return l;
}

// dc.SoftmaxCrossEntropy(logits, labels) -> (loss, log_probs): the mean over rows of
// -log_softmax(logits)[label], classes on the last axis.
std::vector<Tensor> run_softmax_cross_entropy(const Node& node, const Inputs& in) {
  require_f32(node, in.at(0), "logits");
  const Tensor &x = in[0], &labels = in.at(1);
  const CrossEntropyShape s = ce_shape(node, x, labels);
  Tensor logp(DType::f32, x.shape());
  const float* xp = x.data<float>();
  float* lp = logp.mutable_data<float>();
  const int64_t* lab = labels.data<int64_t>();
  double total = 0;
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* row = xp + r * s.classes;
    double m = -std::numeric_limits<double>::infinity(), z = 0;
    for (int64_t k = 0; k < s.classes; ++k) m = std::max<double>(m, row[k]);
    for (int64_t k = 0; k < s.classes; ++k) z += std::exp(row[k] - m);
    const double lse = m + std::log(z);
    for (int64_t k = 0; k < s.classes; ++k)
      lp[r * s.classes + k] = static_cast<float>(row[k] - lse);
    total -= lp[r * s.classes + checked_label(node, lab, r, s.classes)];
  }
  const float loss = s.rows > 0 ? static_cast<float>(total / static_cast<double>(s.rows)) : 0.f;
  return {Tensor::scalar(loss), logp};
}

// dc.SoftmaxCrossEntropyGrad(dloss, log_probs, labels) -> dlogits = dloss * (softmax -
// onehot(label)) / rows.
std::vector<Tensor> run_softmax_cross_entropy_grad(const Node& node, const Inputs& in) {
  require_f32(node, in.at(0), "dloss");
  require_f32(node, in.at(1), "log_probs");
  const Tensor &logp = in[1], &labels = in.at(2);
  const CrossEntropyShape s = ce_shape(node, logp, labels);
  const float scale = in[0].data<float>()[0] / static_cast<float>(std::max<int64_t>(1, s.rows));
  Tensor dx(DType::f32, logp.shape());
  const float* lp = logp.data<float>();
  float* d = dx.mutable_data<float>();
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t l = checked_label(node, labels.data<int64_t>(), r, s.classes);
    for (int64_t k = 0; k < s.classes; ++k) {
      const int64_t i = r * s.classes + k;
      // expm1 for the label's class: p - 1 for p near 1 (a fitted batch) without cancellation.
      d[i] = scale * static_cast<float>(k == l ? std::expm1(static_cast<double>(lp[i]))
                                               : std::exp(static_cast<double>(lp[i])));
    }
  }
  return {dx};
}

void require_same_shape(const Node& node, const Inputs& in, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    require_f32(node, in.at(i), "every state input");
    DC_USER_CHECK(in[i].shape() == in[0].shape(), node.op, ": input ", i, " has shape ",
                  shape_str(in[i].shape()), ", expected ", shape_str(in[0].shape()));
  }
}

// A gated update whose `finite` flag is false skips the step (mixed precision's overflow).
bool skipped(const Node& node, const OptimizerUpdateLayout& l, const Inputs& in) {
  if (!l.gated) return false;
  const Tensor& f = in.at(l.finite());
  DC_USER_CHECK(f.defined() && f.dtype() == DType::boolean && f.numel() == 1, node.op,
                ": the finite flag must be a bool scalar");
  return !f.data<bool>()[0];
}

// 1/S for a scaled update (the gradients it reads are S times the loss's), else 1: exact, S
// being a power of two, and G * (1/S) is rounded to f32 as PyTorch's unscale_ stores it.
float inverse_scale(const Node& node, const OptimizerUpdateLayout& l, const Inputs& in) {
  if (!l.scaled) return 1.f;
  const Tensor& s = in.at(l.scale());
  DC_USER_CHECK(s.defined() && s.dtype() == DType::f32 && s.numel() == 1, node.op,
                ": the loss scale must be an f32 scalar");
  return 1.f / s.data<float>()[0];
}

// The state inputs of every tensor (W and the optimizer's state, not G), in output order.
std::vector<Tensor> state_inputs(const OptimizerUpdateLayout& l, const Inputs& in) {
  std::vector<Tensor> out;
  for (size_t t = 0; t < l.tensors; ++t)
    for (size_t k = 0; k < l.inputs_per_tensor; ++k)
      if (k != 1) out.push_back(in.at(l.input(t, k)));
  return out;
}

// dc.SgdUpdate((W, G[, M])...) -> ((W'[, M'])...), one group per tensor of the bucket
// (ir/optimizer_update.h). attrs lr, momentum, weight_decay. PyTorch's SGD (dampening 0, no
// Nesterov): g += wd * w; m = momentum * m + g; w -= lr * m. Without M (momentum 0):
// w -= lr * g.
std::vector<Tensor> run_sgd_update(const Node& node, const Inputs& in) {
  const OptimizerUpdateLayout l = optimizer_update_layout(node);
  const bool has_m = l.inputs_per_tensor == 3;
  const float lr = node.attrs.get_float("lr"), mu = node.attrs.get_float("momentum", 0.f);
  const float wd = node.attrs.get_float("weight_decay", 0.f);
  const float inv_scale = inverse_scale(node, l, in);
  std::vector<Tensor> out;
  for (size_t t = 0; t < l.tensors; ++t) {
    const Inputs group(in.begin() + static_cast<long>(l.input(t, 0)), in.begin() + static_cast<long>(l.input(t + 1, 0)));
    require_same_shape(node, group, l.inputs_per_tensor);
    Tensor w(DType::f32, group[0].shape()), m(DType::f32, group[0].shape());
    const float *wp = group[0].data<float>(), *gp = group[1].data<float>();
    const float* mp = has_m ? group[2].data<float>() : nullptr;
    float *wo = w.mutable_data<float>(), *mo = m.mutable_data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) {
      const float g = gp[i] * inv_scale + wd * wp[i];
      mo[i] = has_m ? mu * mp[i] + g : g;
      wo[i] = wp[i] - lr * mo[i];
    }
    out.push_back(std::move(w));
    if (has_m) out.push_back(std::move(m));
  }
  return skipped(node, l, in) ? state_inputs(l, in) : out;
}

// dc.AdamWUpdate((W, G, m, v)..., step) -> ((W', m', v')...), one group per tensor of the
// bucket. attrs lr, beta1, beta2, epsilon, weight_decay. PyTorch's AdamW (amsgrad off),
// t = step + 1: w *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
std::vector<Tensor> run_adamw_update(const Node& node, const Inputs& in) {
  const OptimizerUpdateLayout l = optimizer_update_layout(node);
  const int64_t t = step_of(node, in.at(l.step())) + 1;
  const double lr = node.attrs.get_float("lr"), b1 = node.attrs.get_float("beta1");
  const double b2 = node.attrs.get_float("beta2"), eps = node.attrs.get_float("epsilon");
  const double wd = node.attrs.get_float("weight_decay", 0.f);
  const double bc1 = 1 - std::pow(b1, static_cast<double>(t));
  const double bc2_sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(t)));
  const float inv_scale = inverse_scale(node, l, in);
  std::vector<Tensor> out;
  for (size_t k = 0; k < l.tensors; ++k) {
    const Inputs group(in.begin() + static_cast<long>(l.input(k, 0)), in.begin() + static_cast<long>(l.input(k + 1, 0)));
    require_same_shape(node, group, 4);
    Tensor w(DType::f32, group[0].shape()), m(DType::f32, group[0].shape()), v(DType::f32, group[0].shape());
    const float *wp = group[0].data<float>(), *gp = group[1].data<float>();
    const float *mp = group[2].data<float>(), *vp = group[3].data<float>();
    float *wo = w.mutable_data<float>(), *mo = m.mutable_data<float>(), *vo = v.mutable_data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double g = gp[i] * inv_scale;
      const double mi = b1 * mp[i] + (1 - b1) * g, vi = b2 * vp[i] + (1 - b2) * g * g;
      const double denom = std::sqrt(vi) / bc2_sqrt + eps;
      wo[i] = static_cast<float>(wp[i] * (1 - lr * wd) - lr / bc1 * mi / denom);
      mo[i] = static_cast<float>(mi);
      vo[i] = static_cast<float>(vi);
    }
    out.push_back(std::move(w));
    out.push_back(std::move(m));
    out.push_back(std::move(v));
  }
  return skipped(node, l, in) ? state_inputs(l, in) : out;
}

// dc.NonFiniteCheck(G1, ..., Gn) -> flags [F]: flags[f] = 1 when an element e of any G with
// e % F == f is inf or NaN, else 0 (ir/nonfinite_check.h).
std::vector<Tensor> run_nonfinite_check(const Node& node, const Inputs& in) {
  const int64_t lanes = node.attrs.get_int("lanes", 0);
  DC_USER_CHECK(lanes >= 1, node.op, ": attribute lanes must be at least 1");
  Tensor flags(DType::f32, {lanes});
  float* f = flags.mutable_data<float>();
  std::fill(f, f + lanes, 0.f);
  for (const Tensor& g : in) {
    require_f32(node, g, "every gradient");
    const float* gp = g.data<float>();
    for (int64_t e = 0; e < g.numel(); ++e)
      if (!std::isfinite(gp[e])) f[e % lanes] = 1.f;
  }
  return {flags};
}

// dc.MultiCast(W1, ..., Wn) -> (w1, ..., wn): each wi = Cast(Wi, to), the Cast's rounding
// (ir/multi_cast.h).
std::vector<Tensor> run_multi_cast(const Node& node, const Inputs& in) {
  const auto to = dtype_from_onnx(static_cast<int32_t>(node.attrs.get_int("to")));
  DC_USER_CHECK(to && is_float(*to), node.op, ": attribute 'to' must be a float dtype");
  DC_USER_CHECK(in.size() == node.outputs.size(), node.op, ": ", in.size(), " inputs but ", node.outputs.size(),
                " outputs");
  std::vector<Tensor> out;
  for (const Tensor& w : in) {
    require_f32(node, w, "every weight");
    out.push_back(convert_float(w, *to));
  }
  return out;
}

const OpDef kOps[] = {
    {"dc.Dropout", run_dropout, nullptr},
    {"dc.BatchNormTrain", run_batch_norm_train, nullptr},
    {"dc.BatchNormStats", run_batch_norm_stats, nullptr},
    {"dc.SoftmaxCrossEntropy", run_softmax_cross_entropy, nullptr},
    {"dc.SoftmaxCrossEntropyGrad", run_softmax_cross_entropy_grad, nullptr},
    {"dc.SgdUpdate", run_sgd_update, nullptr},
    {"dc.AdamWUpdate", run_adamw_update, nullptr},
    {kNonFiniteCheck, run_nonfinite_check, nullptr},
    {kMultiCast, run_multi_cast, nullptr},
};

}  // namespace

std::span<const OpDef> training_ops() { return kOps; }

}  // namespace dc::ref
