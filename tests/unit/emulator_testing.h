// Helpers for tests that run hand-written CUDA kernels on the host emulator
// (test_emulator*.cpp): buffers, launches, a kernel with the prelude, the suite's cache.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "emulator.h"
#include "ir/kernel.h"
#include "variant.h"
#include "prelude.h"

namespace dc::emu_testing {

inline KernelBuffer buffer(std::string name, BufferRole role, Shape shape,
                           DType dtype = DType::f32, bool zero_init = false) {
  KernelBuffer b;
  b.name = std::move(name);
  b.role = role;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.zero_init = zero_init;
  return b;
}

inline Launch launch(std::string kernel, std::array<int64_t, 3> grid,
                     std::array<int64_t, 3> block, std::vector<int> args,
                     int64_t dynamic_smem_bytes = 0) {
  Launch l;
  l.kernel = std::move(kernel);
  l.grid = grid;
  l.block = block;
  l.args = std::move(args);
  l.dynamic_smem_bytes = dynamic_smem_bytes;
  return l;
}

inline GeneratedKernel make_kernel(const std::string& body, std::vector<KernelBuffer> buffers,
                                   std::vector<Launch> launches) {
  GeneratedKernel k;
  k.template_name = "test";
  k.source = cuda_prelude() + body;
  k.buffers = std::move(buffers);
  k.launches = std::move(launches);
  return k;
}

// One cache for the suite, kept between runs of the test binary (compiles happen once).
inline EmulatorOptions options() {
  EmulatorOptions o;
  o.cache_dir = ::testing::TempDir() + "dc-emulator-test-cache";
  return o;
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in:\n" << text;
}

inline EmulatorResult run_ok(const GeneratedKernel& k, std::vector<Tensor>& buffers) {
  EmulatorResult r = emulate(k, buffers, options());
  EXPECT_TRUE(r.ok) << r.error;
  return r;
}

inline std::vector<float> floats(const Tensor& t) { return t.to_float_vector(); }

}  // namespace dc::emu_testing
