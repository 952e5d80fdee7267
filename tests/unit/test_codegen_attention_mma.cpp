// Tensor-core attention (codegen/template_attention_mma.cpp) per math path (tf32, fp16,
// bf16), and the CUDA-core template on f16/bf16 storage: each case builds an attention
// cluster by hand, runs variants on the host emulator with seeded random inputs (outputs
// poisoned by the emulator) and compares with the CPU reference executor within
// kernel_tolerance (common/ir/tolerance.h, docs/precision.md). The reference runs the same
// graph in fp32 on the stored values (the IR's mixed-dtype rule: every op computes in fp32
// from its inputs' values and rounds once to its output's dtype). For fp16/bf16 math on
// f32 storage the inputs are first rounded to the math type, so the reference sees what the
// tensor cores multiply; tf32 inputs are not, the tolerance counts the operand rounding.
// Every source is also compiled with NVRTC for sm_80 and sm_90.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "emulator.h"
#include "estimator.h"
#include "estimator_testing.h"
#include "generate.h"
#include "ir/error.h"
#include "ir/tolerance.h"
#include "ir/workload.h"
#include "model_builder.h"
#include "nvrtc.h"
#include "param_space.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "attention_backward_cases.h"
#include "attention_testing.h"
#include "testing.h"

namespace dc {
namespace {

using testing::ModelBuilder;
using testing::random_tensor;
using namespace testing::attn;

Variant fp32_variant(int64_t bm, int64_t bn, int64_t threads, int64_t stages, int64_t vec) {
  Variant v;
  v.template_name = "attention_fused";
  v.params = {{"block_m", bm}, {"block_n", bn}, {"threads", threads}, {"stages", stages}, {"vec", vec}};
  return v;
}

struct Check {
  std::map<std::string, Tensor> inputs;  // f32 values by model name (else random)
  int64_t reduction_length = 0;          // the longer of the two sums: D or Sk
};

// Generates, emulates and compares one variant; returns the worst relative L2 error.
double check_variant(const Workload& w, const Variant& v, const Check& c) {
  SCOPED_TRACE(v.key());
  GeneratedKernel k;
  EXPECT_NO_THROW(k = generate_kernel(w, v));
  if (k.source.empty()) return 1;
  const DType math = math_dtype(v.precision);
  std::vector<Tensor> buffers(k.buffers.size());
  ref::TensorMap ref_inputs;
  uint32_t seed = 11;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role != BufferRole::input) continue;
    const auto pos = std::find(w.graph.inputs.begin(), w.graph.inputs.end(), b.name) - w.graph.inputs.begin();
    const std::string& model_name = w.source_inputs.at(static_cast<size_t>(pos));
    auto it = c.inputs.find(model_name);
    Tensor values = it != c.inputs.end() ? it->second : random_tensor(b.shape, seed++);
    if (b.dtype == DType::f32 && math != DType::f32) values = round_to(values, math);
    buffers[i] = to_storage(values, b.dtype);
    ref_inputs[b.name] = widen(buffers[i]);
  }
  // The reference: the same graph with every float tensor f32 (values as stored).
  const Graph ref_graph = fp32_graph(w.graph);
  std::future<std::vector<CompileResult>> compiled = std::async(std::launch::async, [&k] {
    return compile_for_archs(k.source, {"sm_80", "sm_90"}, 1);
  });
  const EmulatorResult r = emulate(k, buffers);
  for (const auto& cr : compiled.get()) EXPECT_TRUE(cr.ok) << cr.arch << ": " << cr.error;
  EXPECT_TRUE(r.ok) << r.error;
  if (!r.ok) return 1;
  const auto expected = ref::run_graph(ref_graph, ref_inputs);
  double worst = 0;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role != BufferRole::output) continue;
    const Tensor want = round_to(expected.at(b.name), b.dtype);
    const Tolerance tol = kernel_tolerance(v.precision, b.dtype, c.reduction_length);
    const ref::Comparison cmp = ref::compare_tensors(widen(buffers[i]), want, tol.rtol, tol.atol);
    EXPECT_TRUE(cmp.pass) << b.name << ": rel L2 " << cmp.rel_l2_error << " (rtol " << tol.rtol
                          << "), max abs " << cmp.max_abs_error << " " << cmp.problem;
    worst = std::max(worst, cmp.rel_l2_error);
  }
  return worst;
}

Check check_for(const AttentionSpec& a) {
  Check c;
  c.reduction_length = std::max(a.d, a.sk);
  return c;
}

const char* kPrecisions[] = {"tf32", "fp16", "bf16"};

TEST(CodegenAttentionMma, MaskWithHiddenKeysAndRaggedKeyTiles) {
  // 20 keys: not a multiple of block_n 16 or 32; the mask hides keys with -inf and -1e4.
  AttentionSpec a;
  a.mask = true;
  const Workload w = attention_workload(a);
  Check c = check_for(a);
  Tensor mask = random_tensor({1, 1, 1, 20}, 99);
  mask.mutable_data<float>()[3] = -kInf;
  mask.mutable_data<float>()[19] = -kInf;
  mask.mutable_data<float>()[7] = -10000.f;
  c.inputs["mask"] = mask;
  for (const char* p : kPrecisions)
    for (const Variant& v : {mma_variant(p, 16, 16, 16, 1), mma_variant(p, 32, 32, 16, 2),
                             mma_variant(p, 32, 16, 32, 3)})
      check_variant(w, v, c);
}

TEST(CodegenAttentionMma, BatchHeadsHeadDimsNotTileMultiples) {
  // Batch 2 x 3 heads, 33 queries and keys, D = 24 != Dv = 40 (padded to the mma K and to
  // pairs of n8 tiles), two m16 tiles per warp.
  AttentionSpec a;
  a.b = 2, a.h = 3, a.sq = 33, a.sk = 33, a.d = 24, a.dv = 40;
  const Workload w = attention_workload(a);
  for (const char* p : kPrecisions)
    for (const Variant& v : {mma_variant(p, 64, 16, 16, 2), mma_variant(p, 64, 32, 32, 3)})
      check_variant(w, v, check_for(a));
}

TEST(CodegenAttentionMma, StoredInMathTypeWithCpAsyncAndHalfOutput) {
  // f16 (bf16) Q/K/V on the fp16 (bf16) path: 16-byte cp.async copies; f16 output with a
  // Relu epilogue stored through dc_from_f32.
  for (const char* p : {"fp16", "bf16"}) {
    AttentionSpec a;
    a.h = 3, a.sq = 40, a.sk = 72, a.d = 32, a.dv = 16, a.mask = true, a.relu = true;
    a.qkv = a.out = math_dtype(p);
    const Workload w = attention_workload(a);
    const Variant v = mma_variant(p, 32, 32, 16, 3);
    const std::string src = generate_kernel(w, v).source;
    EXPECT_NE(src.find("Q cp.async, K cp.async, V cp.async"), std::string::npos);
    EXPECT_NE(src.find("dc_ldmatrix_x4_trans"), std::string::npos);
    check_variant(w, v, check_for(a));
    check_variant(w, mma_variant(p, 16, 64, 16, 2), check_for(a));
  }
}

TEST(CodegenAttentionMma, OtherStorageThroughRegisters) {
  // f16 storage on the tf32 path and bf16 storage on the fp16 path (converted while
  // staged), f32 output.
  AttentionSpec a;
  a.sq = 24, a.sk = 40, a.d = 16, a.dv = 24;
  a.qkv = DType::f16;
  check_variant(attention_workload(a), mma_variant("tf32", 32, 16, 16, 2), check_for(a));
  a.qkv = DType::bf16;
  const Workload w = attention_workload(a);
  const Variant v = mma_variant("fp16", 32, 16, 16, 2);
  EXPECT_NE(generate_kernel(w, v).source.find("V via registers"), std::string::npos);
  check_variant(w, v, check_for(a));
}

TEST(CodegenAttentionMma, KtAsInputWithEpilogue) {
  // Kt given as [B,H,D,S] (keys contiguous: staged through registers, rows fastest) + Relu.
  ModelBuilder m;
  m.input("q", {1, 2, 17, 16}).input("kt", {1, 2, 16, 24}).input("v", {1, 2, 24, 16});
  Attributes ax;
  ax.set("axis", int64_t{-1});
  m.node("MatMul", {"q", "kt"}, "s0", {1, 2, 17, 24});
  m.node("Softmax", {"s0"}, "p", {1, 2, 17, 24}, ax);
  m.node("MatMul", {"p", "v"}, "o", {1, 2, 17, 16}).node("Relu", {"o"}, "r", {1, 2, 17, 16});
  const Workload w = m.workload(ClusterKind::attention);
  Check c;
  c.reduction_length = 24;
  for (const char* p : kPrecisions) check_variant(w, mma_variant(p, 32, 16, 16, 2), c);
}

TEST(CodegenAttentionMma, BertLayoutTransposesAbsorbed) {
  // Q/K/V read as strided views of [B,S,H,D] (16-byte cp.async where the storage is the
  // math type: head dim contiguous, row stride H*D), the output stored as [B,S,H,D]: the
  // transposes around attention cost no kernel. Also split over keys (the combine launch
  // stores through the same permuted epilogue).
  const int64_t b = 2, h = 3, s = 40, d = 16;
  for (const char* p : kPrecisions) {
    const DType t = math_dtype(p);
    const Workload w = bert_layout_workload(b, h, s, d, t);
    ASSERT_EQ(w.graph.outputs.size(), 1u);
    EXPECT_EQ(w.graph.info(w.graph.outputs[0]).shape, (Shape{b, s, h, d}));
    const Variant v = mma_variant(p, 32, 16, 16, 3);
    const std::string src = generate_kernel(w, v).source;
    EXPECT_NE(src.find("Q cp.async, K cp.async, V cp.async"), std::string::npos) << src;
    Check c;
    c.reduction_length = s;
    check_variant(w, v, c);
    check_variant(w, mma_variant(p, 16, 16, 16, 2, 3), c);
  }
}

TEST(CodegenAttentionMma, SplitKvWithCombineAndEpilogue) {
  // 70 keys in tiles of 16 (5 tiles) over 2, 3 (uneven) and 5 slices; mask with -inf and
  // a Relu epilogue in the combine launch.
  AttentionSpec a;
  a.sq = 20, a.sk = 70, a.d = 16, a.dv = 24, a.mask = true, a.relu = true;
  const Workload w = attention_workload(a);
  Check c = check_for(a);
  Tensor mask = random_tensor({1, 1, 1, 70}, 5);
  for (int i : {0, 33, 69}) mask.mutable_data<float>()[i] = -kInf;
  c.inputs["mask"] = mask;
  for (const char* p : kPrecisions)
    for (int64_t split : {2, 3, 5}) {
      const Variant v = mma_variant(p, 16, 16, 16, 2, split);
      const GeneratedKernel k = generate_kernel(w, v);
      ASSERT_EQ(k.launches.size(), 2u);
      EXPECT_EQ(k.launches[0].grid[2], split);
      check_variant(w, v, c);
    }
}

TEST(CodegenAttentionMma, TrainingForwardWritesTheLogSumExp) {
  // A training step's dc.Attention on tf32 tensor cores writes O and each row's log-sum-exp
  // (the backward's input), also from the split-KV combine launch; the causal case has a row
  // masked entirely by -inf (its LSE is -inf). Variants spread over the A100 space, plus
  // every split_kv it offers.
  const GpuSpec gpu = testing::spec_a100();
  for (const auto& c : testing::attention_backward_cases()) {
    SCOPED_TRACE(c.name);
    const Workload w = testing::attention_forward_workload(c);
    const Workload grad = testing::attention_backward_workload(c);
    const std::vector<Tensor> gin = testing::attention_backward_inputs(grad, c, 2026);
    Check check;
    check.reduction_length = std::max(c.d, c.sk);
    check.inputs = {{"q", gin[0]}, {"kt", gin[1]}, {"v", gin[2]}};
    if (!c.mask.empty()) check.inputs["mask"] = gin[6];
    const auto space = enumerate_variants(w, gpu, SpaceOptions{{"tf32"}});
    ASSERT_FALSE(space.empty());
    std::vector<Variant> chosen;
    for (size_t i = 0; i < 3; ++i) chosen.push_back(space[i * space.size() / 3]);
    for (const auto& v : space)
      if (v.params.at("split_kv") > 1 && chosen.size() < 5) chosen.push_back(v);
    for (const auto& v : chosen) {
      EXPECT_EQ(v.precision, "tf32");
      check_variant(w, v, check);
    }
  }
}

TEST(CodegenAttentionMma, CudaCoresOnHalfStorage) {
  // The fp32 template reading f16/bf16 Q/K/V (dc_to_f32) and storing a half output.
  for (DType t : {DType::f16, DType::bf16}) {
    AttentionSpec a;
    a.sq = 20, a.sk = 33, a.d = 12, a.dv = 20, a.mask = true;
    a.qkv = a.out = t;
    const Workload w = attention_workload(a);
    for (const Variant& v : {fp32_variant(16, 16, 64, 2, 1), fp32_variant(32, 32, 128, 1, 4)})
      check_variant(w, v, check_for(a));
  }
}

TEST(CodegenAttentionMma, RefusesBadParameters) {
  const Workload w = attention_workload(AttentionSpec{});
  EXPECT_THROW(generate_kernel(w, mma_variant("fp16", 32, 24, 16, 2)), InternalError);  // block_n
  EXPECT_THROW(generate_kernel(w, mma_variant("fp16", 48, 16, 32, 2)), InternalError);  // warp_m
  EXPECT_THROW(generate_kernel(w, mma_variant("fp8", 32, 16, 16, 2)), InternalError);
}

// The shared layouts of docs/codegen.md, replayed: rows padded by 16 bytes, head dims
// padded to the mma K (16; tf32 8) and, for fp16/bf16, V's to 16. Every ldmatrix phase (8
// lanes, one 16-byte row each) must touch 8 distinct 16-byte bank groups; every tf32
// fragment read (32 lanes, one word each) 32 distinct banks.
TEST(CodegenAttentionMma, SharedLayoutsAreConflictFree) {
  auto distinct = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) == v.end();
  };
  for (int64_t d = 8; d <= 256; d += 8) {
    SCOPED_TRACE(fmt::format("head dim {}", d));
    // fp16/bf16: pitch in bytes; ldmatrix x4 lane l supplies row (l & 7) of its matrix, the
    // column offsets are the same within a phase, so only the rows' pitch matters.
    const int64_t pitch16 = ((d + 15) / 16 * 16 + 8) * 2;
    std::vector<int64_t> groups;
    for (int64_t r = 0; r < 8; ++r) groups.push_back((r * pitch16 / 16) % 8);
    EXPECT_TRUE(distinct(groups)) << "ldmatrix rows, pitch " << pitch16;
    // tf32: Q and K read (row g, column t), V reads (row 2t and 2t + 1, column g); pitch in
    // words.
    const int64_t pitch32 = (d + 7) / 8 * 8 + 4;
    std::vector<int64_t> qk, v0, v1;
    for (int64_t lane = 0; lane < 32; ++lane) {
      const int64_t g = lane >> 2, t = lane & 3;
      qk.push_back((g * pitch32 + t) % 32);
      v0.push_back((2 * t * pitch32 + g) % 32);
      v1.push_back(((2 * t + 1) * pitch32 + g) % 32);
    }
    EXPECT_TRUE(distinct(qk) && distinct(v0) && distinct(v1)) << "tf32 pitch " << pitch32;
  }
  // The pad is what does it: without it, D = 64 conflicts on both paths.
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < 8; ++r) rows.push_back((r * 128 / 16) % 8);
  EXPECT_FALSE(distinct(rows));
}

// ---- parameter space and estimator ---------------------------------------------------------

// BERT-base self-attention: batch b, 12 heads, 128 tokens, head dim 64.
Workload bert_attention(int64_t batch, DType t) {
  AttentionSpec a;
  a.b = batch, a.h = 12, a.sq = 128, a.sk = 128, a.d = 64, a.dv = 64, a.mask = true;
  a.qkv = a.out = t;
  return attention_workload(a);
}

const Variant& best(const std::vector<Variant>& vs, const WorkloadShape& s, const GpuSpec& g) {
  size_t bi = 0;
  double bt = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vs.size(); ++i) {
    const double t = estimate(s, vs[i], g).seconds;
    if (t < bt) bt = t, bi = i;
  }
  return vs.at(bi);
}

TEST(AttentionMmaSpace, SplitKvOnlyWhereSmsIdle) {
  const GpuSpec h100 = testing::spec_h100();
  for (int64_t batch : {1, 8}) {
    const auto s = analyze_workload(bert_attention(batch, DType::f16));
    const auto vs = enumerate_variants(s, h100, SpaceOptions{{"fp16"}});
    ASSERT_FALSE(vs.empty());
    bool split = false;
    for (const auto& v : vs) {
      EXPECT_EQ(v.precision, "fp16");
      split = split || v.param("split_kv") > 1;
      // Every split keeps its blocks below the SM count that made it worth trying.
      if (v.param("split_kv") > 1) {
        EXPECT_LT(v.grid_blocks / v.param("split_kv") * 2, h100.sm_count) << v.key();
      }
    }
    EXPECT_EQ(split, batch == 1) << "batch " << batch;
    // The space's resources are the kernel's: dynamic shared memory and blocks.
    const Workload w = bert_attention(batch, DType::f16);
    for (size_t i = 0; i < vs.size(); i += 7) {
      const GeneratedKernel k = generate_kernel(w, vs[i]);
      const Launch& l = k.launches.at(0);
      EXPECT_EQ(l.dynamic_smem_bytes, vs[i].smem_bytes) << vs[i].key();
      EXPECT_EQ(l.grid[0] * l.grid[1] * l.grid[2], vs[i].grid_blocks) << vs[i].key();
      EXPECT_EQ(l.block[0], vs[i].threads_per_block) << vs[i].key();
    }
  }
  // No tensor-core variant before sm_80.
  EXPECT_TRUE(enumerate_variants(analyze_workload(bert_attention(1, DType::f16)),
                                 testing::spec_t4(), SpaceOptions{{"fp16"}})
                  .empty());
}

TEST(AttentionMmaSpace, EstimatorPrefersTensorCores) {
  const GpuSpec h100 = testing::spec_h100();
  for (const char* p : {"fp16", "bf16", "tf32"}) {
    const auto s = analyze_workload(bert_attention(8, p == std::string("tf32") ? DType::f32 : math_dtype(p)));
    const auto vs = enumerate_variants(s, h100, SpaceOptions{{"fp32", p}});
    EXPECT_EQ(best(vs, s, h100).precision, p);
  }
}

TEST(AttentionMmaSpace, BertFirstChoiceCompilesWithoutSpills) {
  // The estimator's first choice per path compiles for sm_80/86/89/90 without spills and
  // within the register estimate's launch bound.
  const GpuSpec h100 = testing::spec_h100();
  for (const char* p : kPrecisions) {
    const Workload w = bert_attention(8, p == std::string("tf32") ? DType::f32 : math_dtype(p));
    const auto s = analyze_workload(w);
    const Variant v = best(enumerate_variants(s, h100, SpaceOptions{{p}}), s, h100);
    SCOPED_TRACE(v.key());
    const GeneratedKernel k = generate_kernel(w, v);
    for (const auto& r : compile_for_archs(k.source, {"sm_80", "sm_86", "sm_89", "sm_90"}, 1)) {
      ASSERT_TRUE(r.ok) << r.arch << ": " << r.error;
      ASSERT_EQ(r.kernels.size(), k.launches.size());
      for (const auto& kr : r.kernels) {
        EXPECT_EQ(kr.spill_stores_bytes, 0) << r.arch << " " << kr.kernel;
        EXPECT_EQ(kr.spill_loads_bytes, 0) << r.arch << " " << kr.kernel;
      }
    }
  }
}

// Not a check: prints the space sizes per path for docs/estimator.md's table.
TEST(AttentionMmaSpace, DISABLED_SpaceSizes) {
  const auto s = analyze_workload(bert_attention(1, DType::f32));
  for (const GpuSpec& g : {testing::spec_t4(), testing::spec_a100(), testing::spec_h100()})
    for (const char* p : {"fp32", "tf32", "fp16", "bf16"})
      std::printf("size %s %s %zu\n", g.name.c_str(), p,
                  enumerate_variants(s, g, SpaceOptions{{p}}).size());
}

// Not a check: prints the ptxas figures of BERT-base's first choices (batch 1 and 8, per
// path, ranked for the A100 and the H100) on sm_80/86/89/90 (docs/bench/compile-all.md).
TEST(AttentionMmaSpace, DISABLED_BertFirstChoiceFigures) {
  for (const GpuSpec& g : {testing::spec_a100(), testing::spec_h100()})
    for (int64_t batch : {1, 8})
      for (const char* p : kPrecisions) {
        const Workload w = bert_attention(batch, p == std::string("tf32") ? DType::f32 : math_dtype(p));
        const auto s = analyze_workload(w);
        const Variant v = best(enumerate_variants(s, g, SpaceOptions{{p}}), s, g);
        const GeneratedKernel k = generate_kernel(w, v);
        for (const auto& r : compile_for_archs(k.source, {"sm_80", "sm_86", "sm_89", "sm_90"}, 2)) {
          ASSERT_TRUE(r.ok) << r.error;
          for (const auto& kr : r.kernels)
            std::printf("first %s batch %lld %s %s %s: est %d regs %d spill %d/%d smem %lld us %.1f\n",
                        g.name.c_str(), static_cast<long long>(batch), v.key().c_str(),
                        r.arch.c_str(), kr.kernel.c_str(), v.regs_per_thread, kr.registers,
                        kr.spill_stores_bytes, kr.spill_loads_bytes,
                        static_cast<long long>(v.smem_bytes), estimate(s, v, g).seconds * 1e6);
        }
      }
}

// Not a check: prints ptxas registers next to attention_mma_regs for the fit recorded in
// docs/bench/compile-all.md (--gtest_also_run_disabled_tests).
TEST(AttentionMmaSpace, DISABLED_RegisterFit) {
  for (const char* p : kPrecisions)
    for (int64_t d : {32, 64, 128})
      for (int64_t wm : {16, 32})
        for (int64_t bn : {32, 64, 128}) {
          AttentionSpec a;
          a.b = 1, a.h = 12, a.sq = 128, a.sk = 128, a.d = d, a.dv = d, a.mask = true;
          a.qkv = a.out = p == std::string("tf32") ? DType::f32 : math_dtype(p);
          const Workload w = attention_workload(a);
          const auto s = analyze_workload(w);
          const Variant v = mma_variant(p, 64, bn, wm, 2);
          const auto r = compile_cuda(generate_kernel(w, v).source, "sm_80");
          if (!r.ok || r.kernels.empty()) {
            ADD_FAILURE() << r.error;
            continue;
          }
          std::printf("regfit %s d=%lld wm=%lld bn=%lld est=%d ptxas=%d spill=%d\n", p,
                      static_cast<long long>(d), static_cast<long long>(wm),
                      static_cast<long long>(bn), attention_mma_regs(s, p, wm, bn, 64 / wm * 32),
                      r.kernels[0].registers, r.kernels[0].spill_stores_bytes);
        }
}

}  // namespace
}  // namespace dc
