// Pad (constant, reflect, edge, wrap; negative pads crop), Resize and Upsample (nearest with
// every nearest_mode, linear, cubic; every coordinate transformation). The geometry comes
// from ref/resample.h, shared with the code generator; here each output element is computed
// from it directly.
#include <cstring>

#include "ir/error.h"
#include "ir/parallel.h"
#include "ref/kernel.h"
#include "ref/resample.h"

namespace dc::ref {

namespace {

using Infos = std::vector<const TensorInfo*>;

// Row-major coordinates of linear index `lin` in `shape`.
void unravel(int64_t lin, const Shape& shape, std::vector<int64_t>& c) {
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = shape[d] == 0 ? 0 : lin % shape[d];
    lin = shape[d] == 0 ? 0 : lin / shape[d];
  }
}

// ---------------------------------------------------------------------------------------
// Pad

void check_pad(const Node& n, const Infos& in) {
  DC_USER_CHECK(n.has_input(0), "required input 'data' (input 0) is missing");
  DC_USER_CHECK(n.outputs.size() == 1, "expected 1 output, the node has ", n.outputs.size());
  check_pad_attrs(n);
  const bool attr_form = n.attrs.has("pads") || n.attrs.has("paddings");
  DC_USER_CHECK(attr_form || n.has_input(1), "'pads' is required (attribute before opset 11, "
                                             "input 1 since)");
  if (in.size() > 1 && in[1] != nullptr)
    DC_USER_CHECK(in[1]->dtype == DType::i64, "input 'pads' has dtype ", dtype_name(in[1]->dtype),
                  ", expected i64");
  if (in.size() > 2 && in[2] != nullptr && in[0] != nullptr)
    DC_USER_CHECK(in[2]->dtype == in[0]->dtype, "input 'constant_value' has dtype ",
                  dtype_name(in[2]->dtype), ", the data has ", dtype_name(in[0]->dtype));
  if (in[0] != nullptr)
    DC_USER_CHECK(dtype_size(in[0]->dtype) > 0, "input 'data' has dtype ",
                  dtype_name(in[0]->dtype), ", which dc cannot pad");
}

// One element of `dtype` holding `v` (the fill of constant mode).
Tensor fill_element(DType dtype, double v) {
  switch (dtype) {
    case DType::f32: return Tensor::scalar<float>(static_cast<float>(v));
    case DType::f64: return Tensor::scalar<double>(v);
    case DType::f16: return Tensor::scalar<uint16_t>(float_to_half(static_cast<float>(v)));
    case DType::bf16: return Tensor::scalar<uint16_t>(float_to_bf16(static_cast<float>(v)));
    case DType::i8: return Tensor::scalar<int8_t>(static_cast<int8_t>(v));
    case DType::u8: return Tensor::scalar<uint8_t>(static_cast<uint8_t>(v));
    case DType::boolean: return Tensor::scalar<uint8_t>(v != 0 ? 1 : 0);
    case DType::i16: return Tensor::scalar<int16_t>(static_cast<int16_t>(v));
    case DType::u16: return Tensor::scalar<uint16_t>(static_cast<uint16_t>(v));
    case DType::i32: return Tensor::scalar<int32_t>(static_cast<int32_t>(v));
    case DType::u32: return Tensor::scalar<uint32_t>(static_cast<uint32_t>(v));
    case DType::i64: return Tensor::scalar<int64_t>(static_cast<int64_t>(v));
    case DType::u64: return Tensor::scalar<uint64_t>(static_cast<uint64_t>(v));
    default: throw_user_error("Pad of dtype ", dtype_name(dtype), " is not supported");
  }
}

std::vector<Tensor> run_pad(const Node& n, const Inputs& in) {
  const Tensor& x = in.at(0);
  const PadSpec p = pad_spec(n, x.shape(), in);
  const Shape out_shape = pad_output_shape(p, x.shape());
  Tensor y(x.dtype(), out_shape);
  const size_t es = dtype_size(x.dtype());
  // An integer constant_value input keeps its exact value (to_float_vector would round it).
  const Tensor fill = p.mode == PadMode::constant && in.size() > 2 && in[2].defined() &&
                              in[2].numel() == 1 && in[2].dtype() == x.dtype()
                          ? in[2]
                          : fill_element(x.dtype(), p.value);
  const auto strides = shape_strides(x.shape());
  const size_t rank = out_shape.size();
  parallel_for(y.numel(), 1024, [&](int64_t e0, int64_t e1) {
    std::vector<int64_t> c(rank);
    for (int64_t e = e0; e < e1; ++e) {
      unravel(e, out_shape, c);
      int64_t src = 0;
      for (size_t d = 0; d < rank && src >= 0; ++d) {
        const int64_t i = pad_source(p.mode, c[d] - p.begin[d], x.shape()[d]);
        src = i < 0 ? -1 : src + i * strides[d];
      }
      std::memcpy(y.raw_mutable() + static_cast<size_t>(e) * es,
                  src < 0 ? fill.raw() : x.raw() + static_cast<size_t>(src) * es, es);
    }
  });
  return {y};
}

// ---------------------------------------------------------------------------------------
// Resize / Upsample

void check_resize(const Node& n, const Infos& in) {
  DC_USER_CHECK(n.has_input(0), "required input 'X' (input 0) is missing");
  DC_USER_CHECK(n.outputs.size() == 1, "expected 1 output, the node has ", n.outputs.size());
  check_resize_attrs(n);
  // f16/bf16 data is widened to f32 by run_node and the result rounded back (storage_dtypes.h).
  if (in[0] != nullptr)
    DC_USER_CHECK(in[0]->dtype == DType::f32 || in[0]->dtype == DType::f16 || in[0]->dtype == DType::bf16,
                  "input 'X' has dtype ", dtype_name(in[0]->dtype), ", supported: f32, f16, bf16");
}

std::vector<Tensor> run_resize(const Node& n, const Inputs& in) {
  const Tensor& x = in.at(0);
  DC_USER_CHECK(x.dtype() == DType::f32, "input 'X' has dtype ", dtype_name(x.dtype()),
                ", supported: f32, f16, bf16");
  const ResizeSpec s = resize_spec(n, x.shape(), in);
  Tensor y(DType::f32, s.out_shape);
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  const auto strides = shape_strides(x.shape());
  const size_t rank = s.out_shape.size();
  parallel_for(y.numel(), 256, [&](int64_t e0, int64_t e1) {
    std::vector<int64_t> c(rank), tap(rank, 0);
    for (int64_t e = e0; e < e1; ++e) {
      unravel(e, s.out_shape, c);
      bool outside = false;
      for (size_t d = 0; d < rank; ++d)
        outside = outside || (s.axes[d].taps > 0 && s.axes[d].outside[static_cast<size_t>(c[d])]);
      if (outside) {
        yp[e] = s.extrapolation_value;
        continue;
      }
      // Every combination of taps, the last axis fastest (an odometer over `tap`).
      std::fill(tap.begin(), tap.end(), 0);
      float acc = 0.f;
      for (;;) {
        float w = 1.f;
        int64_t off = 0;
        for (size_t d = 0; d < rank; ++d) {
          const ResizeAxis& a = s.axes[d];
          if (a.taps == 0) {
            off += c[d] * strides[d];
            continue;
          }
          const size_t k = static_cast<size_t>(c[d] * a.taps + tap[d]);
          w *= a.weight[k];
          off += a.idx[k] * strides[d];
        }
        acc += w * xp[off];
        size_t d = rank;
        while (d-- > 0) {
          if (s.axes[d].taps > 1 && ++tap[d] < s.axes[d].taps) break;
          tap[d] = 0;
        }
        if (d == static_cast<size_t>(-1)) break;
      }
      yp[e] = acc;
    }
  });
  return {y};
}

const OpDef kOps[] = {
    {"Pad", run_pad, check_pad},
    {"Resize", run_resize, check_resize},
    {"Upsample", run_resize, check_resize},
};

}  // namespace

std::span<const OpDef> resample_ops() { return kOps; }

}  // namespace dc::ref
