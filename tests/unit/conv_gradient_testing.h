// Shared by the convolution-gradient template tests (test_codegen_conv_gradients.cpp,
// test_codegen_conv_grad_weight_grouped.cpp, test_codegen_conv_bias_gradient.cpp): a variant of a workload on the host emulator
// against the CPU reference, on every precision path and storage type.
#pragma once

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "emulator.h"
#include "generate.h"
#include "ir/tolerance.h"
#include "ir/workload.h"
#include "nvrtc.h"
#include "random_inputs.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "variant_tolerance.h"

namespace dc::testing {

// A new seed each call (fresh inputs every run; the seed is in the failure's trace).
inline uint32_t fresh_seed() {
  static uint32_t seed = static_cast<uint32_t>(std::random_device{}());
  return seed++;
}

// Emulates variant v of w on fresh random inputs with poisoned outputs (NaN in f32, all ones
// in f16 / bf16, also a NaN) and compares each output with the CPU reference within
// variant_tolerance (docs/precision.md); `nvrtc`: NVRTC compiles the source for sm_80 too.
inline void check_variant_on_emulator(const Workload& w, const Variant& v, bool nvrtc) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(fmt::format("{} (seed {})", v.key(), seed));
  GeneratedKernel k;
  ASSERT_NO_THROW(k = generate_kernel(w, v));
  const std::vector<Tensor> in = random_workload_inputs(w, seed);
  ref::TensorMap inputs;
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) inputs[w.graph.inputs[i]] = in[i];
  std::vector<Tensor> buffers(k.buffers.size());
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input) {
      buffers[i] = inputs.at(b.name);
      continue;
    }
    Tensor t(b.dtype, b.shape);
    ASSERT_TRUE(b.dtype == DType::f32 || b.dtype == DType::f16 || b.dtype == DType::bf16);
    if (b.dtype == DType::f32)
      std::fill_n(t.mutable_data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
    else
      std::fill_n(t.raw_mutable(), t.nbytes(), std::byte{0xff});
    buffers[i] = t;
  }
  if (nvrtc) {
    const CompileResult cr = compile_cuda(k.source, "sm_80");
    EXPECT_TRUE(cr.ok) << cr.error << "\n" << cr.log;
  }
  const EmulatorResult r = emulate(k, buffers);
  ASSERT_TRUE(r.ok) << r.error;
  const auto expected = ref::run_graph(w.graph, inputs);
  const Tolerance tol = variant_tolerance(v.precision, w);
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    if (k.buffers[i].role != BufferRole::output) continue;
    const ref::Comparison c = ref::compare_tensors(buffers[i], expected.at(k.buffers[i].name), tol.rtol, tol.atol);
    EXPECT_TRUE(c.pass) << k.buffers[i].name << ": rel L2 " << c.rel_l2_error << ", max abs " << c.max_abs_error
                        << " " << c.problem;
  }
}

}  // namespace dc::testing
