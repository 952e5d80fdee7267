// ONNX test-data folders (model-zoo layout: input_0.pb, input_1.pb, ..., output_0.pb, ...).
#pragma once

#include <string>
#include <vector>

#include "ir/tensor.h"

namespace dc {

struct NamedTensor {
  std::string name;  // the TensorProto's name (may be empty)
  Tensor value;
};

struct TestData {
  std::vector<NamedTensor> inputs;   // input_0.pb, input_1.pb, ... in order
  std::vector<NamedTensor> outputs;  // output_0.pb, ... in order
};

// Reads a test-data folder. UserError if it does not exist, has no input_N.pb, has a gap in
// the numbering, or holds a file that is not a TensorProto.
TestData read_test_data(const std::string& dir);

// Reads one serialized TensorProto file.
NamedTensor read_tensor_file(const std::string& path);

// Writes one serialized TensorProto file (raw_data).
void write_tensor_file(const std::string& path, const std::string& name, const Tensor& t);

}  // namespace dc
