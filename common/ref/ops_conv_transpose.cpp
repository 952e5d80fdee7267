// ConvTranspose, 1-D to 3-D, with groups: per image and group a GEMM W^T x into columns
// (one row per output channel and kernel tap), then col2im adds each column into the output
// positions its taps land on. The generated kernels gather instead (conv_transpose.h).
#include <algorithm>
#include <memory>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/conv_transpose.h"
#include "ref/gemm.h"
#include "ref/im2col.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

std::vector<int64_t> ints_or(const Node& n, const char* name, size_t count, int64_t dflt) {
  auto v = n.attrs.get_ints(name, std::vector<int64_t>(count, dflt));
  DC_USER_CHECK(v.size() == count, "attribute '", name, "' has ", v.size(), " values, expected ",
                count, " (one per spatial dim)");
  return v;
}

}  // namespace

ConvTransposeGeometry conv_transpose_geometry(const Node& node, const Shape& x, const Shape& w,
                                              const Shape* bias) {
  DC_USER_CHECK(x.size() >= 3, "input X must have rank >= 3 (N x C x spatial dims), got ",
                shape_str(x));
  DC_USER_CHECK(w.size() == x.size(), "weight W has shape ", shape_str(w), ", expected rank ",
                x.size(), " like X (", shape_str(x), ")");
  const size_t r = x.size() - 2;
  if (r > static_cast<size_t>(Window::kMaxRank))
    throw_user_error("unsupported: ", r, "-D ConvTranspose (dc supports 1 to ", Window::kMaxRank,
                     " spatial dims)");
  ConvTransposeGeometry g;
  g.batch = x[0];
  g.channels = x[1];
  g.group = node.attrs.get_int("group", 1);
  DC_USER_CHECK(g.group > 0, "attribute 'group' must be > 0, got ", g.group);
  DC_USER_CHECK(w[0] == g.channels, "weight W has ", w[0], " input channels (dim 0), X has ",
                g.channels);
  DC_USER_CHECK(g.channels % g.group == 0, "group ", g.group, " does not divide input channels ",
                g.channels);
  g.filters = w[1] * g.group;
  if (bias != nullptr)
    DC_USER_CHECK(bias->size() == 1 && (*bias)[0] == g.filters, "bias B has shape ",
                  shape_str(*bias), ", expected [", g.filters, "] (one per output channel)");
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (node.attrs.has("kernel_shape"))
    DC_USER_CHECK(node.attrs.get_ints("kernel_shape") == kernel, "attribute 'kernel_shape' ",
                  shape_str(node.attrs.get_ints("kernel_shape")),
                  " does not match the weight's spatial dims ", shape_str(kernel));
  const auto strides = ints_or(node, "strides", r, 1);
  const auto dilations = ints_or(node, "dilations", r, 1);
  const auto out_pad = ints_or(node, "output_padding", r, 0);
  const std::string auto_pad = read_auto_pad(node);
  std::vector<int64_t> pads(2 * r, 0);
  if (auto_pad == "NOTSET") pads = ints_or(node, "pads", 2 * r, 0);
  std::vector<int64_t> out_shape;
  if (node.attrs.has("output_shape")) {
    out_shape = node.attrs.get_ints("output_shape");
    // The spatial dims, or (as some exporters write it) the whole output shape.
    if (out_shape.size() == r + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    DC_USER_CHECK(out_shape.size() == r, "attribute 'output_shape' has ", out_shape.size(),
                  " values, expected ", r, " (one per spatial dim)");
  }
  Window& win = g.window;
  win.rank = static_cast<int>(r);
  for (size_t i = 0; i < r; ++i) {
    const size_t d = Window::kMaxRank - r + i;
    DC_USER_CHECK(kernel[i] > 0 && strides[i] > 0 && dilations[i] > 0,
                  "kernel_shape, strides and dilations must be > 0 (spatial dim ", i, ")");
    DC_USER_CHECK(out_pad[i] >= 0, "attribute 'output_padding' values must be >= 0, got ",
                  out_pad[i]);
    DC_USER_CHECK(x[2 + i] > 0, "spatial dim ", i, " of the input is empty");
    win.in[d] = x[2 + i];
    win.kernel[d] = kernel[i];
    win.stride[d] = strides[i];
    win.dilation[d] = dilations[i];
    const int64_t full = strides[i] * (x[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1;
    const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
    if (!out_shape.empty() || same) {
      // The padding that gives the requested extent (input * stride for SAME), split with
      // the odd element at the end (at the beginning for SAME_LOWER), as ONNX's reference.
      const int64_t want = out_shape.empty() ? x[2 + i] * strides[i] : out_shape[i];
      const int64_t total = full - want;
      win.pad_begin[d] = auto_pad == "SAME_LOWER" ? total - total / 2 : total / 2;
      win.pad_end[d] = total - win.pad_begin[d];
    } else {
      win.pad_begin[d] = pads[i];
      win.pad_end[d] = pads[i + r];
      DC_USER_CHECK(pads[i] >= 0 && pads[i + r] >= 0, "attribute 'pads' values must be >= 0");
    }
    win.out[d] = full - win.pad_begin[d] - win.pad_end[d];
    DC_USER_CHECK(win.out[d] > 0, "ConvTranspose output extent ", win.out[d], " in spatial dim ",
                  i, " is not positive (pads ", win.pad_begin[d], ", ", win.pad_end[d], ")");
  }
  return g;
}

namespace {

void check_conv_transpose(const Node& node, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(node.has_input(0), "required input X (input 0) is missing");
  DC_USER_CHECK(node.has_input(1), "required input W (input 1) is missing");
  DC_USER_CHECK(node.outputs.size() <= 1, "expected 1 output, the node has ", node.outputs.size());
  // f16/bf16 operands are widened to f32 by run_node and the result rounded back to the
  // output's dtype (storage_dtypes.h), as for Conv under a reduced-precision plan.
  for (size_t i = 0; i < in.size() && i < 3; ++i)
    if (in[i] != nullptr)
      DC_USER_CHECK(in[i]->dtype == DType::f32 || in[i]->dtype == DType::f16 || in[i]->dtype == DType::bf16,
                    "input ", i, " has dtype ", dtype_name(in[i]->dtype), ", supported: f32, f16, bf16");
  const TensorInfo* b = in.size() > 2 ? in[2] : nullptr;
  if (in[0] != nullptr && in[1] != nullptr)
    conv_transpose_geometry(node, in[0]->shape, in[1]->shape, b != nullptr ? &b->shape : nullptr);
}

// Adds column row (m, kd, kh, kw) of `col` (one value per input position) into the output
// positions its tap lands on; rows of different channels run in parallel.
void col2im(const float* col, int64_t channels, const Window& w, float* y) {
  const int64_t ksize = w.kernel_size(), isize = w.in_size(), osize = w.out_size();
  parallel_for(channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t m = c0; m < c1; ++m)
      for (int64_t tap = 0; tap < ksize; ++tap) {
        const int64_t kd = tap / (w.kernel[1] * w.kernel[2]);
        const int64_t kh = tap / w.kernel[2] % w.kernel[1];
        const int64_t kw = tap % w.kernel[2];
        const float* src = col + (m * ksize + tap) * isize;
        float* ym = y + m * osize;
        for (int64_t id = 0; id < w.in[0]; ++id) {
          const int64_t od = id * w.stride[0] - w.pad_begin[0] + kd * w.dilation[0];
          if (od < 0 || od >= w.out[0]) continue;
          for (int64_t ih = 0; ih < w.in[1]; ++ih) {
            const int64_t oh = ih * w.stride[1] - w.pad_begin[1] + kh * w.dilation[1];
            if (oh < 0 || oh >= w.out[1]) continue;
            const float* s = src + (id * w.in[1] + ih) * w.in[2];
            float* yr = ym + (od * w.out[1] + oh) * w.out[2];
            for (int64_t iw = 0; iw < w.in[2]; ++iw) {
              const int64_t ow = iw * w.stride[2] - w.pad_begin[2] + kw * w.dilation[2];
              if (ow >= 0 && ow < w.out[2]) yr[ow] += s[iw];
            }
          }
        }
      }
  });
}

std::vector<Tensor> run_conv_transpose(const Node& node, const Inputs& in) {
  const Tensor& x = in.at(0);
  const Tensor& w = in.at(1);
  const bool has_bias = in.size() > 2 && in[2].defined();
  const ConvTransposeGeometry g =
      conv_transpose_geometry(node, x.shape(), w.shape(), has_bias ? &in[2].shape() : nullptr);
  const Window& win = g.window;
  Shape out_shape{g.batch, g.filters};
  for (int64_t d : win.out_dims()) out_shape.push_back(d);
  Tensor y(DType::f32, out_shape);
  float* yp = y.mutable_data<float>();
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const int64_t cg = g.channels / g.group, mg = g.filters / g.group;
  const int64_t ksize = win.kernel_size(), isize = win.in_size(), osize = win.out_size();
  auto col = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(mg * ksize * isize));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.group; ++grp) {
      float* yg = yp + (n * g.filters + grp * mg) * osize;
      for (int64_t m = 0; m < mg; ++m)
        std::fill(yg + m * osize, yg + (m + 1) * osize,
                  has_bias ? in[2].data<float>()[grp * mg + m] : 0.f);
      // col (Mg*K x P_in) = W_g^T (W_g is Cg x Mg*K) times x_g (Cg x P_in).
      sgemm(true, false, {mg * ksize, isize, cg}, 1.f, wp + grp * cg * mg * ksize, mg * ksize,
            xp + (n * g.channels + grp * cg) * isize, isize, 0.f, col.get(), isize);
      col2im(col.get(), mg, win, yg);
    }
  return {y};
}

const OpDef kOps[] = {
    {"ConvTranspose", run_conv_transpose, check_conv_transpose},
};

}  // namespace

std::span<const OpDef> conv_transpose_ops() { return kOps; }

}  // namespace dc::ref
