// libFuzzer harness: an ONNX file through import (parse, checker, shape inference,
// conversion, validation) and simplification, as `dc-coordinator plan/tune` read a model.
#include <cstdint>

#include "fuzz_util.h"
#include "onnx/import.h"
#include "passes/simplify.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dc::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dc::fuzz::scratch_file("model.onnx", data, size);
  dc::fuzz::expect_user_errors([&] { (void)dc::simplify(dc::import_onnx_file(path)); });
  return 0;
}
