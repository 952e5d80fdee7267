// Gradients of normalisations and reductions: LayerNormalization (row means and elementwise
// ops from its saved statistics),
// Softmax and LogSoftmax (elementwise compositions with one ReduceSum), ReduceSum and
// ReduceMean (the gradient expanded back over the reduced axes). BatchNormalization is
// rewritten to dc.BatchNormTrain before differentiation (grad_training_ops.cpp).
#include <algorithm>

#include "ir/error.h"
#include "ir/reduced_axes.h"
#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

const std::string& in(const GradCall& c, size_t i) { return c.node.inputs.at(i); }

int64_t normalize(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

// ReduceMean over `axes` with keepdims (axes as the attribute, which every opset reads).
std::string reduce_mean(GradBuilder& b, const std::string& x, const std::vector<int64_t>& axes) {
  Shape out = b.shape(x);
  for (int64_t a : axes) out[static_cast<size_t>(a)] = 1;
  Attributes attrs;
  attrs.set("axes", axes);
  attrs.set("keepdims", int64_t{1});
  return b.node1("ReduceMean", {x}, TensorInfo{b.info(x).dtype, out}, attrs);
}

// The row statistics of a LayerNormalization: its saved Mean and InvStdDev outputs (the
// training forward adds them, training_forward.h), else recomputed (two-pass, as the forward).
std::pair<std::string, std::string> layer_norm_statistics(GradBuilder& b, const GradCall& c,
                                                          const std::vector<int64_t>& axes) {
  const auto& outs = c.node.outputs;
  if (outs.size() == 3 && !outs[1].empty() && !outs[2].empty()) return {outs[1], outs[2]};
  const std::string& x = in(c, 0);
  const std::string mean = reduce_mean(b, x, axes);
  const std::string d = b.sub(x, mean);
  const std::string var = reduce_mean(b, b.mul(d, d), axes);
  const double eps = c.node.attrs.get_float("epsilon", 1e-5f);
  const std::string std = b.unary("Sqrt", b.add(var, b.scalar(eps, b.info(x).dtype)));
  return {mean, b.unary("Reciprocal", std)};
}

// True for a scale that is a constant of ones (no gradient of its own, so it never changes
// between steps): the LayerNorm that fuse_layer_norm makes of a decomposed one, whose weight
// and bias stay separate Mul and Add nodes in training.
bool unit_scale(const GradBuilder& b, const GradCall& c) {
  if (c.want(1)) return false;
  const auto it = b.graph().initializers.find(in(c, 1));
  if (it == b.graph().initializers.end() || it->second.dtype() != DType::f32) return false;
  const float* v = it->second.data<float>();
  return std::all_of(v, v + it->second.numel(), [](float f) { return f == 1.f; });
}

// With x_hat = (x - mean) * invstd and g = dY * scale over the normalised axes A:
//   dX = invstd * (g - mean_A(g) - x_hat * mean_A(g * x_hat)),
//   dscale = sum over the rows of dY * x_hat, dB = sum over the rows of dY.
// ONNX ops only, written as the linear chains the candidate generator fuses
// (docs/candidates.md: a chain follows one input; a reduction takes 3 prologue and 2
// epilogue steps), each consumer with its own copy of what it reads:
//   m1 = mean_A(dY * scale)                                    row_reduce, 1 prologue step
//   k  = mean_A((x - mean) * scale * dY) * invstd * invstd    row_reduce, 3 + 2 steps
//   u  = (x - mean) * k                                        elementwise (written)
//   dX = (dY * scale - m1 - u) * invstd                        elementwise
// (k * (x - mean) = x_hat * mean_A(g * x_hat), invstd being constant along a row). dX joins
// two products of different full-size tensors, so u is written; with a unit scale it is
// one chain from x, (dY - ((x - mean) * k + m1)) * invstd: three kernels.
Grads layer_norm_rule(GradBuilder& b, const GradCall& c) {
  DC_USER_CHECK(c.dy.size() < 2 || (c.dy[1].empty() && (c.dy.size() < 3 || c.dy[2].empty())),
                "node '", c.node.name, "' (LayerNormalization): gradients through its Mean and "
                "InvStdDev outputs are not supported");
  const std::string& x = in(c, 0);
  const std::string& scale = in(c, 1);
  const std::string& dy = c.dy[0];
  const size_t rank = b.shape(x).size();
  std::vector<int64_t> axes;
  for (auto a = normalize(c.node.attrs.get_int("axis", -1), rank); a < static_cast<int64_t>(rank); ++a)
    axes.push_back(a);
  const auto [mean, invstd] = layer_norm_statistics(b, c, axes);
  auto centred = [&] { return b.sub(x, mean); };
  Grads grads(c.node.inputs.size());
  if (c.want(0) && unit_scale(b, c)) {
    const std::string m1 = reduce_mean(b, dy, axes);
    const std::string k = b.mul(b.mul(reduce_mean(b, b.mul(centred(), dy), axes), invstd), invstd);
    grads[0] = b.mul(b.sub(dy, b.add(b.mul(centred(), k), m1)), invstd);
  } else if (c.want(0)) {
    const std::string m1 = reduce_mean(b, b.mul(dy, scale), axes);
    const std::string k =
        b.mul(b.mul(reduce_mean(b, b.mul(b.mul(centred(), scale), dy), axes), invstd), invstd);
    const std::string u = b.mul(centred(), k);
    grads[0] = b.mul(b.sub(b.sub(b.mul(dy, scale), m1), u), invstd);
  }
  if (c.want(1)) grads[1] = b.sum_to(b.mul(dy, b.mul(centred(), invstd)), b.shape(scale));
  if (c.want(2)) grads[2] = b.sum_to(dy, b.shape(in(c, 2)));
  return grads;
}

// The softmax axis; opsets before 13 flatten to 2-D at `axis`, which is the same only for
// the last axis.
int64_t softmax_axis(const GradBuilder& b, const GradCall& c) {
  const size_t rank = b.shape(in(c, 0)).size();
  const bool old = b.graph().opset > 0 && b.graph().opset < 13;
  const int64_t axis = normalize(c.node.attrs.get_int("axis", old ? 1 : -1), rank);
  DC_USER_CHECK(!old || axis == static_cast<int64_t>(rank) - 1, "node '", c.node.name, "' (",
                c.node.op, "): the gradient of an opset < 13 ", c.node.op,
                " over other than the last axis is not supported");
  return axis;
}

// dx = y * (dy - sum(dy * y, axis)).
Grads softmax_rule(GradBuilder& b, const GradCall& c) {
  const std::string& y = c.node.outputs[0];
  const std::string s = b.reduce_sum(b.mul(c.dy[0], y), {softmax_axis(b, c)}, true);
  return {b.mul(y, b.sub(c.dy[0], s))};
}

// dx = dy - exp(y) * sum(dy, axis).
Grads log_softmax_rule(GradBuilder& b, const GradCall& c) {
  const std::string& y = c.node.outputs[0];
  const std::string s = b.reduce_sum(c.dy[0], {softmax_axis(b, c)}, true);
  return {b.sub(c.dy[0], b.mul(b.unary("Exp", y), s))};
}

// The reduced axes of a Reduce* node (attribute or constant input), all when none given.
std::vector<int64_t> reduced_axes(const GradBuilder& b, const GradCall& c) {
  const ReducedAxes r = dc::reduced_axes(b.graph(), c.node);
  DC_USER_CHECK(!r.runtime_axes, "node '", c.node.name, "' (", c.node.op, "): the gradient needs constant axes");
  DC_USER_CHECK(!r.noop, "node '", c.node.name, "' (", c.node.op, "): noop_with_empty_axes is not supported "
                "in training");
  return r.axes;
}

template <bool kMean>
Grads reduce_rule(GradBuilder& b, const GradCall& c) {
  const Shape& x = b.shape(in(c, 0));
  const auto axes = reduced_axes(b, c);
  Shape kept = x;
  int64_t count = 1;
  for (int64_t a : axes) {
    count *= x[static_cast<size_t>(a)];
    kept[static_cast<size_t>(a)] = 1;
  }
  std::string g = b.expand(b.reshape(c.dy[0], kept), x);
  if (kMean) g = b.scale(g, 1.0 / static_cast<double>(count));
  return {g, ""};
}

const GradRuleDef kRules[] = {
    {"LayerNormalization", layer_norm_rule},
    {"Softmax", softmax_rule},
    {"LogSoftmax", log_softmax_rule},
    {"ReduceSum", reduce_rule<false>},
    {"ReduceMean", reduce_rule<true>},
};

}  // namespace

std::span<const GradRuleDef> norm_gradients() { return kRules; }

}  // namespace dc::grad
