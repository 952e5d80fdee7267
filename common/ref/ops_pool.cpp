// MaxPool, AveragePool (1-D to 3-D windows) and the global pools.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/im2col.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

void require_f32_input(const Node& node, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(node.has_input(0), "required input X is missing");
  if (in.empty() || in[0] == nullptr) return;
  DC_USER_CHECK(in[0]->dtype == DType::f32, "input X has dtype ", dtype_name(in[0]->dtype),
                ", supported: f32");
}

// Division rounding towards +infinity, for any sign of a (b > 0).
int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Taps [lo, hi) of one window dim that land inside the input, and how many land inside the
// input or its padding (count_include_pad's divisor).
struct TapRange {
  int64_t lo, hi, padded;
};
TapRange taps(const Window& w, int d, int64_t o) {
  const int64_t start = o * w.stride[d] - w.pad_begin[d];  // input index of tap 0
  const int64_t dil = w.dilation[d], k = w.kernel[d];
  TapRange r;
  r.lo = std::clamp<int64_t>(ceil_div(-start, dil), 0, k);
  r.hi = std::clamp<int64_t>(ceil_div(w.in[d] - start, dil), r.lo, k);
  r.padded = std::clamp<int64_t>(ceil_div(w.in[d] + w.pad_end[d] - start, dil), 0, k);
  return r;
}

enum class PoolKind { max, average };

struct PoolParams {
  Window window;
  bool count_include_pad = false;
};

PoolParams pool_params(const Node& node, PoolKind kind, const Shape& x) {
  DC_USER_CHECK(x.size() >= 3, "input X must have rank >= 3 (N x C x spatial dims), got ",
                shape_str(x));
  const char* op = kind == PoolKind::max ? "MaxPool" : "AveragePool";
  const auto kernel = node.attrs.get_ints("kernel_shape");
  PoolParams p;
  p.window = make_window(node, {op, true}, std::vector<int64_t>(x.begin() + 2, x.end()), kernel);
  if (kind == PoolKind::max) {
    const int64_t order = node.attrs.get_int("storage_order", 0);
    DC_USER_CHECK(order == 0 || order == 1, "attribute 'storage_order' must be 0 or 1, got ",
                  order);
    DC_USER_CHECK(order == 0, "unsupported: storage_order 1 (column-major Indices)");
    DC_USER_CHECK(node.outputs.size() <= 1 || node.outputs[1].empty(),
                  "unsupported: MaxPool's second output (Indices)");
  } else {
    const int64_t cip = node.attrs.get_int("count_include_pad", 0);
    DC_USER_CHECK(cip == 0 || cip == 1, "attribute 'count_include_pad' must be 0 or 1, got ", cip);
    p.count_include_pad = cip == 1;
  }
  return p;
}

void pool_plane(PoolKind kind, const PoolParams& p, const float* x, float* y) {
  const Window& w = p.window;
  for (int64_t od = 0; od < w.out[0]; ++od) {
    const TapRange rd = taps(w, 0, od);
    const int64_t id0 = od * w.stride[0] - w.pad_begin[0];
    for (int64_t oh = 0; oh < w.out[1]; ++oh) {
      const TapRange rh = taps(w, 1, oh);
      const int64_t ih0 = oh * w.stride[1] - w.pad_begin[1];
      for (int64_t ow = 0; ow < w.out[2]; ++ow) {
        const TapRange rw = taps(w, 2, ow);
        const int64_t iw0 = ow * w.stride[2] - w.pad_begin[2];
        float acc = kind == PoolKind::max ? -std::numeric_limits<float>::infinity() : 0.f;
        for (int64_t kd = rd.lo; kd < rd.hi; ++kd)
          for (int64_t kh = rh.lo; kh < rh.hi; ++kh) {
            // Index of tap kw = 0 in this row; it may lie in padding, the taps read do not.
            const int64_t row =
                ((id0 + kd * w.dilation[0]) * w.in[1] + ih0 + kh * w.dilation[1]) * w.in[2] + iw0;
            for (int64_t kw = rw.lo; kw < rw.hi; ++kw) {
              const float v = x[row + kw * w.dilation[2]];
              if (kind == PoolKind::max)
                acc = (v > acc || std::isnan(v)) && !std::isnan(acc) ? v : acc;
              else
                acc += v;
            }
          }
        if (kind == PoolKind::average) {
          const int64_t count = p.count_include_pad
                                    ? rd.padded * rh.padded * rw.padded
                                    : (rd.hi - rd.lo) * (rh.hi - rh.lo) * (rw.hi - rw.lo);
          // A window entirely in padding has no values: 0/0 would be NaN, report 0.
          acc = count > 0 ? acc / static_cast<float>(count) : 0.f;
        }
        *y++ = acc;
      }
    }
  }
}

template <PoolKind kind>
void check_pool(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_f32_input(node, in);
  DC_USER_CHECK(node.attrs.has("kernel_shape"), "required attribute 'kernel_shape' is missing");
  if (!in.empty() && in[0] != nullptr) pool_params(node, kind, in[0]->shape);
}

template <PoolKind kind>
std::vector<Tensor> run_pool(const Node& node, const Inputs& in) {
  DC_USER_CHECK(node.has_input(0), "required input X is missing");
  const Tensor& x = in.at(0);
  const PoolParams p = pool_params(node, kind, x.shape());
  Shape out_shape{x.dim(0), x.dim(1)};
  for (int64_t d : p.window.out_dims()) out_shape.push_back(d);
  Tensor y(DType::f32, out_shape);
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  const int64_t isize = p.window.in_size(), osize = p.window.out_size();
  parallel_for(x.dim(0) * x.dim(1), std::max<int64_t>(1, 4096 / std::max<int64_t>(1, osize)),
               [&](int64_t c0, int64_t c1) {
                 for (int64_t c = c0; c < c1; ++c)
                   pool_plane(kind, p, xp + c * isize, yp + c * osize);
               });
  return {y};
}

// Global pools: one value per (image, channel) over all spatial dims.
template <PoolKind kind>
void check_global_pool(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_f32_input(node, in);
  if (!in.empty() && in[0] != nullptr)
    DC_USER_CHECK(in[0]->shape.size() >= 2, "input X must have rank >= 2 (N x C x ...), got ",
                  shape_str(in[0]->shape));
}

template <PoolKind kind>
std::vector<Tensor> run_global_pool(const Node& node, const Inputs& in) {
  DC_USER_CHECK(node.has_input(0), "required input X is missing");
  const Tensor& x = in.at(0);
  DC_USER_CHECK(x.rank() >= 2, "input X must have rank >= 2 (N x C x ...), got ",
                shape_str(x.shape()));
  Shape out_shape = x.shape();
  std::fill(out_shape.begin() + 2, out_shape.end(), 1);
  Tensor y(DType::f32, out_shape);
  const int64_t planes = x.dim(0) * x.dim(1), size = x.numel() / std::max<int64_t>(planes, 1);
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, size)),
               [&](int64_t c0, int64_t c1) {
                 for (int64_t c = c0; c < c1; ++c) {
                   const float* v = xp + c * size;
                   if (kind == PoolKind::max) {
                     float m = -std::numeric_limits<float>::infinity();
                     for (int64_t i = 0; i < size; ++i)
                       m = (v[i] > m || std::isnan(v[i])) && !std::isnan(m) ? v[i] : m;
                     yp[c] = m;
                   } else {
                     double s = 0;  // long planes: accumulate in double
                     for (int64_t i = 0; i < size; ++i) s += v[i];
                     yp[c] = static_cast<float>(s / static_cast<double>(size));
                   }
                 }
               });
  return {y};
}

const OpDef kOps[] = {
    {"MaxPool", run_pool<PoolKind::max>, check_pool<PoolKind::max>},
    {"AveragePool", run_pool<PoolKind::average>, check_pool<PoolKind::average>},
    {"GlobalMaxPool", run_global_pool<PoolKind::max>, check_global_pool<PoolKind::max>},
    {"GlobalAveragePool", run_global_pool<PoolKind::average>, check_global_pool<PoolKind::average>},
};

}  // namespace

std::span<const OpDef> pool_ops() { return kOps; }

}  // namespace dc::ref
