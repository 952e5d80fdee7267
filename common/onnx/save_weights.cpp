#include "onnx/save_weights.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <onnx/onnx_pb.h>

#include "ir/error.h"
#include "onnx/tensor_proto.h"

namespace dc {

namespace {

onnx::ModelProto read_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DC_USER_CHECK(in.good(), "cannot open the source model '", path, "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string text = bytes.str();
  onnx::ModelProto m;
  DC_USER_CHECK(m.ParseFromString(text), "'", path, "' is not an ONNX model");
  return m;
}

}  // namespace

int save_model_with_weights(const std::string& source, const std::string& out,
                            const std::map<std::string, Tensor>& values) {
  onnx::ModelProto m = read_model(source);
  const std::string dir = std::filesystem::path(source).parent_path().string();
  int replaced = 0;
  for (onnx::TensorProto& init : *m.mutable_graph()->mutable_initializer()) {
    const auto it = values.find(init.name());
    const bool external = init.data_location() == onnx::TensorProto::EXTERNAL;
    if (it == values.end() && !external) continue;
    // The source's own value (external data inlined: the copy must not point beside the
    // source), or the trained one in the source's element type.
    const Tensor original = tensor_from_proto(init, dir.empty() ? "." : dir);
    Tensor value = original;
    if (it != values.end()) {
      const Tensor& v = it->second;
      DC_USER_CHECK(v.shape() == original.shape(), "weight '", init.name(), "' has shape ", shape_str(v.shape()),
                    " but the source model's initializer ", shape_str(original.shape()));
      DC_USER_CHECK(v.dtype() == original.dtype(), "weight '", init.name(), "' is ", dtype_name(v.dtype()),
                    " but the source model's initializer ", dtype_name(original.dtype()));
      value = v;
      ++replaced;
    }
    const std::string name = init.name();
    init.Clear();
    tensor_to_proto(value, name, &init);
  }
  std::ofstream os(out, std::ios::binary | std::ios::trunc);
  DC_USER_CHECK(os.good(), "cannot write '", out, "'");
  DC_USER_CHECK(m.SerializeToOstream(&os) && os.good(), "writing '", out, "' failed");
  return replaced;
}

}  // namespace dc
