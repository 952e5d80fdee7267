// Index maps of issue 14 that move elements without arithmetic: DepthToSpace (DCR and CRD),
// SpaceToDepth, Trilu and GatherElements; and ArgMax / ArgMin and CumSum, whose output
// elements each walk their row along the axis. Each output element is one input element (Trilu: or zero), copied
// as bytes, so every dtype works. The ValueEmitter emits the same maps (value_emitter_index.cpp).
#include <cstring>

#include "ir/error.h"
#include "ref/checked_op.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

int64_t blocksize_of(const Node& n) {
  const int64_t b = n.attrs.get_int("blocksize");
  DC_USER_CHECK(b > 0, n.op, ": attribute 'blocksize' must be positive, got ", b);
  return b;
}

const TensorInfo& nchw_input(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(!in.empty() && in[0] != nullptr, n.op, ": required input 0 is missing");
  DC_USER_CHECK(in[0]->shape.size() == 4, n.op, ": input must have rank 4 (N x C x H x W), got ",
                shape_str(in[0]->shape));
  DC_USER_CHECK(in[0]->dtype != DType::undefined, n.op, ": input has no dtype");
  return *in[0];
}

void check_depth_to_space(const Node& n, const std::vector<const TensorInfo*>& in) {
  const Shape& x = nchw_input(n, in).shape;
  const int64_t b = blocksize_of(n);
  DC_USER_CHECK(x[1] % (b * b) == 0, n.op, ": channels ", x[1], " not divisible by blocksize^2 = ", b * b);
  const std::string mode = n.attrs.get_string("mode", "DCR");
  DC_USER_CHECK(mode == "DCR" || mode == "CRD", n.op, ": attribute 'mode' is '", mode,
                "'; allowed: 'DCR', 'CRD'");
}

void check_space_to_depth(const Node& n, const std::vector<const TensorInfo*>& in) {
  const Shape& x = nchw_input(n, in).shape;
  const int64_t b = blocksize_of(n);
  DC_USER_CHECK(x[2] % b == 0 && x[3] % b == 0, n.op, ": H and W (", x[2], ", ", x[3],
                ") must be multiples of blocksize ", b);
}

// Copies element src(o) of x to each element o of a new tensor of `shape`; src < 0: zero.
template <class Src>
Tensor gather_bytes(const Tensor& x, const Shape& shape, Src src) {
  Tensor y(x.dtype(), shape);
  const size_t es = dtype_size(x.dtype());
  const std::byte* xp = x.raw();
  std::byte* yp = y.raw_mutable();
  for (int64_t o = 0; o < y.numel(); ++o) {
    const int64_t s = src(o);
    if (s < 0) std::memset(yp + o * es, 0, es);
    else std::memcpy(yp + o * es, xp + s * es, es);
  }
  return y;
}

std::vector<Tensor> run_depth_to_space(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const int64_t b = blocksize_of(n), N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t oc = C / (b * b), oh = H * b, ow = W * b;
  const bool crd = n.attrs.get_string("mode", "DCR") == "CRD";
  return {gather_bytes(x, {N, oc, oh, ow}, [&](int64_t o) {
    const int64_t w = o % ow, h = (o / ow) % oh, c = (o / (ow * oh)) % oc, nn = o / (ow * oh * oc);
    const int64_t i = h % b, j = w % b;
    const int64_t ic = crd ? (c * b + i) * b + j : (i * b + j) * oc + c;
    return ((nn * C + ic) * H + h / b) * W + w / b;
  })};
}

std::vector<Tensor> run_space_to_depth(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const int64_t b = blocksize_of(n), N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t oc = C * b * b, oh = H / b, ow = W / b;
  return {gather_bytes(x, {N, oc, oh, ow}, [&](int64_t o) {
    const int64_t w = o % ow, h = (o / ow) % oh, c = (o / (ow * oh)) % oc, nn = o / (ow * oh * oc);
    const int64_t ic = c % C, i = c / C / b, j = c / C % b;
    return ((nn * C + ic) * H + h * b + i) * W + w * b + j;
  })};
}

void check_trilu(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(!in.empty() && in[0] != nullptr, n.op, ": required input 0 is missing");
  DC_USER_CHECK(in[0]->shape.size() >= 2, n.op, ": input must have rank >= 2, got ",
                shape_str(in[0]->shape));
  if (in.size() > 1 && in[1] != nullptr)
    DC_USER_CHECK(in[1]->dtype == DType::i64 && shape_numel(in[1]->shape) == 1, n.op,
                  ": k must be an int64 scalar");
  const int64_t upper = n.attrs.get_int("upper", 1);
  DC_USER_CHECK(upper == 0 || upper == 1, n.op, ": attribute 'upper' must be 0 or 1, got ", upper);
}

// Keeps the elements on and above (upper) or on and below (lower) the k-th diagonal of the
// last two dims; zeroes the rest.
std::vector<Tensor> run_trilu(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const int64_t k = in.size() > 1 && in[1].defined() ? in[1].to_int64_vector().at(0) : 0;
  const bool upper = n.attrs.get_int("upper", 1) == 1;
  const int64_t cols = x.shape().back(), rows = x.shape()[x.shape().size() - 2];
  return {gather_bytes(x, x.shape(), [&](int64_t o) {
    const int64_t c = o % cols, r = (o / cols) % rows;
    return (upper ? c - r >= k : c - r <= k) ? o : -1;
  })};
}

void check_gather_elements(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(in.size() == 2 && in[0] != nullptr && in[1] != nullptr, n.op,
                ": expected 2 inputs (data, indices)");
  const Shape &d = in[0]->shape, &i = in[1]->shape;
  DC_USER_CHECK(in[1]->dtype == DType::i64 || in[1]->dtype == DType::i32, n.op,
                ": indices must be int32 or int64, got ", dtype_name(in[1]->dtype));
  DC_USER_CHECK(!d.empty() && d.size() == i.size(), n.op, ": data ", shape_str(d), " and indices ",
                shape_str(i), " must have the same rank >= 1");
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(d.size()), "axis"));
  for (size_t k = 0; k < d.size(); ++k)
    DC_USER_CHECK(k == axis || i[k] <= d[k], n.op, ": indices ", shape_str(i),
                  " exceed data ", shape_str(d), " along axis ", k);
}

// out[..., j, ...] = data[..., indices[..., j, ...], ...] along `axis`; negative indices wrap.
std::vector<Tensor> run_gather_elements(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const Shape& d = x.shape();
  const Shape& is = in[1].shape();
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(d.size()), "axis"));
  const std::vector<int64_t> idx = in[1].to_int64_vector();
  for (int64_t v : idx)
    DC_USER_CHECK(v >= -d[axis] && v < d[axis], n.op, ": index ", v, " out of range [", -d[axis],
                  ", ", d[axis], ")");
  return {gather_bytes(x, is, [&](int64_t o) {
    int64_t rem = o, off = 0, stride = 1;
    for (size_t k = d.size(); k-- > 0;) {
      int64_t c = rem % is[k];
      rem /= is[k];
      if (k == axis) c = idx[static_cast<size_t>(o)] < 0 ? idx[static_cast<size_t>(o)] + d[k] : idx[static_cast<size_t>(o)];
      off += c * stride;
      stride *= d[k];
    }
    return off;
  })};
}

void check_arg_reduce(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(!in.empty() && in[0] != nullptr, n.op, ": required input 0 is missing");
  const DType t = in[0]->dtype;
  DC_USER_CHECK(t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64, n.op,
                ": input has dtype ", dtype_name(t), ", supported: f32, f64, i32, i64");
  DC_USER_CHECK(!in[0]->shape.empty(), n.op, ": input must have rank >= 1");
  normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(in[0]->shape.size()), "axis");
  for (const char* f : {"keepdims", "select_last_index"}) {
    const int64_t v = n.attrs.get_int(f, f[0] == 'k' ? 1 : 0);
    DC_USER_CHECK(v == 0 || v == 1, n.op, ": attribute '", f, "' must be 0 or 1, got ", v);
  }
}

// The index of the first (or, with select_last_index, the last) largest / smallest element
// along the axis.
std::vector<Tensor> run_arg_reduce(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  Shape s = x.shape();
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(s.size()), "axis"));
  const bool last = n.attrs.get_int("select_last_index", 0) == 1, max = n.op == "ArgMax";
  int64_t inner = 1;
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t len = s[axis];
  std::vector<double> v;  // exact for f32, f64 and integers up to 2^53
  if (x.dtype() == DType::f64) {
    v.assign(x.data<double>(), x.data<double>() + x.numel());
  } else if (x.dtype() == DType::f32) {
    for (float f : x.to_float_vector()) v.push_back(f);
  } else {
    for (int64_t i : x.to_int64_vector()) v.push_back(static_cast<double>(i));
  }
  Shape os = s;
  os[axis] = 1;
  std::vector<int64_t> out(static_cast<size_t>(shape_numel(os)));
  for (size_t o = 0; o < out.size(); ++o) {
    const int64_t base = static_cast<int64_t>(o) / inner * len * inner + static_cast<int64_t>(o) % inner;
    int64_t best = 0;
    for (int64_t k = 1; k < len; ++k) {
      const double a = v[static_cast<size_t>(base + k * inner)], b = v[static_cast<size_t>(base + best * inner)];
      if (max ? (last ? a >= b : a > b) : (last ? a <= b : a < b)) best = k;
    }
    out[o] = best;
  }
  if (n.attrs.get_int("keepdims", 1) == 0) os.erase(os.begin() + static_cast<int64_t>(axis));
  return {Tensor::from_vector<int64_t>(os, out)};
}

void check_cumsum(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(in.size() == 2 && in[0] != nullptr && in[1] != nullptr, n.op,
                ": expected 2 inputs (x, axis)");
  const DType t = in[0]->dtype;
  DC_USER_CHECK(t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64, n.op,
                ": input has dtype ", dtype_name(t), ", supported: f32, f64, i32, i64");
  DC_USER_CHECK((in[1]->dtype == DType::i64 || in[1]->dtype == DType::i32) &&
                    shape_numel(in[1]->shape) == 1,
                n.op, ": axis must be an int32 or int64 scalar");
  DC_USER_CHECK(!in[0]->shape.empty(), n.op, ": input must have rank >= 1");
}

// y[j] = sum of x[k] for k <= j (exclusive: k < j; reverse: k >= j, or k > j), summed in
// increasing k in the element type, as the ValueEmitter's loop does.
template <class T>
Tensor cumsum_typed(const Tensor& x, size_t axis, bool exclusive, bool reverse) {
  const Shape& s = x.shape();
  int64_t inner = 1;
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t len = s[axis];
  Tensor y(x.dtype(), s);
  const T* xp = x.data<T>();
  T* yp = y.mutable_data<T>();
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t j = (e / inner) % len, base = e - j * inner;
    T acc = T(0);
    for (int64_t k = 0; k < len; ++k) {
      const bool in = reverse ? (exclusive ? k > j : k >= j) : (exclusive ? k < j : k <= j);
      if (in) acc = static_cast<T>(acc + xp[base + k * inner]);
    }
    yp[e] = acc;
  }
  return y;
}

std::vector<Tensor> run_cumsum(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const auto axis = static_cast<size_t>(normalize_axis(in[1].to_int64_vector().at(0), static_cast<int64_t>(x.shape().size()), "axis"));
  const bool ex = n.attrs.get_int("exclusive", 0) != 0, rev = n.attrs.get_int("reverse", 0) != 0;
  switch (x.dtype()) {
    case DType::f32: return {cumsum_typed<float>(x, axis, ex, rev)};
    case DType::f64: return {cumsum_typed<double>(x, axis, ex, rev)};
    case DType::i32: return {cumsum_typed<int32_t>(x, axis, ex, rev)};
    default: return {cumsum_typed<int64_t>(x, axis, ex, rev)};
  }
}

const OpDef kOps[] = {
    op_def<check_cumsum, run_cumsum>("CumSum"),
    op_def<check_arg_reduce, run_arg_reduce>("ArgMax"),
    op_def<check_arg_reduce, run_arg_reduce>("ArgMin"),
    op_def<check_gather_elements, run_gather_elements>("GatherElements"),
    op_def<check_depth_to_space, run_depth_to_space>("DepthToSpace"),
    op_def<check_space_to_depth, run_space_to_depth>("SpaceToDepth"),
    op_def<check_trilu, run_trilu>("Trilu"),
};

}  // namespace

std::span<const OpDef> index_ops() { return kOps; }

}  // namespace dc::ref
