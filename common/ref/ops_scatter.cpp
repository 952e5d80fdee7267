// GatherND, ScatterND and ScatterElements (and opset 9-10's Scatter, ScatterElements without
// reduction). Indices may be negative (they wrap once); an index outside [-d, d) is a
// UserError naming it. Scatters apply their updates in row-major order of the indices, so
// duplicate indices are deterministic: with reduction 'none' the last update wins, with
// add/mul/max/min they combine in that order. The ValueEmitter's gather form
// (codegen/value_emitter_index.cpp) visits the updates of each output element in the same
// order.
#include <cstring>

#include "ir/error.h"
#include "ref/checked_op.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

bool is_index_dtype(DType t) { return t == DType::i64 || t == DType::i32; }

std::string reduction_of(const Node& n) { return n.attrs.get_string("reduction", "none"); }

void check_reduction(const Node& n, DType data) {
  const std::string r = reduction_of(n);
  DC_USER_CHECK(r == "none" || r == "add" || r == "mul" || r == "max" || r == "min", n.op,
                ": attribute 'reduction' is '", r, "'; allowed: none, add, mul, max, min");
  if (r != "none")
    DC_USER_CHECK(data == DType::f32 || data == DType::f64 || data == DType::i32 || data == DType::i64,
                  n.op, ": reduction '", r, "' on dtype ", dtype_name(data),
                  " is not supported (f32, f64, i32, i64)");
}

int64_t wrap_index(const Node& n, int64_t v, int64_t dim) {
  DC_USER_CHECK(v >= -dim && v < dim, n.op, ": index ", v, " out of range [", -dim, ", ", dim, ")");
  return v < 0 ? v + dim : v;
}

// dst = dst (reduction) src, one element of dtype t.
template <class T>
T combine(const std::string& r, T a, T b) {
  if (r == "add") return static_cast<T>(a + b);
  if (r == "mul") return static_cast<T>(a * b);
  if (r == "max") return b > a ? b : a;  // the ValueEmitter's expression (NaN in a stays)
  if (r == "min") return b < a ? b : a;
  return b;
}

void apply(const std::string& r, DType t, std::byte* dst, const std::byte* src) {
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    T a, b;
    std::memcpy(&a, dst, sizeof(T));
    std::memcpy(&b, src, sizeof(T));
    const T c = combine<T>(r, a, b);
    std::memcpy(dst, &c, sizeof(T));
  };
  if (r == "none") {
    std::memcpy(dst, src, dtype_size(t));
    return;
  }
  switch (t) {
    case DType::f32: typed(float{}); break;
    case DType::f64: typed(double{}); break;
    case DType::i32: typed(int32_t{}); break;
    default: typed(int64_t{}); break;
  }
}

void check_gather_nd(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(in.size() == 2 && in[0] != nullptr && in[1] != nullptr, n.op,
                ": expected 2 inputs (data, indices)");
  const Shape &d = in[0]->shape, &i = in[1]->shape;
  DC_USER_CHECK(is_index_dtype(in[1]->dtype), n.op, ": indices must be int32 or int64, got ",
                dtype_name(in[1]->dtype));
  const int64_t b = n.attrs.get_int("batch_dims", 0);
  DC_USER_CHECK(!d.empty() && !i.empty(), n.op, ": data and indices must have rank >= 1");
  DC_USER_CHECK(b >= 0 && b < static_cast<int64_t>(std::min(d.size(), i.size())), n.op,
                ": batch_dims ", b, " must be in [0, min(rank(data), rank(indices)))");
  const auto bu = static_cast<size_t>(b);
  for (size_t k = 0; k < bu; ++k)
    DC_USER_CHECK(d[k] == i[k], n.op, ": batch dimension ", k, " differs: data ", shape_str(d),
                  ", indices ", shape_str(i));
  DC_USER_CHECK(i.back() >= 1 && bu + static_cast<size_t>(i.back()) <= d.size(), n.op,
                ": indices' last dimension ", i.back(), " must be in [1, rank(data) - batch_dims]");
}

// out[b..., q..., r...] = data[b..., indices[b..., q..., :], r...].
std::vector<Tensor> run_gather_nd(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const Shape &d = x.shape(), &is = in[1].shape();
  const auto b = static_cast<size_t>(n.attrs.get_int("batch_dims", 0));
  const auto m = static_cast<size_t>(is.back());
  const std::vector<int64_t> idx = in[1].to_int64_vector();
  Shape os(is.begin(), is.end() - 1);
  os.insert(os.end(), d.begin() + static_cast<long>(b + m), d.end());
  int64_t slice = 1, per_batch = 1;  // elements copied per index tuple; tuples per batch
  for (size_t k = b + m; k < d.size(); ++k) slice *= d[k];
  for (size_t k = b; k + 1 < is.size(); ++k) per_batch *= is[k];
  const auto ds = shape_strides(d);
  Tensor y(x.dtype(), os);
  const size_t es = dtype_size(x.dtype());
  const int64_t tuples = shape_numel(is) / static_cast<int64_t>(m);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0, batch = t / per_batch;
    for (size_t k = b; k-- > 0;) {  // batch coordinates, innermost first
      off += (batch % d[k]) * ds[k];
      batch /= d[k];
    }
    for (size_t j = 0; j < m; ++j)
      off += wrap_index(n, idx[static_cast<size_t>(t) * m + j], d[b + j]) * ds[b + j];
    std::memcpy(y.raw_mutable() + t * slice * static_cast<int64_t>(es), x.raw() + off * static_cast<int64_t>(es),
                static_cast<size_t>(slice) * es);
  }
  return {y};
}

void check_scatter_nd(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(in.size() == 3 && in[0] != nullptr && in[1] != nullptr && in[2] != nullptr, n.op,
                ": expected 3 inputs (data, indices, updates)");
  const Shape &d = in[0]->shape, &i = in[1]->shape, &u = in[2]->shape;
  DC_USER_CHECK(is_index_dtype(in[1]->dtype), n.op, ": indices must be int32 or int64, got ",
                dtype_name(in[1]->dtype));
  DC_USER_CHECK(in[2]->dtype == in[0]->dtype, n.op, ": updates have dtype ",
                dtype_name(in[2]->dtype), ", data ", dtype_name(in[0]->dtype));
  DC_USER_CHECK(!d.empty() && !i.empty() && i.back() >= 1 && static_cast<size_t>(i.back()) <= d.size(),
                n.op, ": indices' last dimension must be in [1, rank(data)], got indices ",
                shape_str(i), " for data ", shape_str(d));
  Shape want(i.begin(), i.end() - 1);
  want.insert(want.end(), d.begin() + i.back(), d.end());
  DC_USER_CHECK(u == want, n.op, ": updates have shape ", shape_str(u), ", expected ", shape_str(want));
  check_reduction(n, in[0]->dtype);
}

// out = data; then out[indices[q, :], r...] (reduction)= updates[q, r...] for each q in order.
std::vector<Tensor> run_scatter_nd(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const Shape& d = x.shape();
  const auto m = static_cast<size_t>(in[1].shape().back());
  const std::vector<int64_t> idx = in[1].to_int64_vector();
  int64_t slice = 1;
  for (size_t k = m; k < d.size(); ++k) slice *= d[k];
  const auto ds = shape_strides(d);
  Tensor y = x.clone();
  const auto es = static_cast<int64_t>(dtype_size(x.dtype()));
  const std::string r = reduction_of(n);
  const auto tuples = static_cast<int64_t>(idx.size() / m);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (size_t j = 0; j < m; ++j) off += wrap_index(n, idx[static_cast<size_t>(t) * m + j], d[j]) * ds[j];
    for (int64_t e = 0; e < slice; ++e)
      apply(r, x.dtype(), y.raw_mutable() + (off + e) * es, in[2].raw() + (t * slice + e) * es);
  }
  return {y};
}

void check_scatter_elements(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(in.size() == 3 && in[0] != nullptr && in[1] != nullptr && in[2] != nullptr, n.op,
                ": expected 3 inputs (data, indices, updates)");
  const Shape &d = in[0]->shape, &i = in[1]->shape;
  DC_USER_CHECK(is_index_dtype(in[1]->dtype), n.op, ": indices must be int32 or int64, got ",
                dtype_name(in[1]->dtype));
  DC_USER_CHECK(in[2]->dtype == in[0]->dtype, n.op, ": updates have dtype ",
                dtype_name(in[2]->dtype), ", data ", dtype_name(in[0]->dtype));
  DC_USER_CHECK(in[2]->shape == i, n.op, ": updates ", shape_str(in[2]->shape),
                " and indices ", shape_str(i), " must have the same shape");
  DC_USER_CHECK(!d.empty() && d.size() == i.size(), n.op, ": data ", shape_str(d), " and indices ",
                shape_str(i), " must have the same rank >= 1");
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(d.size()), "axis"));
  for (size_t k = 0; k < d.size(); ++k)
    DC_USER_CHECK(k == axis || i[k] <= d[k], n.op, ": indices ", shape_str(i), " exceed data ",
                  shape_str(d), " along axis ", k);
  check_reduction(n, in[0]->dtype);
}

// out = data; then out[..., indices[e], ...] (reduction)= updates[e] along `axis`, for each
// element e of indices in row-major order.
std::vector<Tensor> run_scatter_elements(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const Shape &d = x.shape(), &is = in[1].shape();
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(d.size()), "axis"));
  const std::vector<int64_t> idx = in[1].to_int64_vector();
  const auto ds = shape_strides(d);
  Tensor y = x.clone();
  const auto es = static_cast<int64_t>(dtype_size(x.dtype()));
  const std::string r = reduction_of(n);
  for (int64_t e = 0; e < static_cast<int64_t>(idx.size()); ++e) {
    int64_t rem = e, off = 0;
    for (size_t k = d.size(); k-- > 0;) {
      int64_t c = rem % is[k];
      rem /= is[k];
      if (k == axis) c = wrap_index(n, idx[static_cast<size_t>(e)], d[k]);
      off += c * ds[k];
    }
    apply(r, x.dtype(), y.raw_mutable() + off * es, in[2].raw() + e * es);
  }
  return {y};
}

const OpDef kOps[] = {
    op_def<check_gather_nd, run_gather_nd>("GatherND"),
    op_def<check_scatter_nd, run_scatter_nd>("ScatterND"),
    op_def<check_scatter_elements, run_scatter_elements>("ScatterElements"),
    op_def<check_scatter_elements, run_scatter_elements>("Scatter"),
};

}  // namespace

std::span<const OpDef> scatter_ops() { return kOps; }

}  // namespace dc::ref
