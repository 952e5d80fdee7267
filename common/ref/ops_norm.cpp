// Normalisations and reductions: BatchNormalization (inference), LayerNormalization,
// Softmax / LogSoftmax and the Reduce* family. Sums over long rows accumulate in double,
// and variances are computed in two passes, so that the reference stays an oracle.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

void require_input(const Node& node, size_t i, const char* what) {
  DC_USER_CHECK(node.has_input(i), "required input ", what, " (input ", i, ") is missing");
}

void require_f32(const TensorInfo* t, const char* what) {
  if (t == nullptr) return;
  DC_USER_CHECK(t->dtype == DType::f32, "input ", what, " has dtype ", dtype_name(t->dtype),
                ", supported: f32");
}

const TensorInfo* info_at(const std::vector<const TensorInfo*>& in, size_t i) {
  return i < in.size() ? in[i] : nullptr;
}

float read_epsilon(const Node& node, float dflt) {
  const float eps = node.attrs.get_float("epsilon", dflt);
  // 0 is legal (variances of real data are positive); negative or NaN is a broken model.
  DC_USER_CHECK(eps >= 0.f && std::isfinite(eps), "attribute 'epsilon' must be >= 0, got ", eps);
  return eps;
}

int64_t read_flag(const Node& node, const char* name, int64_t dflt) {
  const int64_t v = node.attrs.get_int(name, dflt);
  DC_USER_CHECK(v == 0 || v == 1, "attribute '", name, "' must be 0 or 1, got ", v);
  return v;
}

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// ---------------------------------------------------------------------------------------
// BatchNormalization, inference form: y = scale * (x - mean) / sqrt(var + eps) + B per channel.

constexpr const char* kBnInputs[] = {"X", "scale", "B", "input_mean", "input_var"};

void bn_validate(const Node& node, const Shape& x, const std::vector<const Shape*>& params) {
  DC_USER_CHECK(read_flag(node, "training_mode", 0) == 0,
                "unsupported: training_mode=1 (dc runs inference only)");
  DC_USER_CHECK(read_flag(node, "spatial", 1) == 1,
                "unsupported: spatial=0 (per-activation statistics)");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    DC_USER_CHECK(node.outputs[i].empty(), "unsupported: training output ", i,
                  " (running mean/var or saved statistics)");
  read_epsilon(node, 1e-5f);
  DC_USER_CHECK(x.size() >= 2, "input X must have rank >= 2 (N x C x ...), got ", shape_str(x));
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i] != nullptr)
      DC_USER_CHECK(params[i]->size() == 1 && (*params[i])[0] == x[1], "input ", kBnInputs[i + 1],
                    " has shape ", shape_str(*params[i]), ", expected [", x[1],
                    "] (one value per channel)");
}

void check_batch_norm(const Node& node, const std::vector<const TensorInfo*>& in) {
  std::vector<const Shape*> params;
  for (size_t i = 0; i < 5; ++i) {
    require_input(node, i, kBnInputs[i]);
    require_f32(info_at(in, i), kBnInputs[i]);
    if (i > 0) params.push_back(info_at(in, i) ? &in[i]->shape : nullptr);
  }
  if (info_at(in, 0) != nullptr) bn_validate(node, in[0]->shape, params);
}

std::vector<Tensor> run_batch_norm(const Node& node, const Inputs& in) {
  for (size_t i = 0; i < 5; ++i) require_input(node, i, kBnInputs[i]);
  const Tensor& x = in.at(0);
  bn_validate(node, x.shape(),
              {&in.at(1).shape(), &in.at(2).shape(), &in.at(3).shape(), &in.at(4).shape()});
  const double eps = read_epsilon(node, 1e-5f);
  const int64_t n = x.dim(0), c = x.dim(1), inner = product(x.shape(), 2, x.shape().size());
  const float* scale = in[1].data<float>();
  const float* bias = in[2].data<float>();
  const float* mean = in[3].data<float>();
  const float* var = in[4].data<float>();
  // Folded per channel: y = x * a + b.
  std::vector<float> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) {
    const double ai = scale[i] / std::sqrt(static_cast<double>(var[i]) + eps);
    a[i] = static_cast<float>(ai);
    b[i] = static_cast<float>(bias[i] - mean[i] * ai);
  }
  Tensor y(DType::f32, x.shape());
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  parallel_for(n * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, inner)),
               [&](int64_t p0, int64_t p1) {
                 for (int64_t p = p0; p < p1; ++p) {
                   const float ai = a[p % c], bi = b[p % c];
                   for (int64_t i = 0; i < inner; ++i)
                     yp[p * inner + i] = xp[p * inner + i] * ai + bi;
                 }
               });
  return {y};
}

// ---------------------------------------------------------------------------------------
// LayerNormalization (opset 17): normalise over dims [axis, rank), then scale and shift.

// Scale or bias with leading 1s beyond the normalised rank dropped (the ONNX function body
// multiplies with numpy broadcasting, so [1, D] scales a [N, D] input normalised over D).
Shape ln_param_shape(Shape p, size_t norm_rank) {
  while (p.size() > norm_rank && p.front() == 1) p.erase(p.begin());
  return p;
}

// Scale or bias must broadcast (unidirectionally) to the normalised dims.
void ln_check_param(const Shape& param, const Shape& x, size_t axis, const char* what) {
  const size_t norm_rank = x.size() - axis;
  const Shape p = ln_param_shape(param, norm_rank);
  bool ok = p.size() <= norm_rank;
  for (size_t i = 0; ok && i < p.size(); ++i) ok = p[i] == 1 || p[i] == x[x.size() - p.size() + i];
  DC_USER_CHECK(ok, "input ", what, " of shape ", shape_str(param),
                " cannot be broadcast to the normalised dims ",
                shape_str(Shape(x.begin() + static_cast<int64_t>(axis), x.end())));
}

size_t ln_axis(const Node& node, const Shape& x) {
  DC_USER_CHECK(!x.empty(), "input X must have rank >= 1");
  return static_cast<size_t>(
      normalize_axis(node.attrs.get_int("axis", -1), static_cast<int64_t>(x.size()), "axis"));
}

void check_layer_norm(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_input(node, 0, "X");
  require_input(node, 1, "Scale");
  for (size_t i = 0; i < 3; ++i) require_f32(info_at(in, i), i == 0 ? "X" : i == 1 ? "Scale" : "B");
  read_epsilon(node, 1e-5f);
  const int64_t stash = node.attrs.get_int("stash_type", 1);
  DC_USER_CHECK(stash == 1, "unsupported: stash_type ", stash, " (only 1: float32)");
  if (info_at(in, 0) == nullptr) return;
  const Shape& x = in[0]->shape;
  const size_t axis = ln_axis(node, x);
  if (info_at(in, 1)) ln_check_param(in[1]->shape, x, axis, "Scale");
  if (info_at(in, 2)) ln_check_param(in[2]->shape, x, axis, "B");
}

// A scale/bias value per position of the normalised block.
std::vector<float> expand_param(const Tensor& p, const Shape& x, size_t axis) {
  const Shape norm(x.begin() + static_cast<int64_t>(axis), x.end());
  const auto strides = broadcast_strides(ln_param_shape(p.shape(), norm.size()), norm);
  const int64_t size = shape_numel(norm);
  std::vector<float> out(static_cast<size_t>(size));
  const float* v = p.data<float>();
  std::vector<int64_t> idx(norm.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < norm.size(); ++d) off += idx[d] * strides[d];
    out[i] = v[off];
    for (size_t d = norm.size(); d-- > 0;) {
      if (++idx[d] < norm[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<Tensor> run_layer_norm(const Node& node, const Inputs& in) {
  require_input(node, 0, "X");
  require_input(node, 1, "Scale");
  const Tensor& x = in.at(0);
  const size_t axis = ln_axis(node, x.shape());
  ln_check_param(in.at(1).shape(), x.shape(), axis, "Scale");
  const bool has_bias = in.size() > 2 && in[2].defined();
  if (has_bias) ln_check_param(in[2].shape(), x.shape(), axis, "B");
  const double eps = read_epsilon(node, 1e-5f);
  const auto scale = expand_param(in[1], x.shape(), axis);
  const auto bias =
      has_bias ? expand_param(in[2], x.shape(), axis) : std::vector<float>(scale.size(), 0.f);

  const int64_t rows = product(x.shape(), 0, axis);
  const int64_t cols = product(x.shape(), axis, x.shape().size());
  Shape stat_shape = x.shape();
  std::fill(stat_shape.begin() + static_cast<int64_t>(axis), stat_shape.end(), 1);
  Tensor y(DType::f32, x.shape()), mean_t(DType::f32, stat_shape), inv_t(DType::f32, stat_shape);
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  float* mp = mean_t.mutable_data<float>();
  float* ip = inv_t.mutable_data<float>();
  parallel_for(
      rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, cols)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = xp + r * cols;
          double sum = 0;
          for (int64_t i = 0; i < cols; ++i) sum += xr[i];
          const double mean = cols > 0 ? sum / static_cast<double>(cols) : 0.0;
          double sq = 0;
          for (int64_t i = 0; i < cols; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
          const double var = cols > 0 ? sq / static_cast<double>(cols) : 0.0;
          const double inv = 1.0 / std::sqrt(var + eps);
          for (int64_t i = 0; i < cols; ++i)
            yp[r * cols + i] = static_cast<float>((xr[i] - mean) * inv * scale[i] + bias[i]);
          mp[r] = static_cast<float>(mean);
          ip[r] = static_cast<float>(inv);
        }
      });
  return {y, mean_t, inv_t};
}

// RMSNormalization (opset 23; also what passes/fuse_rms_norm makes of the exporters' forms):
// Y = X / sqrt(mean(X^2 over dims [axis, rank)) + epsilon) * Scale. No bias input.
void check_rms_norm(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_input(node, 0, "X");
  require_input(node, 1, "Scale");
  for (size_t i = 0; i < 2; ++i) require_f32(info_at(in, i), i == 0 ? "X" : "Scale");
  read_epsilon(node, 1e-5f);
  const int64_t stash = node.attrs.get_int("stash_type", 1);
  DC_USER_CHECK(stash == 1, "unsupported: stash_type ", stash, " (only 1: float32)");
  if (info_at(in, 0) == nullptr) return;
  const Shape& x = in[0]->shape;
  const size_t axis = ln_axis(node, x);
  if (info_at(in, 1)) ln_check_param(in[1]->shape, x, axis, "Scale");
}

std::vector<Tensor> run_rms_norm(const Node& node, const Inputs& in) {
  require_input(node, 0, "X");
  require_input(node, 1, "Scale");
  const Tensor& x = in.at(0);
  const size_t axis = ln_axis(node, x.shape());
  ln_check_param(in.at(1).shape(), x.shape(), axis, "Scale");
  const double eps = read_epsilon(node, 1e-5f);
  const auto scale = expand_param(in[1], x.shape(), axis);
  const int64_t rows = product(x.shape(), 0, axis);
  const int64_t cols = product(x.shape(), axis, x.shape().size());
  Tensor y(DType::f32, x.shape());
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  parallel_for(
      rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, cols)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = xp + r * cols;
          double sq = 0;
          for (int64_t i = 0; i < cols; ++i) sq += static_cast<double>(xr[i]) * xr[i];
          const double inv = 1.0 / std::sqrt((cols > 0 ? sq / static_cast<double>(cols) : 0.0) + eps);
          for (int64_t i = 0; i < cols; ++i) yp[r * cols + i] = static_cast<float>(xr[i] * inv * scale[i]);
        }
      });
  return {y};
}

// ---------------------------------------------------------------------------------------
// Softmax / LogSoftmax. Opset >= 13: over one axis. Opset < 13 (the importer marks the node
// with dc_legacy_flatten=1): over the flattened block of dims [axis, rank).

struct SoftmaxLayout {
  int64_t outer, n, inner;  // softmax over n values spaced `inner` apart
};

SoftmaxLayout softmax_layout(const Node& node, const Shape& x) {
  const bool legacy = read_flag(node, "dc_legacy_flatten", 0) == 1;
  const auto rank = static_cast<int64_t>(x.size());
  if (rank == 0) return {1, 1, 1};
  const auto axis = static_cast<size_t>(
      normalize_axis(node.attrs.get_int("axis", legacy ? 1 : -1), rank, "axis"));
  if (legacy) return {product(x, 0, axis), product(x, axis, x.size()), 1};
  return {product(x, 0, axis), x[axis], product(x, axis + 1, x.size())};
}

template <bool kLog>
void check_softmax(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_input(node, 0, "input");
  require_f32(info_at(in, 0), "input");
  if (info_at(in, 0) != nullptr) softmax_layout(node, in[0]->shape);
}

template <bool kLog>
std::vector<Tensor> run_softmax(const Node& node, const Inputs& in) {
  require_input(node, 0, "input");
  const Tensor& x = in.at(0);
  const SoftmaxLayout l = softmax_layout(node, x.shape());
  Tensor y(DType::f32, x.shape());
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  parallel_for(l.outer, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, l.n * l.inner)),
               [&](int64_t o0, int64_t o1) {
                 std::vector<float> mx(static_cast<size_t>(l.inner));
                 std::vector<double> sum(static_cast<size_t>(l.inner));
                 for (int64_t o = o0; o < o1; ++o) {
                   const float* xb = xp + o * l.n * l.inner;
                   float* yb = yp + o * l.n * l.inner;
                   // Rows of the block are contiguous: loop over them and keep one running
                   // max / sum per column, so that the inner loops are unit-stride.
                   std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
                   std::fill(sum.begin(), sum.end(), 0.0);
                   for (int64_t i = 0; i < l.n; ++i)
                     for (int64_t j = 0; j < l.inner; ++j)
                       mx[j] = std::max(mx[j], xb[i * l.inner + j]);
                   for (int64_t i = 0; i < l.n; ++i)
                     for (int64_t j = 0; j < l.inner; ++j) {
                       const float e = std::exp(xb[i * l.inner + j] - mx[j]);
                       sum[j] += e;
                       if (!kLog) yb[i * l.inner + j] = e;
                     }
                   for (int64_t i = 0; i < l.n; ++i)
                     for (int64_t j = 0; j < l.inner; ++j) {
                       float& v = yb[i * l.inner + j];
                       if (kLog)
                         v = static_cast<float>(xb[i * l.inner + j] - mx[j] - std::log(sum[j]));
                       else
                         v = static_cast<float>(v / sum[j]);
                     }
                 }
               });
  return {y};
}

// ---------------------------------------------------------------------------------------
// Reduce*: axes from the attribute (opset < 18, ReduceSum < 13) or the optional second
// input; keepdims (default 1); noop_with_empty_axes: no axes + noop=1 is the identity,
// no axes otherwise reduces everything.

enum class Red { sum, mean, max, min, prod, l1, l2, sum_square, log_sum, log_sum_exp };

constexpr bool allows_int(Red r) {
  return r == Red::sum || r == Red::max || r == Red::min || r == Red::prod;
}
// ReduceSum and ReduceMean also take f64 (the fp64 gradient checks of docs/training.md).
constexpr bool allows_f64(Red r) { return r == Red::sum || r == Red::mean; }

struct ReducePlan {
  bool identity = false;
  Shape out_shape;
  std::vector<int64_t> base;     // per output element: offset of its first input element
  std::vector<int64_t> offsets;  // per reduced position: offset from the base
};

ReducePlan plan_reduce(const Node& node, const Shape& x, const std::vector<int64_t>& axes_in) {
  const bool keepdims = read_flag(node, "keepdims", 1) == 1;
  const bool noop = read_flag(node, "noop_with_empty_axes", 0) == 1;
  const auto rank = static_cast<int64_t>(x.size());
  ReducePlan p;
  if (axes_in.empty() && noop) {
    p.identity = true;
    p.out_shape = x;
    return p;
  }
  std::vector<bool> reduced(x.size(), axes_in.empty());
  for (int64_t a : axes_in) {
    DC_USER_CHECK(rank > 0, "axes given for a scalar input");
    const auto ax = static_cast<size_t>(normalize_axis(a, rank, "axes"));
    DC_USER_CHECK(!reduced[ax], "axes names axis ", ax, " twice");
    reduced[ax] = true;
  }
  const auto strides = shape_strides(x);
  Shape kept_dims, kept_strides, red_dims, red_strides;
  for (size_t i = 0; i < x.size(); ++i) {
    if (reduced[i]) {
      red_dims.push_back(x[i]);
      red_strides.push_back(strides[i]);
      if (keepdims) p.out_shape.push_back(1);
    } else {
      kept_dims.push_back(x[i]);
      kept_strides.push_back(strides[i]);
      p.out_shape.push_back(x[i]);
    }
  }
  // Offsets of every position of a (dims, strides) index space, row-major.
  auto enumerate = [](const Shape& dims, const Shape& st) {
    std::vector<int64_t> out(static_cast<size_t>(shape_numel(dims)));
    std::vector<int64_t> idx(dims.size(), 0);
    for (auto& o : out) {
      int64_t off = 0;
      for (size_t d = 0; d < dims.size(); ++d) off += idx[d] * st[d];
      o = off;
      for (size_t d = dims.size(); d-- > 0;) {
        if (++idx[d] < dims[d]) break;
        idx[d] = 0;
      }
    }
    return out;
  };
  p.base = enumerate(kept_dims, kept_strides);
  p.offsets = enumerate(red_dims, red_strides);
  return p;
}

void reduce_check_axes_dtype(const TensorInfo* axes) {
  if (axes == nullptr) return;
  DC_USER_CHECK(axes->dtype == DType::i64, "input axes has dtype ", dtype_name(axes->dtype),
                ", expected i64");
  DC_USER_CHECK(axes->shape.size() == 1, "input axes must be 1-D, got ", shape_str(axes->shape));
}

template <Red kRed>
void check_reduce(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_input(node, 0, "data");
  if (const TensorInfo* x = info_at(in, 0)) {
    const bool ok = x->dtype == DType::f32 || (allows_f64(kRed) && x->dtype == DType::f64) ||
                    (allows_int(kRed) && (x->dtype == DType::i32 || x->dtype == DType::i64));
    DC_USER_CHECK(ok, "input data has dtype ", dtype_name(x->dtype), ", supported: f32",
                  allows_f64(kRed) ? ", f64" : "", allows_int(kRed) ? ", i32, i64" : "");
  }
  DC_USER_CHECK(!(node.attrs.has("axes") && node.has_input(1)),
                "axes given both as attribute and as input");
  reduce_check_axes_dtype(node.has_input(1) ? info_at(in, 1) : nullptr);
  read_flag(node, "keepdims", 1);
  read_flag(node, "noop_with_empty_axes", 0);
  if (const TensorInfo* x = info_at(in, 0); x != nullptr && node.attrs.has("axes"))
    plan_reduce(node, x->shape, node.attrs.get_ints("axes"));
}

// Accumulates in double for floats (long rows), in the element type for integers
// (wrapping like numpy, through the unsigned type).
template <Red kRed, class T>
void reduce_typed(const ReducePlan& p, const T* x, T* y) {
  const auto n = static_cast<int64_t>(p.offsets.size());
  const auto outs = static_cast<int64_t>(p.base.size());
  parallel_for(
      outs, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)), [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          const T* xb = x + p.base[o];
          if constexpr (std::is_integral_v<T>) {
            using U = std::make_unsigned_t<T>;
            U acc = kRed == Red::prod ? 1 : 0;
            T m =
                kRed == Red::max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
            for (int64_t r = 0; r < n; ++r) {
              const T v = xb[p.offsets[r]];
              if constexpr (kRed == Red::sum) acc += static_cast<U>(v);
              if constexpr (kRed == Red::prod) acc *= static_cast<U>(v);
              if constexpr (kRed == Red::max) m = std::max(m, v);
              if constexpr (kRed == Red::min) m = std::min(m, v);
            }
            y[o] = (kRed == Red::max || kRed == Red::min) ? m : static_cast<T>(acc);
          } else {
            if constexpr (kRed == Red::max || kRed == Red::min) {
              // NaN propagates, as in numpy.
              float m = kRed == Red::max ? -std::numeric_limits<float>::infinity()
                                         : std::numeric_limits<float>::infinity();
              for (int64_t r = 0; r < n && !std::isnan(m); ++r) {
                const float v = xb[p.offsets[r]];
                if (std::isnan(v) || (kRed == Red::max ? v > m : v < m)) m = v;
              }
              y[o] = m;
            } else if constexpr (kRed == Red::log_sum_exp) {
              float m = -std::numeric_limits<float>::infinity();
              for (int64_t r = 0; r < n; ++r) m = std::max(m, static_cast<float>(xb[p.offsets[r]]));
              if (std::isinf(m)) {
                y[o] = m;  // all -inf (or an inf): the shift below would make NaN
                continue;
              }
              double s = 0;
              for (int64_t r = 0; r < n; ++r)
                s += std::exp(static_cast<double>(xb[p.offsets[r]]) - m);
              y[o] = static_cast<float>(m + std::log(s));
            } else {
              double acc = kRed == Red::prod ? 1.0 : 0.0;
              for (int64_t r = 0; r < n; ++r) {
                const double v = xb[p.offsets[r]];
                if constexpr (kRed == Red::prod)
                  acc *= v;
                else if constexpr (kRed == Red::l1)
                  acc += std::fabs(v);
                else if constexpr (kRed == Red::l2 || kRed == Red::sum_square)
                  acc += v * v;
                else
                  acc += v;
              }
              if constexpr (kRed == Red::mean) acc /= static_cast<double>(n);
              if constexpr (kRed == Red::l2) acc = std::sqrt(acc);
              if constexpr (kRed == Red::log_sum) acc = std::log(acc);
              y[o] = static_cast<T>(acc);
            }
          }
        }
      });
}

template <Red kRed>
std::vector<Tensor> run_reduce(const Node& node, const Inputs& in) {
  require_input(node, 0, "data");
  const Tensor& x = in.at(0);
  std::vector<int64_t> axes;
  if (node.attrs.has("axes")) {
    axes = node.attrs.get_ints("axes");
  } else if (in.size() > 1 && in[1].defined()) {
    axes = in[1].to_int64_vector();
  }
  const ReducePlan p = plan_reduce(node, x.shape(), axes);
  if (p.identity) return {x};
  Tensor y(x.dtype(), p.out_shape);
  if (x.dtype() == DType::f32) {
    reduce_typed<kRed>(p, x.data<float>(), y.mutable_data<float>());
    return {y};
  }
  if constexpr (allows_f64(kRed)) {
    if (x.dtype() == DType::f64) {
      reduce_typed<kRed>(p, x.data<double>(), y.mutable_data<double>());
      return {y};
    }
  }
  if constexpr (allows_int(kRed)) {
    if (x.dtype() == DType::i32) {
      reduce_typed<kRed>(p, x.data<int32_t>(), y.mutable_data<int32_t>());
      return {y};
    }
    if (x.dtype() == DType::i64) {
      reduce_typed<kRed>(p, x.data<int64_t>(), y.mutable_data<int64_t>());
      return {y};
    }
  }
  throw_user_error("input data has dtype ", dtype_name(x.dtype()), ", supported: f32",
                   allows_f64(kRed) ? ", f64" : "", allows_int(kRed) ? ", i32, i64" : "");
}

template <Red kRed>
constexpr OpDef reduce_op(std::string_view name) {
  return {name, run_reduce<kRed>, check_reduce<kRed>};
}

const OpDef kOps[] = {
    {"BatchNormalization", run_batch_norm, check_batch_norm},
    {"LayerNormalization", run_layer_norm, check_layer_norm},
    {"RMSNormalization", run_rms_norm, check_rms_norm},
    {"Softmax", run_softmax<false>, check_softmax<false>},
    {"LogSoftmax", run_softmax<true>, check_softmax<true>},
    reduce_op<Red::sum>("ReduceSum"),
    reduce_op<Red::mean>("ReduceMean"),
    reduce_op<Red::max>("ReduceMax"),
    reduce_op<Red::min>("ReduceMin"),
    reduce_op<Red::prod>("ReduceProd"),
    reduce_op<Red::l1>("ReduceL1"),
    reduce_op<Red::l2>("ReduceL2"),
    reduce_op<Red::sum_square>("ReduceSumSquare"),
    reduce_op<Red::log_sum>("ReduceLogSum"),
    reduce_op<Red::log_sum_exp>("ReduceLogSumExp"),
};

}  // namespace

std::span<const OpDef> norm_ops() { return kOps; }

}  // namespace dc::ref
