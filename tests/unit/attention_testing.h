// Attention workloads and storage-type helpers shared by the tensor-core attention tests on
// the host emulator (tests/unit/test_codegen_attention_mma.cpp) and on a GPU
// (tests/gpu/test_gpu_attention_mma.cpp).
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ir/workload.h"
#include "model_builder.h"
#include "testing.h"
#include "variant.h"

namespace dc::testing::attn {

const float kInf = std::numeric_limits<float>::infinity();

// f32 values stored as `t` (rounded to nearest even).
inline Tensor to_storage(const Tensor& f, DType t) {
  if (t == DType::f32) return f;
  Tensor out(t, f.shape());
  auto* dst = reinterpret_cast<uint16_t*>(out.raw_mutable());
  const float* src = f.data<float>();
  for (int64_t i = 0; i < f.numel(); ++i)
    dst[i] = t == DType::f16 ? float_to_half(src[i]) : float_to_bf16(src[i]);
  return out;
}

// Any float tensor as f32 values.
inline Tensor widen(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  return Tensor::from_vector<float>(t.shape(), t.to_float_vector());
}

// f32 values rounded to `t` and back.
inline Tensor round_to(const Tensor& f, DType t) { return widen(to_storage(f, t)); }

inline DType math_dtype(const std::string& precision) {
  return precision == "fp16" ? DType::f16 : precision == "bf16" ? DType::bf16 : DType::f32;
}

inline Variant mma_variant(const std::string& precision, int64_t bm, int64_t bn, int64_t wm,
                           int64_t stages, int64_t split = 1) {
  Variant v;
  v.template_name = "attention_fused";
  v.precision = precision;
  v.params = {{"block_m", bm}, {"block_n", bn}, {"warp_m", wm}, {"stages", stages}, {"split_kv", split}};
  return v;
}

// Q [B,H,Sq,D], K [B,H,Sk,D] transposed in the cluster, scale, optional mask [B,1,1,Sk],
// softmax, V [B,H,Sk,Dv]; optional Relu epilogue. Storage dtypes of q/k/v and the output.
struct AttentionSpec {
  int64_t b = 1, h = 2, sq = 20, sk = 20, d = 16, dv = 16;
  bool mask = false, relu = false;
  DType qkv = DType::f32, out = DType::f32;
};

inline Workload attention_workload(const AttentionSpec& a) {
  ModelBuilder m;
  m.input("q", {a.b, a.h, a.sq, a.d}).input("k", {a.b, a.h, a.sk, a.d}).input("v", {a.b, a.h, a.sk, a.dv});
  if (a.mask) m.input("mask", {a.b, 1, 1, a.sk});
  m.scalar("scale", 1.f / std::sqrt(static_cast<float>(a.d)));
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{0, 1, 3, 2});
  m.node("Transpose", {"k"}, "kt", {a.b, a.h, a.d, a.sk}, perm);
  m.node("MatMul", {"q", "kt"}, "s0", {a.b, a.h, a.sq, a.sk});
  m.node("Mul", {"s0", "scale"}, "s1", {a.b, a.h, a.sq, a.sk});
  std::string in = "s1";
  if (a.mask) {
    m.node("Add", {"s1", "mask"}, "s2", {a.b, a.h, a.sq, a.sk});
    in = "s2";
  }
  Attributes ax;
  ax.set("axis", int64_t{-1});
  m.node("Softmax", {in}, "p", {a.b, a.h, a.sq, a.sk}, ax);
  m.node("MatMul", {"p", "v"}, "o", {a.b, a.h, a.sq, a.dv});
  if (a.relu) m.node("Relu", {"o"}, "r", {a.b, a.h, a.sq, a.dv});
  for (const char* t : {"q", "k", "v", "kt"}) m.g.tensors[t].dtype = a.qkv;
  m.g.tensors[m.g.nodes.back().outputs[0]].dtype = a.out;
  return m.workload(ClusterKind::attention);
}

// Attention as BERT's export writes it, with every transpose absorbed into the cluster's
// index maps: Q, K, V arrive as [B,S,H,D] (the projections' output reshaped), Q and V go
// through Transpose(0,2,1,3), K through Transpose(0,2,3,1) (K^T), and the attention output
// [B,H,S,Dv] goes through Transpose(0,2,1,3) back to [B,S,H,Dv] (what the output
// projection reads after a Reshape). Scale and mask [B,1,1,S]; storage dtype of everything.
inline Workload bert_layout_workload(int64_t b, int64_t h, int64_t s, int64_t d, DType t) {
  ModelBuilder m;
  m.input("q_in", {b, s, h, d}).input("k_in", {b, s, h, d}).input("v_in", {b, s, h, d});
  m.input("mask", {b, 1, 1, s});
  m.scalar("scale", std::sqrt(static_cast<float>(d)));
  auto perm = [](std::vector<int64_t> p) {
    Attributes a;
    a.set("perm", std::move(p));
    return a;
  };
  m.node("Transpose", {"q_in"}, "q", {b, h, s, d}, perm({0, 2, 1, 3}));
  m.node("Transpose", {"k_in"}, "kt", {b, h, d, s}, perm({0, 2, 3, 1}));
  m.node("Transpose", {"v_in"}, "v", {b, h, s, d}, perm({0, 2, 1, 3}));
  m.node("MatMul", {"q", "kt"}, "s0", {b, h, s, s});
  m.node("Div", {"s0", "scale"}, "s1", {b, h, s, s});
  m.node("Add", {"s1", "mask"}, "s2", {b, h, s, s});
  Attributes ax;
  ax.set("axis", int64_t{-1});
  m.node("Softmax", {"s2"}, "p", {b, h, s, s}, ax);
  m.node("MatMul", {"p", "v"}, "o", {b, h, s, d});
  m.node("Transpose", {"o"}, "y", {b, s, h, d}, perm({0, 2, 1, 3}));
  for (const char* n : {"q_in", "k_in", "v_in", "q", "kt", "v", "o", "y"}) m.g.tensors[n].dtype = t;
  return m.workload(ClusterKind::attention);
}

// The reference graph: the same graph with every float tensor f32, to be run on the stored
// values and its outputs rounded to their dtypes (the IR's mixed-dtype rule: each op
// computes in fp32 from its inputs' values and rounds once to its output's dtype).
inline Graph fp32_graph(const Graph& g) {
  Graph out = g;
  for (auto& [name, info] : out.tensors)
    if (info.dtype == DType::f16 || info.dtype == DType::bf16) info.dtype = DType::f32;
  return out;
}

}  // namespace dc::testing::attn
