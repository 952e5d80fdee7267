// ONNX external data: where a tensor's bytes lie outside the .onnx file, checked before
// anything reads them. Internal to common/onnx (includes ONNX headers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <onnx/onnx_pb.h>

namespace dc {

struct ExternalRegion {
  std::string path;     // the data file, canonical
  uint64_t offset = 0;  // of the tensor's first byte
};

// Reads the tensor's external_data entries (location, offset, length) and checks them: a
// location inside the model's folder `model_dir`, integer offset and length, a length equal
// to `nbytes` (the shape's), a regular file that holds [offset, offset + nbytes). Every
// problem is a UserError naming the tensor and the file.
ExternalRegion locate_external_data(const onnx::TensorProto& p, const std::string& model_dir,
                                    size_t nbytes);

}  // namespace dc
