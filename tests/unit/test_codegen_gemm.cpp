// GEMM-family templates on CUDA cores (codegen/template_gemm.cpp: gemm_tiled and
// conv_implicit_gemm): every case builds a small model graph by hand (or takes a workload of
// the tiny example models), cuts the cluster out with make_workload, generates
// representative variants of its parameter space (small and large tiles, vector loads,
// double buffering, split-K, plus hand-set variants the space would not pick for such small
// shapes) and checks each with codegen_testing.h's check_variant (host emulator against the
// CPU reference, NVRTC for sm_80). Depthwise and attention: test_codegen_depthwise.cpp,
// test_codegen_attention.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "candidates.h"
#include "codegen_testing.h"
#include "operand_sum_testing.h"
#include "swapped_matmul_testing.h"
#include "ir/error.h"
#include "onnx/import.h"
#include "passes/simplify.h"

namespace dc {
namespace {

using testing::a100;
using testing::check_all;
using testing::check_variant;
using testing::conv_attrs;
using testing::fp32_variants;
using testing::ModelBuilder;
using testing::pick;
using testing::random_tensor;
using testing::RunOptions;
using testing::kSwappedCases;
using testing::swapped_matmul;
using testing::kSwappedGemmK;
using testing::kSwappedGemmM;
using testing::kSwappedGemmN;
using testing::swapped_gemm;
using testing::swapped_gemm_cases;

int64_t area(const Variant& v) { return v.param("block_m") * v.param("block_n"); }

// GEMM-family picks: the smallest tile single-buffered, the largest double-buffered, the
// widest vector loads, a split-K variant, and the longest K tile.
std::vector<Variant> gemm_picks(const Workload& w) {
  auto all = fp32_variants(w);
  EXPECT_FALSE(all.empty());
  auto by_area = all;
  std::stable_sort(by_area.begin(), by_area.end(),
                   [](const Variant& a, const Variant& b) { return area(a) < area(b); });
  int64_t max_vec = 1;
  for (const auto& v : all) max_vec = std::max(max_vec, v.param("vec"));
  auto out = pick(by_area, {[](const Variant& v) { return v.param("stages") == 1; }});
  std::reverse(by_area.begin(), by_area.end());
  auto more = pick(by_area, {[](const Variant& v) { return v.param("stages") == 2; },
                             [](const Variant& v) { return v.param("stages") == 3; },
                             [&](const Variant& v) { return v.param("vec") == max_vec && v.param("stages") >= 2; },
                             [](const Variant& v) { return v.param("split_k") > 1; },
                             [](const Variant& v) { return v.param("block_k") == 32; }});
  for (auto& v : more)
    if (std::none_of(out.begin(), out.end(), [&](const Variant& o) { return o.key() == v.key(); }))
      out.push_back(v);
  return out;
}

// A hand-made gemm_tiled variant (for shapes the space would tile otherwise).
Variant gemm_variant(const char* templ, int64_t bm, int64_t bn, int64_t bk, int64_t tm, int64_t tn,
                     int64_t vec, int64_t stages, int64_t split) {
  Variant v;
  v.template_name = templ;
  v.params = {{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"thread_m", tm},
              {"thread_n", tn}, {"vec", vec},   {"stages", stages}, {"split_k", split}};
  return v;
}

// ---- gemm_tiled --------------------------------------------------------------------------

TEST(CodegenGemm, MatMulHandComputed) {
  // [[1,2,3],[4,5,6]] . [[1,0],[0,1],[1,1]] = [[4,5],[10,11]]; + bias [1,-20]; relu.
  ModelBuilder m;
  m.input("a", {2, 3}).weight("b", {3, 2}).weight("bias", {2});
  m.node("MatMul", {"a", "b"}, "y", {2, 2}).node("Add", {"y", "bias"}, "z", {2, 2});
  m.node("Relu", {"z"}, "r", {2, 2});
  const Workload w = m.workload(ClusterKind::gemm);
  const GeneratedKernel k = generate_kernel(w, gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 1, 2, 1));
  std::vector<Tensor> buf(k.buffers.size());
  buf[0] = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  buf[1] = Tensor::from_vector<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  buf[2] = Tensor::from_vector<float>({2}, {1, -20});
  const auto r = emulate(k, buf);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(buf[3].to_float_vector(), (std::vector<float>{5, 0, 11, 0}));
}

TEST(CodegenGemm, MatMulOddSizes) {
  // M, N, K none a multiple of any tile.
  ModelBuilder m;
  m.input("a", {37, 29}).weight("b", {29, 45});
  m.node("MatMul", {"a", "b"}, "y", {37, 45});
  const Workload w = m.workload(ClusterKind::gemm);
  auto vs = gemm_picks(w);
  vs.push_back(gemm_variant("gemm_tiled", 32, 16, 16, 4, 2, 1, 1, 1));  // 64 threads, no warp layout
  check_all(w, vs);
}

TEST(CodegenGemm, MatMulKSmallerThanBlockK) {
  ModelBuilder m;
  m.input("a", {20, 5}).weight("b", {5, 24});
  m.node("MatMul", {"a", "b"}, "y", {20, 24});
  const Workload w = m.workload(ClusterKind::gemm);
  check_all(w, {gemm_variant("gemm_tiled", 16, 16, 16, 2, 2, 1, 1, 1),
                gemm_variant("gemm_tiled", 32, 32, 32, 4, 4, 1, 2, 1),
                gemm_variant("gemm_tiled", 16, 32, 8, 2, 4, 1, 2, 2)});
}

TEST(CodegenGemm, BatchedMatMulBroadcastsBatchDims) {
  // [2,1,13,24] x [3,24,20] -> [2,3,13,20]: A broadcast over the 3, B over the 2.
  ModelBuilder m;
  m.input("a", {2, 1, 13, 24}).input("b", {3, 24, 20});
  m.node("MatMul", {"a", "b"}, "y", {2, 3, 13, 20});
  const Workload w = m.workload(ClusterKind::gemm);
  auto vs = gemm_picks(w);
  vs.push_back(gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 4, 2, 2));
  check_all(w, vs);
}

TEST(CodegenGemm, MatMulWeightsFoldBatchIntoMWithGeluEpilogue) {
  // matmul + add + gelu on [2,7,32] x [32,24]: vector loads (K and N divide by 4).
  ModelBuilder m;
  m.input("x", {2, 7, 32}).weight("w", {32, 24}).weight("bias", {24});
  m.node("MatMul", {"x", "w"}, "y", {2, 7, 24}).node("Add", {"bias", "y"}, "z", {2, 7, 24});
  m.node("Gelu", {"z"}, "g", {2, 7, 24});
  const Workload w = m.workload(ClusterKind::gemm);
  const auto vs = gemm_picks(w);
  bool saw_vec4 = false;
  for (const auto& v : vs) {
    const auto k = generate_kernel(w, v);
    if (v.param("vec") == 4) {
      saw_vec4 = true;
      // Register-staged pipelines load float4s; cp.async ones copy the 4 elements.
      EXPECT_NE(k.source.find(v.param("stages") >= 3 ? "cp.async copies of 4" : "float4"), std::string::npos)
          << v.key();
    }
  }
  EXPECT_TRUE(saw_vec4);
  check_all(w, vs);
}

TEST(CodegenGemm, MatMulOneDimensionalOperands) {
  {
    ModelBuilder m;  // [3,5,16] x [16] -> [3,5]
    m.input("a", {3, 5, 16}).weight("b", {16});
    m.node("MatMul", {"a", "b"}, "y", {3, 5});
    const Workload w = m.workload(ClusterKind::gemm);
    check_all(w, {gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 4, 2, 1)});
  }
  {
    ModelBuilder m;  // [16] x [2,16,12] -> [2,12]
    m.input("a", {16}).input("b", {2, 16, 12});
    m.node("MatMul", {"a", "b"}, "y", {2, 12});
    const Workload w = m.workload(ClusterKind::gemm);
    check_all(w, {gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 4, 1, 1)});
  }
}

TEST(CodegenGemm, GemmTransposesAlphaBetaAndBroadcastC) {
  // Y = 0.5 * A^T B^T + 2 * C with A [K=19, M=21], B [N=22, K=19], C [N] (a row broadcast).
  Attributes a;
  a.set("transA", int64_t{1});
  a.set("transB", int64_t{1});
  a.set("alpha", 0.5f);
  a.set("beta", 2.0f);
  ModelBuilder m;
  m.input("a", {19, 21}).weight("b", {22, 19}).weight("c", {22});
  m.node("Gemm", {"a", "b", "c"}, "y", {21, 22}, a);
  const Workload w = m.workload(ClusterKind::gemm);
  auto vs = gemm_picks(w);
  vs.push_back(gemm_variant("gemm_tiled", 16, 32, 8, 2, 4, 1, 2, 3));  // split-K with C: scratch
  check_all(w, vs);

  // C of [M, 1] (a column broadcast), no transposes, vector loads.
  Attributes b;
  b.set("beta", 0.25f);
  ModelBuilder m2;
  m2.input("a", {12, 16}).weight("b", {16, 8}).weight("c", {12, 1});
  m2.node("Gemm", {"a", "b", "c"}, "y", {12, 8}, b);
  const Workload w2 = m2.workload(ClusterKind::gemm);
  check_all(w2, {gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 4, 2, 1),
                 gemm_variant("gemm_tiled", 16, 16, 16, 2, 2, 4, 1, 2)});

  // A scalar C kept as a constant of the workload (inlined as a literal), transA only.
  Attributes c;
  c.set("transA", int64_t{1});
  ModelBuilder m3;
  m3.input("a", {10, 9}).weight("b", {10, 7}).scalar("c", 0.75f);
  m3.node("Gemm", {"a", "b", "c"}, "y", {9, 7}, c);
  const Workload w3 = m3.workload(ClusterKind::gemm);
  EXPECT_EQ(w3.graph.initializers.size(), 1u);
  check_all(w3, {gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 1, 1, 1)});
}

TEST(CodegenGemm, TransposePrologueAndResidualEpilogue) {
  // MatMul(Transpose(x), w) + bias + residual, x stored [K, M].
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{1, 0});
  ModelBuilder m;
  m.input("x", {24, 18}).weight("w", {24, 20}).weight("bias", {20}).input("res", {18, 20});
  m.node("Transpose", {"x"}, "xt", {18, 24}, perm);
  m.node("MatMul", {"xt", "w"}, "y", {18, 20}).node("Add", {"y", "bias"}, "z", {18, 20});
  m.node("Add", {"z", "res"}, "s", {18, 20});
  const Workload w = m.workload(ClusterKind::gemm);
  check_all(w, gemm_picks(w));
}

// stages 3: a cp.async ring of three shared stages; copies outside the matrix zero-fill.
TEST(CodegenGemm, CpAsyncPipelineOddSizesShortAndLongK) {
  for (const auto& [m, k, n] : {std::array<int64_t, 3>{37, 29, 45}, {20, 5, 24}, {64, 96, 64}}) {
    ModelBuilder b;
    b.input("a", {m, k}).weight("b", {k, n});
    b.node("MatMul", {"a", "b"}, "y", {m, n});
    const Workload w = b.workload(ClusterKind::gemm);
    const std::vector<Variant> vs = {gemm_variant("gemm_tiled", 32, 16, 8, 4, 2, 1, 3, 1),
                                     gemm_variant("gemm_tiled", 16, 32, 16, 2, 4, 4, 3, 1),
                                     gemm_variant("gemm_tiled", 32, 32, 8, 4, 4, 2, 3, 2)};
    for (const auto& v : vs) {
      const GeneratedKernel g = generate_kernel(w, v);
      EXPECT_NE(g.source.find("cp.async pipeline of 3 stages"), std::string::npos) << v.key();
      // B's rows are n: a vector of 4 (n a multiple of 4, vec 4) is one 16-byte copy.
      const bool wide = v.param("vec") == 4 && n % 4 == 0;
      EXPECT_NE(g.source.find(wide ? "dc_cp_async_f32x4(&dc_bs[" : "dc_cp_async_f32(&dc_bs["), std::string::npos)
          << v.key();
      EXPECT_EQ(g.launches[0].dynamic_smem_bytes, 3 * v.param("block_k") *
                                                      (v.param("block_m") + v.param("block_n") + 8) * 4);
    }
    check_all(w, vs);
  }
}

// An operand with a fused prologue goes through registers: stages 3 falls back to 2. (A
// Transpose swapping the last two dims is no such prologue: SwappedTransposeOperands.)
TEST(CodegenGemm, PrologueKeepsRegisterStagedPipeline) {
  ModelBuilder b;
  b.input("a", {24, 16}).input("b0", {16, 20}).input("s", {16, 20});
  b.node("Mul", {"b0", "s"}, "b", {16, 20});
  b.node("MatMul", {"a", "b"}, "y", {24, 20});
  const Workload w = b.workload(ClusterKind::gemm);
  const Variant v = gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 1, 3, 1);
  const GeneratedKernel g = generate_kernel(w, v);
  EXPECT_EQ(g.source.find("cp.async pipeline"), std::string::npos);
  EXPECT_NE(g.source.find("stages 2"), std::string::npos);
  check_all(w, {v});
}

// MatMul operands computed by a Transpose that swaps the last two dims of a cluster input,
// read from that input in place (swapped_matmul_testing.h), with vector loads along the
// stored rows where the extents allow.
TEST(CodegenGemm, SwappedTransposeOperands) {
  for (const auto& c : kSwappedCases) {
    SCOPED_TRACE(c.name);
    const Workload w = swapped_matmul(c);
    const auto k = generate_kernel(w, gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 4, 2, 1));
    const std::string body = k.source.substr(k.source.find("end of prelude"));
    // In place: the kernel loads the stored tensor by address; a 4-vector where its rows
    // (M for A, K for B) divide by 4.
    for (const auto& [label, in_place, rows] :
         {std::tuple{"a", c.in_place_a, c.a[c.a.size() - 2]}, {"b", c.swap_b, c.b[c.b.size() - 2]}}) {
      const auto& src = w.source_inputs;
      const auto pos = std::find(src.begin(), src.end(), std::string(label) + "_stored") - src.begin();
      const std::string param = fmt::format("in{}", pos);  // the kernel's name of the stored tensor
      const bool vec4 = in_place && rows % 4 == 0;
      EXPECT_EQ(body.find(fmt::format("float4*>({} +", param)) != std::string::npos, vec4) << label;
      EXPECT_EQ(body.find(param + "[dc_" + label + "_base") != std::string::npos, in_place && !vec4)
          << label;
    }
    check_all(w, gemm_picks(w));
  }
}

// Gemm operands computed by a 2-D Transpose of a cluster input (a model's W^T, an
// activation's X^T), read from that input in place with transA or transB flipped
// (swapped_matmul_testing.h): every flag pair with A, B and both transposed.
TEST(CodegenGemm, SwappedTransposeGemmOperands) {
  for (const auto& c : swapped_gemm_cases()) {
    SCOPED_TRACE(c.name());
    const Workload w = swapped_gemm(c);
    const auto k = generate_kernel(w, gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 1, 2, 1));
    const std::string body = k.source.substr(k.source.find("end of prelude"));
    // By address in the stored layout: A^T of a Gemm without transA is stored [K, M], read at
    // k * M + m; B^T without transB is stored [N, K], read at n * K + k.
    for (const auto& [label, swapped, along_m_or_n] :
         {std::tuple{"a", c.swap_a, c.trans_a == c.swap_a}, {"b", c.swap_b, c.trans_b != c.swap_b}}) {
      if (!swapped) continue;
      const auto& src = w.source_inputs;
      const auto pos = std::find(src.begin(), src.end(), std::string(label) + "_stored") - src.begin();
      const std::string address =
          std::string(label) == "a"
              ? (along_m_or_n ? fmt::format("dc_row * {} + dc_k", kSwappedGemmK) : fmt::format("dc_k * {} + dc_row", kSwappedGemmM))
              : (along_m_or_n ? fmt::format("dc_row * {} + dc_k", kSwappedGemmK) : fmt::format("dc_k * {} + dc_row", kSwappedGemmN));
      EXPECT_NE(body.find(fmt::format("in{}[{}]", pos, address)), std::string::npos) << label << "\n" << body;
    }
    check_all(w, gemm_picks(w));
  }
}

// A Linear layer's weight gradient with its bias gradient beside it: the ReduceSum of dY over
// the rows is one more row of A (or column of B) of ones, whose accumulators are stored as
// the second output. Every form, odd and aligned sizes, the ones row alone in the last block
// row (M a multiple of block_m), vector loads, cp.async, split-K through the scratch.
TEST(CodegenGemm, OperandSumIsTheBiasGradient) {
  for (const auto& c : testing::kOperandSumCases) {
    SCOPED_TRACE(c.name);
    const Workload w = testing::operand_sum_workload(c);
    ASSERT_EQ(w.graph.outputs.size(), 2u);
    auto vs = gemm_picks(w);
    vs.push_back(gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 1, 1, 1));
    vs.push_back(gemm_variant("gemm_tiled", 16, 16, 16, 2, 2, 4, 3, 1));
    vs.push_back(gemm_variant("gemm_tiled", 16, 32, 16, 2, 4, 2, 2, 3));
    check_all(w, vs);
  }
}

TEST(CodegenGemm, SplitK) {
  // A long K and a small output: the space offers split-K itself.
  ModelBuilder m;
  m.input("a", {8, 300}).weight("b", {300, 12});
  m.node("MatMul", {"a", "b"}, "y", {8, 12});
  const Workload w = m.workload(ClusterKind::gemm);
  const auto all = fp32_variants(w);
  auto vs = pick(all, {[](const Variant& v) { return v.param("split_k") == 2; },
                       [](const Variant& v) { return v.param("split_k") == 4 && v.param("stages") == 2; }});
  ASSERT_EQ(vs.size(), 2u);
  // No epilogue: partial sums go straight into the zero-initialised output, one launch.
  const auto k = generate_kernel(w, vs[0]);
  EXPECT_EQ(k.launches.size(), 1u);
  EXPECT_TRUE(k.buffers.back().zero_init);
  EXPECT_NE(k.source.find("atomicAdd"), std::string::npos);
  vs.push_back(gemm_variant("gemm_tiled", 16, 16, 32, 2, 2, 4, 2, 5));  // slices of uneven K
  check_all(w, vs);

  // With an epilogue: scratch sums, then an epilogue launch.
  ModelBuilder m2;
  m2.input("a", {8, 300}).weight("b", {300, 12}).weight("bias", {12});
  m2.node("MatMul", {"a", "b"}, "y", {8, 12}).node("Add", {"y", "bias"}, "z", {8, 12});
  m2.node("Relu", {"z"}, "r", {8, 12});
  const Workload w2 = m2.workload(ClusterKind::gemm);
  const Variant v2 = gemm_variant("gemm_tiled", 16, 16, 16, 2, 2, 4, 1, 3);
  const auto k2 = generate_kernel(w2, v2);
  ASSERT_EQ(k2.launches.size(), 2u);
  EXPECT_EQ(k2.buffers.back().role, BufferRole::scratch);
  EXPECT_TRUE(k2.buffers.back().zero_init);
  check_all(w2, {v2});
}

TEST(CodegenGemm, VectorLoadsOnlyWhereAligned) {
  // K = 29 and N = 45: no operand can use float4, whatever the variant asks.
  ModelBuilder m;
  m.input("a", {37, 29}).weight("b", {29, 45});
  m.node("MatMul", {"a", "b"}, "y", {37, 45});
  const Workload w = m.workload(ClusterKind::gemm);
  const auto k = generate_kernel(w, gemm_variant("gemm_tiled", 16, 16, 8, 2, 2, 4, 1, 1));
  const std::string body = k.source.substr(k.source.find("end of prelude"));  // the prelude has float4s
  EXPECT_EQ(body.find("float4"), std::string::npos);
  EXPECT_NE(body.find("dc_mma_tile_fp32"), std::string::npos);
}

// ---- conv_implicit_gemm -------------------------------------------------------------------

TEST(CodegenConv, Conv3x3BiasResidualRelu) {
  // Odd channel counts (5 -> 7), 9x11 image, pad 1, + bias + residual add + relu.
  ModelBuilder m;
  m.input("x", {1, 5, 9, 11}).weight("w", {7, 5, 3, 3}).weight("bias", {7}).input("res", {1, 7, 9, 11});
  m.node("Conv", {"x", "w", "bias"}, "y", {1, 7, 9, 11}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}));
  m.node("Add", {"y", "res"}, "z", {1, 7, 9, 11}).node("Relu", {"z"}, "r", {1, 7, 9, 11});
  const Workload w = m.workload(ClusterKind::conv);
  auto vs = gemm_picks(w);
  vs.push_back(gemm_variant("conv_implicit_gemm", 32, 16, 16, 2, 2, 1, 2, 2));  // split + epilogue
  check_all(w, vs);
}

// The implicit-GEMM gather (hoisted rows) as cp.async copies: padding taps zero-fill.
TEST(CodegenConv, CpAsyncGatherWithPadsStrideAndDilation) {
  ModelBuilder m;
  m.input("x", {2, 3, 13, 12}).weight("w", {6, 3, 3, 3});
  m.node("Conv", {"x", "w"}, "y", {2, 6, 5, 6}, conv_attrs({3, 3}, {2, 2}, {1, 2, 0, 1}, {2, 2}));
  const Workload w = m.workload(ClusterKind::conv);
  const std::vector<Variant> vs = {gemm_variant("conv_implicit_gemm", 32, 16, 8, 2, 2, 1, 3, 1),
                                   gemm_variant("conv_implicit_gemm", 16, 16, 16, 2, 2, 1, 3, 1)};
  for (const auto& v : vs)
    EXPECT_NE(generate_kernel(w, v).source.find("dc_cp_async_f32(&dc_as["), std::string::npos) << v.key();
  check_all(w, vs);
}

TEST(CodegenConv, StrideDilationAsymmetricPads) {
  // Stride 2, dilation 2, pads (top 1, left 2, bottom 0, right 1), batch 2.
  ModelBuilder m;
  m.input("x", {2, 3, 13, 12}).weight("w", {6, 3, 3, 3});
  // OH = (13 + 1 + 0 - 5) / 2 + 1 = 5, OW = (12 + 2 + 1 - 5) / 2 + 1 = 6.
  m.node("Conv", {"x", "w"}, "y", {2, 6, 5, 6}, conv_attrs({3, 3}, {2, 2}, {1, 2, 0, 1}, {2, 2}));
  const Workload w = m.workload(ClusterKind::conv);
  check_all(w, gemm_picks(w));
}

TEST(CodegenConv, PrologueOnInputAndIrregularThreadCounts) {
  // Conv(x * s) with s of x's shape (a prologue read through ValueEmitter, not memory),
  // then the same conv without prologue with 12 threads for a 16-row tile (rows not
  // hoistable) and 8 threads (two hoisted rows per thread).
  ModelBuilder m;
  m.input("x", {1, 3, 8, 7}).weight("s", {1, 3, 8, 7}).weight("w", {5, 3, 3, 3});
  m.node("Mul", {"x", "s"}, "xs", {1, 3, 8, 7});
  m.node("Conv", {"xs", "w"}, "y", {1, 5, 4, 4}, conv_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}));
  const Workload w = m.workload(ClusterKind::conv);
  check_all(w, {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 2, 1)});
  ModelBuilder m2;
  m2.input("x", {1, 3, 8, 7}).weight("w", {5, 3, 3, 3});
  m2.node("Conv", {"x", "w"}, "y", {1, 5, 4, 4}, conv_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}));
  const Workload w2 = m2.workload(ClusterKind::conv);
  check_all(w2, {gemm_variant("conv_implicit_gemm", 16, 6, 8, 4, 2, 1, 2, 1),
                 gemm_variant("conv_implicit_gemm", 16, 4, 8, 4, 2, 1, 1, 1)});
}

TEST(CodegenConv, PointwiseIsAPlainGemmWithVectorLoads) {
  ModelBuilder m;
  m.input("x", {2, 8, 6, 6}).weight("w", {12, 8, 1, 1}).weight("bias", {12});
  m.node("Conv", {"x", "w", "bias"}, "y", {2, 12, 6, 6}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}));
  m.node("Clip", {"y"}, "c", {2, 12, 6, 6});
  m.g.nodes.back().attrs.set("min", 0.f);
  m.g.nodes.back().attrs.set("max", 6.f);
  const Workload w = m.workload(ClusterKind::conv);
  const Variant v4 = gemm_variant("conv_implicit_gemm", 32, 16, 8, 2, 2, 4, 2, 1);
  const std::string src4 = generate_kernel(w, v4).source;
  EXPECT_NE(src4.find("float4", src4.find("end of prelude")), std::string::npos);
  // The cp.async pipeline copies A (rows = pixels, contiguous) 16 bytes at a time; the
  // weights (contiguous along k, scattered over shared rows) element by element.
  const Variant v4s3 = gemm_variant("conv_implicit_gemm", 32, 16, 8, 2, 2, 4, 3, 1);
  const std::string src4s3 = generate_kernel(w, v4s3).source;
  EXPECT_NE(src4s3.find("dc_cp_async_f32x4(&dc_as["), std::string::npos);
  EXPECT_NE(src4s3.find("dc_cp_async_f32(&dc_bs["), std::string::npos);
  auto vs = gemm_picks(w);
  vs.push_back(v4);
  vs.push_back(v4s3);
  check_all(w, vs);
}

TEST(CodegenConv, GroupedConvOneGemmPerGroup) {
  // 6 -> 4 channels in 2 groups of 3 input channels: the conv template, batch = groups.
  ModelBuilder m;
  m.input("x", {1, 6, 7, 7}).weight("w", {4, 3, 3, 3}).weight("bias", {4});
  m.node("Conv", {"x", "w", "bias"}, "y", {1, 4, 7, 7}, conv_attrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2));
  m.node("LeakyRelu", {"y"}, "l", {1, 4, 7, 7});
  const Workload w = m.workload(ClusterKind::depthwise);
  EXPECT_EQ(analyze_workload(w).family, Family::conv);
  auto vs = gemm_picks(w);
  vs.push_back(gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 1, 2));
  check_all(w, vs);

  // Grouped 1x1 (8 -> 6 channels, 2 groups): vector loads from each group's channels.
  ModelBuilder m2;
  m2.input("x", {2, 8, 4, 4}).weight("w", {6, 4, 1, 1});
  m2.node("Conv", {"x", "w"}, "y", {2, 6, 4, 4}, conv_attrs({1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 2));
  const Workload w2 = m2.workload(ClusterKind::depthwise);
  const Variant v4 = gemm_variant("conv_implicit_gemm", 16, 16, 4, 2, 2, 4, 2, 1);
  EXPECT_NE(generate_kernel(w2, v4).source.find("float4"), std::string::npos);
  check_all(w2, {v4});
}

TEST(CodegenConv, OneDimensionalAndAutoPad) {
  {
    ModelBuilder m;  // 1-D, stride 2: [2,4,19] -> [2,5,9]
    m.input("x", {2, 4, 19}).weight("w", {5, 4, 3});
    Attributes a;
    a.set("kernel_shape", std::vector<int64_t>{3});
    a.set("strides", std::vector<int64_t>{2});
    m.node("Conv", {"x", "w"}, "y", {2, 5, 9}, a);
    const Workload w = m.workload(ClusterKind::conv);
    check_all(w, {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 2, 1)});
  }
  {
    ModelBuilder m;  // SAME_UPPER, stride 2: 10x9 -> 5x5, total pads (1, 2) split (0|1, 1|1)
    m.input("x", {1, 3, 10, 9}).weight("w", {4, 3, 3, 3});
    Attributes a;
    a.set("kernel_shape", std::vector<int64_t>{3, 3});
    a.set("strides", std::vector<int64_t>{2, 2});
    a.set("auto_pad", std::string("SAME_UPPER"));
    m.node("Conv", {"x", "w"}, "y", {1, 4, 5, 5}, a);
    const Workload w = m.workload(ClusterKind::conv);
    check_all(w, {gemm_variant("conv_implicit_gemm", 16, 16, 16, 2, 2, 1, 1, 1)});
  }
}

// ---- ConvTranspose and 3-D convolutions through conv_implicit_gemm ------------------------

Attributes convt_attrs(std::vector<int64_t> strides, std::vector<int64_t> pads,
                       std::vector<int64_t> dilations, std::vector<int64_t> output_padding,
                       int64_t group = 1) {
  Attributes a;
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  a.set("output_padding", output_padding);
  a.set("group", group);
  return a;
}

TEST(CodegenConvTranspose, StridesPadsOutputPaddingBiasRelu) {
  // 6 -> 4 channels, strides 2x3, pads (1, 0 | 0, 2), output_padding (1, 2):
  // H = 2*4 + 1 + 3 - 1 = 11, W = 3*3 + 2 + 3 - 2 = 12. Each output gathers its taps.
  ModelBuilder m;
  m.input("x", {2, 6, 5, 4}).weight("w", {6, 4, 3, 3}).weight("bias", {4});
  m.node("ConvTranspose", {"x", "w", "bias"}, "y", {2, 4, 11, 12},
         convt_attrs({2, 3}, {1, 0, 0, 2}, {1, 1}, {1, 2}));
  m.node("Relu", {"y"}, "r", {2, 4, 11, 12});
  const Workload w = m.workload(ClusterKind::conv);
  EXPECT_EQ(analyze_workload(w).family, Family::conv);
  auto vs = gemm_picks(w);
  vs.push_back(gemm_variant("conv_implicit_gemm", 32, 16, 16, 2, 2, 1, 3, 1));
  check_all(w, vs);
  EXPECT_EQ(generate_kernel(w, vs.front()).source.find("atomicAdd"), std::string::npos)
      << "a gather, not a scatter";
}

TEST(CodegenConvTranspose, GroupsDilationsOneAndThreeDimensions) {
  {  // 3 groups (6 -> 6 channels), dilation 2x1, stride 1x2: H = 3 + 5 = 8, W = 8 + 2 = 10
    ModelBuilder m;
    m.input("x", {1, 6, 4, 5}).weight("w", {6, 2, 3, 2});
    m.node("ConvTranspose", {"x", "w"}, "y", {1, 6, 8, 10}, convt_attrs({1, 2}, {0, 0, 0, 0}, {2, 1}, {0, 0}, 3));
    const Workload w = m.workload(ClusterKind::conv);
    check_all(w, {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 2, 1),
                  gemm_variant("conv_implicit_gemm", 32, 8, 4, 4, 2, 1, 1, 2)});
  }
  {  // 1-D, stride 3, pads (2, 1): L = 3*6 + 4 - 3 = 19
    ModelBuilder m;
    m.input("x", {2, 3, 7}).weight("w", {3, 5, 4});
    m.node("ConvTranspose", {"x", "w"}, "y", {2, 5, 19}, convt_attrs({3}, {2, 1}, {1}, {0}));
    check_all(m.workload(ClusterKind::conv), {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 2, 1)});
  }
  {  // 3-D: D = 2*2 + 2 = 6, H = 3 + 3 - 1 = 5, W = 2*2 + 2 - 2 = 4
    ModelBuilder m;
    m.input("x", {1, 4, 3, 4, 3}).weight("w", {4, 3, 2, 3, 2});
    m.node("ConvTranspose", {"x", "w"}, "y", {1, 3, 6, 5, 4},
           convt_attrs({2, 1, 2}, {0, 1, 1, 0, 0, 1}, {1, 1, 1}, {0, 0, 0}));
    check_all(m.workload(ClusterKind::conv), {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 2, 1),
                                              gemm_variant("conv_implicit_gemm", 32, 16, 16, 2, 2, 1, 3, 2)});
  }
  {  // SAME_UPPER with stride 2: 5x5 -> 10x10
    ModelBuilder m;
    m.input("x", {1, 2, 5, 5}).weight("w", {2, 3, 3, 3});
    Attributes a;
    a.set("strides", std::vector<int64_t>{2, 2});
    a.set("auto_pad", std::string("SAME_UPPER"));
    m.node("ConvTranspose", {"x", "w"}, "y", {1, 3, 10, 10}, a);
    check_all(m.workload(ClusterKind::conv), {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 1, 1)});
  }
}

TEST(CodegenConv, ThreeDimensionalBiasAndGroups) {
  {  // D = (5 + 2 - 5) + 1 = 3, H = (6 + 1 - 2) / 2 + 1 = 3, W = (7 + 1 - 3) / 2 + 1 = 3
    ModelBuilder m;
    m.input("x", {2, 3, 5, 6, 7}).weight("w", {4, 3, 3, 2, 3}).weight("bias", {4});
    m.node("Conv", {"x", "w", "bias"}, "y", {2, 4, 3, 3, 3},
           conv_attrs({3, 2, 3}, {1, 2, 2}, {1, 0, 1, 1, 1, 0}, {2, 1, 1}));
    m.node("Sigmoid", {"y"}, "s", {2, 4, 3, 3, 3});
    const Workload w = m.workload(ClusterKind::conv);
    EXPECT_EQ(analyze_workload(w).family, Family::conv);
    check_all(w, {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 1, 1),
                  gemm_variant("conv_implicit_gemm", 32, 16, 16, 2, 2, 1, 3, 1),
                  gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 2, 2)});
  }
  {  // depthwise 3-D (groups = channels): the GEMM template, one group per batch
    ModelBuilder m;
    m.input("x", {1, 4, 4, 5, 6}).weight("w", {4, 1, 3, 3, 3});
    m.node("Conv", {"x", "w"}, "y", {1, 4, 4, 5, 6},
           conv_attrs({3, 3, 3}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, 4));
    const Workload w = m.workload(ClusterKind::depthwise);
    EXPECT_EQ(analyze_workload(w).family, Family::conv);
    check_all(w, {gemm_variant("conv_implicit_gemm", 32, 4, 8, 4, 1, 1, 2, 1)});
  }
}

TEST(CodegenConv, PadAndResizeProloguesReadThroughTheGather) {
  {  // reflect Pad (1 | 2 on H, 0 | 1 on W) -> 3x3 Conv: [1,3,7,6] -> [1,3,10,7] -> [1,5,8,5]
    ModelBuilder m;
    m.input("x", {1, 3, 7, 6}).weight("w", {5, 3, 3, 3});
    m.g.initializers["p"] = Tensor::from_vector<int64_t>({8}, {0, 0, 1, 0, 0, 0, 2, 1});
    m.g.tensors["p"] = {DType::i64, {8}};
    Attributes pa;
    pa.set("mode", std::string("reflect"));
    m.node("Pad", {"x", "p"}, "xp", {1, 3, 10, 7}, pa);
    m.node("Conv", {"xp", "w"}, "y", {1, 5, 8, 5}, conv_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}));
    check_all(m.workload(ClusterKind::conv), {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 2, 1)});
  }
  {  // bilinear 2x upsample -> ConvTranspose stride 1 (a decoder step): [1,4,3,5] -> [1,4,6,10] -> [1,2,8,12]
    ModelBuilder m;
    m.input("x", {1, 4, 3, 5}).weight("w", {4, 2, 3, 3});
    m.g.initializers["s"] = Tensor::from_vector<float>({4}, {1, 1, 2, 2});
    m.g.tensors["s"] = {DType::f32, {4}};
    Attributes ra;
    ra.set("mode", std::string("linear"));
    m.node("Resize", {"x", "", "s"}, "u", {1, 4, 6, 10}, ra);
    m.node("ConvTranspose", {"u", "w"}, "y", {1, 2, 8, 12}, convt_attrs({1, 1}, {0, 0, 0, 0}, {1, 1}, {0, 0}));
    check_all(m.workload(ClusterKind::conv), {gemm_variant("conv_implicit_gemm", 16, 16, 8, 2, 2, 1, 2, 1)});
  }
}

// ---- the tiny example models ----------------------------------------------------------------

Graph load_example(const std::string& name) {
  return simplify(import_onnx_file(std::string(DC_SOURCE_DIR) + "/examples/" + name + "/model.onnx"));
}

// The GEMM-family, depthwise and attention workloads of the model, one per distinct
// problem (template and M/N/K/batch or convolution geometry), the one with the longest fused
// chain (it covers the shorter prefixes), each with one variant: alternately the first of
// its space and the largest-tile double-buffered one.
void check_model(const std::string& name, std::set<std::string> want_templates) {
  const Graph g = load_example(name);
  const auto cands = generate_candidates(g);
  const auto ws = dedupe_workloads(g, cands);
  std::map<std::string, const Workload*> problems;
  for (const auto& w : ws.workloads) {
    if (w.kind != ClusterKind::gemm && w.kind != ClusterKind::conv &&
        w.kind != ClusterKind::depthwise && w.kind != ClusterKind::attention)
      continue;
    const WorkloadShape s = analyze_workload(w);
    const std::string key = fmt::format("{} {} {} {} {} {} {} {}", family_template_name(s.family), s.m,
                                         s.n, s.k, s.batch, s.out_h, s.out_w, s.out_channels);
    const Workload*& best = problems[key];
    if (best == nullptr || w.graph.nodes.size() > best->graph.nodes.size()) best = &w;
  }
  int checked = 0;
  for (const auto& [key, w] : problems) {
    SCOPED_TRACE(w->canonical);
    const auto all = fp32_variants(*w);
    ASSERT_FALSE(all.empty());
    const Variant* v = &all.front();
    if (checked % 2 == 1)
      for (auto it = all.rbegin(); it != all.rend(); ++it)
        if (it->param_or("stages", 0) == 2) {
          v = &*it;
          break;
        }
    want_templates.erase(v->template_name);
    check_variant(*w, *v);
    ++checked;
  }
  EXPECT_GE(checked, 3);
  EXPECT_TRUE(want_templates.empty()) << "never generated: " << *want_templates.begin();
}

TEST(CodegenModels, TinyCnn) {
  check_model("tiny_cnn", {"conv_implicit_gemm", "depthwise_direct", "gemm_tiled"});
}

TEST(CodegenModels, TinyTransformer) {
  check_model("tiny_transformer", {"gemm_tiled", "attention_fused"});
}

}  // namespace
}  // namespace dc
