#include "onnx/external_data.h"

#include <charconv>
#include <filesystem>

#include "ir/error.h"

namespace dc {

namespace fs = std::filesystem;

namespace {

std::string tensor_label(const onnx::TensorProto& p) {
  return p.name().empty() ? std::string("tensor") : "tensor '" + p.name() + "'";
}

int64_t parse_count(const onnx::TensorProto& p, const std::string& key, const std::string& text) {
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  DC_USER_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0, tensor_label(p),
                ": external data ", key, " '", text, "' is not a non-negative integer");
  return v;
}

}  // namespace

ExternalRegion locate_external_data(const onnx::TensorProto& p, const std::string& model_dir,
                                    size_t nbytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = parse_count(p, "offset", kv.value());
    else if (kv.key() == "length") length = parse_count(p, "length", kv.value());
  }
  DC_USER_CHECK(!location.empty(), tensor_label(p), " has external data without a location");
  const fs::path base = fs::weakly_canonical(fs::path(model_dir.empty() ? "." : model_dir));
  const fs::path file = fs::weakly_canonical(base / location);
  const auto rel = file.lexically_relative(base);
  DC_USER_CHECK(!rel.empty() && *rel.begin() != "..", tensor_label(p), ": external data '",
                location, "' lies outside the model's folder ", base.string());
  std::error_code ec;
  DC_USER_CHECK(fs::exists(file, ec), tensor_label(p), ": external data file '", file.string(),
                "' does not exist");
  DC_USER_CHECK(fs::is_regular_file(file, ec), tensor_label(p), ": external data '", file.string(),
                "' is not a regular file");
  if (length >= 0)
    DC_USER_CHECK(static_cast<size_t>(length) == nbytes, tensor_label(p), ": external length ",
                  length, " does not match ", nbytes, " bytes for its shape");
  const auto size = fs::file_size(file, ec);
  DC_USER_CHECK(!ec, tensor_label(p), ": cannot read external data file '", file.string(), "': ",
                ec.message());
  DC_USER_CHECK(static_cast<uint64_t>(offset) <= size && nbytes <= size - static_cast<uint64_t>(offset),
                tensor_label(p), ": external data file '", file.string(), "' is too short (needs ",
                nbytes, " bytes at offset ", offset, ", has ", size, " bytes)");
  return {file.string(), static_cast<uint64_t>(offset)};
}

}  // namespace dc
