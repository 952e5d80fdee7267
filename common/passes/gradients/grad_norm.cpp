// Gradients of normalisations and reductions: LayerNormalization (dc.LayerNormGrad),
// Softmax and LogSoftmax (elementwise compositions with one ReduceSum), ReduceSum and
// ReduceMean (the gradient expanded back over the reduced axes). BatchNormalization is
// rewritten to dc.BatchNormTrain before differentiation (grad_training_ops.cpp).
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

Grads layer_norm_rule(GradBuilder& b, const GradCall& c) {
  DC_USER_CHECK(c.dy.size() < 2 || (c.dy[1].empty() && (c.dy.size() < 3 || c.dy[2].empty())),
                "node '", c.node.name, "' (LayerNormalization): gradients through its Mean and "
                "InvStdDev outputs are not supported");
  Attributes a;
  a.set("axis", c.node.attrs.get_int("axis", -1));
  a.set("epsilon", c.node.attrs.get_float("epsilon", 1e-5f));
  const auto outs = b.node("dc.LayerNormGrad", {c.dy[0], in(c, 0), in(c, 1)},
                           {b.info(in(c, 0)), b.info(in(c, 1)), b.info(in(c, 1))}, a);
  Grads g(c.node.inputs.size());
  if (c.want(0)) g[0] = outs[0];
  if (c.want(1)) g[1] = outs[1];
  if (c.want(2)) g[2] = b.sum_to(outs[2], b.shape(in(c, 2)));
  return g;
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
