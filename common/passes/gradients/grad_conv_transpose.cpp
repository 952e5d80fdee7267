// Gradients of ConvTranspose through the Conv that is its adjoint. ConvTranspose is the data
// gradient of a Conv (ref/conv_transpose.h), so with its window (strides, dilations, the
// pads it resolved, group) and W [C, M / group, k...] read as a Conv weight:
//  - data gradient: dX = Conv(dY, W) -- that Conv's output extent is the input's exactly,
//    since output_padding < stride only adds rows no window of it reaches;
//  - weight gradient: dW[c, m, k] = sum over n, i of X[n, c, i] dY[n, m, i * stride + k *
//    dilation - pad], which is the weight gradient of that same Conv Z = Conv(dY, W) when
//    X is Z's gradient: Conv's rule (grad_conv.cpp) builds it, on the tuned template;
//  - bias gradient: ReduceSum of dY over the batch and spatial axes.
#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"
#include "ref/conv_transpose.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

const std::string& in(const GradCall& c, size_t i) { return c.node.inputs.at(i); }

// The Conv over dY whose data gradient the node is: the node's window as Conv attributes.
Node adjoint_conv(const GradCall& c, const Shape& x, const Shape& w) {
  const ref::ConvTransposeGeometry geo = ref::conv_transpose_geometry(c.node, x, w, nullptr);
  const ref::Window& win = geo.window;
  const size_t r = x.size() - 2;
  std::vector<int64_t> kernel(w.begin() + 2, w.end()), strides, dilations, pads(2 * r);
  for (size_t i = 0; i < r; ++i) {
    const size_t d = ref::Window::kMaxRank - r + i;
    if (win.pad_begin[d] < 0 || win.pad_end[d] < 0)
      no_gradient(c, "an output_shape beyond the extent its windows reach (negative padding)");
    // The adjoint Conv's extent: floor((stride * (in - 1) + extra) / stride) + 1 == in
    // exactly when the extra rows (output_padding, or output_shape's) are fewer than stride.
    const int64_t reach = win.out[d] + win.pad_begin[d] + win.pad_end[d] - (win.kernel[d] - 1) * win.dilation[d] - 1;
    if (reach / win.stride[d] + 1 != win.in[d])
      no_gradient(c, str_cat("output_padding of ", reach - win.stride[d] * (win.in[d] - 1),
                             " rows in spatial dim ", i, ", not below the stride ", win.stride[d]));
    strides.push_back(win.stride[d]);
    dilations.push_back(win.dilation[d]);
    pads[i] = win.pad_begin[d];
    pads[i + r] = win.pad_end[d];
  }
  Node conv;
  conv.name = c.node.name;
  conv.op = "Conv";
  conv.inputs = {c.dy[0], in(c, 1)};
  conv.outputs = {in(c, 0)};
  conv.attrs.set("kernel_shape", kernel);
  conv.attrs.set("strides", strides);
  conv.attrs.set("dilations", dilations);
  conv.attrs.set("pads", pads);
  conv.attrs.set("group", geo.group);
  return conv;
}

Grads conv_transpose_rule(GradBuilder& b, const GradCall& c) {
  Grads g(c.node.inputs.size());
  const Shape x = b.shape(in(c, 0)), w = b.shape(in(c, 1));  // copies: nodes are added below
  const Node conv = adjoint_conv(c, x, w);
  if (c.want(0)) g[0] = b.node1("Conv", conv.inputs, b.info(in(c, 0)), conv.attrs);
  if (c.want(1)) {
    const GradRuleDef* conv_rule = find_gradient_rule("Conv");
    DC_INTERNAL_CHECK(conv_rule != nullptr, "ConvTranspose's gradient needs Conv's rule");
    g[1] = conv_rule->rule(b, GradCall{conv, {in(c, 0)}, {false, true}})[1];
  }
  if (c.want(2)) g[2] = b.sum_per_channel(c.dy[0]);
  return g;
}

const GradRuleDef kRules[] = {
    {"ConvTranspose", conv_transpose_rule},
};

}  // namespace

std::span<const GradRuleDef> conv_transpose_gradients() { return kRules; }

}  // namespace dc::grad
