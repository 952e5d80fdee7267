// TopK and OneHot. TopK's k and OneHot's depth decide output shapes, so they are constants
// by the time shapes are static (verify binds them from test data; see
// docs/onnx-conformance.md); the kernels read them from the output shapes' inputs anyway.
//
// TopK orders by a strict weak order shared with the ValueEmitter
// (codegen/value_emitter_index.cpp): NaN is larger than every number, equal values keep
// the lower index first. Both `sorted` values give the sorted order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "ir/error.h"
#include "ref/checked_op.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

bool numeric(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64;
}

void check_topk(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(in.size() == 2 && in[0] != nullptr && in[1] != nullptr, n.op,
                ": expected 2 inputs (X, K)");
  DC_USER_CHECK(numeric(in[0]->dtype), n.op, ": input has dtype ", dtype_name(in[0]->dtype),
                ", supported: f32, f64, i32, i64");
  DC_USER_CHECK(in[1]->dtype == DType::i64 && shape_numel(in[1]->shape) == 1, n.op,
                ": K must be an int64 tensor of one element");
  DC_USER_CHECK(!in[0]->shape.empty(), n.op, ": input must have rank >= 1");
  normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(in[0]->shape.size()), "axis");
  for (const char* f : {"largest", "sorted"}) {
    const int64_t v = n.attrs.get_int(f, 1);
    DC_USER_CHECK(v == 0 || v == 1, n.op, ": attribute '", f, "' must be 0 or 1, got ", v);
  }
}

// a comes before b in TopK's order (largest: descending, NaN first; smallest: ascending,
// NaN last), ties by index.
bool before(double a, int64_t ia, double b, int64_t ib, bool largest) {
  auto gt = [](double x, double y) { return x > y || (std::isnan(x) && !std::isnan(y)); };
  const bool ab = largest ? gt(a, b) : gt(b, a), ba = largest ? gt(b, a) : gt(a, b);
  return ab || (!ba && ia < ib);
}

std::vector<Tensor> run_topk(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const Shape& s = x.shape();
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(s.size()), "axis"));
  const int64_t k = in[1].to_int64_vector().at(0), len = s[axis];
  DC_USER_CHECK(k >= 0 && k <= len, n.op, ": K = ", k, " must be in [0, ", len, "]");
  const bool largest = n.attrs.get_int("largest", 1) == 1;
  int64_t inner = 1;
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  std::vector<double> v;  // exact for f32, f64 and integers up to 2^53
  if (x.dtype() == DType::f64) v.assign(x.data<double>(), x.data<double>() + x.numel());
  else if (x.dtype() == DType::f32) for (float f : x.to_float_vector()) v.push_back(f);
  else for (int64_t i : x.to_int64_vector()) v.push_back(static_cast<double>(i));
  Shape os = s;
  os[axis] = k;
  Tensor values(x.dtype(), os);
  std::vector<int64_t> indices(static_cast<size_t>(shape_numel(os)));
  const auto es = static_cast<int64_t>(dtype_size(x.dtype()));
  std::vector<int64_t> order(static_cast<size_t>(len));
  for (int64_t row = 0; row < x.numel() / std::max<int64_t>(len, 1); ++row) {
    const int64_t base = row / inner * len * inner + row % inner;
    auto at = [&](int64_t i) { return v[static_cast<size_t>(base + i * inner)]; };
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return before(at(a), a, at(b), b, largest); });
    for (int64_t j = 0; j < k; ++j) {
      const int64_t o = row / inner * k * inner + row % inner + j * inner;
      indices[static_cast<size_t>(o)] = order[static_cast<size_t>(j)];
      std::memcpy(values.raw_mutable() + o * es, x.raw() + (base + order[static_cast<size_t>(j)] * inner) * es,
                  static_cast<size_t>(es));
    }
  }
  return {values, Tensor::from_vector<int64_t>(os, indices)};
}

void check_onehot(const Node& n, const std::vector<const TensorInfo*>& in) {
  DC_USER_CHECK(in.size() == 3 && in[0] != nullptr && in[1] != nullptr && in[2] != nullptr, n.op,
                ": expected 3 inputs (indices, depth, values)");
  for (size_t i = 0; i < 2; ++i)
    DC_USER_CHECK(numeric(in[i]->dtype), n.op, ": input ", i, " has dtype ",
                  dtype_name(in[i]->dtype), ", supported: f32, f64, i32, i64");
  DC_USER_CHECK(shape_numel(in[1]->shape) == 1, n.op, ": depth must have one element");
  DC_USER_CHECK(shape_numel(in[2]->shape) == 2 && in[2]->shape.size() == 1, n.op,
                ": values must be [off_value, on_value], got shape ", shape_str(in[2]->shape));
  normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(in[0]->shape.size()) + 1, "axis");
}

// Values truncated toward zero to integers (float indices and depth are allowed).
std::vector<int64_t> as_integers(const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64) return t.to_int64_vector();
  std::vector<int64_t> out;
  if (t.dtype() == DType::f64) for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<int64_t>(t.data<double>()[i]));
  else for (float f : t.to_float_vector()) out.push_back(static_cast<int64_t>(f));
  return out;
}

// out[..., j, ...] = values[1] if the index (truncated to an integer; negative ones count
// from depth) is j, else values[0]; an index outside [-depth, depth) gives all values[0].
std::vector<Tensor> run_onehot(const Node& n, const Inputs& in) {
  const Shape& is = in[0].shape();
  const int64_t depth = as_integers(in[1]).at(0);
  DC_USER_CHECK(depth >= 1, n.op, ": depth must be >= 1, got ", depth);
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(is.size()) + 1, "axis"));
  const std::vector<int64_t> idx = as_integers(in[0]);
  Shape os = is;
  os.insert(os.begin() + static_cast<long>(axis), depth);
  int64_t inner = 1;
  for (size_t k = axis; k < is.size(); ++k) inner *= is[k];
  Tensor y(in[2].dtype(), os);
  const auto es = static_cast<int64_t>(dtype_size(y.dtype()));
  for (int64_t o = 0; o < y.numel(); ++o) {
    const int64_t j = o / inner % depth, e = o / (inner * depth) * inner + o % inner;
    int64_t i = idx[static_cast<size_t>(e)];
    if (i < 0) i += depth;
    std::memcpy(y.raw_mutable() + o * es, in[2].raw() + (i == j ? es : 0), static_cast<size_t>(es));
  }
  return {y};
}

const OpDef kOps[] = {
    op_def<check_topk, run_topk>("TopK"),
    op_def<check_onehot, run_onehot>("OneHot"),
};

}  // namespace

std::span<const OpDef> search_ops() { return kOps; }

}  // namespace dc::ref
