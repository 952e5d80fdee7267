// Gradients of Conv as ops the tuned implicit-GEMM template serves (docs/training.md,
// "Convolution gradients"):
//  - data gradient: ConvTranspose(dY, W) with Conv's window. ConvTranspose's weight layout
//    [C_in, C_out / group, k...] is Conv's W [M, C / group, k...] as stored (C_in = M), so W
//    is read in place (no transpose, no flip); output_padding gives back the input rows past
//    the last window that a strided forward never read (their gradient is 0);
//  - weight gradient (more than one input channel per group): dc.ConvGradWeight(X, dY) with
//    Conv's attributes and weight_shape, dW[m, c, k] = sum over n, o of dY[n, m, o]
//    X[n, g C / group + c, o * stride + k * dilation - pad] for m in group g: the
//    implicit-GEMM template's weight-gradient mode (per group M / group filters x C / group *
//    taps columns, K = N * output pixels, the groups as the GEMM's batch, split-K over the
//    long K) reads dY and X in their natural layouts and writes dW [M, C / group, k...]
//    directly. One input channel per group (depthwise): a Conv with a group per (image,
//    channel), X and dY as views, Conv's dilation as the stride and its stride as the
//    dilation, then a ReduceSum of the per-image partials over the images.
//  - bias gradient: ReduceSum of dY over the batch and spatial axes.
#include "ir/error.h"
#include "passes/gradients/gradient_rules.h"
#include "ref/im2col.h"

namespace dc::grad {

namespace {

using Grads = std::vector<std::string>;

const std::string& in(const GradCall& c, size_t i) { return c.node.inputs.at(i); }

// Slot of spatial dim i (of r) in a Window's right-aligned arrays.
size_t slot(size_t i, size_t r) { return ref::Window::kMaxRank - r + i; }

ref::Window conv_window(const Node& n, const Shape& x, const Shape& w) {
  return ref::make_window(n, {"Conv", false}, Shape(x.begin() + 2, x.end()), Shape(w.begin() + 2, w.end()));
}

// Rows past the last window: input extent minus the extent that the windows reach.
int64_t dropped_rows(const ref::Window& win, size_t d) {
  const int64_t reach = win.stride[d] * (win.out[d] - 1) + (win.kernel[d] - 1) * win.dilation[d] + 1 -
                        win.pad_begin[d] - win.pad_end[d];
  return win.in[d] - reach;  // in [0, stride): the forward's floor division dropped them
}

std::string data_gradient(GradBuilder& b, const GradCall& c) {
  const Shape x = b.shape(in(c, 0)), w = b.shape(in(c, 1));  // copies: nodes are added below
  const ref::Window win = conv_window(c.node, x, w);
  const size_t r = x.size() - 2;
  std::vector<int64_t> kernel(w.begin() + 2, w.end()), strides, dilations, pads(2 * r), out_pad;
  for (size_t i = 0; i < r; ++i) {
    const size_t d = slot(i, r);
    strides.push_back(win.stride[d]);
    dilations.push_back(win.dilation[d]);
    pads[i] = win.pad_begin[d];
    pads[i + r] = win.pad_end[d];
    out_pad.push_back(dropped_rows(win, d));
  }
  Attributes a;
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("dilations", dilations);
  a.set("pads", pads);
  a.set("output_padding", out_pad);
  a.set("group", c.node.attrs.get_int("group", 1));
  return b.node1("ConvTranspose", {c.dy[0], in(c, 1)}, b.info(in(c, 0)), a);
}

// The weight gradient of a Conv with more than one input channel per group: one node the
// implicit-GEMM template computes in its weight-gradient mode (codegen/template_gemm.cpp),
// the reference op of ops_grad_conv.cpp.
std::string weight_gradient_node(GradBuilder& b, const GradCall& c) {
  Attributes a = c.node.attrs;
  const Shape& w = b.shape(in(c, 1));
  a.set("weight_shape", std::vector<int64_t>(w.begin(), w.end()));
  return b.node1("dc.ConvGradWeight", {in(c, 0), c.dy[0]}, b.info(in(c, 1)), a);
}

// One input channel per group: per (image, channel) a Conv of the image's channel with its
// dY plane as the filter (both operands views: X as 1 image of N C channels, dY as N M
// filters of one channel), the [1, N M, k...] per-image partial sums summed over the images.
std::string depthwise_weight_gradient(GradBuilder& b, const GradCall& c) {
  const Shape x = b.shape(in(c, 0)), w = b.shape(in(c, 1));  // copies: nodes are added below
  const Shape dy = b.shape(c.dy[0]);
  const ref::Window win = conv_window(c.node, x, w);
  const size_t r = x.size() - 2;
  // The per-image Conv's pads: Conv's at the beginning; at the end Conv's less the dropped
  // rows, which makes its output extent exactly the kernel's. Where that is negative, no
  // end pad, and the few extra output rows are sliced off.
  std::vector<int64_t> strides, dilations, pads(2 * r), filter(dy.begin() + 2, dy.end());
  std::vector<int64_t> starts, ends, axes;
  Shape partial_out{1, x[0] * w[0]};
  bool slice = false;
  for (size_t i = 0; i < r; ++i) {
    const size_t d = slot(i, r);
    strides.push_back(win.dilation[d]);
    dilations.push_back(win.stride[d]);
    pads[i] = win.pad_begin[d];
    pads[i + r] = std::max<int64_t>(0, win.pad_end[d] - dropped_rows(win, d));
    const int64_t extent = (win.in[d] + pads[i] + pads[i + r] - ((win.out[d] - 1) * win.stride[d] + 1)) /
                               win.dilation[d] + 1;
    DC_INTERNAL_CHECK(extent >= w[2 + i], "weight gradient's Conv extent ", extent, " < kernel ", w[2 + i]);
    slice = slice || extent != w[2 + i];
    partial_out.push_back(extent);
    starts.push_back(0);
    ends.push_back(w[2 + i]);
    axes.push_back(static_cast<int64_t>(2 + i));
  }
  Attributes a;
  a.set("kernel_shape", filter);
  a.set("strides", strides);
  a.set("dilations", dilations);
  a.set("pads", pads);
  a.set("group", x[0] * x[1]);
  const DType dt = b.info(in(c, 1)).dtype;
  Shape xs = x, ys = dy;
  xs[1] *= xs[0];
  xs[0] = 1;
  ys[0] *= ys[1];
  ys[1] = 1;
  std::string g =
      b.node1("Conv", {b.reshape(in(c, 0), xs), b.reshape(c.dy[0], ys)}, TensorInfo{dt, partial_out}, a);
  Shape cut = partial_out;
  for (size_t i = 0; i < r; ++i) cut[2 + i] = w[2 + i];
  if (slice) g = b.node1("Slice", {g, b.ints(starts), b.ints(ends), b.ints(axes)}, TensorInfo{dt, cut});
  Shape per_image = cut;  // [N, M, k...]
  per_image[0] = x[0];
  per_image[1] = w[0];
  if (x[0] > 1) g = b.reduce_sum(b.reshape(g, per_image), {0}, false);
  return b.reshape(g, w);
}

// Depthwise keeps its per-image form: in the weight-gradient mode each group would be a
// multiplier x taps GEMM padded to 16 x 16 tiles, several times slower at 224x224 by the
// estimates (docs/training.md "Grouped and depthwise").
std::string weight_gradient(GradBuilder& b, const GradCall& c) {
  return b.shape(in(c, 1))[1] > 1 ? weight_gradient_node(b, c) : depthwise_weight_gradient(b, c);
}

Grads conv_rule(GradBuilder& b, const GradCall& c) {
  Grads g(c.node.inputs.size());
  if (c.want(0)) g[0] = data_gradient(b, c);
  if (c.want(1)) g[1] = weight_gradient(b, c);
  if (c.want(2)) g[2] = b.sum_per_channel(c.dy[0]);
  return g;
}

const GradRuleDef kRules[] = {
    {"Conv", conv_rule},
};

}  // namespace

std::span<const GradRuleDef> conv_gradients() { return kRules; }

}  // namespace dc::grad
