// Parameter spaces: workload figures (M/N/K, rows), limits of every emitted variant checked
// with arithmetic written out independently of codegen/param_space*.cpp, determinism,
// non-empty spaces, and the effect of the GPU's limits and features on the space.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "estimator_testing.h"
#include "generate.h"
#include "param_space.h"
#include "testing.h"
#include "variant.h"

namespace dc {
namespace {

using namespace dc::testing;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::vector<Workload> one_of_each_kind() {
  return {
      matmul_2d(1024, 768, 3072),
      matmul_2d(1, 2048, 1000),
      conv2d(1, 64, 56, 56, 64, 3, 1, 1),
      conv2d(1, 32, 112, 112, 32, 3, 1, 1, 32, ClusterKind::depthwise),
      attention(1, 12, 128, 64),
      softmax_2d(12 * 128, 128),
      add_1d(1 << 20),
      global_avg_pool(1, 2048, 7, 7),
  };
}

TEST(ParamSpace, VariantKeyIsCanonical) {
  Variant v;
  v.template_name = "gemm_tiled";
  v.precision = "tf32";
  v.params = {{"block_m", 64}, {"block_k", 16}, {"vec", 4}};
  EXPECT_EQ(v.key(), "gemm_tiled/tf32/block_k=16,block_m=64,vec=4");
  EXPECT_EQ(v.param("block_m"), 64);
  EXPECT_EQ(v.param_or("split_k", 1), 1);
}

TEST(ParamSpace, AnalyzeConvAsImplicitGemm) {
  // x 2x64x56x56, w 128x64x3x3, stride 2, pad 1: OH = (56 + 2 - 3) / 2 + 1 = 28.
  // M = 2*28*28 = 1568, N = 128, K = 64*3*3 = 576, one group.
  const auto s = analyze_workload(conv2d(2, 64, 56, 56, 128, 3, 2, 1));
  EXPECT_EQ(s.family, Family::conv);
  EXPECT_EQ(s.m, 1568);
  EXPECT_EQ(s.n, 128);
  EXPECT_EQ(s.k, 576);
  EXPECT_EQ(s.batch, 1);
  EXPECT_TRUE(s.gather_a);
  EXPECT_EQ(s.vec_align, 1);  // im2col gathers are scalar
  EXPECT_DOUBLE_EQ(s.a_bytes, 4.0 * 2 * 64 * 56 * 56);
  EXPECT_DOUBLE_EQ(s.b_bytes, 4.0 * 128 * 64 * 9);

  // 1x1 stride 1: a plain GEMM per image plane, vectorisable (56*56 and 64 divide by 4).
  const auto p = analyze_workload(conv2d(1, 64, 56, 56, 256, 1, 1, 0));
  EXPECT_FALSE(p.gather_a);
  EXPECT_EQ(p.m, 3136);
  EXPECT_EQ(p.k, 64);
  EXPECT_EQ(p.vec_align, 4);

  // Grouped (4 groups of 16 input channels): one GEMM per group.
  const auto g = analyze_workload(conv2d(1, 64, 28, 28, 128, 3, 1, 1, 4));
  EXPECT_EQ(g.family, Family::conv);
  EXPECT_EQ(g.batch, 4);
  EXPECT_EQ(g.n, 32);
  EXPECT_EQ(g.k, 16 * 9);

  // Depthwise (groups = channels): the direct template, even if the kind says conv.
  const auto d = analyze_workload(conv2d(1, 32, 112, 112, 32, 3, 2, 1, 32));
  EXPECT_EQ(d.family, Family::depthwise);
  EXPECT_EQ(d.out_h, 56);
  EXPECT_EQ(d.stride_w, 2);
}

TEST(ParamSpace, AnalyzeMatMulAndGemm) {
  // Batched activations times 2-D weights fold into M: 8*128 = 1024.
  auto w =
      make_test_workload(ClusterKind::gemm, {test_node("MatMul", {"a", "b"}, {"c"})},
                         {{"a", {8, 128, 768}}, {"b", {768, 3072}}, {"c", {8, 128, 3072}}}, 0, 0);
  auto s = analyze_workload(w);
  EXPECT_EQ(s.m, 1024);
  EXPECT_EQ(s.n, 3072);
  EXPECT_EQ(s.k, 768);
  EXPECT_EQ(s.batch, 1);
  EXPECT_EQ(s.vec_align, 4);

  // Both batched, with broadcasting over the first batch dim: batch = 2*12 = 24.
  w = make_test_workload(
      ClusterKind::gemm, {test_node("MatMul", {"a", "b"}, {"c"})},
      {{"a", {2, 12, 128, 64}}, {"b", {1, 12, 64, 130}}, {"c", {2, 12, 128, 130}}}, 0, 0);
  s = analyze_workload(w);
  EXPECT_EQ(s.batch, 24);
  EXPECT_EQ(s.m, 128);
  EXPECT_EQ(s.n, 130);
  EXPECT_EQ(s.vec_align, 2);  // 130 = 2 * 65

  // A Transpose prologue (B read through an index map): every extent must align.
  // M = 6 (2 x 3), K = N = 8: 2 instead of 4.
  w = make_test_workload(
      ClusterKind::gemm,
      {test_node("Transpose", {"bt"}, {"b"}), test_node("MatMul", {"a", "b"}, {"c"})},
      {{"a", {6, 8}}, {"bt", {8, 8}}, {"b", {8, 8}}, {"c", {6, 8}}}, 0, 0);
  EXPECT_EQ(analyze_workload(w).vec_align, 2);

  // Gemm with transB (a classifier): A [1, 2048], B [1000, 2048].
  Attributes a;
  a.set("transB", int64_t{1});
  w = make_test_workload(
      ClusterKind::gemm, {test_node("Gemm", {"x", "w", "bias"}, {"y"}, a)},
      {{"x", {1, 2048}}, {"w", {1000, 2048}}, {"bias", {1000}}, {"y", {1, 1000}}}, 0, 0);
  s = analyze_workload(w);
  EXPECT_EQ(s.m, 1);
  EXPECT_EQ(s.n, 1000);
  EXPECT_EQ(s.k, 2048);
}

TEST(ParamSpace, AnalyzeReductions) {
  auto s = analyze_workload(softmax_2d(1536, 128));
  EXPECT_EQ(s.family, Family::reduction);
  EXPECT_EQ(s.rows, 1536);
  EXPECT_EQ(s.row_len, 128);
  EXPECT_EQ(s.reductions_per_row, 2);
  EXPECT_EQ(s.stream_reads, 2);
  EXPECT_EQ(s.vec_align, 4);

  s = analyze_workload(global_avg_pool(2, 2048, 7, 7));
  EXPECT_EQ(s.rows, 4096);
  EXPECT_EQ(s.row_len, 49);
  EXPECT_EQ(s.vec_align, 1);  // 49 is odd

  // Softmax over axis 1 of [4, 10, 6]: rows of 10 strided by 6 elements.
  Attributes a;
  a.set("axis", int64_t{1});
  s = analyze_workload(make_test_workload(ClusterKind::reduction,
                                          {test_node("Softmax", {"x"}, {"y"}, a)},
                                          {{"x", {4, 10, 6}}, {"y", {4, 10, 6}}}, 0, 0));
  EXPECT_EQ(s.rows, 24);
  EXPECT_EQ(s.row_len, 10);
  EXPECT_FALSE(s.row_contiguous);

  // ReduceMean with axes as a constant input (opset 18 form) over [2, 3, 8] axes {1, 2}.
  Workload w =
      make_test_workload(ClusterKind::reduction, {test_node("ReduceMean", {"x", "axes"}, {"y"})},
                         {{"x", {2, 3, 8}}, {"y", {2, 1, 1}}}, 0, 0);
  w.graph.tensors["axes"] = {DType::i64, {2}};
  w.graph.initializers["axes"] = Tensor::from_vector<int64_t>({2}, {-1, 1});
  s = analyze_workload(w);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.row_len, 24);
  EXPECT_TRUE(s.row_contiguous);
}

// Every limit of every emitted variant, recomputed here.
void expect_within_limits(const Variant& v, const GpuSpec& g, const WorkloadShape& s) {
  SCOPED_TRACE(v.key());
  const int64_t t = v.threads_per_block;
  ASSERT_GE(t, 1);
  EXPECT_LE(t, g.max_threads_per_block);
  EXPECT_LE(t, g.max_threads_per_sm);
  EXPECT_EQ(t % 32, 0);
  EXPECT_LE(v.smem_bytes, g.smem_per_block_bytes);
  EXPECT_LE(v.smem_bytes + (g.cc_major >= 8 ? 1024 : 0), g.smem_per_sm_bytes);
  EXPECT_LE(v.regs_per_thread, g.regs_per_thread);
  EXPECT_LE(int64_t{v.regs_per_thread} * t, g.regs_per_sm);
  // Register file in units of 8 registers per thread: the block's warps must fit.
  const int64_t warps_by_regs = g.regs_per_sm / (cdiv(v.regs_per_thread, 8) * 8 * 32);
  EXPECT_GE(warps_by_regs, t / 32);
  EXPECT_GE(v.grid_blocks, 1);
  if (v.param_or("stages", 1) >= 3) {
    EXPECT_GE(g.cc_major, 8);
  }
  EXPECT_LE(v.param_or("vec", 1), s.vec_align);

  if (v.template_name == "gemm_tiled" || v.template_name == "conv_implicit_gemm") {
    const int64_t bm = v.param("block_m"), bn = v.param("block_n"), bk = v.param("block_k");
    const int64_t st = v.param("stages"), split = v.param("split_k");
    EXPECT_EQ(v.grid_blocks, cdiv(s.m, bm) * cdiv(s.n, bn) * s.batch * split);
    EXPECT_GE(cdiv(s.k, split), 64) << "each split covers at least 64 of K";
    // A split is only tried while half as many splits left SMs idle.
    if (split > 1) {
      EXPECT_LT(cdiv(s.m, bm) * cdiv(s.n, bn) * s.batch * (split / 2), g.sm_count);
    }
    if (v.precision == "fp32") {
      const int64_t tm = v.param("thread_m"), tn = v.param("thread_n");
      EXPECT_EQ(t, (bm / tm) * (bn / tn));
      // A k-major [bk][bm + 4] and B [bk][bn + 4] floats per stage.
      EXPECT_EQ(v.smem_bytes, st * (bk * (bm + 4) + bk * (bn + 4)) * 4);
      // Every operand of these workloads is a workload input whose contiguous extent
      // divides by the variant's vec (or vec is 1): (bm + bn) bk / t elements in loads of vec.
      const double e = static_cast<double>((bm + bn) * bk) / static_cast<double>(t);
      const double vec = static_cast<double>(v.param("vec"));
      EXPECT_EQ(v.regs_per_thread, gemm_fp32_regs(tm, tn, {e, e / vec, 0}, st, t));
      EXPECT_EQ(v.param("warp_m") * v.param("warp_n"), 32 * tm * tn);
    } else {
      const int64_t wm = v.param("warp_m"), wn = v.param("warp_n");
      EXPECT_EQ(t, 32 * (bm / wm) * (bn / wn));
      const int64_t e = v.precision == "tf32" ? 4 : 2;
      // Rows of k ([tile][bk + pad]) or rows of m/n ([bk][tile + pad]), padded 16 bytes
      // (32 for tf32 rows of m/n).
      auto stage = [&](bool along_rows, int64_t tile) {
        const int64_t pad = (e == 4 && along_rows ? 32 : 16) / e;
        return along_rows ? bk * (tile + pad) : tile * (bk + pad);
      };
      EXPECT_EQ(v.smem_bytes,
                st * e * (stage(s.a_layout.along_rows, bm) + stage(s.b_layout.along_rows, bn)));
    }
  } else if (v.template_name == "row_reduce") {
    EXPECT_EQ(t, v.param("threads_per_row") * v.param("rows_per_block"));
    EXPECT_EQ(v.grid_blocks, cdiv(s.rows, v.param("rows_per_block")));
  } else if (v.template_name == "elementwise" || v.template_name == "pool_window") {
    EXPECT_EQ(v.grid_blocks,
              cdiv(s.elements, v.param("threads") * v.param("elems_per_thread") * v.param("vec")));
  } else if (v.template_name == "depthwise_direct") {
    EXPECT_EQ(t, v.param("tile_h") * v.param("tile_w") * v.param("block_c") /
                     v.param("pixels_per_thread"));
  } else if (v.template_name == "attention_fused") {
    EXPECT_EQ(v.grid_blocks, cdiv(s.m, v.param("block_m")) * s.batch * v.param_or("split_kv", 1));
  }
}

TEST(ParamSpace, EveryVariantWithinLimits) {
  for (const GpuSpec& g : {spec_t4(), spec_a100(), spec_h100()}) {
    for (const Workload& w : one_of_each_kind()) {
      const auto s = analyze_workload(w);
      const auto vs = enumerate_variants(w, g);
      SCOPED_TRACE(g.name + " " + cluster_kind_name(w.kind));
      ASSERT_FALSE(vs.empty());
      for (const auto& v : vs) {
        expect_within_limits(v, g, s);
        EXPECT_TRUE(fits_gpu(v, g));
      }
    }
  }
}

TEST(ParamSpace, DeterministicAndDistinct) {
  const GpuSpec g = spec_a100();
  for (const Workload& w : one_of_each_kind()) {
    const auto a = enumerate_variants(w, g), b = enumerate_variants(w, g);
    ASSERT_EQ(a.size(), b.size());
    std::set<std::string> keys;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].key(), b[i].key());
      EXPECT_EQ(a[i].grid_blocks, b[i].grid_blocks);
      keys.insert(a[i].key());
    }
    EXPECT_EQ(keys.size(), a.size()) << "duplicate variants for " << cluster_kind_name(w.kind);
  }
}

// Counts per kind stay realistic: up to a few thousand per workload, and more than a
// handful even for GlobalAveragePool's 49-element rows (8: 32 or 64 threads per row x 1, 2,
// 4 or 8 rows per block; scalar loads, nothing to cache for a one-pass reduction).
TEST(ParamSpace, SpaceSizesRealistic) {
  for (const GpuSpec& g : {spec_t4(), spec_a100(), spec_h100()}) {
    for (const Workload& w : one_of_each_kind()) {
      const size_t n = enumerate_variants(w, g).size();
      SCOPED_TRACE(g.name + " " + cluster_kind_name(w.kind));
      EXPECT_GE(n, 8u);
      EXPECT_LE(n, 5000u);
    }
  }
}

TEST(ParamSpace, SmallerSharedMemoryGivesSubset) {
  GpuSpec big = spec_a100();
  GpuSpec small = big;
  small.smem_per_sm_bytes = 64 * 1024;  // T4's limits
  small.smem_per_block_bytes = 64 * 1024;
  for (const Workload& w : {matmul_2d(2048, 2048, 2048), conv2d(8, 128, 28, 28, 128, 3, 1, 1),
                            attention(1, 12, 512, 64), softmax_2d(64, 32768)}) {
    const auto a = enumerate_variants(w, big), b = enumerate_variants(w, small);
    std::set<std::string> keys;
    for (const auto& v : a) keys.insert(v.key());
    for (const auto& v : b) EXPECT_TRUE(keys.count(v.key())) << v.key();
    // 128x128x32 tiles with 3 stages need 3*32*(132+132)*4 = 101376 B: A100 only.
    EXPECT_LT(b.size(), a.size()) << cluster_kind_name(w.kind);
  }
  // T4 (sm_75: no cp.async stages, no tf32/bf16, 64 KB) is a subset of A100.
  const Workload w = matmul_2d(1024, 1024, 1024);
  const auto a = enumerate_variants(w, spec_a100()), t = enumerate_variants(w, spec_t4());
  std::set<std::string> keys;
  for (const auto& v : a) keys.insert(v.key());
  for (const auto& v : t) EXPECT_TRUE(keys.count(v.key())) << v.key();
  EXPECT_LT(t.size(), a.size());
}

TEST(ParamSpace, PrecisionPathsFollowTheGpu) {
  const Workload w = matmul_2d(1024, 1024, 1024);
  auto precisions = [&](const GpuSpec& g, const SpaceOptions& o) {
    std::set<std::string> p;
    for (const auto& v : enumerate_variants(w, g, o)) p.insert(v.precision);
    return p;
  };
  EXPECT_EQ(precisions(spec_a100(), {}), (std::set<std::string>{"bf16", "fp16", "fp32", "tf32"}));
  // T4 (sm_75) has fp16 tensor cores, but the tensor-core template needs mma.sync
  // m16n8k16 and cp.async (sm_80+): no GEMM variant on that path.
  EXPECT_EQ(precisions(spec_t4(), {}), (std::set<std::string>{"fp32"}));
  EXPECT_EQ(precisions(spec_a100(), SpaceOptions{{"fp32"}}), (std::set<std::string>{"fp32"}));
  EXPECT_EQ(precisions(spec_t4(), SpaceOptions{{"tf32"}}), (std::set<std::string>{}));
  EXPECT_THROW(enumerate_variants(w, spec_t4(), SpaceOptions{{"fp8"}}), UserError);
  // Non-GEMM templates exist in fp32 only.
  EXPECT_TRUE(enumerate_variants(add_1d(1000), spec_a100(), SpaceOptions{{"fp16"}}).empty());
}

TEST(ParamSpace, SplitKOnlyForLongK) {
  auto splits = [](const Workload& w) {
    std::set<int64_t> s;
    for (const auto& v : enumerate_variants(w, spec_a100())) s.insert(v.param("split_k"));
    return s;
  };
  // Classifier 1x2048 . 2048x1000: K = 2048 >= 4 sqrt(1000) = 126.5: split 2, 4, 8 (2048/8
  // = 256 >= 64; with 128-wide tiles, 8 tiles x 4 < 108 SMs).
  EXPECT_EQ(splits(matmul_2d(1, 2048, 1000)), (std::set<int64_t>{1, 2, 4, 8}));
  // 4096^3: K = 4096 < 4 * 4096: never.
  EXPECT_EQ(splits(matmul_2d(4096, 4096, 4096)), (std::set<int64_t>{1}));
  // M = N = 16, K = 256: 256 >= 64; splits 2 and 4 keep >= 64 per split, 8 does not.
  EXPECT_EQ(splits(matmul_2d(16, 256, 16)), (std::set<int64_t>{1, 2, 4}));
}

TEST(ParamSpace, VectorWidthFollowsAlignment) {
  // CUDA-core GEMM: the widest width dividing the contiguous extents (K and N here) for
  // which every thread loads whole vectors of both tiles.
  auto widest = [](const Workload& w, int64_t align) {
    int64_t widest_seen = 0;
    for (const auto& v : enumerate_variants(w, spec_a100(), SpaceOptions{{"fp32"}})) {
      const int64_t bm = v.param("block_m"), bn = v.param("block_n"), bk = v.param("block_k");
      const int64_t t = v.threads_per_block;
      int64_t want = align;
      while (want > 1 && ((bm * bk) % (t * want) != 0 || (bk * bn) % (t * want) != 0)) want /= 2;
      EXPECT_EQ(v.param("vec"), want) << v.key();
      widest_seen = std::max(widest_seen, v.param("vec"));
    }
    return widest_seen;
  };
  EXPECT_EQ(widest(matmul_2d(512, 512, 512), 4), 4);
  EXPECT_EQ(widest(matmul_2d(512, 510, 512), 2), 2);  // K = 510 = 2 * 255
  EXPECT_EQ(widest(matmul_2d(512, 511, 512), 1), 1);
  EXPECT_EQ(widest(conv2d(1, 64, 56, 56, 64, 3, 1, 1), 1), 1);  // im2col gathers
  EXPECT_EQ(widest(conv2d(1, 64, 56, 56, 64, 1, 1, 0), 4), 4);  // 1x1: 3136 and 64
  // Elementwise: every width up to the alignment of the inner extent.
  auto vecs = [](const Workload& w) {
    std::set<int64_t> s;
    for (const auto& v : enumerate_variants(w, spec_a100())) s.insert(v.param("vec"));
    return s;
  };
  EXPECT_EQ(vecs(add_1d(1 << 20)), (std::set<int64_t>{1, 2, 4}));
  EXPECT_EQ(vecs(add_1d(1002)), (std::set<int64_t>{1, 2}));
  EXPECT_EQ(vecs(add_1d(1001)), (std::set<int64_t>{1}));
}

TEST(ParamSpace, TilesBoundedByProblem) {
  // M = 1: no block_m above 16 (fp32) or 32 (tensor cores) computes anything but padding.
  for (const auto& v : enumerate_variants(matmul_2d(1, 2048, 1000), spec_a100()))
    EXPECT_LE(v.param("block_m"), v.precision == "fp32" ? 16 : 32) << v.key();
  // A 7x7 depthwise output: tiles up to 8x8.
  for (const auto& v : enumerate_variants(conv2d(1, 960, 7, 7, 960, 3, 1, 1, 960), spec_a100())) {
    EXPECT_LE(v.param("tile_h"), 8);
    EXPECT_LE(v.param("tile_w"), 8);
  }
}

TEST(ParamSpace, FitsGpuExplainsRejections) {
  const GpuSpec t4 = spec_t4();
  Variant v;
  v.template_name = "elementwise";
  v.threads_per_block = 256;
  v.regs_per_thread = 32;
  v.grid_blocks = 10;
  std::string why;
  EXPECT_TRUE(fits_gpu(v, t4, &why));

  Variant bad = v;
  bad.threads_per_block = 2048;
  EXPECT_FALSE(fits_gpu(bad, t4, &why));
  EXPECT_NE(why.find("threads"), std::string::npos) << why;

  bad = v;
  bad.smem_bytes = 64 * 1024 + 4;
  EXPECT_FALSE(fits_gpu(bad, t4, &why));
  EXPECT_NE(why.find("shared memory"), std::string::npos) << why;

  bad = v;
  bad.regs_per_thread = 256;
  EXPECT_FALSE(fits_gpu(bad, t4, &why));

  bad = v;
  bad.threads_per_block = 1024;
  bad.regs_per_thread = 65;  // 66560 > 65536
  EXPECT_FALSE(fits_gpu(bad, t4, &why));
  EXPECT_NE(why.find("registers"), std::string::npos) << why;

  bad = v;
  bad.precision = "tf32";
  EXPECT_FALSE(fits_gpu(bad, t4, &why));
  EXPECT_TRUE(fits_gpu(bad, spec_a100()));

  bad = v;
  bad.params["stages"] = 3;
  EXPECT_FALSE(fits_gpu(bad, t4, &why));
  EXPECT_NE(why.find("cp.async"), std::string::npos) << why;

  // Residency: 600 threads occupy 19 warps (608 thread slots): one block in T4's 1024.
  // 40 KB + the 1 KB reserved per block: 167936 / 41984 = 4 blocks on A100.
  EXPECT_EQ(blocks_per_sm(600, 0, 32, t4), 1);
  EXPECT_EQ(blocks_per_sm(128, 40 * 1024, 32, spec_a100()), 4);
  // 72 registers round to 72 (x8): 72*32 = 2304 per warp; 65536 / 2304 = 28 warps; 256
  // threads = 8 warps -> 3 blocks.
  EXPECT_EQ(blocks_per_sm(256, 0, 72, spec_a100()), 3);
  // 65 registers round up to 72 as well.
  EXPECT_EQ(blocks_per_sm(256, 0, 65, spec_a100()), 3);
}

// The occupancy calculator's rules (common/gpu/occupancy.h, include/cuda_occupancy.h): each
// case below passes a check that drops the rule it names and then fails on the GPU with
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (or runs fewer blocks per SM than estimated).
TEST(ParamSpace, LaunchLimitsFollowTheOccupancyCalculator) {
  const GpuSpec a100 = spec_a100();  // 164 KB per SM, 163 KB per block, 1 KB reserved
  Variant v;
  v.template_name = "elementwise";
  v.threads_per_block = 128;
  v.regs_per_thread = 32;
  v.grid_blocks = 10;
  std::string why;

  // Shared memory at the exact per-block limit fits (163 KB + 1 KB reserved = the SM's 164
  // KB); one byte more does not, nor does the SM's whole 164 KB.
  v.smem_bytes = a100.smem_per_block_bytes;
  EXPECT_TRUE(fits_gpu(v, a100, &why)) << why;
  EXPECT_EQ(blocks_per_sm(128, v.smem_bytes, 32, a100), 1);
  v.smem_bytes = a100.smem_per_block_bytes + 1;
  EXPECT_FALSE(fits_gpu(v, a100, &why));
  EXPECT_NE(why.find("reserved"), std::string::npos) << why;
  v.smem_bytes = a100.smem_per_sm_bytes;
  EXPECT_FALSE(fits_gpu(v, a100, &why));
  EXPECT_EQ(blocks_per_sm(128, a100.smem_per_sm_bytes, 32, a100), 0);

  // The 1 KB reserved per block: two blocks of exactly half the SM's shared memory do not
  // share it (without the reservation: 2).
  EXPECT_EQ(blocks_per_sm(128, a100.smem_per_sm_bytes / 2, 32, a100), 1);
  EXPECT_EQ(blocks_per_sm(128, a100.smem_per_sm_bytes / 2 - 1024, 32, a100), 2);
  // Not before sm_80: T4 reserves nothing, 32 KB blocks pair up in its 64 KB.
  EXPECT_EQ(blocks_per_sm(128, 32 * 1024, 32, spec_t4()), 2);

  // The 128-byte allocation unit: 54946 + 1024 = 55970 B rounds up to 56064, and
  // 167936 / 56064 = 2.99 blocks (unrounded, 167936 / 55970 = 3.0005: 3).
  EXPECT_EQ(smem_allocated_per_block(54946, a100), 56064);
  EXPECT_EQ(blocks_per_sm(128, 54946, 32, a100), 2);
  // T4: 256-byte units and no reservation.
  EXPECT_EQ(smem_allocated_per_block(1, spec_t4()), 256);

  // Registers per block: 13 warps of 152 registers each hold 4864 (152 x 32, a multiple of
  // 256) and count as 16 warps (4 sub-partitions): 77824 > 65536 registers per block, although
  // 152 x 416 = 63232 is below it.
  v.smem_bytes = 0;
  v.threads_per_block = 416;
  v.regs_per_thread = 152;
  EXPECT_FALSE(fits_gpu(v, a100, &why));
  EXPECT_NE(why.find("per block"), std::string::npos) << why;
  EXPECT_EQ(blocks_per_sm(416, 0, 152, a100), 0);
  v.regs_per_thread = 128;  // 4096 x 16 = 65536
  EXPECT_TRUE(fits_gpu(v, a100, &why)) << why;
  EXPECT_EQ(launch_bounds_regs(416), 128);
  EXPECT_EQ(max_regs_per_thread_for_block(416, a100), 128);
  EXPECT_EQ(launch_bounds_regs(1024), 64);
  EXPECT_EQ(launch_bounds_regs(384), 168);
  EXPECT_EQ(launch_bounds_regs(256), 255);

  // Warps per SM by sub-partition: 96 registers = 3072 per warp; a quarter of the register
  // file (16384) holds 5 of them, so 20 one-warp blocks (65536 / 3072 = 21 without the
  // sub-partitions).
  EXPECT_EQ(blocks_per_sm(32, 0, 96, a100), 20);
  // Per-thread counts round up to 8 (256 per warp): 65 registers take 72.
  EXPECT_EQ(regs_allocated_per_warp(65, a100), 72 * 32);
}

// Operand layouts as the GEMM template reads them: contiguous along rows (m for A, n for
// B) or along k, and plain (read by address) or not.
std::string layout_of(const GemmOperandLayout& o) {
  return std::string(o.along_rows ? "rows" : "k") + (o.plain ? " plain" : "") +
         (o.direct ? " direct" : "");
}

Workload gemm_2d(bool trans_a, bool trans_b) {
  Attributes a;
  a.set("transA", int64_t{trans_a});
  a.set("transB", int64_t{trans_b});
  return make_test_workload(ClusterKind::gemm, {test_node("Gemm", {"x", "w"}, {"y"}, a)},
                            {{"x", trans_a ? Shape{64, 32} : Shape{32, 64}},
                             {"w", trans_b ? Shape{48, 64} : Shape{64, 48}},
                             {"y", {32, 48}}},
                            0, 0);
}

// BERT's scores without the softmax: Q [12, 128, 64] . Transpose(K [12, 128, 64]), the
// Transpose swapping K's last two dims: K is read in place, stored [.., N, K].
Workload matmul_transposed_b() {
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{0, 2, 1});
  return make_test_workload(
      ClusterKind::gemm,
      {test_node("Transpose", {"k"}, {"kt"}, perm), test_node("MatMul", {"q", "kt"}, {"s"})},
      {{"q", {12, 128, 64}}, {"k", {12, 128, 64}}, {"kt", {12, 64, 128}}, {"s", {12, 128, 128}}},
      0, 0);
}

// B computed by a Transpose that moves a batch dim (K [64, 12, 128] -> [12, 64, 128]): no
// layout the template reads by address, so B goes through the prologue's index map.
Workload matmul_permuted_b() {
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{1, 0, 2});
  return make_test_workload(
      ClusterKind::gemm,
      {test_node("Transpose", {"k"}, {"kt"}, perm), test_node("MatMul", {"q", "kt"}, {"s"})},
      {{"q", {12, 128, 64}}, {"k", {64, 12, 128}}, {"kt", {12, 64, 128}}, {"s", {12, 128, 128}}},
      0, 0);
}

TEST(ParamSpace, GemmOperandLayouts) {
  auto s = analyze_workload(matmul_2d(128, 64, 256));  // A [m][k], B [k][n]
  EXPECT_EQ(layout_of(s.a_layout), "k plain direct");
  EXPECT_EQ(layout_of(s.b_layout), "rows plain direct");
  s = analyze_workload(gemm_2d(false, false));
  EXPECT_EQ(layout_of(s.a_layout), "k plain direct");
  EXPECT_EQ(layout_of(s.b_layout), "rows plain direct");
  s = analyze_workload(gemm_2d(true, true));  // A [k][m], B [n][k]
  EXPECT_EQ(layout_of(s.a_layout), "rows plain direct");
  EXPECT_EQ(layout_of(s.b_layout), "k plain direct");
  s = analyze_workload(conv2d(1, 64, 56, 56, 256, 1, 1, 0));  // x along the plane, W[oc][k]
  EXPECT_EQ(layout_of(s.a_layout), "rows plain direct");
  EXPECT_EQ(layout_of(s.b_layout), "k plain direct");
  s = analyze_workload(conv2d(1, 64, 56, 56, 64, 3, 1, 1));  // the im2col gather
  EXPECT_EQ(layout_of(s.a_layout), "rows direct");
  EXPECT_EQ(layout_of(s.b_layout), "k plain direct");
  s = analyze_workload(matmul_transposed_b());  // B read in place through its swap: along k
  EXPECT_EQ(layout_of(s.a_layout), "k plain direct");
  EXPECT_EQ(layout_of(s.b_layout), "k plain direct");
  s = analyze_workload(matmul_permuted_b());  // B computed by its Transpose prologue
  EXPECT_EQ(layout_of(s.a_layout), "k plain direct");
  EXPECT_EQ(layout_of(s.b_layout), "rows");
  EXPECT_FALSE(s.wide_index);

  // Vector widths per operand: the prologue operand loads element by element, the 3x3
  // gather too; a plain one narrows to what divides its contiguous extent and tile.
  EXPECT_EQ(gemm_operand_vec(s, true, 4, 32, 16), 4);
  EXPECT_EQ(gemm_operand_vec(s, false, 4, 32, 16), 1);
  EXPECT_EQ(gemm_operand_vec(s, true, 4, 32, 2), 2);  // k tile of 2
  const auto gather = analyze_workload(conv2d(1, 64, 56, 56, 64, 3, 1, 1));
  EXPECT_EQ(gemm_operand_vec(gather, true, 4, 64, 16), 1);
  // 1x1 conv over a 14x14 plane (196 = 4 x 49) but 2 images: m = 392, vectors of 4 stay
  // inside a plane; a 7x7 plane (49) allows none.
  EXPECT_EQ(gemm_operand_vec(analyze_workload(conv2d(2, 64, 14, 14, 64, 1, 1, 0)), true, 4, 64, 16), 4);
  EXPECT_EQ(gemm_operand_vec(analyze_workload(conv2d(4, 64, 7, 7, 64, 1, 1, 0)), true, 4, 64, 16), 1);
}

// Stages 3 is emitted only where the kernel really is a cp.async pipeline: the generator
// says so in every such kernel, and a workload with a prologue operand gets none (its
// kernel would run stages 2 under another name).
TEST(ParamSpace, Stages3OnlyWhereCpAsyncRuns) {
  const GpuSpec g = spec_a100();
  const SpaceOptions fp32{{"fp32"}};
  struct Case {
    const char* name;
    Workload w;
    bool expect_stages_3;
  };
  const std::vector<Case> cases = {
      {"matmul", matmul_2d(128, 64, 256), true},
      {"gemm transA transB", gemm_2d(true, true), true},
      {"conv 1x1", conv2d(1, 32, 14, 14, 64, 1, 1, 0), true},
      {"conv 3x3 (hoisted gather)", conv2d(1, 16, 14, 14, 32, 3, 1, 1), true},
      {"matmul, transposed B read in place", matmul_transposed_b(), true},
      {"matmul, B through a Transpose prologue", matmul_permuted_b(), false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    int stages_3 = 0, stages_2 = 0;
    for (const auto& v : enumerate_variants(c.w, g, fp32)) {
      const int64_t st = v.param("stages");
      if (st == 2) ++stages_2;
      if (st != 3) continue;
      ++stages_3;
      SCOPED_TRACE(v.key());
      const std::string src = generate_kernel(c.w, v).source;
      EXPECT_NE(src.find("cp.async pipeline"), std::string::npos);
      EXPECT_NE(src.find("stages 3,"), std::string::npos);
    }
    EXPECT_GT(stages_2, 0);
    EXPECT_EQ(stages_3 > 0, c.expect_stages_3) << stages_3 << " stages-3 variants";
  }
}

}  // namespace
}  // namespace dc
