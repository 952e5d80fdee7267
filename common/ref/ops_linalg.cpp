// Conv, Gemm and MatMul: the heavy ops. All of them end in ref/gemm's SGEMM, Conv through
// im2col (skipped for pointwise convolutions, whose input already is the GEMM operand)
// except depthwise convolutions, which are a direct loop.
#include <algorithm>
#include <memory>
#include <type_traits>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/gemm.h"
#include "ref/im2col.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

void require_dtype(const TensorInfo* t, const char* what, std::initializer_list<DType> allowed) {
  if (t == nullptr) return;
  for (DType d : allowed)
    if (t->dtype == d) return;
  std::string names;
  for (DType d : allowed) names += str_cat(names.empty() ? "" : ", ", dtype_name(d));
  throw_user_error("input ", what, " has dtype ", dtype_name(t->dtype), ", supported: ", names);
}

void require_input(const Node& node, size_t i, const char* what) {
  DC_USER_CHECK(node.has_input(i), "required input ", what, " (input ", i, ") is missing");
}

void require_single_output(const Node& node) {
  DC_USER_CHECK(node.outputs.size() <= 1, "expected 1 output, the node has ", node.outputs.size());
}

// ---------------------------------------------------------------------------------------
// Conv

struct ConvGeometry {
  Window window;
  int64_t batch = 0, channels = 0, filters = 0, group = 1;
};

ConvGeometry conv_geometry(const Node& node, const Shape& x, const Shape& w, const Shape* bias) {
  DC_USER_CHECK(x.size() >= 3, "input X must have rank >= 3 (N x C x spatial dims), got ",
                shape_str(x));
  DC_USER_CHECK(w.size() == x.size(), "weight W has shape ", shape_str(w), ", expected rank ",
                x.size(), " like X (", shape_str(x), ")");
  ConvGeometry g;
  g.batch = x[0];
  g.channels = x[1];
  g.filters = w[0];
  g.group = node.attrs.get_int("group", 1);
  DC_USER_CHECK(g.group > 0, "attribute 'group' must be > 0, got ", g.group);
  DC_USER_CHECK(g.channels % g.group == 0, "group ", g.group, " does not divide input channels ",
                g.channels);
  DC_USER_CHECK(g.filters % g.group == 0, "group ", g.group, " does not divide output channels ",
                g.filters, " (W dim 0)");
  DC_USER_CHECK(w[1] * g.group == g.channels, "weight W has ", w[1],
                " input channels per group (dim 1), expected ", g.channels, " / group ", g.group,
                " = ", g.channels / g.group);
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (node.attrs.has("kernel_shape")) {
    const auto ks = node.attrs.get_ints("kernel_shape");
    DC_USER_CHECK(ks == kernel, "attribute 'kernel_shape' ", shape_str(ks),
                  " does not match the weight's spatial dims ", shape_str(kernel));
  }
  if (bias != nullptr)
    DC_USER_CHECK(bias->size() == 1 && (*bias)[0] == g.filters, "bias B has shape ",
                  shape_str(*bias), ", expected [", g.filters, "] (one per output channel)");
  g.window =
      make_window(node, {"Conv", false}, std::vector<int64_t>(x.begin() + 2, x.end()), kernel);
  return g;
}

void check_conv(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_input(node, 0, "X");
  require_input(node, 1, "W");
  require_single_output(node);
  require_dtype(in[0], "X", {DType::f32});
  require_dtype(in[1], "W", {DType::f32});
  const TensorInfo* b = in.size() > 2 ? in[2] : nullptr;
  require_dtype(b, "B", {DType::f32});
  if (in[0] != nullptr && in[1] != nullptr)
    conv_geometry(node, in[0]->shape, in[1]->shape, b != nullptr ? &b->shape : nullptr);
}

// One output plane per (image, channel) for group == C == M: a direct loop, since the
// GEMM per channel would be 1 x K x P.
void depthwise_conv(const ConvGeometry& g, const float* x, const float* w, const float* bias,
                    float* y) {
  const Window& win = g.window;
  const int64_t isize = win.in_size(), osize = win.out_size(), ksize = win.kernel_size();
  parallel_for(g.batch * g.channels, 4, [&](int64_t p0, int64_t p1) {
    for (int64_t plane = p0; plane < p1; ++plane) {
      const int64_t c = plane % g.channels;
      const float* xc = x + plane * isize;
      const float* wc = w + c * ksize;
      float* yc = y + plane * osize;
      std::fill(yc, yc + osize, bias != nullptr ? bias[c] : 0.f);
      for (int64_t kd = 0; kd < win.kernel[0]; ++kd)
        for (int64_t kh = 0; kh < win.kernel[1]; ++kh)
          for (int64_t kw = 0; kw < win.kernel[2]; ++kw) {
            const float wv = wc[(kd * win.kernel[1] + kh) * win.kernel[2] + kw];
            const int64_t off_w = kw * win.dilation[2] - win.pad_begin[2];
            // Output columns whose tap lands inside the input row: [lo, hi).
            int64_t lo = 0;
            while (lo < win.out[2] && lo * win.stride[2] + off_w < 0) ++lo;
            int64_t hi = win.out[2];
            while (hi > lo && (hi - 1) * win.stride[2] + off_w >= win.in[2]) --hi;
            for (int64_t od = 0; od < win.out[0]; ++od) {
              const int64_t id = od * win.stride[0] - win.pad_begin[0] + kd * win.dilation[0];
              if (id < 0 || id >= win.in[0]) continue;
              for (int64_t oh = 0; oh < win.out[1]; ++oh) {
                const int64_t ih = oh * win.stride[1] - win.pad_begin[1] + kh * win.dilation[1];
                if (ih < 0 || ih >= win.in[1]) continue;
                const float* xr = xc + (id * win.in[1] + ih) * win.in[2];
                float* yr = yc + (od * win.out[1] + oh) * win.out[2];
                const int64_t s = win.stride[2];
                if (s == 1) {
                  for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow + off_w];
                } else {
                  for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * s + off_w];
                }
              }
            }
          }
    }
  });
}

std::vector<Tensor> run_conv(const Node& node, const Inputs& in) {
  require_input(node, 0, "X");
  require_input(node, 1, "W");
  const Tensor& x = in.at(0);
  const Tensor& w = in.at(1);
  const bool has_bias = in.size() > 2 && in[2].defined();
  const ConvGeometry g =
      conv_geometry(node, x.shape(), w.shape(), has_bias ? &in[2].shape() : nullptr);
  const Window& win = g.window;

  Shape out_shape{g.batch, g.filters};
  for (int64_t d : win.out_dims()) out_shape.push_back(d);
  Tensor y(DType::f32, out_shape);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* bp = has_bias ? in[2].data<float>() : nullptr;
  float* yp = y.mutable_data<float>();

  if (g.group == g.channels && g.filters == g.channels) {
    depthwise_conv(g, xp, wp, bp, yp);
    return {y};
  }

  const int64_t cg = g.channels / g.group, mg = g.filters / g.group;
  const int64_t k = cg * win.kernel_size(), p = win.out_size(), isize = win.in_size();
  // A pointwise conv reads its input as the K x P operand directly.
  std::unique_ptr<float[]> col;
  if (!win.is_pointwise())
    col = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(k * p));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.group; ++grp) {
      const float* xg = xp + (n * g.channels + grp * cg) * isize;
      if (col) im2col(xg, cg, win, col.get());
      float* yg = yp + (n * g.filters + grp * mg) * p;
      if (bp != nullptr)
        for (int64_t i = 0; i < mg; ++i) std::fill(yg + i * p, yg + (i + 1) * p, bp[grp * mg + i]);
      sgemm(false, false, {mg, p, k}, 1.f, wp + grp * mg * k, k, col ? col.get() : xg, p,
            bp != nullptr ? 1.f : 0.f, yg, p);
    }
  return {y};
}

// ---------------------------------------------------------------------------------------
// Gemm: Y = alpha * op(A) * op(B) + beta * C, C broadcast to M x N.

struct GemmDims {
  int64_t m, n, k;
};

GemmDims gemm_dims(const Node& node, const Shape& a, const Shape& b, const Shape* c) {
  DC_USER_CHECK(a.size() == 2, "input A must have rank 2, got ", shape_str(a));
  DC_USER_CHECK(b.size() == 2, "input B must have rank 2, got ", shape_str(b));
  const int64_t ta = node.attrs.get_int("transA", 0), tb = node.attrs.get_int("transB", 0);
  DC_USER_CHECK(ta == 0 || ta == 1, "attribute 'transA' must be 0 or 1, got ", ta);
  DC_USER_CHECK(tb == 0 || tb == 1, "attribute 'transB' must be 0 or 1, got ", tb);
  GemmDims d{ta ? a[1] : a[0], tb ? b[0] : b[1], ta ? a[0] : a[1]};
  const int64_t kb = tb ? b[1] : b[0];
  DC_USER_CHECK(d.k == kb, "inner dims do not match: op(A) is ", d.m, "x", d.k, " (A ",
                shape_str(a), ", transA=", ta, "), op(B) is ", kb, "x", d.n, " (B ", shape_str(b),
                ", transB=", tb, ")");
  if (c != nullptr) {
    // Unidirectional broadcast of C to M x N: scalar, [N], [1,N], [M,1], [M,N], ...
    const Shape target{d.m, d.n};
    bool ok = c->size() <= 2;
    for (size_t i = 0; ok && i < c->size(); ++i) {
      const int64_t want = target[2 - c->size() + i];
      ok = (*c)[i] == 1 || (*c)[i] == want;
    }
    DC_USER_CHECK(ok, "input C of shape ", shape_str(*c), " cannot be broadcast to the ", d.m, "x",
                  d.n, " result");
  }
  return d;
}

void check_gemm(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_input(node, 0, "A");
  require_input(node, 1, "B");
  require_single_output(node);
  require_dtype(in[0], "A", {DType::f32});
  require_dtype(in[1], "B", {DType::f32});
  const TensorInfo* c = in.size() > 2 ? in[2] : nullptr;
  require_dtype(c, "C", {DType::f32});
  if (in[0] != nullptr && in[1] != nullptr)
    gemm_dims(node, in[0]->shape, in[1]->shape, c != nullptr ? &c->shape : nullptr);
}

std::vector<Tensor> run_gemm(const Node& node, const Inputs& in) {
  require_input(node, 0, "A");
  require_input(node, 1, "B");
  const Tensor& a = in.at(0);
  const Tensor& b = in.at(1);
  const bool has_c = in.size() > 2 && in[2].defined();
  const GemmDims d = gemm_dims(node, a.shape(), b.shape(), has_c ? &in[2].shape() : nullptr);
  const float alpha = node.attrs.get_float("alpha", 1.f);
  const float beta = node.attrs.get_float("beta", 1.f);
  Tensor y(DType::f32, {d.m, d.n});
  float* yp = y.mutable_data<float>();
  if (has_c && beta != 0.f) {
    const Tensor& c = in[2];
    const Shape full = [&] {
      Shape s = c.shape();
      while (s.size() < 2) s.insert(s.begin(), 1);
      return s;
    }();
    const float* cp = c.data<float>();
    const int64_t rs = full[0] == 1 ? 0 : full[1], cs = full[1] == 1 ? 0 : 1;
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.n; ++j) yp[i * d.n + j] = cp[i * rs + j * cs];
  }
  const bool ta = node.attrs.get_int("transA", 0) != 0, tb = node.attrs.get_int("transB", 0) != 0;
  sgemm(ta, tb, {d.m, d.n, d.k}, alpha, a.data<float>(), a.dim(1), b.data<float>(), b.dim(1),
        has_c ? beta : 0.f, yp, d.n);
  return {y};
}

// ---------------------------------------------------------------------------------------
// MatMul with numpy semantics: 1-D operands are promoted (and the promoted dim removed
// from the result), leading dims are batch dims broadcast against each other.

struct MatMulDims {
  int64_t m, n, k;
  Shape batch;  // broadcast batch dims
  Shape a_batch, b_batch;
  Shape out;
};

MatMulDims matmul_dims(const Shape& a, const Shape& b) {
  DC_USER_CHECK(!a.empty() && !b.empty(), "MatMul operands must have rank >= 1, got A ",
                shape_str(a), " and B ", shape_str(b));
  MatMulDims d;
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  d.m = a_vec ? 1 : a[a.size() - 2];
  d.k = a.back();
  const int64_t kb = b_vec ? b[0] : b[b.size() - 2];
  d.n = b_vec ? 1 : b.back();
  DC_USER_CHECK(d.k == kb, "inner dims do not match: A is ", shape_str(a), ", B is ", shape_str(b),
                " (", d.k, " vs ", kb, ")");
  if (!a_vec) d.a_batch.assign(a.begin(), a.end() - 2);
  if (!b_vec) d.b_batch.assign(b.begin(), b.end() - 2);
  d.batch = broadcast_shapes(d.a_batch, d.b_batch);
  d.out = d.batch;
  if (!a_vec) d.out.push_back(d.m);
  if (!b_vec) d.out.push_back(d.n);
  return d;
}

void check_matmul(const Node& node, const std::vector<const TensorInfo*>& in) {
  require_input(node, 0, "A");
  require_input(node, 1, "B");
  require_single_output(node);
  require_dtype(in[0], "A", {DType::f32, DType::i32, DType::i64});
  require_dtype(in[1], "B", {DType::f32, DType::i32, DType::i64});
  if (in[0] != nullptr && in[1] != nullptr) {
    DC_USER_CHECK(in[0]->dtype == in[1]->dtype,
                  "A and B have different dtypes: ", dtype_name(in[0]->dtype), " and ",
                  dtype_name(in[1]->dtype));
    matmul_dims(in[0]->shape, in[1]->shape);
  }
}

// Offsets (in elements) of each batch's matrices within A and B.
void batch_offsets(const MatMulDims& d, std::vector<int64_t>& a_off, std::vector<int64_t>& b_off) {
  const int64_t count = shape_numel(d.batch);
  const auto as = broadcast_strides(d.a_batch, d.batch);
  const auto bs = broadcast_strides(d.b_batch, d.batch);
  a_off.assign(static_cast<size_t>(count), 0);
  b_off.assign(static_cast<size_t>(count), 0);
  std::vector<int64_t> idx(d.batch.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t ao = 0, bo = 0;
    for (size_t j = 0; j < idx.size(); ++j) {
      ao += idx[j] * as[j];
      bo += idx[j] * bs[j];
    }
    a_off[i] = ao * d.m * d.k;
    b_off[i] = bo * d.k * d.n;
    for (size_t j = idx.size(); j-- > 0;) {
      if (++idx[j] < d.batch[j]) break;
      idx[j] = 0;
    }
  }
}

// Integer MatMul wraps on overflow like numpy (computed in the unsigned type: no UB).
template <class T>
void matmul_naive(const MatMulDims& d, const T* a, const T* b, T* y) {
  using U = std::make_unsigned_t<T>;
  std::vector<int64_t> a_off, b_off;
  batch_offsets(d, a_off, b_off);
  for (size_t t = 0; t < a_off.size(); ++t) {
    const T* at = a + a_off[t];
    const T* bt = b + b_off[t];
    T* yt = y + static_cast<int64_t>(t) * d.m * d.n;
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.n; ++j) {
        U acc = 0;
        for (int64_t kk = 0; kk < d.k; ++kk)
          acc += static_cast<U>(at[i * d.k + kk]) * static_cast<U>(bt[kk * d.n + j]);
        yt[i * d.n + j] = static_cast<T>(acc);
      }
  }
}

void matmul_f32(const MatMulDims& d, const float* a, const float* b, float* y) {
  // B shared by every batch and A's batches contiguous: one tall GEMM (the common
  // activations x weights case).
  if (shape_numel(d.b_batch) == 1 && d.a_batch == d.batch) {
    sgemm(false, false, {shape_numel(d.batch) * d.m, d.n, d.k}, 1.f, a, d.k, b, d.n, 0.f, y, d.n);
    return;
  }
  std::vector<int64_t> a_off, b_off;
  batch_offsets(d, a_off, b_off);
  const auto count = static_cast<int64_t>(a_off.size());
  auto one = [&](int64_t t, bool parallel) {
    sgemm(false, false, {d.m, d.n, d.k}, 1.f, a + a_off[t], d.k, b + b_off[t], d.n, 0.f,
          y + t * d.m * d.n, d.n, parallel);
  };
  if (count >= parallel_threads()) {
    // Many independent GEMMs (attention heads): one thread each.
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, d.m * d.n * d.k));
    parallel_for(count, grain, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) one(t, false);
    });
  } else {
    for (int64_t t = 0; t < count; ++t) one(t, true);
  }
}

std::vector<Tensor> run_matmul(const Node& node, const Inputs& in) {
  require_input(node, 0, "A");
  require_input(node, 1, "B");
  const Tensor& a = in.at(0);
  const Tensor& b = in.at(1);
  DC_USER_CHECK(a.dtype() == b.dtype(), "A and B have different dtypes: ", dtype_name(a.dtype()),
                " and ", dtype_name(b.dtype()));
  const MatMulDims d = matmul_dims(a.shape(), b.shape());
  Tensor y(a.dtype(), d.out);
  switch (a.dtype()) {
    case DType::f32:
      matmul_f32(d, a.data<float>(), b.data<float>(), y.mutable_data<float>());
      break;
    case DType::i32:
      matmul_naive(d, a.data<int32_t>(), b.data<int32_t>(), y.mutable_data<int32_t>());
      break;
    case DType::i64:
      matmul_naive(d, a.data<int64_t>(), b.data<int64_t>(), y.mutable_data<int64_t>());
      break;
    default:
      throw_user_error("MatMul of dtype ", dtype_name(a.dtype()),
                       " is not supported (f32, i32, i64)");
  }
  return {y};
}

const OpDef kOps[] = {
    {"Conv", run_conv, check_conv},
    {"Gemm", run_gemm, check_gemm},
    {"MatMul", run_matmul, check_matmul},
};

}  // namespace

std::span<const OpDef> linalg_ops() { return kOps; }

}  // namespace dc::ref
