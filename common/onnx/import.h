// ONNX import: file -> checked, shape-inferred dc::Graph with static shapes.
//
// Two steps, so that a caller can look at the model's inputs before deciding how to import
// it (verify binds shape-determining integer inputs to test data as constants):
//   OnnxModel m = load_onnx("model.onnx");      // parse; clear UserError for bad files
//   Graph g = import_onnx(std::move(m), opts);  // checker, shape inference, conversion
// Every problem with the file or the model is a UserError with a one-line message.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "onnx/proto_scan.h"

namespace onnx {
class ModelProto;
}

namespace dc {

// Default-domain opsets dc imports; models outside the tested range 11..23 get a warning.
// Opsets 1..5 and 18..23 are adapted to what ONNX 1.12 checks first (onnx/opset_adapt.h).
inline constexpr int64_t kMinOpset = 1;
inline constexpr int64_t kMaxOpset = 23;

struct ModelInput {
  std::string name;
  DType dtype = DType::undefined;
  std::vector<int64_t> dims;  // -1 for a dynamic dimension
  std::vector<std::string> dim_names;  // symbolic name of each dim ("" if static or unnamed)
};

// A parsed ONNX model, not yet checked or converted.
class OnnxModel {
 public:
  // raw_data_in_file: initializers whose raw_data load_onnx left in the file (proto_scan.h).
  OnnxModel(std::unique_ptr<onnx::ModelProto> proto, std::string path,
            std::map<int, FileSlice> raw_data_in_file = {});
  OnnxModel(OnnxModel&&) noexcept;
  OnnxModel& operator=(OnnxModel&&) noexcept;
  ~OnnxModel();

  const std::string& path() const { return path_; }
  // Runtime inputs (graph inputs that are not initializers), in order.
  std::vector<ModelInput> inputs() const;
  std::vector<std::string> output_names() const;
  // Names of runtime inputs that feed a shape-determining operand (Reshape's shape,
  // Slice's starts/ends, Expand's shape, Split's sizes, axes inputs, ...).
  std::vector<std::string> shape_inputs() const;

  onnx::ModelProto& proto() { return *proto_; }
  // graph.initializer index -> where its raw_data lies in path() (read when needed).
  const std::map<int, FileSlice>& raw_data_in_file() const { return raw_data_in_file_; }

 private:
  std::unique_ptr<onnx::ModelProto> proto_;
  std::string path_;
  std::map<int, FileSlice> raw_data_in_file_;
};

struct ImportOptions {
  // --shape NAME=1x3x224x224: fixes the shape of a runtime input (dynamic dims, batch size).
  std::map<std::string, Shape> input_shapes;
  // Runtime inputs replaced by constant initializers before shape inference.
  std::map<std::string, Tensor> bind_constants;
};

// Reads and parses an ONNX file. UserError: missing, unreadable, empty, not ONNX. Large
// initializers' raw_data (>= 64 KiB) is not read: import makes them file-backed tensors.
OnnxModel load_onnx(const std::string& path);

// Checks (onnx::checker), infers shapes (onnx::shape_inference), converts to a Graph and
// validates it: supported ops (one message listing every unsupported op type with its first
// node), static shapes (dynamic dims are named, with the --shape remedy), attributes, cycles.
Graph import_onnx(OnnxModel model, const ImportOptions& opts = {});

// Convenience: load_onnx + import_onnx.
Graph import_onnx_file(const std::string& path, const ImportOptions& opts = {});

// Parses "1x3x224x224" (or "1,3,224,224"); UserError on anything else.
Shape parse_shape(const std::string& text);

}  // namespace dc
