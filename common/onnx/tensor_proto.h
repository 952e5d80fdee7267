// onnx::TensorProto <-> dc::Tensor. Internal to common/onnx (includes ONNX headers).
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

#include "ir/tensor.h"

namespace dc {

// Converts a TensorProto, reading external data relative to `model_dir` (which must contain
// the data file: paths escaping it are refused). UserError for unsupported element types,
// sizes that do not match the shape, or missing/short external files.
Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& model_dir);

// A tensor whose raw_data lies at [offset, offset + bytes) of the file `path` (a .onnx file
// scanned by proto_scan.h), read when first needed. UserError as for tensor_from_proto.
Tensor tensor_in_file(const onnx::TensorProto& proto, const std::string& path, uint64_t offset,
                      uint64_t bytes);

// Fills a TensorProto (raw_data) from a Tensor.
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* proto);

}  // namespace dc
