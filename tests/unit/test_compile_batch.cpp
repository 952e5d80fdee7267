// compile_batch (codegen/compile_batch.h): many generated kernels in one NVRTC program per
// architecture. ptxas's figures per kernel must be those of the source compiled alone, a
// source that does not compile must fail alone (with its own error), and the kernels of a
// multi-launch source (split-K + epilogue) must all be reported under their own names.
#include <gtest/gtest.h>

#include <algorithm>

#include "compile_batch.h"
#include "estimator_testing.h"
#include "generate.h"
#include "model_builder.h"
#include "nvrtc.h"
#include "param_space.h"
#include "prelude.h"

namespace dc {
namespace {

using testing::ModelBuilder;

Variant gemm_variant(const std::string& precision, int64_t bm, int64_t bn, int64_t bk,
                     int64_t wm, int64_t wn, int64_t stages, int64_t split = 1) {
  Variant v;
  v.template_name = "gemm_tiled";
  v.precision = precision;
  v.params = {{"block_m", bm}, {"block_n", bn}, {"block_k", bk},     {"warp_m", wm},
              {"warp_n", wn},  {"vec", 4},      {"stages", stages}, {"split_k", split}};
  return v;
}

// A tensor-core GEMM + bias (split 4 takes the scratch + epilogue kernel), an elementwise
// kernel and the reference: sources of three templates with the same kernel names twice.
std::vector<GeneratedKernel> sample_kernels() {
  ModelBuilder m;
  m.input("a", {64, 512}).weight("b", {512, 96}).weight("bias", {96});
  m.node("MatMul", {"a", "b"}, "y", {64, 96}).node("Add", {"y", "bias"}, "z", {64, 96});
  const Workload gemm = m.workload(ClusterKind::gemm);
  ModelBuilder e;
  e.input("x", {1000}).node("Sigmoid", {"x"}, "y", {1000}).node("Relu", {"y"}, "z", {1000});
  const Workload ew = e.workload(ClusterKind::elementwise);
  std::vector<GeneratedKernel> out;
  out.push_back(generate_kernel(gemm, gemm_variant("tf32", 64, 32, 32, 32, 32, 3)));
  out.push_back(generate_kernel(gemm, gemm_variant("fp16", 32, 64, 32, 32, 32, 4, 4)));
  out.push_back(generate_kernel(gemm, gemm_variant("bf16", 64, 64, 16, 32, 32, 2)));
  out.push_back(generate_reference(gemm));
  const auto space = enumerate_variants(ew, testing::spec_a100());
  EXPECT_FALSE(space.empty());
  if (!space.empty()) out.push_back(generate_kernel(ew, space.front()));
  return out;
}

std::vector<const GeneratedKernel*> pointers(const std::vector<GeneratedKernel>& ks) {
  std::vector<const GeneratedKernel*> p;
  for (const auto& k : ks) p.push_back(&k);
  return p;
}

TEST(CompileBatch, FiguresEqualSeparateCompiles) {
  const auto kernels = sample_kernels();
  for (const std::string arch : {"sm_80", "sm_90"}) {
    BatchStats stats;
    const auto batched = compile_batch(pointers(kernels), arch, {}, &stats);
    ASSERT_EQ(batched.size(), kernels.size());
    // Every source in one program, then those that spilled in a second (retry_spills).
    const bool retried = std::any_of(batched.begin(), batched.end(),
                                     [](const BatchItemResult& b) { return b.spill_retried; });
    EXPECT_EQ(stats.programs, retried ? 2 : 1);
    for (size_t i = 0; i < kernels.size(); ++i) {
      SCOPED_TRACE(kernels[i].variant_key + " on " + arch);
      const CompileResult alone = compile_cuda(kernels[i].source, arch);
      ASSERT_TRUE(alone.ok) << alone.error;
      ASSERT_TRUE(batched[i].ok) << batched[i].error;
      EXPECT_TRUE(batched[i].batched);
      ASSERT_EQ(batched[i].kernels.size(), alone.kernels.size());
      for (const auto& a : alone.kernels) {
        const auto it = std::find_if(batched[i].kernels.begin(), batched[i].kernels.end(),
                                     [&](const KernelResources& b) { return b.kernel == a.kernel; });
        ASSERT_NE(it, batched[i].kernels.end()) << a.kernel;
        EXPECT_EQ(it->registers, a.registers) << a.kernel;
        EXPECT_EQ(it->spill_stores_bytes, a.spill_stores_bytes) << a.kernel;
        EXPECT_EQ(it->spill_loads_bytes, a.spill_loads_bytes) << a.kernel;
        EXPECT_EQ(it->static_smem_bytes, a.static_smem_bytes) << a.kernel;
        EXPECT_EQ(it->stack_bytes, a.stack_bytes) << a.kernel;
      }
    }
    // The split-K source reports both of its kernels.
    EXPECT_EQ(batched[1].kernels.size(), 2u);
  }
}

TEST(CompileBatch, BrokenSourceFailsAlone) {
  auto kernels = sample_kernels();
  const size_t bad = 2;
  const auto at = kernels[bad].source.rfind("DC_EXPORT_KERNEL");
  ASSERT_NE(at, std::string::npos);
  kernels[bad].source.insert(at, "this_is_not_cuda;\n");
  BatchStats stats;
  const auto results = compile_batch(pointers(kernels), "sm_86", {}, &stats);
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (i == bad) {
      EXPECT_FALSE(results[i].ok);
      EXPECT_FALSE(results[i].batched);
      EXPECT_NE(results[i].error.find("this_is_not_cuda"), std::string::npos) << results[i].error;
    } else {
      EXPECT_TRUE(results[i].ok) << i << ": " << results[i].error;
      EXPECT_FALSE(results[i].kernels.empty()) << i;
    }
  }
  EXPECT_GT(stats.programs, 2) << "the failing batch was split";
}

// MobileNetV2's first 1x1 conv (32 -> 16 channels, 112x112) stored f16 with its bias, as the
// fp16 plan stores it, and the variant the estimator ranked first for it on a100, a10 and l4
// (docs/bench/compile-all.md): ptxas picks 48 registers for it and spills 28 bytes unless told
// that one block per SM suffices.
GeneratedKernel spilling_conv() {
  ModelBuilder m;
  Attributes a;
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  a.set("kernel_shape", std::vector<int64_t>{1, 1});
  a.set("dilations", std::vector<int64_t>{1, 1});
  a.set("group", int64_t{1});
  m.input("x", {1, 32, 112, 112}).weight("w", {16, 32, 1, 1}).weight("b", {16});
  m.node("Conv", {"x", "w", "b"}, "y", {1, 16, 112, 112}, a);
  Workload w = m.workload(ClusterKind::conv);
  for (auto& [name, info] : w.graph.tensors)
    if (info.dtype == DType::f32 && !w.graph.is_constant(name)) info.dtype = DType::f16;
  Variant v = gemm_variant("fp16", 128, 32, 32, 32, 32, 2);
  v.template_name = "conv_implicit_gemm";
  return generate_kernel(w, v);
}

TEST(CompileBatch, SpillsBelowTheLimitAreCompiledAgain) {
  const GeneratedKernel conv = spilling_conv();
  CompileOptions no_retry;
  no_retry.retry_spills = false;
  const CompileResult heuristic = compile_cuda(conv.source, "sm_80", no_retry);
  ASSERT_TRUE(heuristic.ok) << heuristic.error;
  ASSERT_EQ(heuristic.kernels.size(), 1u);
  EXPECT_GT(spilled_bytes(heuristic.kernels), 0) << "the case no longer spills: " << heuristic.log;
  EXPECT_LT(heuristic.kernels[0].registers, 128) << "a spill far below the limit";

  const CompileResult retried = compile_cuda(conv.source, "sm_80");
  ASSERT_TRUE(retried.ok) << retried.error;
  ASSERT_EQ(retried.kernels.size(), 1u);
  EXPECT_EQ(spilled_bytes(retried.kernels), 0) << retried.log;
  EXPECT_GT(retried.kernels[0].registers, heuristic.kernels[0].registers);
  EXPECT_NE(retried.log.find("compiled again with --minnctapersm=1: kept"), std::string::npos)
      << retried.log;
  EXPECT_NE(retried.cubin, heuristic.cubin);

  // In a batch only the spilling source is compiled again; the others keep their figures.
  auto kernels = sample_kernels();
  kernels.push_back(conv);
  BatchStats stats;
  const auto batched = compile_batch(pointers(kernels), "sm_80", {}, &stats);
  EXPECT_EQ(stats.programs, 2) << "the batch, then the spilling source";
  ASSERT_TRUE(batched.back().ok) << batched.back().error;
  EXPECT_TRUE(batched.back().spill_retried);
  ASSERT_EQ(batched.back().kernels.size(), 1u);
  EXPECT_EQ(batched.back().kernels[0].registers, retried.kernels[0].registers);
  EXPECT_EQ(spilled_bytes(batched.back().kernels), 0);
  const auto plain = compile_batch(pointers(kernels), "sm_80", no_retry);
  EXPECT_EQ(spilled_bytes(plain.back().kernels), spilled_bytes(heuristic.kernels));
  EXPECT_FALSE(plain.back().spill_retried);
  for (size_t i = 0; i + 1 < kernels.size(); ++i) {
    EXPECT_FALSE(batched[i].spill_retried) << i;
    ASSERT_EQ(batched[i].kernels.size(), plain[i].kernels.size()) << i;
    for (size_t k = 0; k < plain[i].kernels.size(); ++k)
      EXPECT_EQ(batched[i].kernels[k].registers, plain[i].kernels[k].registers) << i;
  }
}

TEST(CompileBatch, ProgramRenamesKernelsApart) {
  const auto kernels = sample_kernels();
  std::vector<size_t> left_out;
  const std::string program = batch_program(pointers(kernels), &left_out);
  EXPECT_TRUE(left_out.empty());
  EXPECT_NE(program.find(" dc_gemm_b0("), std::string::npos);
  EXPECT_NE(program.find(" dc_gemm_b1("), std::string::npos);
  EXPECT_NE(program.find(" dc_gemm_epilogue_b1("), std::string::npos);
  EXPECT_EQ(program.find(" dc_gemm("), std::string::npos);
  // The prelude once.
  const std::string marker = cuda_prelude().substr(0, 200);
  EXPECT_EQ(program.find(marker, program.find(marker) + 1), std::string::npos);
}

}  // namespace
}  // namespace dc
