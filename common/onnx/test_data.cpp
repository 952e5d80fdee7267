#include "onnx/test_data.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <onnx/onnx_pb.h>

#include "ir/error.h"
#include "onnx/tensor_proto.h"

namespace dc {

namespace fs = std::filesystem;

namespace {

std::vector<NamedTensor> read_series(const fs::path& dir, const std::string& prefix) {
  std::vector<NamedTensor> out;
  for (int i = 0;; ++i) {
    const fs::path f = dir / (prefix + std::to_string(i) + ".pb");
    if (!fs::exists(f)) break;
    out.push_back(read_tensor_file(f.string()));
  }
  // A gap (input_0, input_2) would silently shift the binding: refuse it.
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) != 0 || e.path().extension() != ".pb") continue;
    const std::string idx = n.substr(prefix.size(), n.size() - prefix.size() - 3);
    bool numeric = !idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos;
    DC_USER_CHECK(numeric && std::stoul(idx) < out.size(), "test data: ", e.path().string(),
                  " does not continue the sequence ", prefix, "0.pb, ", prefix, "1.pb, ...");
  }
  return out;
}

}  // namespace

NamedTensor read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DC_USER_CHECK(in.good(), "cannot open tensor file '", path, "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  onnx::TensorProto proto;
  DC_USER_CHECK(!bytes.empty() && proto.ParseFromString(bytes), "'", path,
                "' is not a serialized ONNX TensorProto");
  const std::string dir = fs::path(path).parent_path().string();
  return {proto.name(), tensor_from_proto(proto, dir)};
}

void write_tensor_file(const std::string& path, const std::string& name, const Tensor& t) {
  onnx::TensorProto proto;
  tensor_to_proto(t, name, &proto);
  std::ofstream out(path, std::ios::binary);
  DC_USER_CHECK(out.good(), "cannot write '", path, "'");
  DC_USER_CHECK(proto.SerializeToOstream(&out), "failed writing '", path, "'");
}

TestData read_test_data(const std::string& dir) {
  DC_USER_CHECK(fs::is_directory(dir), "test-data folder '", dir, "' does not exist");
  TestData d;
  d.inputs = read_series(dir, "input_");
  d.outputs = read_series(dir, "output_");
  DC_USER_CHECK(!d.inputs.empty() || !d.outputs.empty(), "'", dir,
                "' holds no input_N.pb / output_N.pb files (ONNX test-data layout)");
  return d;
}

}  // namespace dc
