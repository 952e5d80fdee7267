// Reference kernels of the windowed ops' gradients (dc-internal, docs/training.md):
// dc.ConvGradData and dc.ConvGradWeight (im2col and SGEMM, as the forward Conv), and
// dc.MaxPoolGrad / dc.AveragePoolGrad. Each grad node carries its forward node's attributes
// (strides, pads, dilations, auto_pad, group, kernel_shape, ...) so that make_window derives
// the same geometry.
#include <algorithm>
#include <limits>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/gemm.h"
#include "ref/im2col.h"
#include "ref/kernel.h"
#include "ref/training_ops.h"

namespace dc::ref {

namespace {

std::vector<int64_t> spatial(const Shape& s) { return {s.begin() + 2, s.end()}; }

void require_f32(const Node& node, const Tensor& t, const char* what) {
  DC_USER_CHECK(t.defined() && t.dtype() == DType::f32, node.op, ": ", what,
                " must be an f32 tensor");
}

// Conv geometry of a grad node: x and w shapes, the window and the group split.
struct ConvDims {
  Shape x, w;
  Window window;
  int64_t group = 1, cg = 0, mg = 0;  // channels and filters per group
};

ConvDims conv_dims(const Node& node, Shape x, Shape w) {
  ConvDims d;
  d.x = std::move(x);
  d.w = std::move(w);
  DC_USER_CHECK(d.x.size() >= 3 && d.w.size() == d.x.size(), node.op, ": bad shapes X ",
                shape_str(d.x), " W ", shape_str(d.w));
  d.group = node.attrs.get_int("group", 1);
  d.cg = d.x[1] / d.group;
  d.mg = d.w[0] / d.group;
  d.window = make_window(node, {"Conv", false}, spatial(d.x), spatial(d.w));
  return d;
}

void check_dy(const Node& node, const Tensor& dy, const ConvDims& d) {
  Shape want{d.x[0], d.w[0]};
  for (int64_t o : d.window.out_dims()) want.push_back(o);
  DC_USER_CHECK(dy.shape() == want, node.op, ": dY has shape ", shape_str(dy.shape()),
                ", expected ", shape_str(want));
}

// Adds the columns of `col` (rows (c, kernel taps), columns output positions) back into
// the input image x: the adjoint of im2col.
void col2im(const float* col, int64_t channels, const Window& w, float* x) {
  const int64_t ksize = w.kernel_size(), osize = w.out_size(), isize = w.in_size();
  parallel_for(channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t k = 0; k < ksize; ++k) {
        const int64_t kd = k / (w.kernel[1] * w.kernel[2]);
        const int64_t kh = k / w.kernel[2] % w.kernel[1], kw = k % w.kernel[2];
        const float* src = col + (c * ksize + k) * osize;
        float* dst = x + c * isize;
        for (int64_t od = 0; od < w.out[0]; ++od) {
          const int64_t id = od * w.stride[0] - w.pad_begin[0] + kd * w.dilation[0];
          if (id < 0 || id >= w.in[0]) continue;
          for (int64_t oh = 0; oh < w.out[1]; ++oh) {
            const int64_t ih = oh * w.stride[1] - w.pad_begin[1] + kh * w.dilation[1];
            if (ih < 0 || ih >= w.in[1]) continue;
            for (int64_t ow = 0; ow < w.out[2]; ++ow) {
              const int64_t iw = ow * w.stride[2] - w.pad_begin[2] + kw * w.dilation[2];
              if (iw < 0 || iw >= w.in[2]) continue;
              dst[(id * w.in[1] + ih) * w.in[2] + iw] += src[(od * w.out[1] + oh) * w.out[2] + ow];
            }
          }
        }
      }
  });
}

// dc.ConvGradData(dY, W) -> dX. attr input_shape: X's shape.
std::vector<Tensor> run_conv_grad_data(const Node& node, const Inputs& in) {
  require_f32(node, in.at(0), "dY");
  require_f32(node, in.at(1), "W");
  const ConvDims d = conv_dims(node, node.attrs.get_ints("input_shape"), in[1].shape());
  check_dy(node, in[0], d);
  const Window& win = d.window;
  const int64_t rows = d.cg * win.kernel_size(), osize = win.out_size();
  Tensor dx(DType::f32, d.x);
  std::vector<float> col(static_cast<size_t>(rows * osize));
  for (int64_t n = 0; n < d.x[0]; ++n)
    for (int64_t g = 0; g < d.group; ++g) {
      const float* wg = in[1].data<float>() + g * d.mg * rows;
      const float* dyg = in[0].data<float>() + (n * d.w[0] + g * d.mg) * osize;
      sgemm(true, false, {rows, osize, d.mg}, 1.f, wg, rows, dyg, osize, 0.f, col.data(), osize);
      col2im(col.data(), d.cg, win, dx.mutable_data<float>() + (n * d.x[1] + g * d.cg) * win.in_size());
    }
  return {dx};
}

// dc.ConvGradWeight(X, dY) -> dW. attr weight_shape: W's shape.
std::vector<Tensor> run_conv_grad_weight(const Node& node, const Inputs& in) {
  require_f32(node, in.at(0), "X");
  require_f32(node, in.at(1), "dY");
  const ConvDims d = conv_dims(node, in[0].shape(), node.attrs.get_ints("weight_shape"));
  check_dy(node, in[1], d);
  const Window& win = d.window;
  const int64_t rows = d.cg * win.kernel_size(), osize = win.out_size();
  Tensor dw(DType::f32, d.w);
  std::vector<float> col(static_cast<size_t>(rows * osize));
  for (int64_t n = 0; n < d.x[0]; ++n)
    for (int64_t g = 0; g < d.group; ++g) {
      im2col(in[0].data<float>() + (n * d.x[1] + g * d.cg) * win.in_size(), d.cg, win, col.data());
      const float* dyg = in[1].data<float>() + (n * d.w[0] + g * d.mg) * osize;
      sgemm(false, true, {d.mg, rows, osize}, 1.f, dyg, osize, col.data(), osize, 1.f,
            dw.mutable_data<float>() + g * d.mg * rows, rows);
    }
  return {dw};
}

// Input positions [lo, hi) of tap range along dim d for output o, clamped to the input.
struct Taps {
  int64_t lo, hi, padded;
};
Taps taps(const Window& w, int d, int64_t o) {
  const int64_t start = o * w.stride[d] - w.pad_begin[d];
  Taps t{0, 0, 0};
  for (int64_t k = 0; k < w.kernel[d]; ++k) {
    const int64_t i = start + k * w.dilation[d];
    if (i < w.in[d] + w.pad_end[d]) t.padded = k + 1;
  }
  t.lo = w.kernel[d];
  for (int64_t k = 0; k < w.kernel[d]; ++k) {
    const int64_t i = start + k * w.dilation[d];
    if (i >= 0 && i < w.in[d]) {
      t.lo = std::min(t.lo, k);
      t.hi = k + 1;
    }
  }
  if (t.hi < t.lo) t.hi = t.lo;
  return t;
}

// dc.MaxPoolGrad(dY, X) -> dX: each output's gradient goes to the first maximum of its
// window. dc.AveragePoolGrad(dY) -> dX (attr input_shape): spread evenly over the window's
// divisor (count_include_pad as the forward op).
template <bool kMax>
std::vector<Tensor> run_pool_grad(const Node& node, const Inputs& in) {
  require_f32(node, in.at(0), "dY");
  const Shape xs = kMax ? in.at(1).shape() : Shape(node.attrs.get_ints("input_shape"));
  DC_USER_CHECK(xs.size() >= 3, node.op, ": X must have rank >= 3");
  const Window w = make_window(node, {node.op, true}, spatial(xs), node.attrs.get_ints("kernel_shape"));
  const bool include_pad = node.attrs.get_int("count_include_pad", 0) == 1;
  Tensor dx(DType::f32, xs);
  const int64_t planes = xs[0] * xs[1], isize = w.in_size(), osize = w.out_size();
  DC_USER_CHECK(in[0].numel() == planes * osize, node.op, ": dY has shape ",
                shape_str(in[0].shape()), ", which does not match the window");
  parallel_for(planes, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* dy = in[0].data<float>() + p * osize;
      const float* x = kMax ? in[1].data<float>() + p * isize : nullptr;
      float* dxp = dx.mutable_data<float>() + p * isize;
      int64_t o = 0;
      for (int64_t od = 0; od < w.out[0]; ++od)
        for (int64_t oh = 0; oh < w.out[1]; ++oh)
          for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
            const Taps td = taps(w, 0, od), th = taps(w, 1, oh), tw = taps(w, 2, ow);
            auto at = [&](int64_t kd, int64_t kh, int64_t kw) {
              return ((od * w.stride[0] - w.pad_begin[0] + kd * w.dilation[0]) * w.in[1] +
                      oh * w.stride[1] - w.pad_begin[1] + kh * w.dilation[1]) * w.in[2] +
                     ow * w.stride[2] - w.pad_begin[2] + kw * w.dilation[2];
            };
            int64_t best = -1;
            float best_v = -std::numeric_limits<float>::infinity();
            const int64_t inside = (td.hi - td.lo) * (th.hi - th.lo) * (tw.hi - tw.lo);
            const int64_t count = include_pad ? td.padded * th.padded * tw.padded : inside;
            for (int64_t kd = td.lo; kd < td.hi; ++kd)
              for (int64_t kh = th.lo; kh < th.hi; ++kh)
                for (int64_t kw = tw.lo; kw < tw.hi; ++kw) {
                  const int64_t i = at(kd, kh, kw);
                  if (!kMax) {
                    dxp[i] += dy[o] / static_cast<float>(count);
                  } else if (best < 0 || x[i] > best_v) {
                    best = i;
                    best_v = x[i];
                  }
                }
            if (kMax && best >= 0) dxp[best] += dy[o];
          }
    }
  });
  return {dx};
}

const OpDef kOps[] = {
    {"dc.ConvGradData", run_conv_grad_data, nullptr},
    {"dc.ConvGradWeight", run_conv_grad_weight, nullptr},
    {"dc.MaxPoolGrad", run_pool_grad<true>, nullptr},
    {"dc.AveragePoolGrad", run_pool_grad<false>, nullptr},
};

}  // namespace

std::span<const OpDef> conv_grad_ops() { return kOps; }

}  // namespace dc::ref
