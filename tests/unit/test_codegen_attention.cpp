// The CUDA-core attention_fused template (codegen/template_attention.cpp): QK^T, scale, mask,
// online softmax and P.V in one kernel; ragged key tiles, batch x heads, K^T as an input,
// epilogues, on the host emulator against the CPU reference (codegen_testing.h's
// check_variant, which also compiles with NVRTC). The tensor-core path:
// test_codegen_attention_mma.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "attention_testing.h"
#include "codegen_testing.h"
#include "ir/error.h"

namespace dc {
namespace {

using testing::check_all;
using testing::conv_attrs;
using testing::fp32_variants;
using testing::ModelBuilder;
using testing::pick;
using testing::random_tensor;
using testing::RunOptions;

// ---- attention_fused ------------------------------------------------------------------------

Variant attn_variant(int64_t bm, int64_t bn, int64_t threads, int64_t stages, int64_t vec) {
  Variant v;
  v.template_name = "attention_fused";
  v.params = {{"block_m", bm}, {"block_n", bn}, {"threads", threads}, {"stages", stages}, {"vec", vec}};
  return v;
}

std::vector<Variant> attn_picks(const Workload& w) {
  auto all = fp32_variants(w);
  EXPECT_FALSE(all.empty());
  return pick(all, {[](const Variant& v) { return v.param("stages") == 1 && v.param("vec") == 1; },
                    [](const Variant& v) { return v.param("stages") == 2 && v.param("threads") == 128; },
                    [](const Variant& v) { return v.param("vec") == 4 && v.param("block_n") == 32; }});
}

// Q [B,H,S,D], K [B,H,S,D] transposed in the cluster, scale, mask [B,1,1,S], softmax, V.
Workload attention_workload(int64_t b, int64_t h, int64_t s, int64_t d, int64_t dv, bool mask,
                            bool div) {
  ModelBuilder m;
  m.input("q", {b, h, s, d}).input("k", {b, h, s, d}).input("v", {b, h, s, dv});
  if (mask) m.input("mask", {b, 1, 1, s});
  m.scalar("scale", div ? std::sqrt(static_cast<float>(d)) : 1.f / std::sqrt(static_cast<float>(d)));
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{0, 1, 3, 2});
  m.node("Transpose", {"k"}, "kt", {b, h, d, s}, perm);
  m.node("MatMul", {"q", "kt"}, "s0", {b, h, s, s});
  m.node(div ? "Div" : "Mul", {"s0", "scale"}, "s1", {b, h, s, s});
  std::string in = "s1";
  if (mask) {
    m.node("Add", {"s1", "mask"}, "s2", {b, h, s, s});
    in = "s2";
  }
  Attributes ax;
  ax.set("axis", int64_t{-1});
  m.node("Softmax", {in}, "p", {b, h, s, s}, ax);
  m.node("MatMul", {"p", "v"}, "o", {b, h, s, dv});
  return m.workload(ClusterKind::attention);
}

TEST(CodegenAttention, MaskScaleAndRaggedKeyTiles) {
  // 20 keys: not a multiple of block_n 16 or 32. The mask hides some keys entirely.
  const Workload w = attention_workload(1, 2, 20, 8, 8, true, true);
  RunOptions opt;
  Tensor mask = random_tensor({1, 1, 1, 20}, 99);
  for (int i : {3, 7, 19}) mask.mutable_data<float>()[i] = -10000.f;
  opt.inputs["mask"] = mask;
  auto vs = attn_picks(w);
  vs.push_back(attn_variant(16, 16, 64, 2, 1));
  vs.push_back(attn_variant(32, 16, 64, 1, 4));
  check_all(w, vs, opt);
}

TEST(CodegenAttention, BertLayoutTransposesAbsorbed) {
  // Q/K/V as strided views of [B,S,H,D] through their Transposes, the output stored through
  // Transpose(0,2,1,3) as [B,S,H,D]: one kernel, no copy before or after it.
  const Workload w = testing::attn::bert_layout_workload(2, 3, 20, 8, DType::f32);
  ASSERT_EQ(w.graph.outputs.size(), 1u);
  EXPECT_EQ(w.graph.info(w.graph.outputs[0]).shape, (Shape{2, 20, 3, 8}));
  auto vs = attn_picks(w);
  vs.push_back(attn_variant(16, 16, 64, 2, 4));
  check_all(w, vs);
}

TEST(CodegenAttention, CausalWhereMaskAndOutputTranspose) {
  // Hugging Face decoders: Where(causal, scores, min) then the padding mask, and the output
  // transposed back to [B,S,H,D] inside the kernel.
  const int64_t b = 1, h = 2, s = 19, d = 8;
  ModelBuilder m;
  m.input("q", {b, h, s, d}).input("kt", {b, h, d, s}).input("v", {b, h, s, d});
  m.input("causal", {1, 1, s, s}).input("mask", {b, 1, 1, s});
  m.g.tensors["causal"].dtype = DType::boolean;
  m.scalar("scale", std::sqrt(static_cast<float>(d))).scalar("fill", -3.4e38f);
  m.node("MatMul", {"q", "kt"}, "s0", {b, h, s, s});
  m.node("Div", {"s0", "scale"}, "s1", {b, h, s, s});
  m.node("Where", {"causal", "s1", "fill"}, "s2", {b, h, s, s});
  m.node("Add", {"s2", "mask"}, "s3", {b, h, s, s});
  Attributes ax;
  ax.set("axis", int64_t{-1});
  m.node("Softmax", {"s3"}, "p", {b, h, s, s}, ax);
  m.node("MatMul", {"p", "v"}, "o", {b, h, s, d});
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{0, 2, 1, 3});
  m.node("Transpose", {"o"}, "y", {b, s, h, d}, perm);
  const Workload w = m.workload(ClusterKind::attention);
  RunOptions opt;
  Tensor causal(DType::boolean, {1, 1, s, s});
  auto* c = reinterpret_cast<uint8_t*>(causal.raw_mutable());
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < s; ++j) c[i * s + j] = j <= i ? 1 : 0;
  opt.inputs["causal"] = causal;
  auto vs = attn_picks(w);
  vs.push_back(attn_variant(16, 16, 64, 2, 1));
  check_all(w, vs, opt);
}

TEST(CodegenAttention, BatchHeadsScaleByMulDifferentValueDim) {
  // Batch 2 x 3 heads, 33 keys, D = 12, Dv = 20, Mul scale, no mask.
  const Workload w = attention_workload(2, 3, 33, 12, 20, false, false);
  auto vs = attn_picks(w);
  vs.push_back(attn_variant(16, 32, 128, 2, 4));
  vs.push_back(attn_variant(64, 16, 256, 1, 1));
  check_all(w, vs);
}

TEST(CodegenAttention, KtAsInputWithEpilogue) {
  // Kt given as [B,H,D,S] (vector loads along the keys), then a Relu epilogue.
  ModelBuilder m;
  m.input("q", {1, 2, 17, 8}).input("kt", {1, 2, 8, 24}).input("v", {1, 2, 24, 8});
  Attributes ax;
  ax.set("axis", int64_t{-1});
  m.node("MatMul", {"q", "kt"}, "s0", {1, 2, 17, 24});
  m.node("Softmax", {"s0"}, "p", {1, 2, 17, 24}, ax);
  m.node("MatMul", {"p", "v"}, "o", {1, 2, 17, 8}).node("Relu", {"o"}, "r", {1, 2, 17, 8});
  const Workload w = m.workload(ClusterKind::attention);
  const Variant v4 = attn_variant(16, 16, 64, 2, 4);
  EXPECT_NE(generate_kernel(w, v4).source.find("float4"), std::string::npos);
  check_all(w, {v4, attn_variant(32, 32, 128, 1, 1)});
}

TEST(CodegenAttention, RefusesSoftmaxOverAnotherAxis) {
  ModelBuilder m;
  m.input("q", {2, 8, 4}).input("kt", {2, 4, 8}).input("v", {2, 8, 4});
  Attributes ax;
  ax.set("axis", int64_t{1});
  m.node("MatMul", {"q", "kt"}, "s0", {2, 8, 8});
  m.node("Softmax", {"s0"}, "p", {2, 8, 8}, ax);
  m.node("MatMul", {"p", "v"}, "o", {2, 8, 4});
  const Workload w = m.workload(ClusterKind::attention);
  EXPECT_THROW(generate_kernel(w, attn_variant(16, 16, 64, 1, 1)), InternalError);
}

}  // namespace
}  // namespace dc
