// libFuzzer harness: the tuning configuration YAML (--config, examples/tune.yaml).
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "tune_config.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dc::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dc::fuzz::expect_user_errors([&] {
    dc::PlanOptions opts;
    bool from_db = false;
    dc::parse_tune_config(text, "fuzz.yaml", &opts, &from_db);
  });
  return 0;
}
