// Tensor-core attention (codegen/template_attention_mma.cpp) on a real GPU (ctest label
// "gpu"): the emulator tests' cases (tests/unit/test_codegen_attention_mma.cpp) per math
// path, compiled with NVRTC for the device, run through the CUDA driver API and compared
// with the CPU reference executor within kernel_tolerance. Skipped without a device, or on a
// device below sm_80 (mma.sync m16n8k16 / tf32 need it).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "../unit/attention_testing.h"
#include "device_discovery.h"
#include "generate.h"
#include "gpu_runner.h"
#include "ir/tolerance.h"
#include "nvrtc.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "testing.h"
#include "gpu_testing.h"

namespace dc {
namespace {

using namespace testing::attn;

struct Gpu {
  std::unique_ptr<GpuDevice> device;
  DiscoveredDevice info;
  std::string why;
};

const Gpu& gpu() {
  static const Gpu* const g = [] {
    auto* out = new Gpu;
    for (const auto& d : discover_devices(GpuCatalog::builtin(), &out->why)) {
      if (!d.usable()) continue;
      out->info = d;
      if (d.spec.cc_major >= 8) out->device = std::make_unique<GpuDevice>(d.ordinal);
      else out->why = "compute capability below 8.0";
      break;
    }
    return out;
  }();
  return *g;
}

// Runs the variant on the GPU on seeded inputs (rounded to the math type for fp16/bf16 on
// f32 storage) and compares every output with the reference.
void expect_matches_cpu(const Workload& w, const Variant& v, const std::map<std::string, Tensor>& given,
                        int64_t reduction_length) {
  SCOPED_TRACE(v.key());
  const GeneratedKernel k = generate_kernel(w, v);
  const CompileResult cr = compile_cuda(k.source, gpu().info.arch);
  ASSERT_TRUE(cr.ok) << cr.error;
  const DType math = math_dtype(v.precision);
  std::vector<Tensor> bufs(k.buffers.size());
  ref::TensorMap ref_in;
  uint32_t seed = 11;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role != BufferRole::input) continue;
    const auto pos = std::find(w.graph.inputs.begin(), w.graph.inputs.end(), b.name) - w.graph.inputs.begin();
    const auto it = given.find(w.source_inputs.at(static_cast<size_t>(pos)));
    Tensor values = it != given.end() ? it->second : testing::random_tensor(b.shape, seed++);
    if (b.dtype == DType::f32 && math != DType::f32) values = round_to(values, math);
    bufs[i] = to_storage(values, b.dtype);
    ref_in[b.name] = widen(bufs[i]);
  }
  const GpuRunResult r = run_on_gpu(*gpu().device, k, cr.cubin, bufs);
  ASSERT_TRUE(r.ok()) << job_status_name(r.status) << ": " << r.error;
  const auto want = ref::run_graph(fp32_graph(w.graph), ref_in);
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role != BufferRole::output) continue;
    const Tolerance tol = kernel_tolerance(v.precision, b.dtype, reduction_length);
    const ref::Comparison c =
        ref::compare_tensors(widen(bufs[i]), round_to(want.at(b.name), b.dtype), tol.rtol, tol.atol);
    EXPECT_TRUE(c.pass) << b.name << ": rel L2 " << c.rel_l2_error << " (rtol " << tol.rtol << ") "
                        << c.problem;
    std::cout << v.key() << "  rel. L2 vs CPU " << c.rel_l2_error << "\n";
  }
}

TEST(OnGpuAttentionMma, EmulatorCasesMatchTheCpu) {
  DC_SKIP_WITHOUT_GPU(!gpu().device, "no sm_80+ CUDA device: " << gpu().why);
  for (const char* p : {"tf32", "fp16", "bf16"}) {
    AttentionSpec a;
    a.mask = true;
    Tensor mask = testing::random_tensor({1, 1, 1, 20}, 99);
    mask.mutable_data<float>()[3] = -kInf;
    mask.mutable_data<float>()[7] = -10000.f;
    for (const Variant& v : {mma_variant(p, 16, 16, 16, 1), mma_variant(p, 32, 32, 16, 2),
                             mma_variant(p, 32, 16, 32, 3)})
      expect_matches_cpu(attention_workload(a), v, {{"mask", mask}}, 20);

    AttentionSpec b;
    b.b = 2, b.h = 3, b.sq = 33, b.sk = 33, b.d = 24, b.dv = 40;
    expect_matches_cpu(attention_workload(b), mma_variant(p, 64, 32, 32, 3), {}, 40);

    AttentionSpec s;
    s.sq = 20, s.sk = 70, s.dv = 24, s.mask = true, s.relu = true;
    Tensor smask = testing::random_tensor({1, 1, 1, 70}, 5);
    smask.mutable_data<float>()[33] = -kInf;
    expect_matches_cpu(attention_workload(s), mma_variant(p, 16, 16, 16, 2, 3), {{"mask", smask}}, 70);

    if (std::string(p) != "tf32") {
      AttentionSpec h;  // stored in the math type: 16-byte cp.async, half output
      h.h = 12, h.sq = 128, h.sk = 128, h.d = 64, h.dv = 64, h.mask = true;
      h.qkv = h.out = math_dtype(p);
      expect_matches_cpu(attention_workload(h), mma_variant(p, 64, 32, 16, 3), {}, 128);
      expect_matches_cpu(attention_workload(h), mma_variant(p, 64, 64, 16, 2, 2), {}, 128);
    }
  }
}

}  // namespace
}  // namespace dc
