#include "onnx/tensor_proto.h"

#include <optional>

#include "ir/error.h"
#include "onnx/external_data.h"

namespace dc {

namespace {

std::string tensor_label(const onnx::TensorProto& p) {
  return p.name().empty() ? std::string("tensor") : "tensor '" + p.name() + "'";
}

// The typed field's values into a tensor of `shape`, once their count is checked (before
// allocating: a corrupt shape must not allocate).
template <class Dst, class Src>
Tensor copy_typed(const Src& field, DType dtype, const Shape& shape, int64_t n, const onnx::TensorProto& p) {
  DC_USER_CHECK(static_cast<int64_t>(field.size()) == n, tensor_label(p), " holds ",
                field.size(), " values but its shape ", shape_str(shape), " needs ", n);
  Tensor t(dtype, shape);
  auto* dst = reinterpret_cast<Dst*>(t.raw_mutable());
  for (int i = 0; i < field.size(); ++i) dst[i] = static_cast<Dst>(field.Get(i));
  return t;
}

struct TypeAndSize {
  DType dtype;
  Shape shape;
  size_t nbytes;
};

// The tensor's dtype and shape, checked (supported type, no segments, sane dims).
TypeAndSize checked_type(const onnx::TensorProto& p) {
  const auto dtype = dtype_from_onnx(p.data_type());
  DC_USER_CHECK(dtype.has_value(), tensor_label(p), " has element type ",
                onnx_dtype_name(p.data_type()), ", which dc does not support");
  DC_USER_CHECK(!p.has_segment(), tensor_label(p), " is segmented, which dc does not support");
  Shape shape(p.dims().begin(), p.dims().end());
  for (int64_t d : shape)
    DC_USER_CHECK(d >= 0, tensor_label(p), " has a negative dimension ", d);
  // Guard against absurd sizes in a corrupt file before allocating.
  int64_t n = 1;
  for (int64_t d : shape) {
    DC_USER_CHECK(d == 0 || n <= (int64_t{1} << 40) / d, tensor_label(p), " is too large (shape ",
                  shape_str(shape), ")");
    n *= d;
  }
  return {*dtype, shape, static_cast<size_t>(n) * dtype_size(*dtype)};
}

}  // namespace

Tensor tensor_in_file(const onnx::TensorProto& p, const std::string& path, uint64_t offset, uint64_t bytes) {
  const auto [dtype, shape, nbytes] = checked_type(p);
  DC_USER_CHECK(bytes == nbytes, tensor_label(p), " has ", bytes, " bytes of raw data but its shape ",
                shape_str(shape), " and type ", dtype_name(dtype), " need ", nbytes);
  return Tensor::from_file(dtype, shape, path, offset);
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& model_dir) {
  const TypeAndSize type = checked_type(p);
  const std::optional<DType> dtype = type.dtype;
  const Shape& shape = type.shape;
  const size_t nbytes = type.nbytes;
  const auto n = static_cast<int64_t>(nbytes / dtype_size(type.dtype));
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    const ExternalRegion r = locate_external_data(p, model_dir, nbytes);
    return Tensor::from_file(*dtype, shape, r.path, r.offset);
  }
  if (p.has_raw_data()) {
    DC_USER_CHECK(p.raw_data().size() == nbytes, tensor_label(p), " has ", p.raw_data().size(),
                  " bytes of raw data but its shape ", shape_str(shape), " and type ",
                  dtype_name(*dtype), " need ", nbytes);
    Tensor t(*dtype, shape);
    std::memcpy(t.raw_mutable(), p.raw_data().data(), nbytes);
    return t;
  }
  switch (*dtype) {
    case DType::f32: return copy_typed<float>(p.float_data(), *dtype, shape, n, p);
    case DType::f64: return copy_typed<double>(p.double_data(), *dtype, shape, n, p);
    case DType::i64: return copy_typed<int64_t>(p.int64_data(), *dtype, shape, n, p);
    case DType::i32: return copy_typed<int32_t>(p.int32_data(), *dtype, shape, n, p);
    case DType::i16: return copy_typed<int16_t>(p.int32_data(), *dtype, shape, n, p);
    case DType::i8: return copy_typed<int8_t>(p.int32_data(), *dtype, shape, n, p);
    case DType::u16: return copy_typed<uint16_t>(p.int32_data(), *dtype, shape, n, p);
    case DType::u8: return copy_typed<uint8_t>(p.int32_data(), *dtype, shape, n, p);
    case DType::boolean: return copy_typed<bool>(p.int32_data(), *dtype, shape, n, p);
    case DType::f16: case DType::bf16: return copy_typed<uint16_t>(p.int32_data(), *dtype, shape, n, p);
    case DType::u32: return copy_typed<uint32_t>(p.uint64_data(), *dtype, shape, n, p);
    case DType::u64: return copy_typed<uint64_t>(p.uint64_data(), *dtype, shape, n, p);
    case DType::undefined: throw_internal_error("undefined dtype");
  }
  throw_internal_error("unhandled dtype");
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* proto) {
  proto->Clear();
  proto->set_name(name);
  proto->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) proto->add_dims(d);
  proto->set_raw_data(reinterpret_cast<const char*>(t.raw()), t.nbytes());
}

}  // namespace dc
