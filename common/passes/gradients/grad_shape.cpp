// Gradients of data movement: Reshape, Flatten, Squeeze, Unsqueeze (the gradient reshaped
// back), Transpose (the inverse permutation), Expand (summed back), Concat (one Slice per
// input), Split (a Concat, zeros for outputs without a gradient), Slice (a Pad, unit steps),
// Pad (a Slice, constant mode), Where, and Gather as an embedding (dc.GatherGrad:
// scatter-add, duplicate indices summed).
#include <algorithm>

#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

const std::string& in(const GradCall& c, size_t i) { return c.node.inputs.at(i); }

// A constant integer operand: attribute `attr` (older opsets) or initializer input `idx`.
std::vector<int64_t> const_ints(const GradBuilder& b, const GradCall& c, const char* attr,
                                size_t idx, bool required) {
  if (c.node.attrs.has(attr)) return c.node.attrs.get_ints(attr);
  if (c.node.has_input(idx)) {
    const auto it = b.graph().initializers.find(in(c, idx));
    if (it == b.graph().initializers.end()) no_gradient(c, str_cat("'", attr, "' is not a constant"));
    return it->second.to_int64_vector();
  }
  if (required) no_gradient(c, str_cat("'", attr, "' is missing"));
  return {};
}

Grads reshape_back(GradBuilder& b, const GradCall& c) {
  Grads g(c.node.inputs.size());
  g[0] = b.reshape(c.dy[0], b.shape(in(c, 0)));
  return g;
}

Grads transpose_rule(GradBuilder& b, const GradCall& c) {
  const size_t rank = b.shape(in(c, 0)).size();
  std::vector<int64_t> perm = c.node.attrs.get_ints("perm", {});
  if (perm.empty())
    for (size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int64_t>(rank - 1 - d));
  std::vector<int64_t> inverse(rank);
  for (size_t d = 0; d < rank; ++d) inverse[static_cast<size_t>(perm[d])] = static_cast<int64_t>(d);
  return {b.transpose(c.dy[0], inverse)};
}

Grads expand_rule(GradBuilder& b, const GradCall& c) {
  return {b.sum_to(c.dy[0], b.shape(in(c, 0))), ""};
}

std::string slice(GradBuilder& b, const std::string& x, const std::vector<int64_t>& starts,
                  const std::vector<int64_t>& ends, const std::vector<int64_t>& axes) {
  Shape out = b.shape(x);
  for (size_t i = 0; i < axes.size(); ++i) out[static_cast<size_t>(axes[i])] = ends[i] - starts[i];
  return b.node1("Slice", {x, b.ints(starts), b.ints(ends), b.ints(axes)},
                 TensorInfo{b.info(x).dtype, out});
}

Grads concat_rule(GradBuilder& b, const GradCall& c) {
  const size_t rank = b.shape(in(c, 0)).size();
  int64_t axis = c.node.attrs.get_int("axis");
  if (axis < 0) axis += static_cast<int64_t>(rank);
  Grads g(c.node.inputs.size());
  int64_t offset = 0;
  for (size_t i = 0; i < c.node.inputs.size(); ++i) {
    const int64_t len = b.shape(in(c, i))[static_cast<size_t>(axis)];
    if (c.want(i)) g[i] = slice(b, c.dy[0], {offset}, {offset + len}, {axis});
    offset += len;
  }
  return g;
}

Grads split_rule(GradBuilder& b, const GradCall& c) {
  const Shape& x = b.shape(in(c, 0));
  int64_t axis = c.node.attrs.get_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  std::vector<std::string> parts;
  for (size_t k = 0; k < c.node.outputs.size(); ++k) {
    const TensorInfo& t = b.info(c.node.outputs[k]);
    parts.push_back(k < c.dy.size() && !c.dy[k].empty() ? c.dy[k] : b.constant(Tensor(t.dtype, t.shape)));
  }
  Attributes a;
  a.set("axis", axis);
  Grads g(c.node.inputs.size());
  g[0] = b.node1("Concat", parts, b.info(in(c, 0)), a);
  return g;
}

// Slice with unit steps: the gradient padded back with zeros to the input's shape.
Grads slice_rule(GradBuilder& b, const GradCall& c) {
  const Shape& x = b.shape(in(c, 0));
  const Shape& y = b.shape(c.node.outputs[0]);
  const auto starts = const_ints(b, c, "starts", 1, true);
  auto axes = const_ints(b, c, "axes", 3, false);
  const auto steps = const_ints(b, c, "steps", 4, false);
  for (int64_t s : steps)
    if (s != 1) no_gradient(c, "steps other than 1");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> pads(2 * x.size(), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto d = static_cast<size_t>(axes[i] < 0 ? axes[i] + static_cast<int64_t>(x.size()) : axes[i]);
    int64_t s = starts[i] < 0 ? starts[i] + x[d] : starts[i];
    s = std::clamp<int64_t>(s, 0, x[d]);
    pads[d] = s;
    pads[d + x.size()] = x[d] - s - y[d];
  }
  Grads g(c.node.inputs.size());
  g[0] = b.node1("Pad", {c.dy[0], b.ints(pads)}, b.info(in(c, 0)));
  return g;
}

// Pad in constant mode: the gradient is the slice of dy the input landed in.
Grads pad_rule(GradBuilder& b, const GradCall& c) {
  if (c.node.attrs.get_string("mode", "constant") != "constant") no_gradient(c, "modes other than constant");
  const Shape& x = b.shape(in(c, 0));
  const auto pads = const_ints(b, c, "pads", 1, true);
  if (c.node.has_input(3)) no_gradient(c, "the axes input");
  std::vector<int64_t> starts, ends, axes;
  for (size_t d = 0; d < x.size(); ++d) {
    if (pads[d] < 0 || pads[d + x.size()] < 0) no_gradient(c, "negative pads");
    starts.push_back(pads[d]);
    ends.push_back(pads[d] + x[d]);
    axes.push_back(static_cast<int64_t>(d));
  }
  Grads g(c.node.inputs.size());
  g[0] = slice(b, c.dy[0], starts, ends, axes);
  return g;
}

Grads where_rule(GradBuilder& b, const GradCall& c) {
  Grads g(3);
  if (c.want(1)) g[1] = b.sum_to(b.where(in(c, 0), c.dy[0], b.zero(c.dy[0])), b.shape(in(c, 1)));
  if (c.want(2)) g[2] = b.sum_to(b.where(in(c, 0), b.zero(c.dy[0]), c.dy[0]), b.shape(in(c, 2)));
  return g;
}

Grads gather_rule(GradBuilder& b, const GradCall& c) {
  const Shape& data = b.shape(in(c, 0));
  Attributes a;
  a.set("axis", c.node.attrs.get_int("axis", 0));
  a.set("data_shape", std::vector<int64_t>(data.begin(), data.end()));
  return {b.node1("dc.GatherGrad", {c.dy[0], in(c, 1)}, b.info(in(c, 0)), a), ""};
}

const GradRuleDef kRules[] = {
    {"Reshape", reshape_back},     {"Flatten", reshape_back},
    {"Squeeze", reshape_back},     {"Unsqueeze", reshape_back},
    {"Transpose", transpose_rule}, {"Expand", expand_rule},
    {"Concat", concat_rule},       {"Split", split_rule},
    {"Slice", slice_rule},         {"Pad", pad_rule},
    {"Where", where_rule},         {"Gather", gather_rule},
};

}  // namespace

std::span<const GradRuleDef> shape_gradients() { return kRules; }

}  // namespace dc::grad
