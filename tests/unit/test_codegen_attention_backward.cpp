// "attention_backward" (codegen/template_attention_backward.cpp), FlashAttention-2's backward
// of dc.AttentionGrad, on the host emulator against the CPU reference executor: fresh seeded
// inputs (O and LSE from the forward), outputs poisoned by the emulator, the error model's
// bound (variant_tolerance); edge shapes (attention_backward_cases.h). Also its parameter
// space, keys and prices, and the workloads of a training step that reach it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "attention_backward_cases.h"
#include "attention_testing.h"
#include "candidates.h"
#include "estimator.h"
#include "estimator_testing.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "nvrtc.h"
#include "op_case_harness.h"
#include "param_space.h"
#include "random_inputs.h"
#include "ref/executor.h"
#include "training_testing.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

// Which variants besides the spread ones: one of each thread tile, or one of each block tiling
// (block_m, block_n, threads), its thread tile rotating through those the tiling has.
enum class Also { nothing, every_thread_tile, every_block_tiling };

// The reference kernel, up to `max` variants spread over the space and those `also` names,
// each against the CPU reference of the workload on `device`. Returns the number of kernels
// compared.
int expect_kernels_match(const testing::CaseDevice& device, const testing::AttentionBackwardCase& c, size_t max,
                         const GpuSpec* space_of = nullptr, Also also = Also::nothing) {
  const Workload w = testing::attention_backward_workload(c);
  const std::vector<Tensor> in = testing::attention_backward_inputs(w, c, 2026);
  ref::TensorMap in_map;
  for (size_t i = 0; i < in.size(); ++i) in_map[w.graph.inputs[i]] = in[i];
  const ref::TensorMap want = ref::run_graph(w.graph, in_map);
  const Tolerance tol = variant_tolerance("fp32", w);
  const auto all = enumerate_variants(w, space_of ? *space_of : device.spec, SpaceOptions{{"fp32"}});
  EXPECT_FALSE(all.empty()) << c.name << ": no attention_backward variant on " << device.name;
  std::vector<GeneratedKernel> kernels = {generate_reference(w)};
  for (size_t i = 0; i < max && i < all.size(); ++i) {
    const Variant& v = all[i * all.size() / std::min(max, all.size())];
    EXPECT_EQ(v.template_name, kAttentionBackwardTemplate);
    kernels.push_back(generate_kernel(w, v));
  }
  if (also == Also::every_thread_tile) {
    // One variant of each thread tile (the first): every register-blocked cell layout meets
    // the edges (rows and columns past the sequences and head dimensions).
    std::set<std::pair<int64_t, int64_t>> tiles;
    for (const auto& v : all)
      if (tiles.insert({v.param("thread_m"), v.param("thread_n")}).second) kernels.push_back(generate_kernel(w, v));
    EXPECT_EQ(tiles.size(), 9u) << c.name << ": thread tiles 1, 2, 4 x 1, 2, 4";
  }
  if (also == Also::every_block_tiling) {
    std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<const Variant*>> by_block;
    for (const auto& v : all) by_block[{v.param("block_m"), v.param("block_n"), v.threads_per_block}].push_back(&v);
    size_t turn = 0;
    for (const auto& [block, variants] : by_block) kernels.push_back(generate_kernel(w, *variants[turn++ % variants.size()]));
  }
  int compared = 0;
  for (const auto& k : kernels) {
    SCOPED_TRACE(std::string(c.name) + " " + k.template_name + " " + k.variant_key);
    std::string error;
    const std::vector<char> binary = device.compile(k, &error);
    EXPECT_EQ(error, "");
    if (!error.empty()) continue;
    EXPECT_EQ(testing::run_and_compare_outputs(device.run, w, k, binary, in, want, false, tol), "");
    ++compared;
  }
  return compared;
}

TEST(CodegenAttentionBackward, EdgeShapesMatchTheReferenceOnTheEmulator) {
  int compared = 0;
  for (const auto& c : testing::attention_backward_cases())
    compared += expect_kernels_match(testing::emulator_device(), c, 4, nullptr, Also::every_thread_tile);
  EXPECT_EQ(compared, 3 * (1 + 4 + 9));
}

TEST(CodegenAttentionBackward, EveryVariantOfOneShapeOnTheEmulator) {
  // Every block tiling of the A100's and of PoCL's CPU device's spaces (more threads than a
  // tile has elements, one query tile, tiles past the sequence's end), the thread tiles
  // rotating over them (each thread tile meets every edge in the test above).
  const auto c = testing::attention_backward_cases()[0];
  for (const char* gpu : {"a100", "pocl-cpu"}) {
    SCOPED_TRACE(gpu);
    const GpuSpec spec = GpuCatalog::builtin().require(gpu);
    EXPECT_GE(expect_kernels_match(testing::emulator_device(), c, 0, &spec, Also::every_block_tiling), 10);
  }
}

TEST(CodegenAttentionBackward, HalfStorageOnTheEmulator) {
  // A mixed-precision step's dc.AttentionGrad: Q, Kt, V, O, dO, the mask and the gradients
  // stored as f16 or bf16 (LSE f32), read as float, fp32 math, gradients rounded once to
  // their dtype: against the reference on the same stored values.
  const testing::CaseDevice device = testing::emulator_device();
  for (DType storage : {DType::f16, DType::bf16})
    for (const auto& c : testing::attention_backward_cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(storage)));
      const auto [w, in, want] = testing::attention_backward_run(c, storage, 2026);
      EXPECT_EQ(want.at(w.graph.outputs[0]).dtype(), storage);
      const auto space = enumerate_variants(w, device.spec, SpaceOptions{{"fp16", "bf16", "fp32"}});
      ASSERT_FALSE(space.empty());
      for (size_t i : {size_t{0}, space.size() / 2, space.size() - 1}) {
        const GeneratedKernel k = generate_kernel(w, space[i]);
        EXPECT_EQ(k.template_name, kAttentionBackwardTemplate);
        std::string error;
        const std::vector<char> binary = device.compile(k, &error);
        ASSERT_EQ(error, "");
        EXPECT_EQ(testing::run_and_compare_outputs(device.run, w, k, binary, in, want, false,
                                                   variant_tolerance(space[i].precision, w)),
                  "")
            << space[i].key();
      }
    }
}

// The tensor-core path (template_attention_backward_mma.cpp): the tilings of each edge case
// for tf32, fp16 and bf16, on f32 storage and (fp16, bf16) on the mixed-precision step's own
// storage, against the CPU reference on the same stored values, within variant_tolerance of
// the precision (docs/precision.md: the math type's unit roundoff over the longest sum,
// max(Sq, Sk) + max(D, Dv)). One lane's fragment element in the wrong place moves whole
// products, far beyond it.
TEST(CodegenAttentionBackward, TensorCoresMatchTheReferenceOnTheEmulator) {
  // Every tiling of the first case, every fourth of the others (1, 2 and 4 warps in either
  // launch).
  const int compared = testing::expect_attention_backward_paths_match(
      testing::emulator_device(),
      {{"tf32", DType::f32}, {"fp16", DType::f32}, {"bf16", DType::f32}, {"fp16", DType::f16}, {"bf16", DType::bf16}},
      2027, [](const Variant& v, const GeneratedKernel& k) {
        ASSERT_EQ(k.launches.size(), 2u);
        EXPECT_EQ(k.launches[0].block[0], v.param("block_n") / 16 * 32) << "a warp per 16 keys";
        EXPECT_EQ(k.launches[1].block[0], v.param("block_m") / 16 * 32) << "a warp per 16 queries";
      });
  EXPECT_EQ(compared, 5 * (9 + 2 + 3)) << "5 paths x the tilings of the three cases";
}

TEST(CodegenAttentionBackward, TensorCoreSpaceKeys) {
  const auto c = testing::attention_backward_cases()[0];
  const Workload w = testing::attention_backward_workload(c);
  const GpuSpec gpu = testing::spec_a100();
  for (const char* precision : {"tf32", "fp16", "bf16"}) {
    SCOPED_TRACE(precision);
    const auto space = enumerate_variants(w, gpu, SpaceOptions{{precision}});
    ASSERT_EQ(space.size(), 9u) << "block_m, block_n of 16, 32, 64";
    for (const auto& v : space) {
      EXPECT_EQ(v.params.size(), 2u) << v.key() << ": block_m and block_n only";
      std::string why;
      const auto back = Variant::from_key(v.key(), w, gpu, &why);
      ASSERT_TRUE(back.has_value()) << v.key() << ": " << why;
      EXPECT_EQ(back->key(), v.key());
      const Estimate e = estimate(w, v, gpu);
      EXPECT_TRUE(std::isfinite(e.seconds) && e.seconds > 0) << v.key();
      // A key of the other path's parameters is refused, as is the path on sm_75.
      Variant cuda = v;
      cuda.params["thread_m"] = 1;
      cuda.params["thread_n"] = 1;
      EXPECT_FALSE(Variant::from_key(cuda.key(), w, gpu, &why).has_value()) << cuda.key();
      EXPECT_NE(why.find("thread_m"), std::string::npos) << why;
      EXPECT_FALSE(Variant::from_key(v.key(), w, testing::spec_t4(), &why).has_value());
      EXPECT_NE(why.find("sm_75"), std::string::npos) << why;
    }
    EXPECT_TRUE(enumerate_variants(w, testing::spec_t4(), SpaceOptions{{precision}}).empty());
  }
  // An fp32 key without its thread tile is refused.
  const auto fp32 = enumerate_variants(w, gpu, SpaceOptions{{"fp32"}});
  ASSERT_FALSE(fp32.empty());
  Variant old = fp32.front();
  old.params.erase("thread_m");
  std::string why;
  EXPECT_FALSE(Variant::from_key(old.key(), w, gpu, &why).has_value());
  EXPECT_NE(why.find("missing parameter 'thread_m'"), std::string::npos) << why;
}

TEST(CodegenAttentionBackward, SpaceKeysAndPrices) {
  const auto c = testing::attention_backward_cases()[0];
  const Workload w = testing::attention_backward_workload(c);
  const WorkloadShape s = analyze_workload(w);
  EXPECT_EQ(s.family, Family::attention);
  EXPECT_TRUE(s.attention_backward);
  EXPECT_EQ(s.m, 37);
  EXPECT_EQ(s.n, 37);
  EXPECT_EQ(s.k, 16);
  EXPECT_EQ(s.batch, 6);
  EXPECT_EQ(w.flops, 2 * 6 * 37 * 37 * (3 * 16 + 2 * 16));
  const GpuSpec gpu = testing::spec_a100();
  const auto space = enumerate_variants(w, gpu, SpaceOptions{{"fp32"}});
  ASSERT_GE(space.size(), 10u);
  for (const auto& v : space) {
    std::string why;
    const auto back = Variant::from_key(v.key(), w, gpu, &why);
    ASSERT_TRUE(back.has_value()) << v.key() << ": " << why;
    EXPECT_EQ(back->key(), v.key());
    const Estimate e = estimate(w, v, gpu);
    EXPECT_TRUE(std::isfinite(e.seconds) && e.seconds > 0) << v.key();
  }
}

TEST(CodegenAttentionBackward, BlockedTilesPriceLowerAtBertBase) {
  // BERT-base's dc.AttentionGrad (batch 32, 12 heads, sequence 128, head 64, a key mask):
  // register blocking cuts the shared loads per multiply-add from 2 to 1 (2 x 2) or 0.5 (4 x 4),
  // so the best estimate is a blocked tile and each blocked tile beats 1 x 1 on the same blocks.
  const testing::AttentionBackwardCase c{"bert_base", {32, 12}, 128, 128, 64, 64, {32, 1, 1, 128}, 0.125f};
  const Workload w = testing::attention_backward_workload(c);
  const GpuSpec gpu = testing::spec_a100();
  const auto space = enumerate_variants(w, gpu, SpaceOptions{{"fp32"}});
  ASSERT_FALSE(space.empty());
  const Variant* best = nullptr;
  double best_s = 0;
  std::map<std::string, double> by_key;
  for (const auto& v : space) {
    const double sec = estimate(w, v, gpu).seconds;
    by_key[v.key()] = sec;
    if (!best || sec < best_s) best = &v, best_s = sec;
  }
  EXPECT_GT(best->param("thread_m") * best->param("thread_n"), 1) << best->key();
  int compared = 0;
  for (const auto& v : space) {
    if (v.param("thread_m") * v.param("thread_n") == 1) continue;
    Variant one = v;
    one.params["thread_m"] = 1;
    one.params["thread_n"] = 1;
    const auto it = by_key.find(one.key());
    if (it == by_key.end()) continue;
    EXPECT_LT(by_key.at(v.key()), it->second) << v.key() << " against " << one.key();
    ++compared;
  }
  EXPECT_GE(compared, 5);
}

TEST(CodegenAttentionBackward, TensorCoresPriceLowerAtBertBase) {
  // BERT-base's dc.AttentionGrad on the h100: the best tensor-core variant (tf32 on f32
  // storage, bf16 on AMP's bf16) is estimated over 3x faster than the best fp32 CUDA-core one
  // (3.6x, 4.4x; pricing its products at the CUDA cores' FMA rate instead gives 2.1x), and no
  // estimate is below the seven products' tensor-core floor.
  const testing::AttentionBackwardCase c{"bert_base", {32, 12}, 128, 128, 64, 64, {32, 1, 1, 128}, 0.125f};
  const GpuSpec gpu = testing::spec_h100();
  for (const auto& [precision, storage] :
       std::vector<std::pair<const char*, DType>>{{"tf32", DType::f32}, {"bf16", DType::bf16}}) {
    SCOPED_TRACE(precision);
    const Workload w = testing::attention_backward_workload(c, storage);
    const auto best = [&](const char* p) {
      double b = std::numeric_limits<double>::infinity();
      for (const auto& v : enumerate_variants(w, gpu, SpaceOptions{{p}})) b = std::min(b, estimate(w, v, gpu).seconds);
      return b;
    };
    const double tc = best(precision), cuda = best("fp32");
    EXPECT_LT(tc, cuda / 3) << "tensor cores " << tc * 1e6 << " us, CUDA cores " << cuda * 1e6 << " us";
    const double rate = std::string(precision) == "tf32" ? gpu.tc_tf32_flops_per_sm_clk : gpu.tc_bf16_flops_per_sm_clk;
    const double products = 2.0 * 32 * 12 * 128 * 128 * 64 * 7;  // S twice, dP twice, dV, dK, dQ
    EXPECT_GT(tc, products / (rate * gpu.sm_count * gpu.clock_hz()));
  }
}

TEST(CodegenAttentionBackward, TensorCoreVariantsOfBertBaseCompileForTheGpu) {
  // NVRTC (the GPU's compiler) accepts what the host emulator ran, for sm_80 and sm_90:
  // BERT-base's dc.AttentionGrad, each precision's first choice on the h100 and the largest
  // tiling, without spills and within 10 registers of the space's estimate (the fit above
  // it: param_space_attention.cpp). All 27 tilings, printed: DC_ALL_TILINGS=1.
  const testing::AttentionBackwardCase c{"bert_base", {32, 12}, 128, 128, 64, 64, {32, 1, 1, 128}, 0.125f};
  const GpuSpec h100 = testing::spec_h100();
  const bool all = std::getenv("DC_ALL_TILINGS") != nullptr;
  for (const auto& [precision, storage] : std::vector<std::pair<const char*, DType>>{
           {"tf32", DType::f32}, {"fp16", DType::f16}, {"bf16", DType::bf16}}) {
    const Workload w = testing::attention_backward_workload(c, storage);
    const auto space = enumerate_variants(w, h100, SpaceOptions{{precision}});
    ASSERT_EQ(space.size(), 9u);
    std::vector<Variant> chosen = {space.back()};  // block_m = block_n = 64
    for (const auto& v : space)
      if (estimate(w, v, h100).seconds < estimate(w, chosen.front(), h100).seconds) chosen.front() = v;
    chosen.push_back(space.back());
    if (all) chosen = space;
    for (const auto& v : chosen) {
      SCOPED_TRACE(v.key());
      const GeneratedKernel k = generate_kernel(w, v);
      for (const auto& r : compile_for_archs(k.source, {"sm_80", "sm_90"}, 2)) {
        ASSERT_TRUE(r.ok) << r.arch << ": " << r.error;
        ASSERT_EQ(r.kernels.size(), 2u);
        for (const auto& kr : r.kernels) {
          EXPECT_EQ(kr.spill_stores_bytes + kr.spill_loads_bytes, 0) << r.arch << " " << kr.kernel;
          EXPECT_LE(kr.registers, v.regs_per_thread + 10) << r.arch << " " << kr.kernel;
          if (all)
            std::printf("nvrtc %s %s %s: %d registers (estimated %d)\n", v.key().c_str(), r.arch.c_str(),
                        kr.kernel.c_str(), kr.registers, v.regs_per_thread);
        }
      }
    }
  }
}

TEST(CodegenAttentionBackward, TrainingStepWorkloadsReachTheTemplate) {
  const Graph g = testing::training_step("tiny_transformer", OptimizerKind::adamw);
  const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
  int backward = 0, forward = 0;
  for (const auto& w : set.workloads) {
    if (w.graph.nodes.size() != 1) continue;
    if (w.graph.nodes[0].op == "dc.AttentionGrad") {
      ++backward;
      EXPECT_TRUE(analyze_workload(w).attention_backward);
      const auto space = enumerate_variants(w, testing::spec_a100(), SpaceOptions{{"fp32"}});
      ASSERT_FALSE(space.empty());
      EXPECT_EQ(space.front().template_name, kAttentionBackwardTemplate);
    }
    if (w.graph.nodes[0].op == "dc.Attention") {  // the fused forward, writing the LSE too
      ++forward;
      const auto space = enumerate_variants(w, testing::spec_a100(), SpaceOptions{{"fp32", "tf32"}});
      ASSERT_FALSE(space.empty());
      std::map<std::string, const Variant*> by_precision;  // CUDA cores and tf32 tensor cores
      for (const auto& v : space) {
        EXPECT_EQ(v.template_name, "attention_fused");
        if (!by_precision.count(v.precision)) by_precision[v.precision] = &v;
      }
      ASSERT_EQ(by_precision.size(), 2u);
      const testing::CaseDevice device = testing::emulator_device();
      const std::vector<Tensor> in = random_workload_inputs(w, 31);
      ref::TensorMap in_map;
      for (size_t i = 0; i < in.size(); ++i) in_map[w.graph.inputs[i]] = in[i];
      ASSERT_EQ(w.graph.outputs.size(), 2u) << "O and LSE";
      for (const auto& [precision, v] : by_precision) {
        std::string error;
        const GeneratedKernel k = generate_kernel(w, *v);
        EXPECT_EQ(testing::run_and_compare_outputs(device.run, w, k, device.compile(k, &error), in,
                                                   ref::run_graph(w.graph, in_map), false,
                                                   variant_tolerance(precision, w)),
                  "")
            << v->key();
      }
    }
  }
  EXPECT_EQ(backward, 1) << "one workload per shape";
  EXPECT_EQ(forward, 1);
}

}  // namespace
}  // namespace dc
