// Tensor-core attention on sm_70 (codegen/template_attention_mma.cpp with Variant param
// m8n8k4: Volta's mma.sync m8n8k4, P through a per-warp shared tile, rows reduced over lanes
// l ^ 2 and l ^ 8): per edge shape, v100 fp16 variants run on the host emulator with seeded
// random inputs (rounded to f16 as the tensor cores multiply them) and compared with the CPU
// reference within kernel_tolerance (docs/precision.md), as test_codegen_attention_mma.cpp
// does for m16n8k16. Each source compiles for sm_70 with NVRTC 12.
#include <algorithm>
#include <future>
#include <limits>

#include "attention_testing.h"
#include "emulator.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "ir/tolerance.h"
#include "model_builder.h"
#include "nvrtc.h"
#include "param_space.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "testing.h"

namespace dc {
namespace {

using testing::random_tensor;
using namespace testing::attn;

Variant volta(int64_t bm, int64_t bn, int64_t wm, int64_t stages, int64_t split = 1) {
  Variant v = mma_variant("fp16", bm, bn, wm, stages, split);
  v.params["m8n8k4"] = 1;
  return v;
}

// Emulates one variant against the fp32 reference on the stored (f16-rounded) values.
void check(const Workload& w, const Variant& v, int64_t reduction_length, const Tensor* mask = nullptr) {
  SCOPED_TRACE(v.key());
  GeneratedKernel k;
  ASSERT_NO_THROW(k = generate_kernel(w, v));
  const size_t body = k.source.find("---- end of prelude");
  ASSERT_NE(k.source.find("dc_mma_m8n8k4_f16(", body), std::string::npos);
  ASSERT_EQ(k.source.find("dc_ldmatrix", body), std::string::npos);
  std::vector<Tensor> buffers(k.buffers.size());
  ref::TensorMap ref_inputs;
  uint32_t seed = 29;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role != BufferRole::input) continue;
    const auto pos = std::find(w.graph.inputs.begin(), w.graph.inputs.end(), b.name) - w.graph.inputs.begin();
    const bool is_mask = mask != nullptr && w.source_inputs.at(static_cast<size_t>(pos)) == "mask";
    Tensor values = is_mask ? *mask : random_tensor(b.shape, seed++);
    if (b.dtype == DType::f32 && !is_mask) values = round_to(values, DType::f16);
    buffers[i] = to_storage(values, b.dtype);
    ref_inputs[b.name] = widen(buffers[i]);
  }
  std::future<CompileResult> compiled = std::async(std::launch::async, [&k] { return compile_cuda(k.source, "sm_70"); });
  const EmulatorResult r = emulate(k, buffers);
  const CompileResult cr = compiled.get();
  EXPECT_TRUE(cr.ok) << cr.error;
  EXPECT_EQ(cr.nvrtc_version.substr(0, 3), "12.");
  ASSERT_TRUE(r.ok) << r.error;
  const auto expected = ref::run_graph(fp32_graph(w.graph), ref_inputs);
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role != BufferRole::output) continue;
    const Tensor want = round_to(expected.at(b.name), b.dtype);
    const Tolerance tol = kernel_tolerance("fp16", b.dtype, reduction_length);
    const ref::Comparison cmp = ref::compare_tensors(widen(buffers[i]), want, tol.rtol, tol.atol);
    EXPECT_TRUE(cmp.pass) << b.name << ": rel L2 " << cmp.rel_l2_error << " (rtol " << tol.rtol << "), max abs "
                          << cmp.max_abs_error << " " << cmp.problem;
  }
}

TEST(CodegenAttentionMma884, MaskWithHiddenKeysAndRaggedKeyTiles) {
  AttentionSpec a;
  a.mask = true;
  const Workload w = attention_workload(a);
  Tensor mask = random_tensor({1, 1, 1, 20}, 99);
  mask.mutable_data<float>()[3] = -std::numeric_limits<float>::infinity();
  mask.mutable_data<float>()[19] = -std::numeric_limits<float>::infinity();
  mask.mutable_data<float>()[7] = -10000.f;
  for (const Variant& v : {volta(16, 16, 16, 1), volta(32, 32, 16, 2), volta(32, 16, 32, 2)})
    check(w, v, 20, &mask);
}

TEST(CodegenAttentionMma884, BatchHeadsHeadDimsNotTileMultiples) {
  // 2 x 3 heads, 33 queries and keys, D = 24 != Dv = 40, one and two m16 tiles per warp.
  AttentionSpec a;
  a.b = 2, a.h = 3, a.sq = 33, a.sk = 33, a.d = 24, a.dv = 40;
  const Workload w = attention_workload(a);
  for (const Variant& v : {volta(64, 16, 16, 2), volta(64, 32, 32, 1)}) check(w, v, 40);
}

TEST(CodegenAttentionMma884, HalfStorageSplitKvAndEpilogue) {
  AttentionSpec a;
  a.sq = 24, a.sk = 70, a.d = 32, a.dv = 32, a.relu = true, a.qkv = DType::f16, a.out = DType::f16;
  const Workload w = attention_workload(a);
  check(w, volta(16, 16, 16, 2, 3), 70);
  check(w, volta(32, 32, 16, 1), 70);
}

// The v100 space offers m8n8k4 attention for fp16 (stages 1-2) and the a100 space never does.
TEST(CodegenAttentionMma884, V100SpaceOffersM8n8k4) {
  AttentionSpec a;
  a.sq = 128, a.sk = 128, a.d = 64, a.dv = 64;
  const Workload w = attention_workload(a);
  const GpuCatalog catalog = GpuCatalog::builtin();
  int n = 0;
  for (const auto& v : enumerate_variants(w, catalog.require("v100"), SpaceOptions{{"fp16"}})) {
    if (v.precision != "fp16") continue;
    ++n;
    EXPECT_EQ(v.param_or("m8n8k4", 0), 1) << v.key();
    EXPECT_LE(v.param_or("stages", 0), 2) << v.key();
  }
  EXPECT_GT(n, 0);
  for (const auto& v : enumerate_variants(w, catalog.require("a100"), SpaceOptions{{"fp16"}}))
    EXPECT_EQ(v.param_or("m8n8k4", 0), 0) << v.key();
}

}  // namespace
}  // namespace dc
