// Shape and data-movement kernels of the reference executor: Reshape, Flatten, Transpose,
// Squeeze, Unsqueeze, Concat, Split, Slice, Gather, Shape, Size, Constant, ConstantOfShape,
// Identity, Dropout, Expand, Tile, Range.
//
// Pure data movement works on element bytes (dtype_size), so every dtype dc holds passes
// through. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) share the input buffer;
// kernels never write into a buffer they did not create, so that is safe. Transpose, Slice,
// Expand, Tile and Split are one strided copy each. Attributes are validated at import
// (check); values that decide shapes (Reshape's shape, Slice's starts, ...) in the kernel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "ir/parallel.h"
#include "ref/broadcast.h"
#include "ref/checked_op.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

using Infos = std::vector<const TensorInfo*>;

// ---------------------------------------------------------------------------------------
// Checks shared by the kernels and the import-time validation (ref/checked_op.h).


const TensorInfo& required(const Node& n, const Infos& in, size_t i, const char* what) {
  DC_USER_CHECK(i < in.size() && in[i] != nullptr, n.op, ": required input ", i, " (", what,
                ") is missing");
  return *in[i];
}

bool present(const Inputs& in, size_t i) { return i < in.size() && in[i].defined(); }
bool present(const Infos& in, size_t i) { return i < in.size() && in[i] != nullptr; }

void require_count(const Node& n, const Infos& in, size_t lo, size_t hi) {
  DC_USER_CHECK(in.size() >= lo && in.size() <= hi, n.op, ": expected ",
                lo == hi ? std::to_string(lo) : str_cat(lo, " to ", hi), " inputs, got ",
                in.size());
}

// An input holding a list of integers (shape, axes, starts, ...): an integer tensor of rank 0 or 1.
void check_int_list_input(const Node& n, const Infos& in, size_t i, const char* what) {
  if (!present(in, i)) return;
  DC_USER_CHECK(in[i]->dtype == DType::i64 || in[i]->dtype == DType::i32, n.op, ": '", what,
                "' must be an int64 (or int32) tensor, got ", dtype_name(in[i]->dtype));
  DC_USER_CHECK(in[i]->shape.size() <= 1, n.op, ": '", what, "' must be 1-D, got shape ",
                shape_str(in[i]->shape));
}

int64_t rank_of(const TensorInfo& t) { return static_cast<int64_t>(t.shape.size()); }

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Axes normalised to [0, rank); UserError for out-of-range or repeated axes.
std::vector<int64_t> normalize_axes(const Node& n, std::vector<int64_t> axes, int64_t rank) {
  const std::string what = n.op;
  for (int64_t& a : axes) a = normalize_axis(a, rank, what.c_str());
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  DC_USER_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), n.op,
                ": axes ", list_str(axes), " repeat an axis");
  return axes;
}

// A list given as attribute `attr` (older opsets) or as input `idx` (newer ones).
std::optional<std::vector<int64_t>> attr_or_input(const Node& n, const Inputs& in, size_t idx,
                                                  const char* attr) {
  if (n.attrs.has(attr)) return n.attrs.get_ints(attr);
  if (present(in, idx)) return in[idx].to_int64_vector();
  return std::nullopt;
}

void check_not_both(const Node& n, const Infos& in, size_t idx, const char* attr) {
  DC_USER_CHECK(!(n.attrs.has(attr) && present(in, idx)), n.op, ": '", attr,
                "' is given both as an attribute and as input ", idx);
}

// ---------------------------------------------------------------------------------------
// The strided copy behind Transpose, Slice, Expand, Tile and Split:
// dst[i] = src[offset + sum_d idx_d * strides_d] over `shape`, in elements.

template <class E>
void strided_copy_typed(const std::byte* src, std::byte* dst, const StridedLoop<1>& loop,
                        int64_t n) {
  const E* s = reinterpret_cast<const E*>(src);
  E* d = reinterpret_cast<E*>(dst);
  const int64_t inner = loop.strides[0].back();
  parallel_for(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    for_each_run(loop, lo, hi, [&](int64_t o, const std::array<int64_t, 1>& off, int64_t cnt) {
      if (inner == 1) {
        std::memcpy(d + o, s + off[0], static_cast<size_t>(cnt) * sizeof(E));
      } else {
        const E* p = s + off[0];
        for (int64_t j = 0; j < cnt; ++j) d[o + j] = p[j * inner];
      }
    });
  });
}

Tensor strided_copy(const Tensor& src, int64_t offset, const Shape& shape,
                    const std::vector<int64_t>& strides) {
  Tensor out(src.dtype(), shape);
  if (out.numel() == 0) return out;
  const auto loop = collapse<1>(shape, {strides}, {offset});
  const std::byte* s = src.raw();
  std::byte* d = out.raw_mutable();
  switch (dtype_size(src.dtype())) {
    case 1: strided_copy_typed<uint8_t>(s, d, loop, out.numel()); break;
    case 2: strided_copy_typed<uint16_t>(s, d, loop, out.numel()); break;
    case 4: strided_copy_typed<uint32_t>(s, d, loop, out.numel()); break;
    case 8: strided_copy_typed<uint64_t>(s, d, loop, out.numel()); break;
    default: throw_internal_error("strided_copy: element size ", dtype_size(src.dtype()));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Reshape, Flatten, Squeeze, Unsqueeze: views.

void check_reshape(const Node& n, const Infos& in) {
  require_count(n, in, 1, 2);
  required(n, in, 0, "data");
  check_int_list_input(n, in, 1, "shape");
  DC_USER_CHECK(present(in, 1) || n.attrs.has("shape"), n.op, ": no target shape (input 1)");
  const int64_t allowzero = n.attrs.get_int("allowzero", 0);
  DC_USER_CHECK(allowzero == 0 || allowzero == 1, n.op, ": attribute 'allowzero' is ",
                allowzero, "; allowed: 0, 1");
}

Shape reshape_target(const Node& n, const Shape& in, const std::vector<int64_t>& spec,
                     bool allowzero) {
  Shape out(spec.size());
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    const int64_t d = spec[i];
    DC_USER_CHECK(d >= -1, n.op, ": shape ", list_str(spec), " has invalid dim ", d);
    if (d == -1) {
      DC_USER_CHECK(infer < 0, n.op, ": shape ", list_str(spec), " has more than one -1");
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (d == 0 && !allowzero) {
      DC_USER_CHECK(i < in.size(), n.op, ": shape ", list_str(spec), " copies dim ", i,
                    " (0) but the input ", shape_str(in), " has rank ", in.size());
      out[i] = in[i];
    } else {
      out[i] = d;
    }
    known *= out[i];
  }
  const int64_t numel = shape_numel(in);
  if (infer >= 0) {
    DC_USER_CHECK(known != 0, n.op, ": cannot infer the -1 in shape ", list_str(spec),
                  " when the other dims have a zero product (input ", shape_str(in), ")");
    DC_USER_CHECK(numel % known == 0, n.op, ": cannot reshape ", shape_str(in), " (", numel,
                  " elements) to ", list_str(spec));
    out[infer] = numel / known;
  }
  DC_USER_CHECK(shape_numel(out) == numel, n.op, ": cannot reshape ", shape_str(in), " (",
                numel, " elements) to ", list_str(spec), " (", shape_numel(out), " elements)");
  return out;
}

std::vector<Tensor> run_reshape(const Node& n, const Inputs& in) {
  const auto spec = attr_or_input(n, in, 1, "shape");
  const bool allowzero = n.attrs.get_int("allowzero", 0) == 1;
  return {in[0].reshaped(reshape_target(n, in[0].shape(), *spec, allowzero))};
}

int64_t flatten_axis(const Node& n, int64_t rank) {
  const int64_t axis = n.attrs.get_int("axis", 1);
  DC_USER_CHECK(axis >= -rank && axis <= rank, n.op, ": axis ", axis,
                " is out of range for rank ", rank, " (allowed: ", -rank, " to ", rank, ")");
  return axis < 0 ? axis + rank : axis;
}

void check_flatten(const Node& n, const Infos& in) {
  require_count(n, in, 1, 1);
  flatten_axis(n, rank_of(required(n, in, 0, "input")));
}

std::vector<Tensor> run_flatten(const Node& n, const Inputs& in) {
  const Shape& s = in[0].shape();
  const auto axis = static_cast<size_t>(flatten_axis(n, in[0].rank()));
  const int64_t outer = std::accumulate(s.begin(), s.begin() + axis, int64_t{1},
                                        std::multiplies<>());
  const int64_t inner = std::accumulate(s.begin() + axis, s.end(), int64_t{1},
                                        std::multiplies<>());
  return {in[0].reshaped({outer, inner})};
}

void check_squeeze(const Node& n, const Infos& in) {
  require_count(n, in, 1, 2);
  const TensorInfo& x = required(n, in, 0, "data");
  check_int_list_input(n, in, 1, "axes");
  check_not_both(n, in, 1, "axes");
  if (n.attrs.has("axes")) {
    for (int64_t a : normalize_axes(n, n.attrs.get_ints("axes"), rank_of(x)))
      DC_USER_CHECK(x.shape[a] == 1, n.op, ": cannot squeeze axis ", a, " of extent ",
                    x.shape[a], " (input ", shape_str(x.shape), ")");
  }
}

std::vector<Tensor> run_squeeze(const Node& n, const Inputs& in) {
  const Shape& s = in[0].shape();
  std::vector<bool> drop(s.size(), false);
  // No axes (or an empty list): drop every extent-1 dim.
  const auto axes = attr_or_input(n, in, 1, "axes");
  if (axes && !axes->empty()) {
    for (int64_t a : normalize_axes(n, *axes, in[0].rank())) {
      DC_USER_CHECK(s[a] == 1, n.op, ": cannot squeeze axis ", a, " of extent ", s[a],
                    " (input ", shape_str(s), ")");
      drop[a] = true;
    }
  } else {
    for (size_t d = 0; d < s.size(); ++d) drop[d] = s[d] == 1;
  }
  Shape out;
  for (size_t d = 0; d < s.size(); ++d)
    if (!drop[d]) out.push_back(s[d]);
  return {in[0].reshaped(out)};
}

Shape unsqueeze_shape(const Node& n, const Shape& s, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(s.size() + axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : normalize_axes(n, axes, rank)) inserted[a] = true;
  Shape out(rank);
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) out[d] = inserted[d] ? 1 : s[next++];
  return out;
}

void check_unsqueeze(const Node& n, const Infos& in) {
  require_count(n, in, 1, 2);
  const TensorInfo& x = required(n, in, 0, "data");
  check_int_list_input(n, in, 1, "axes");
  check_not_both(n, in, 1, "axes");
  DC_USER_CHECK(n.attrs.has("axes") || present(in, 1), n.op,
                ": 'axes' is required (attribute before opset 13, input 1 since)");
  if (n.attrs.has("axes")) unsqueeze_shape(n, x.shape, n.attrs.get_ints("axes"));
}

std::vector<Tensor> run_unsqueeze(const Node& n, const Inputs& in) {
  return {in[0].reshaped(unsqueeze_shape(n, in[0].shape(), *attr_or_input(n, in, 1, "axes")))};
}

std::vector<Tensor> run_identity(const Node&, const Inputs& in) { return {in[0]}; }

void check_identity(const Node& n, const Infos& in) {
  require_count(n, in, 1, 1);
  required(n, in, 0, "input");
}

// ---------------------------------------------------------------------------------------
// Transpose.

std::vector<int64_t> transpose_perm(const Node& n, int64_t rank) {
  std::vector<int64_t> perm(rank);
  std::iota(perm.rbegin(), perm.rend(), int64_t{0});
  if (!n.attrs.has("perm")) return perm;
  perm = n.attrs.get_ints("perm");
  DC_USER_CHECK(static_cast<int64_t>(perm.size()) == rank, n.op, ": perm ", list_str(perm),
                " has ", perm.size(), " entries for an input of rank ", rank);
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    DC_USER_CHECK(p >= 0 && p < rank && !seen[p], n.op, ": perm ", list_str(perm),
                  " is not a permutation of 0..", rank - 1);
    seen[p] = true;
  }
  return perm;
}

void check_transpose(const Node& n, const Infos& in) {
  require_count(n, in, 1, 1);
  transpose_perm(n, rank_of(required(n, in, 0, "data")));
}

std::vector<Tensor> run_transpose(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const auto perm = transpose_perm(n, x.rank());
  const auto st = shape_strides(x.shape());
  Shape out(perm.size());
  std::vector<int64_t> strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    out[i] = x.dim(perm[i]);
    strides[i] = st[perm[i]];
  }
  return {strided_copy(x, 0, out, strides)};
}

// ---------------------------------------------------------------------------------------
// Concat and Split.

void check_concat(const Node& n, const Infos& in) {
  DC_USER_CHECK(!in.empty(), n.op, ": needs at least one input");
  const TensorInfo& first = required(n, in, 0, "input");
  const int64_t rank = rank_of(first);
  const int64_t axis = normalize_axis(n.attrs.get_int("axis"), rank, n.op.c_str());
  for (size_t i = 1; i < in.size(); ++i) {
    const TensorInfo& x = required(n, in, i, "input");
    DC_USER_CHECK(x.dtype == first.dtype, n.op, ": input ", i, " has dtype ",
                  dtype_name(x.dtype), " but input 0 has ", dtype_name(first.dtype));
    bool ok = rank_of(x) == rank;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == axis || x.shape[d] == first.shape[d];
    DC_USER_CHECK(ok, n.op, ": input ", i, " has shape ", shape_str(x.shape),
                  ", which does not match input 0's ", shape_str(first.shape),
                  " outside axis ", axis);
  }
}

std::vector<Tensor> run_concat(const Node& n, const Inputs& in) {
  const Shape& s0 = in[0].shape();
  const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis"), in[0].rank(),
                                                       n.op.c_str()));
  Shape out_shape = s0;
  out_shape[axis] = 0;
  for (const Tensor& t : in) out_shape[axis] += t.dim(static_cast<int64_t>(axis));
  Tensor out(in[0].dtype(), out_shape);
  const int64_t outer = std::accumulate(s0.begin(), s0.begin() + axis, int64_t{1},
                                        std::multiplies<>());
  const size_t inner_bytes = dtype_size(in[0].dtype()) *
      static_cast<size_t>(std::accumulate(s0.begin() + axis + 1, s0.end(), int64_t{1},
                                          std::multiplies<>()));
  const size_t out_row = static_cast<size_t>(out_shape[axis]) * inner_bytes;
  if (out.numel() == 0) return {out};
  // Rows of the output are independent: parallel over them when there are many.
  const int64_t grain = std::max<int64_t>(1, (kElementwiseGrain * 4) / std::max<size_t>(out_row, 1));
  parallel_for(outer, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      std::byte* dst = out.raw_mutable() + static_cast<size_t>(o) * out_row;
      for (const Tensor& t : in) {
        const size_t bytes = static_cast<size_t>(t.dim(static_cast<int64_t>(axis))) * inner_bytes;
        if (bytes == 0) continue;
        std::memcpy(dst, t.raw() + static_cast<size_t>(o) * bytes, bytes);
        dst += bytes;
      }
    }
  });
  return {out};
}

// Sizes of Split's outputs along `axis` (of extent `dim`).
std::vector<int64_t> split_sizes(const Node& n, const std::optional<std::vector<int64_t>>& split,
                                 int64_t dim) {
  const auto outputs = static_cast<int64_t>(n.outputs.size());
  if (split) {
    DC_USER_CHECK(static_cast<int64_t>(split->size()) == outputs, n.op, ": 'split' ",
                  list_str(*split), " has ", split->size(), " entries for ", outputs,
                  " outputs");
    int64_t sum = 0;
    for (int64_t s : *split) {
      DC_USER_CHECK(s >= 0, n.op, ": 'split' ", list_str(*split), " has a negative size");
      sum += s;
    }
    DC_USER_CHECK(sum == dim, n.op, ": 'split' ", list_str(*split), " sums to ", sum,
                  " but the axis has extent ", dim);
    return *split;
  }
  DC_USER_CHECK(outputs > 0, n.op, ": node has no outputs");
  if (n.attrs.has("num_outputs")) {  // opset 18: the last part may be smaller
    const int64_t parts = n.attrs.get_int("num_outputs");
    DC_USER_CHECK(parts == outputs, n.op, ": 'num_outputs' is ", parts, " but the node has ",
                  outputs, " outputs");
    const int64_t chunk = (dim + parts - 1) / parts;
    std::vector<int64_t> sizes;
    for (int64_t left = dim, i = 0; i < parts; ++i, left -= std::min(left, chunk))
      sizes.push_back(std::min(left, chunk));
    return sizes;
  }
  DC_USER_CHECK(dim % outputs == 0, n.op, ": axis of extent ", dim,
                " cannot be split into ", outputs, " equal parts");
  return std::vector<int64_t>(static_cast<size_t>(outputs), dim / outputs);
}

void check_split(const Node& n, const Infos& in) {
  require_count(n, in, 1, 2);
  const TensorInfo& x = required(n, in, 0, "input");
  const int64_t axis = normalize_axis(n.attrs.get_int("axis", 0), rank_of(x), n.op.c_str());
  check_int_list_input(n, in, 1, "split");
  check_not_both(n, in, 1, "split");
  if (!present(in, 1)) {
    std::optional<std::vector<int64_t>> split;
    if (n.attrs.has("split")) split = n.attrs.get_ints("split");
    split_sizes(n, split, x.shape[axis]);
  }
}

std::vector<Tensor> run_split(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const int64_t axis = normalize_axis(n.attrs.get_int("axis", 0), x.rank(), n.op.c_str());
  const auto sizes = split_sizes(n, attr_or_input(n, in, 1, "split"), x.dim(axis));
  const auto strides = shape_strides(x.shape());
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    Shape shape = x.shape();
    shape[axis] = s;
    out.push_back(strided_copy(x, start * strides[axis], shape, strides));
    start += s;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Slice: starts/ends/axes/steps as inputs (opset >= 10) or attributes (< 10).

void check_slice(const Node& n, const Infos& in) {
  require_count(n, in, 1, 5);
  const TensorInfo& x = required(n, in, 0, "data");
  if (n.attrs.has("starts")) {
    DC_USER_CHECK(in.size() == 1, n.op, ": 'starts' is an attribute and inputs are given too");
    const auto starts = n.attrs.get_ints("starts"), ends = n.attrs.get_ints("ends");
    DC_USER_CHECK(starts.size() == ends.size(), n.op, ": 'starts' has ", starts.size(),
                  " entries but 'ends' has ", ends.size());
    if (n.attrs.has("axes")) {
      const auto axes = n.attrs.get_ints("axes");
      DC_USER_CHECK(axes.size() == starts.size(), n.op, ": 'axes' has ", axes.size(),
                    " entries but 'starts' has ", starts.size());
      normalize_axes(n, axes, rank_of(x));
    } else {
      DC_USER_CHECK(static_cast<int64_t>(starts.size()) <= rank_of(x), n.op, ": 'starts' has ",
                    starts.size(), " entries for an input of rank ", rank_of(x));
    }
    return;
  }
  required(n, in, 1, "starts");
  required(n, in, 2, "ends");
  const char* names[] = {"", "starts", "ends", "axes", "steps"};
  for (size_t i = 1; i < in.size(); ++i) check_int_list_input(n, in, i, names[i]);
}

std::vector<Tensor> run_slice(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const int64_t rank = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.attrs.has("starts")) {
    starts = n.attrs.get_ints("starts");
    ends = n.attrs.get_ints("ends");
    axes = n.attrs.get_ints("axes", {});
  } else {
    starts = in[1].to_int64_vector();
    ends = in[2].to_int64_vector();
    if (present(in, 3)) axes = in[3].to_int64_vector();
    if (present(in, 4)) steps = in[4].to_int64_vector();
  }
  if (axes.empty() && !(present(in, 3) && in[3].numel() == 0)) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), int64_t{0});
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  DC_USER_CHECK(ends.size() == starts.size() && axes.size() == starts.size() &&
                    steps.size() == starts.size(),
                n.op, ": starts, ends, axes and steps have different lengths (", starts.size(),
                ", ", ends.size(), ", ", axes.size(), ", ", steps.size(), ")");
  axes = normalize_axes(n, axes, rank);

  const auto st = shape_strides(x.shape());
  Shape out = x.shape();
  std::vector<int64_t> strides = st;
  int64_t offset = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i], dim = x.dim(a), step = steps[i];
    DC_USER_CHECK(step != 0, n.op, ": step for axis ", a, " is 0");
    // Clamp as the ONNX spec says: negative values count from the end, then into range
    // ([0, dim] going forward, [-1, dim-1] going backward).
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t len;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? 1 + (e - s - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, std::max<int64_t>(dim - 1, 0));
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e && dim > 0 ? 1 + (e - s + 1) / step : 0;
    }
    out[a] = len;
    if (len > 0) offset += s * st[a];
    // A single element needs no stride (and a huge step would overflow it).
    strides[a] = len > 1 ? st[a] * step : 0;
  }
  return {strided_copy(x, offset, out, strides)};
}

// ---------------------------------------------------------------------------------------
// Gather.

void check_gather(const Node& n, const Infos& in) {
  require_count(n, in, 2, 2);
  const TensorInfo& x = required(n, in, 0, "data");
  const TensorInfo& idx = required(n, in, 1, "indices");
  normalize_axis(n.attrs.get_int("axis", 0), rank_of(x), n.op.c_str());
  DC_USER_CHECK(idx.dtype == DType::i64 || idx.dtype == DType::i32, n.op,
                ": indices must be int64 or int32, got ", dtype_name(idx.dtype));
}

std::vector<Tensor> run_gather(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const int64_t axis = normalize_axis(n.attrs.get_int("axis", 0), x.rank(), n.op.c_str());
  const int64_t extent = x.dim(axis);
  std::vector<int64_t> idx = in[1].to_int64_vector();
  for (int64_t& i : idx) {
    DC_USER_CHECK(i >= -extent && i < extent, n.op, ": index ", i,
                  " is out of range for axis ", axis, " of extent ", extent);
    if (i < 0) i += extent;
  }
  const Shape& s = x.shape();
  Shape out_shape(s.begin(), s.begin() + axis);
  out_shape.insert(out_shape.end(), in[1].shape().begin(), in[1].shape().end());
  out_shape.insert(out_shape.end(), s.begin() + axis + 1, s.end());
  Tensor out(x.dtype(), out_shape);
  const int64_t outer = std::accumulate(s.begin(), s.begin() + axis, int64_t{1},
                                        std::multiplies<>());
  const size_t block = dtype_size(x.dtype()) *
      static_cast<size_t>(std::accumulate(s.begin() + axis + 1, s.end(), int64_t{1},
                                          std::multiplies<>()));
  const auto count = static_cast<int64_t>(idx.size());
  if (out.numel() == 0) return {out};
  const int64_t grain = std::max<int64_t>(1, (kElementwiseGrain * 4) / std::max<size_t>(block, 1));
  parallel_for(outer * count, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t o = r / count, k = r % count;
      std::memcpy(out.raw_mutable() + static_cast<size_t>(r) * block,
                  x.raw() + static_cast<size_t>(o * extent + idx[k]) * block, block);
    }
  });
  return {out};
}

// ---------------------------------------------------------------------------------------
// Shape, Size.

void check_shape(const Node& n, const Infos& in) {
  require_count(n, in, 1, 1);
  required(n, in, 0, "data");
  n.attrs.get_int("start", 0);
  n.attrs.get_int("end", 0);
}

std::vector<Tensor> run_shape(const Node& n, const Inputs& in) {
  const Shape& s = in[0].shape();
  const auto rank = static_cast<int64_t>(s.size());
  // start/end (opset 15) clamp into [0, rank] after counting negatives from the end.
  auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t b = clamp(n.attrs.get_int("start", 0));
  const int64_t e = std::max(b, clamp(n.attrs.get_int("end", rank)));
  return {Tensor::from_vector<int64_t>({e - b}, std::vector<int64_t>(s.begin() + b, s.begin() + e))};
}

std::vector<Tensor> run_size(const Node&, const Inputs& in) {
  return {Tensor::scalar<int64_t>(in[0].numel())};
}

// ---------------------------------------------------------------------------------------
// Constant, ConstantOfShape.

constexpr const char* kConstantAttrs[] = {"value", "value_float", "value_floats", "value_int",
                                          "value_ints"};

void check_constant(const Node& n, const Infos& in) {
  require_count(n, in, 0, 0);
  for (const char* a : {"sparse_value", "value_string", "value_strings"})
    DC_USER_CHECK(!n.attrs.has(a), n.op, ": attribute '", a, "' is not supported by dc");
  int given = 0;
  for (const char* a : kConstantAttrs) given += n.attrs.has(a) ? 1 : 0;
  DC_USER_CHECK(given == 1, n.op, ": exactly one of value, value_float, value_floats, "
                "value_int, value_ints must be given, got ", given);
  if (n.attrs.has("value")) n.attrs.get_tensor("value");
  if (n.attrs.has("value_float")) n.attrs.get_float("value_float");
  if (n.attrs.has("value_floats")) n.attrs.get_floats("value_floats");
  if (n.attrs.has("value_int")) n.attrs.get_int("value_int");
  if (n.attrs.has("value_ints")) n.attrs.get_ints("value_ints");
}

std::vector<Tensor> run_constant(const Node& n, const Inputs&) {
  const Attributes& a = n.attrs;
  if (a.has("value")) return {a.get_tensor("value")};
  if (a.has("value_float")) return {Tensor::scalar<float>(a.get_float("value_float"))};
  if (a.has("value_int")) return {Tensor::scalar<int64_t>(a.get_int("value_int"))};
  if (a.has("value_floats")) {
    const auto v = a.get_floats("value_floats");
    return {Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v)};
  }
  const auto v = a.get_ints("value_ints");
  return {Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v)};
}

void check_constant_of_shape(const Node& n, const Infos& in) {
  require_count(n, in, 1, 1);
  required(n, in, 0, "input");
  check_int_list_input(n, in, 0, "input");
  if (n.attrs.has("value")) {
    const Tensor& v = n.attrs.get_tensor("value");
    DC_USER_CHECK(v.numel() == 1, n.op, ": attribute 'value' must hold one element, got shape ",
                  shape_str(v.shape()));
  }
}

std::vector<Tensor> run_constant_of_shape(const Node& n, const Inputs& in) {
  const Shape shape = in[0].to_int64_vector();
  for (int64_t d : shape)
    DC_USER_CHECK(d >= 0, n.op, ": shape ", list_str(shape), " has a negative dim");
  if (!n.attrs.has("value")) return {Tensor(DType::f32, shape)};
  const Tensor& v = n.attrs.get_tensor("value");
  Tensor out(v.dtype(), shape);
  const size_t es = dtype_size(v.dtype());
  const bool zero = std::all_of(v.raw(), v.raw() + es, [](std::byte b) { return b == std::byte{0}; });
  if (!zero)  // the buffer starts zeroed
    for (int64_t i = 0; i < out.numel(); ++i)
      std::memcpy(out.raw_mutable() + static_cast<size_t>(i) * es, v.raw(), es);
  return {out};
}

// ---------------------------------------------------------------------------------------
// Dropout (inference only), Expand, Tile, Range.

void check_dropout(const Node& n, const Infos& in) {
  require_count(n, in, 1, 3);
  required(n, in, 0, "data");
  DC_USER_CHECK(!present(in, 2) || in[2]->dtype == DType::boolean, n.op,
                ": training_mode must be bool");
}

std::vector<Tensor> run_dropout(const Node& n, const Inputs& in) {
  if (present(in, 2))
    DC_USER_CHECK(!in[2].data<bool>()[0], n.op,
                  ": training_mode=true is not supported (dc runs inference only)");
  Tensor mask(DType::boolean, in[0].shape());
  std::fill_n(mask.mutable_data<bool>(), mask.numel(), true);
  return {in[0], mask};
}

void check_expand(const Node& n, const Infos& in) {
  require_count(n, in, 2, 2);
  required(n, in, 0, "input");
  required(n, in, 1, "shape");
  check_int_list_input(n, in, 1, "shape");
}

std::vector<Tensor> run_expand(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const Shape target = in[1].to_int64_vector();
  Shape out;
  try {
    out = broadcast_shapes(x.shape(), target);
  } catch (const UserError&) {
    throw_user_error(n.op, ": cannot expand ", shape_str(x.shape()), " to ", list_str(target));
  }
  return {strided_copy(x, 0, out, broadcast_strides(x.shape(), out))};
}

void check_tile(const Node& n, const Infos& in) {
  require_count(n, in, 2, 2);
  required(n, in, 0, "input");
  required(n, in, 1, "repeats");
  check_int_list_input(n, in, 1, "repeats");
}

std::vector<Tensor> run_tile(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const auto reps = in[1].to_int64_vector();
  DC_USER_CHECK(static_cast<int64_t>(reps.size()) == x.rank(), n.op, ": repeats ",
                list_str(reps), " has ", reps.size(), " entries for an input of rank ",
                x.rank());
  // Tile as an expand of the interleaved shape [r0, d0, r1, d1, ...] with stride 0 on each r.
  const auto st = shape_strides(x.shape());
  Shape wide, out;
  std::vector<int64_t> strides;
  for (int64_t d = 0; d < x.rank(); ++d) {
    DC_USER_CHECK(reps[d] >= 0, n.op, ": repeats ", list_str(reps), " has a negative entry");
    wide.insert(wide.end(), {reps[d], x.dim(d)});
    strides.insert(strides.end(), {0, st[d]});
    out.push_back(reps[d] * x.dim(d));
  }
  return {strided_copy(x, 0, wide, strides).reshaped(out)};
}

void check_range(const Node& n, const Infos& in) {
  require_count(n, in, 3, 3);
  const DType t = required(n, in, 0, "start").dtype;
  const char* names[] = {"start", "limit", "delta"};
  for (size_t i = 0; i < 3; ++i) {
    const TensorInfo& x = required(n, in, i, names[i]);
    DC_USER_CHECK(x.dtype == t, n.op, ": '", names[i], "' has dtype ", dtype_name(x.dtype),
                  " but 'start' has ", dtype_name(t));
    DC_USER_CHECK(shape_numel(x.shape) == 1, n.op, ": '", names[i],
                  "' must be a scalar, got shape ", shape_str(x.shape));
  }
  DC_USER_CHECK(t == DType::f32 || t == DType::f64 || t == DType::i16 || t == DType::i32 ||
                    t == DType::i64,
                n.op, ": dtype ", dtype_name(t), " is not supported (f32, f64, i16, i32, i64)");
}

template <class T>
Tensor range_typed(const Node& n, const Inputs& in) {
  const T start = in[0].data<T>()[0], limit = in[1].data<T>()[0], delta = in[2].data<T>()[0];
  DC_USER_CHECK(delta != T(0), n.op, ": delta is 0");
  int64_t count;
  if constexpr (std::is_integral_v<T>) {
    const int64_t span = static_cast<int64_t>(limit) - static_cast<int64_t>(start);
    const int64_t d = delta;
    count = span / d + ((span % d != 0 && ((span < 0) == (d < 0))) ? 1 : 0);  // ceil
  } else {
    const double c = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                               static_cast<double>(delta));
    DC_USER_CHECK(std::isfinite(c) && c < 1e12, n.op, ": range of ", c, " elements");
    count = static_cast<int64_t>(c);
  }
  count = std::max<int64_t>(count, 0);
  Tensor out(dtype_of<T>::value, {count});
  T* p = out.mutable_data<T>();
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (std::is_integral_v<T>)
      p[i] = static_cast<T>(start + i * delta);
    else
      p[i] = static_cast<T>(static_cast<double>(start) + static_cast<double>(i) * delta);
  }
  return out;
}

std::vector<Tensor> run_range(const Node& n, const Inputs& in) {
  switch (in[0].dtype()) {
    case DType::f32: return {range_typed<float>(n, in)};
    case DType::f64: return {range_typed<double>(n, in)};
    case DType::i16: return {range_typed<int16_t>(n, in)};
    case DType::i32: return {range_typed<int32_t>(n, in)};
    case DType::i64: return {range_typed<int64_t>(n, in)};
    default: throw_internal_error("Range: unchecked dtype");
  }
}

void check_one_input(const Node& n, const Infos& in) {
  require_count(n, in, 1, 1);
  required(n, in, 0, "input");
}

// ---------------------------------------------------------------------------------------

const OpDef kOps[] = {
    op_def<check_reshape, run_reshape>("Reshape"),
    op_def<check_flatten, run_flatten>("Flatten"),
    op_def<check_transpose, run_transpose>("Transpose"),
    op_def<check_squeeze, run_squeeze>("Squeeze"),
    op_def<check_unsqueeze, run_unsqueeze>("Unsqueeze"),
    op_def<check_concat, run_concat>("Concat"),
    op_def<check_split, run_split>("Split"),
    op_def<check_slice, run_slice>("Slice"),
    op_def<check_gather, run_gather>("Gather"),
    op_def<check_shape, run_shape>("Shape"),
    op_def<check_one_input, run_size>("Size"),
    op_def<check_constant, run_constant>("Constant"),
    op_def<check_constant_of_shape, run_constant_of_shape>("ConstantOfShape"),
    op_def<check_identity, run_identity>("Identity"),
    op_def<check_dropout, run_dropout>("Dropout"),
    op_def<check_expand, run_expand>("Expand"),
    op_def<check_tile, run_tile>("Tile"),
    op_def<check_range, run_range>("Range"),
};

}  // namespace

std::span<const OpDef> shape_ops() { return kOps; }

}  // namespace dc::ref
