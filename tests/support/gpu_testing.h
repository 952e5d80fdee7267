// The one way a GPU test says "no device here": a skip with the reason (ctest's "Skipped",
// the documented behaviour of `ctest -L gpu` on CPU machines), or, with DC_REQUIRE_GPU=1 in
// the environment (GPU machines, CI runners that must have one), a failure, so that a
// broken driver setup cannot pass as a run of skipped tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace dc::testing {

inline bool gpu_required() {
  const char* env = std::getenv("DC_REQUIRE_GPU");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

}  // namespace dc::testing

// Skips (or, under DC_REQUIRE_GPU=1, fails) the current test when `cond` says no device.
#define DC_SKIP_WITHOUT_GPU(cond, why)                                                   \
  if (cond) {                                                                            \
    if (::dc::testing::gpu_required()) GTEST_FAIL() << "DC_REQUIRE_GPU=1 but " << why;   \
    GTEST_SKIP() << why;                                                                 \
  }                                                                                      \
  static_assert(true, "")
