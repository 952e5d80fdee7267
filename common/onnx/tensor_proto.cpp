#include "onnx/tensor_proto.h"

#include <charconv>
#include <filesystem>
#include <fstream>

#include "ir/error.h"

namespace dc {

namespace fs = std::filesystem;

namespace {

std::string tensor_label(const onnx::TensorProto& p) {
  return p.name().empty() ? std::string("tensor") : "tensor '" + p.name() + "'";
}

// An external-data entry's integer value (offset, length); UserError unless it is one.
int64_t external_int(const onnx::TensorProto& p, const std::string& key, const std::string& value) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  DC_USER_CHECK(ec == std::errc() && end == value.data() + value.size(), tensor_label(p),
                " has external-data ", key, " '", value, "', which is not an integer");
  return v;
}

// The tensor stored as `nbytes` bytes at `offset` of an external data file. The file is
// checked to hold them before the tensor is allocated (a corrupt shape must not allocate).
Tensor read_external(const onnx::TensorProto& p, const std::string& model_dir, DType dtype,
                     const Shape& shape, size_t nbytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = external_int(p, kv.key(), kv.value());
    else if (kv.key() == "length") length = external_int(p, kv.key(), kv.value());
  }
  DC_USER_CHECK(!location.empty(), tensor_label(p), " has external data without a location");
  DC_USER_CHECK(offset >= 0, tensor_label(p), " has a negative external-data offset");
  const fs::path base = fs::weakly_canonical(fs::path(model_dir.empty() ? "." : model_dir));
  const fs::path file = fs::weakly_canonical(base / location);
  const auto rel = file.lexically_relative(base);
  DC_USER_CHECK(!rel.empty() && *rel.begin() != "..", tensor_label(p), ": external data '",
                location, "' lies outside the model's folder ", base.string());
  std::ifstream in(file, std::ios::binary);
  DC_USER_CHECK(in.good(), tensor_label(p), ": external data file '", file.string(),
                "' cannot be opened");
  if (length >= 0)
    DC_USER_CHECK(static_cast<size_t>(length) == nbytes, tensor_label(p), ": external length ",
                  length, " does not match ", nbytes, " bytes for its shape");
  std::error_code ec;
  const uintmax_t file_bytes = fs::file_size(file, ec);
  DC_USER_CHECK(!ec && static_cast<uintmax_t>(offset) <= file_bytes && nbytes <= file_bytes - offset,
                tensor_label(p), ": external data file '", file.string(), "' is too short (needs ",
                nbytes, " bytes at offset ", offset, ")");
  Tensor t(dtype, shape);
  in.seekg(offset);
  in.read(reinterpret_cast<char*>(t.raw_mutable()), static_cast<std::streamsize>(nbytes));
  DC_USER_CHECK(in.gcount() == static_cast<std::streamsize>(nbytes), tensor_label(p),
                ": external data file '", file.string(), "' is too short (needs ", nbytes,
                " bytes at offset ", offset, ")");
  return t;
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

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& model_dir) {
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
  const size_t nbytes = static_cast<size_t>(n) * dtype_size(*dtype);
  if (p.data_location() == onnx::TensorProto::EXTERNAL)
    return read_external(p, model_dir, *dtype, shape, nbytes);
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
