// libFuzzer harness: one test-data tensor file (input_N.pb / output_N.pb), as
// `dc-coordinator verify --data` and `dc-run --data` read them.
#include <cstdint>

#include "fuzz_util.h"
#include "onnx/test_data.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dc::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dc::fuzz::scratch_file("input_0.pb", data, size);
  dc::fuzz::expect_user_errors([&] { (void)dc::read_tensor_file(path); });
  return 0;
}
