// Shared by the CUDA-core template tests of the GEMM family, depthwise and attention
// (test_codegen_gemm.cpp, test_codegen_depthwise.cpp, test_codegen_attention.cpp): the A100
// spec and its fp32 spaces, picking variants by predicate, and check_variant, which
// generates a variant, runs it on the host emulator with seeded random inputs and poisoned
// (NaN) outputs, compiles it with NVRTC for sm_80 meanwhile, and compares with the CPU
// reference executor on the workload graph: ||out - ref|| / ||ref|| <= 1e-5.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "emulator.h"
#include "estimator_testing.h"
#include "generate.h"
#include "ir/workload.h"
#include "model_builder.h"
#include "nvrtc.h"
#include "param_space.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "testing.h"

namespace dc::testing {

inline Attributes conv_attrs(std::vector<int64_t> kernel, std::vector<int64_t> strides,
                      std::vector<int64_t> pads, std::vector<int64_t> dilations, int64_t group = 1) {
  Attributes a;
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  a.set("group", group);
  return a;
}

inline const GpuSpec& a100() {
  static const GpuSpec g = testing::spec_a100();
  return g;
}

inline std::vector<Variant> fp32_variants(const Workload& w) {
  return enumerate_variants(w, a100(), SpaceOptions{{"fp32"}});
}

// The first variant satisfying each predicate (deduplicated, in predicate order).
inline std::vector<Variant> pick(const std::vector<Variant>& all,
                          const std::vector<std::function<bool(const Variant&)>>& preds) {
  std::vector<Variant> out;
  std::set<std::string> keys;
  for (const auto& p : preds)
    for (const auto& v : all)
      if (p(v)) {
        if (keys.insert(v.key()).second) out.push_back(v);
        break;
      }
  return out;
}

struct RunOptions {
  std::map<std::string, Tensor> inputs;  // by model name (Workload::source_inputs)
  bool nvrtc = true;
};

// Generates, emulates and compares one variant.
inline void check_variant(const Workload& w, const Variant& v, const RunOptions& opt = {}) {
  SCOPED_TRACE(v.key());
  GeneratedKernel k;
  ASSERT_NO_THROW(k = generate_kernel(w, v));
  std::vector<Tensor> buffers(k.buffers.size());
  ref::TensorMap inputs;
  uint32_t seed = 7;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input) {
      const auto pos = std::find(w.graph.inputs.begin(), w.graph.inputs.end(), b.name) - w.graph.inputs.begin();
      const std::string& model_name = w.source_inputs.at(static_cast<size_t>(pos));
      auto it = opt.inputs.find(model_name);
      buffers[i] = it != opt.inputs.end() ? it->second : testing::random_tensor(b.shape, seed++);
      inputs[b.name] = buffers[i];
    } else {
      // Poisoned: an element the kernel does not write fails the comparison.
      Tensor t(b.dtype, b.shape);
      if (b.dtype == DType::f32)
        std::fill_n(t.mutable_data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
      buffers[i] = t;
    }
  }
  // NVRTC (thread safe) compiles while the emulator runs.
  std::future<CompileResult> compiled;
  if (opt.nvrtc)
    compiled = std::async(std::launch::async, [&k] { return compile_cuda(k.source, "sm_80"); });
  const EmulatorResult r = emulate(k, buffers);
  if (opt.nvrtc) {
    const CompileResult cr = compiled.get();
    EXPECT_TRUE(cr.ok) << cr.error << "\n" << cr.log;
  }
  ASSERT_TRUE(r.ok) << r.error << "\n" << k.source;
  const auto expected = ref::run_graph(w.graph, inputs);
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    if (k.buffers[i].role != BufferRole::output) continue;
    const Tensor& want = expected.at(k.buffers[i].name);
    const ref::Comparison c = ref::compare_tensors(buffers[i], want, 1e-5, 0.0);
    EXPECT_TRUE(c.pass) << k.buffers[i].name << ": rel L2 " << c.rel_l2_error << ", max abs "
                        << c.max_abs_error << " " << c.problem;
    EXPECT_LE(c.rel_l2_error, 1e-5);
  }
}

inline void check_all(const Workload& w, const std::vector<Variant>& vs, const RunOptions& opt = {}) {
  ASSERT_FALSE(vs.empty());
  for (const auto& v : vs) check_variant(w, v, opt);
}

}  // namespace dc::testing
