// Index maps of issue 14 that move elements without arithmetic: DepthToSpace (DCR and CRD),
// SpaceToDepth and Trilu. Each output element is one input element (Trilu: or zero), copied
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

const OpDef kOps[] = {
    op_def<check_depth_to_space, run_depth_to_space>("DepthToSpace"),
    op_def<check_space_to_depth, run_space_to_depth>("SpaceToDepth"),
    op_def<check_trilu, run_trilu>("Trilu"),
};

}  // namespace

std::span<const OpDef> index_ops() { return kOps; }

}  // namespace dc::ref
