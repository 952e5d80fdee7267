// A .onnx file's large inline weights left where they are: load_onnx scans the protobuf
// wire format (https://protobuf.dev/programming-guides/encoding/) of ModelProto.graph's
// initializers and copies everything but their large raw_data fields, which it records as
// byte ranges of the file. Parsing the rest takes milliseconds, and the weights are read
// only when a value is needed (Tensor::from_file), never copied into the protobuf.
// Internal to common/onnx.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace dc {

struct FileSlice {
  uint64_t offset = 0;  // of the first byte in the file
  uint64_t bytes = 0;
};

struct SlimModel {
  std::string proto;  // the ModelProto without the recorded raw_data fields
  // graph.initializer index -> where its raw_data lies in the file
  std::map<int, FileSlice> raw_data;
};

// Scans a serialized ModelProto; raw_data fields of at least `threshold` bytes are left
// out. nullopt when the bytes are not a well-formed wire stream (the caller then parses
// them as a whole, for protobuf's own verdict).
std::optional<SlimModel> slim_model(const char* data, size_t size, size_t threshold);

}  // namespace dc
