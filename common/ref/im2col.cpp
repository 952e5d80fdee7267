#include "ref/im2col.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "ir/error.h"
#include "ir/parallel.h"

namespace dc::ref {

namespace {

// Division rounding towards +infinity, for any sign of a (b > 0).
int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

std::vector<int64_t> read_positive(const Node& node, const char* name, size_t count) {
  auto v = node.attrs.get_ints(name, std::vector<int64_t>(count, 1));
  DC_USER_CHECK(v.size() == count, "attribute '", name, "' has ", v.size(), " values, expected ",
                count, " (one per spatial dim)");
  for (int64_t x : v) DC_USER_CHECK(x > 0, "attribute '", name, "' values must be > 0, got ", x);
  return v;
}

}  // namespace

std::vector<int64_t> Window::out_dims() const { return {out.end() - rank, out.end()}; }

bool Window::is_pointwise() const {
  for (int i = 0; i < kMaxRank; ++i)
    if (kernel[i] != 1 || stride[i] != 1 || pad_begin[i] != 0 || pad_end[i] != 0) return false;
  return true;
}

std::string read_auto_pad(const Node& node) {
  std::string auto_pad = node.attrs.get_string("auto_pad", "NOTSET");
  DC_USER_CHECK(auto_pad == "NOTSET" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" ||
                    auto_pad == "VALID",
                "attribute 'auto_pad' is '", auto_pad,
                "', expected one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  return auto_pad;
}

Window make_window(const Node& node, const WindowRules& rules, const std::vector<int64_t>& in,
                   const std::vector<int64_t>& kernel) {
  const size_t r = in.size();
  DC_USER_CHECK(r >= 1, rules.op, " needs an input of rank >= 3 (N, C and a spatial dim)");
  if (r > static_cast<size_t>(Window::kMaxRank))
    throw_user_error("unsupported: ", r, "-D ", rules.op, " (dc supports 1 to ", Window::kMaxRank,
                     " spatial dims)");
  DC_USER_CHECK(kernel.size() == r, "attribute 'kernel_shape' has ", kernel.size(),
                " values, expected ", r, " (one per spatial dim)");
  for (int64_t k : kernel) DC_USER_CHECK(k > 0, "kernel_shape values must be > 0, got ", k);
  const auto strides = read_positive(node, "strides", r);
  const auto dilations = read_positive(node, "dilations", r);

  const std::string auto_pad = read_auto_pad(node);
  std::vector<int64_t> pads(2 * r, 0);
  if (auto_pad == "NOTSET") {
    pads = node.attrs.get_ints("pads", pads);
    DC_USER_CHECK(pads.size() == 2 * r, "attribute 'pads' has ", pads.size(), " values, expected ",
                  2 * r, " (begin and end per spatial dim)");
    for (int64_t p : pads) DC_USER_CHECK(p >= 0, "attribute 'pads' values must be >= 0, got ", p);
  }
  int64_t ceil_mode = 0;
  if (rules.ceil_mode) {
    ceil_mode = node.attrs.get_int("ceil_mode", 0);
    DC_USER_CHECK(ceil_mode == 0 || ceil_mode == 1, "attribute 'ceil_mode' must be 0 or 1, got ",
                  ceil_mode);
  }

  Window w;
  w.rank = static_cast<int>(r);
  for (size_t i = 0; i < r; ++i) {
    const size_t d = Window::kMaxRank - r + i;  // right-aligned slot
    const int64_t n = in[i], s = strides[i];
    const int64_t extent = (kernel[i] - 1) * dilations[i] + 1;  // dilated kernel
    DC_USER_CHECK(n > 0, "spatial dim ", i, " of the input is empty");
    w.in[d] = n;
    w.kernel[d] = kernel[i];
    w.stride[d] = s;
    w.dilation[d] = dilations[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      // Output covers ceil(n / s) positions; the padding needed for that is split evenly,
      // the odd element going to the end (UPPER) or the beginning (LOWER).
      w.out[d] = ceil_div(n, s);
      const int64_t total = std::max<int64_t>(0, (w.out[d] - 1) * s + extent - n);
      w.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[d] = total - w.pad_begin[d];
      continue;
    }
    w.pad_begin[d] = pads[i];
    w.pad_end[d] = pads[i + r];
    const int64_t span = n + w.pad_begin[d] + w.pad_end[d] - extent;
    DC_USER_CHECK(span >= 0, "kernel extent ", extent, " (kernel_shape ", kernel[i], ", dilation ",
                  dilations[i], ") exceeds the padded input extent ",
                  n + w.pad_begin[d] + w.pad_end[d], " in spatial dim ", i);
    w.out[d] = (ceil_mode ? ceil_div(span, s) : span / s) + 1;
    // ONNX (and PyTorch): in ceil mode the last window must start inside the input or its
    // left padding, never entirely in the right padding.
    if (ceil_mode && (w.out[d] - 1) * s >= n + w.pad_begin[d]) --w.out[d];
  }
  return w;
}

void im2col(const float* x, int64_t channels, const Window& w, float* col, bool parallel) {
  const int64_t ksize = w.kernel_size(), osize = w.out_size(), isize = w.in_size();
  const int64_t rows = channels * ksize;
  auto work = [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t c = row / ksize, tap = row % ksize;
      const int64_t kd = tap / (w.kernel[1] * w.kernel[2]);
      const int64_t kh = tap / w.kernel[2] % w.kernel[1];
      const int64_t kw = tap % w.kernel[2];
      const float* xc = x + c * isize;
      float* dst = col + row * osize;
      // Output positions along W whose tap lands inside the input: [lo, hi).
      const int64_t off_w = kw * w.dilation[2] - w.pad_begin[2];
      const int64_t lo = std::clamp<int64_t>(ceil_div(-off_w, w.stride[2]), 0, w.out[2]);
      const int64_t hi = std::clamp<int64_t>(ceil_div(w.in[2] - off_w, w.stride[2]), lo, w.out[2]);
      for (int64_t od = 0; od < w.out[0]; ++od) {
        const int64_t id = od * w.stride[0] - w.pad_begin[0] + kd * w.dilation[0];
        for (int64_t oh = 0; oh < w.out[1]; ++oh, dst += w.out[2]) {
          const int64_t ih = oh * w.stride[1] - w.pad_begin[1] + kh * w.dilation[1];
          if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) {
            std::fill(dst, dst + w.out[2], 0.f);
            continue;
          }
          const float* src = xc + (id * w.in[1] + ih) * w.in[2];
          std::fill(dst, dst + lo, 0.f);
          if (w.stride[2] == 1) {
            std::memcpy(dst + lo, src + lo + off_w, static_cast<size_t>(hi - lo) * sizeof(float));
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * w.stride[2] + off_w];
          }
          std::fill(dst + hi, dst + w.out[2], 0.f);
        }
      }
    }
  };
  if (parallel)
    parallel_for(rows, std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(osize, 1)),
                 work);
  else
    work(0, rows);
}

}  // namespace dc::ref
