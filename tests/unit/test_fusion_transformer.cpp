// Fusion of the forms today's exporters write for transformers (docs/candidates.md rules 4,
// 2-3 and the norms): each form is a small graph with its exact node sequence; the test
// asserts that it is recognised as one cluster, then runs the cluster's kernel on the host
// emulator against the CPU reference, fp32 and fp16 (storage as apply_precision leaves it,
// checked within variant_tolerance, docs/precision.md). Counter-tests: graphs that only look
// alike are not fused, with the note `plan --explain` prints.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>

#include <fmt/format.h>

#include "attention_testing.h"
#include "candidates.h"
#include "codegen_testing.h"
#include "gpu/gpu_catalog.h"
#include "ir/glu.h"
#include "ir/tolerance.h"
#include "pass_testing.h"
#include "passes/apply_precision.h"
#include "passes/fuse_gelu.h"
#include "passes/interleave_glu_weights.h"
#include "passes/simplify.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

using namespace dc::testing;

const float kInf = std::numeric_limits<float>::infinity();

enum class Scale { sqrt_on_q_and_k, mul_after, div_after };
enum class Mask { none, additive_input, bool_where, bool_to_additive, causal_constant };

struct Form {
  int64_t b = 1, sq = 12, sk = 12, heads = 4, kv_heads = 4, hd = 8;
  Scale scale = Scale::sqrt_on_q_and_k;
  Mask mask = Mask::none;
  bool rope = false, casts = false, guard = false;
};

std::vector<int64_t> v64(std::initializer_list<int64_t> v) { return v; }

// Names: nodes computing the mask are "mask_*" (outside the attention cluster); the final
// Reshape is "merge" (a plan view); everything else belongs to the cluster.
struct FormBuilder {
  Graph g;
  const Form& f;
  int n = 0;

  explicit FormBuilder(const Form& form) : f(form) { g.opset = 17; }

  std::string node(const std::string& op, std::vector<std::string> in, Attributes a = {},
                   const std::string& name = "") {
    const std::string out = fmt::format("t{}", n++);
    add_node(g, op, std::move(in), {out}, std::move(a)).name = name.empty() ? "n_" + out : name;
    return out;
  }
  std::string ints(std::vector<int64_t> v) {
    const std::string name = fmt::format("c{}", n++);
    add_initializer(g, name, Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
    return name;
  }
  std::string scalar(float v) {
    const std::string name = fmt::format("c{}", n++);
    add_initializer(g, name, Tensor::scalar<float>(v));
    return name;
  }
  std::string into_heads(const std::string& x, int64_t s, int64_t h) {
    const std::string r = node("Reshape", {x, ints({f.b, s, h, f.hd})});
    return node("Transpose", {r}, attrs({{"perm", v64({0, 2, 1, 3})}}));
  }
  std::string rope(const std::string& x, int64_t s, uint32_t seed) {
    const std::string cos_t = fmt::format("cos{}", seed), sin_t = fmt::format("sin{}", seed);
    add_initializer(g, cos_t, random_tensor({1, 1, s, f.hd}, seed));
    add_initializer(g, sin_t, random_tensor({1, 1, s, f.hd}, seed + 1));
    const int64_t half = f.hd / 2;
    const std::string x1 = node("Slice", {x, ints({0}), ints({half}), ints({-1})});
    const std::string x2 = node("Slice", {x, ints({half}), ints({f.hd}), ints({-1})});
    const std::string rot = node("Concat", {node("Neg", {x2}), x1}, attrs({{"axis", int64_t{-1}}}));
    return node("Add", {node("Mul", {x, cos_t}), node("Mul", {rot, sin_t})});
  }
  std::string repeat_kv(const std::string& x) {
    if (f.kv_heads == f.heads) return x;
    const int64_t rep = f.heads / f.kv_heads;
    const std::string u = node("Unsqueeze", {x, ints({2})});
    const std::string e = node("Expand", {u, ints({f.b, f.kv_heads, rep, f.sk, f.hd})});
    return node("Reshape", {e, ints({f.b, f.heads, f.sk, f.hd})});
  }

  Graph build() {
    add_input(g, "q_in", {f.b, f.sq, f.heads * f.hd});
    add_input(g, "k_in", {f.b, f.sk, f.kv_heads * f.hd});
    add_input(g, "v_in", {f.b, f.sk, f.kv_heads * f.hd});
    std::string q = into_heads("q_in", f.sq, f.heads);
    std::string k = into_heads("k_in", f.sk, f.kv_heads);
    const std::string v = repeat_kv(into_heads("v_in", f.sk, f.kv_heads));
    if (f.rope) {
      q = rope(q, f.sq, 30);
      k = rope(k, f.sk, 40);
    }
    k = repeat_kv(k);
    std::string kt = node("Transpose", {k}, attrs({{"perm", v64({0, 1, 3, 2})}}));
    const float scale = 1.f / std::sqrt(static_cast<float>(f.hd));
    if (f.scale == Scale::sqrt_on_q_and_k) {
      const std::string c = scalar(std::sqrt(scale));
      q = node("Mul", {q, c});
      kt = node("Mul", {kt, c});
    }
    std::string s = node("MatMul", {q, kt});
    if (f.scale == Scale::mul_after) s = node("Mul", {s, scalar(scale)});
    if (f.scale == Scale::div_after) s = node("Div", {s, scalar(1.f / scale)});
    s = masked(s);
    if (f.casts) s = node("Cast", {s}, attrs({{"to", int64_t{1}}}));
    std::string p = node("Softmax", {s}, attrs({{"axis", int64_t{-1}}}));
    if (f.guard) p = node("Where", {node("IsNaN", {p}), scalar(0.f), p});
    if (f.casts) p = node("Cast", {p}, attrs({{"to", int64_t{1}}}));
    const std::string o = node("Transpose", {node("MatMul", {p, v})}, attrs({{"perm", v64({0, 2, 1, 3})}}));
    g.outputs = {node("Reshape", {o, ints({f.b, f.sq, f.heads * f.hd})}, {}, "merge")};
    return with_types(g);
  }

  // The mask: an input (or computed from one by mask_* nodes), applied inside the cluster.
  std::string masked(const std::string& s) {
    switch (f.mask) {
      case Mask::none: return s;
      case Mask::additive_input:
        add_input(g, "mask", {f.b, 1, 1, f.sk});
        return node("Add", {s, "mask"});
      case Mask::bool_where: case Mask::bool_to_additive: {
        add_input(g, "mask_in", {f.b, 1, f.sq, f.sk});
        const std::string keep = node("Greater", {"mask_in", scalar(-0.5f)}, {}, "mask_keep");
        if (f.mask == Mask::bool_where) return node("Where", {keep, s, scalar(-kInf)});
        const std::string add = node("Where", {keep, scalar(0.f), scalar(-kInf)}, {}, "mask_additive");
        return node("Add", {s, add});
      }
      case Mask::causal_constant: {
        Tensor causal(DType::boolean, {1, 1, f.sq, f.sk});
        auto* c = reinterpret_cast<uint8_t*>(causal.raw_mutable());
        for (int64_t i = 0; i < f.sq; ++i)
          for (int64_t j = 0; j < f.sk; ++j) c[i * f.sk + j] = j <= i ? 1 : 0;
        add_initializer(g, "causal", causal);
        return node("Where", {"causal", s, scalar(std::numeric_limits<float>::lowest())});
      }
    }
    return s;
  }
};

// The largest candidate of `kind`, or nullptr.
const Candidate* largest(const std::vector<Candidate>& cands, ClusterKind kind) {
  const Candidate* best = nullptr;
  for (const auto& c : cands)
    if (c.kind == kind && (!best || c.nodes.size() > best->nodes.size())) best = &c;
  return best;
}

// Every node but the mask's and the final Reshape view is in one attention candidate.
Workload expect_one_attention_cluster(const Graph& g) {
  const auto cands = generate_candidates(g);
  const Candidate* c = largest(cands, ClusterKind::attention);
  EXPECT_NE(c, nullptr);
  if (!c) return {};
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const std::string& name = g.nodes[i].name;
    const bool outside = name.rfind("mask_", 0) == 0 || name == "merge";
    const bool in = std::find(c->nodes.begin(), c->nodes.end(), i) != c->nodes.end();
    EXPECT_EQ(in, !outside) << name << " (" << g.nodes[i].op << ") in " << c->pattern;
  }
  return make_workload(g, c->nodes, ClusterKind::attention);
}

// Generates, emulates and compares one variant within variant_tolerance; inputs of f32
// storage rounded to the math type first (what the tensor cores multiply).
void check_within_tolerance(const Workload& w, const Variant& v, const std::map<std::string, Tensor>& given = {}) {
  SCOPED_TRACE(v.key());
  GeneratedKernel k;
  ASSERT_NO_THROW(k = generate_kernel(w, v));
  const DType math = attn::math_dtype(v.precision);
  std::vector<Tensor> buffers(k.buffers.size());
  ref::TensorMap ref_inputs;
  uint32_t seed = 11;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input) {
      const auto pos = std::find(w.graph.inputs.begin(), w.graph.inputs.end(), b.name) - w.graph.inputs.begin();
      auto it = given.find(w.source_inputs.at(static_cast<size_t>(pos)));
      ASSERT_TRUE(it != given.end() || is_float(b.dtype)) << b.name << ": give its values";
      Tensor values = it != given.end() ? it->second : random_tensor(b.shape, seed++);
      if (b.dtype == DType::f32 && math != DType::f32 && values.dtype() == DType::f32)
        values = attn::round_to(values, math);
      buffers[i] = values.dtype() == DType::f32 ? attn::to_storage(values, b.dtype) : values;
      ref_inputs[b.name] = is_float(buffers[i].dtype()) ? attn::widen(buffers[i]) : buffers[i];
    } else {
      buffers[i] = Tensor(b.dtype, b.shape);
      if (b.dtype == DType::f32)
        std::fill_n(buffers[i].mutable_data<float>(), buffers[i].numel(), std::numeric_limits<float>::quiet_NaN());
    }
  }
  auto compiled = std::async(std::launch::async, [&k] { return compile_cuda(k.source, "sm_80"); });
  const EmulatorResult r = emulate(k, buffers);
  const CompileResult cr = compiled.get();
  EXPECT_TRUE(cr.ok) << cr.error;
  ASSERT_TRUE(r.ok) << r.error << "\n" << k.source;
  const auto expected = ref::run_graph(attn::fp32_graph(w.graph), ref_inputs);
  const Tolerance tol = variant_tolerance(v.precision, w);
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role != BufferRole::output) continue;
    const Tensor want = attn::round_to(expected.at(b.name), b.dtype);
    const ref::Comparison c = ref::compare_tensors(attn::widen(buffers[i]), want, tol.rtol, tol.atol);
    EXPECT_TRUE(c.pass) << b.name << ": rel L2 " << c.rel_l2_error << " (rtol " << tol.rtol << ") "
                        << c.problem;
  }
}

// Two fp32 variants of the cluster, then the fp16 plan's cluster (apply_precision) with two
// fp16 variants: the same nodes, recognised again after the storage policy.
void run_both_precisions(const Graph& g, std::map<std::string, Tensor> given = {}) {
  // Boolean masks (constant or computed outside the cluster): their values, not random ones.
  ref::TensorMap inputs;
  for (const auto& name : g.inputs)
    inputs[name] = given.count(name) ? given.at(name) : random_tensor(g.info(name).shape, 3);
  ref::RunOptions keep;
  keep.keep_intermediates = true;
  for (const auto& [name, t] : ref::run_graph(g, inputs, keep))
    if (!is_float(t.dtype()) && !given.count(name)) given[name] = t;
  for (const auto& [name, t] : g.initializers)
    if (!is_float(t.dtype()) && !given.count(name)) given[name] = t;
  const Workload w = expect_one_attention_cluster(g);
  if (w.graph.nodes.empty()) return;
  const auto fp32 = enumerate_variants(w, a100(), SpaceOptions{{"fp32"}});
  ASSERT_FALSE(fp32.empty());
  check_within_tolerance(w, fp32.front(), given);
  check_within_tolerance(w, fp32.back(), given);
  const Graph g16 = apply_precision(g, Precision::fp16);
  const Workload w16 = expect_one_attention_cluster(g16);
  if (w16.graph.nodes.empty()) return;
  const auto fp16 = enumerate_variants(w16, a100(), SpaceOptions{{"fp16"}});
  ASSERT_FALSE(fp16.empty());
  check_within_tolerance(w16, fp16.front(), given);
  check_within_tolerance(w16, fp16.back(), given);
}

TEST(FusionAttention, SdpaSqrtScaleOnQAndKWithViews) {
  run_both_precisions(FormBuilder(Form{}).build());
}

TEST(FusionAttention, MulAfterScoresWithAdditiveMaskInput) {
  Form f;
  f.scale = Scale::mul_after;
  f.mask = Mask::additive_input;
  run_both_precisions(FormBuilder(f).build());
}

TEST(FusionAttention, DivAfterScoresCausalWhereConstant) {
  Form f;
  f.scale = Scale::div_after;
  f.mask = Mask::causal_constant;
  run_both_precisions(FormBuilder(f).build());
}

TEST(FusionAttention, BoolMaskMadeAdditiveFp32SoftmaxCastsAndNanGuard) {
  // A computed boolean mask (Where(keep, 0, -inf) + Add), Softmax between fp32 Casts, and
  // the IsNaN/Where guard: row 3 is masked entirely and must come out 0, not NaN.
  Form f;
  f.mask = Mask::bool_to_additive;
  f.casts = f.guard = true;
  Tensor mask = random_tensor({1, 1, 12, 12}, 5, 0.f, 1.f);
  for (int j = 0; j < 12; ++j) mask.mutable_data<float>()[3 * 12 + j] = -1.f;
  run_both_precisions(FormBuilder(f).build(), {{"mask_in", mask}});
}

TEST(FusionAttention, BoolWhereMaskInsideTheScores) {
  Form f;
  f.mask = Mask::bool_where;
  f.scale = Scale::mul_after;
  Tensor mask = random_tensor({1, 1, 12, 12}, 6, 0.f, 1.f);
  for (int j = 0; j < 12; j += 3) mask.mutable_data<float>()[5 * 12 + j] = -1.f;
  run_both_precisions(FormBuilder(f).build(), {{"mask_in", mask}});
}

TEST(FusionAttention, GroupedQueryAttentionWithRopeAndCausalMask) {
  // LLaMA: RoPE rotate-half on Q and K, K and V repeated from 2 KV heads to 4 by
  // Unsqueeze/Expand/Reshape: all computed in the kernel's operand loads.
  Form f;
  f.kv_heads = 2;
  f.rope = true;
  f.mask = Mask::causal_constant;
  f.casts = true;
  run_both_precisions(FormBuilder(f).build());
}

TEST(FusionAttention, MultiQueryCrossAttentionWithDifferentLengths) {
  Form f;
  f.kv_heads = 1;
  f.sq = 7;
  f.sk = 20;
  f.scale = Scale::div_after;
  f.mask = Mask::additive_input;
  run_both_precisions(FormBuilder(f).build());
}

TEST(FusionAttention, SoftmaxOverTheWrongAxisIsNotFused) {
  Form f;
  FormBuilder b(f);
  Graph g = b.build();
  for (auto& n : g.nodes)
    if (n.op == "Softmax") n.attrs.set("axis", int64_t{2});
  std::vector<std::string> notes;
  const auto cands = generate_candidates(g, &notes);
  EXPECT_EQ(largest(cands, ClusterKind::attention), nullptr);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("axis 2"), std::string::npos) << notes[0];
}

TEST(FusionAttention, MaskComputedFromTheScoresIsNotFused) {
  // Where(scores > 0, scores, -inf): the mask depends on the values, so the scores have a
  // reader outside any attention cluster; the note names the MatMul.
  Graph g;
  g.opset = 17;
  add_input(g, "q", {1, 2, 8, 8});
  add_input(g, "kt", {1, 2, 8, 8});
  add_input(g, "v", {1, 2, 8, 8});
  add_initializer(g, "zero", Tensor::scalar<float>(0.f));
  add_initializer(g, "ninf", Tensor::scalar<float>(-kInf));
  add_node(g, "MatMul", {"q", "kt"}, {"s"}).name = "qk";
  add_node(g, "Greater", {"s", "zero"}, {"keep"});
  add_node(g, "Where", {"keep", "s", "ninf"}, {"m"});
  add_node(g, "Softmax", {"m"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(g, "MatMul", {"p", "v"}, {"o"});
  g.outputs = {"o"};
  g = with_types(g);
  std::vector<std::string> notes;
  const auto cands = generate_candidates(g, &notes);
  EXPECT_EQ(largest(cands, ClusterKind::attention), nullptr);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("'qk'"), std::string::npos) << notes[0];
}

// ---- RMSNorm and the SwiGLU prologue ---------------------------------------------------

TEST(FusionNorm, RmsNormIsOneReductionKernelInFp32AndFp16) {
  ModelBuilder m;
  m.input("x", {3, 5, 96}).weight("w", {96});
  Attributes a;
  a.set("epsilon", 1e-6f);
  m.node("RMSNormalization", {"x", "w"}, "y", {3, 5, 96}, a);
  const Workload w = m.workload(ClusterKind::reduction);
  for (const auto& v : pick(fp32_variants(w), {[](const Variant& v) { return v.param("cache") == 0; },
                                               [](const Variant& v) { return v.param("vec") == 4; },
                                               [](const Variant& v) { return v.param("cache") == 2; }}))
    check_within_tolerance(w, v);
  Workload w16 = w;  // f16 storage; a reduction's math is fp32 in every plan
  for (auto& [name, info] : w16.graph.tensors) info.dtype = DType::f16;
  const auto fp16 = enumerate_variants(w16, a100(), SpaceOptions{{"fp32"}});
  ASSERT_FALSE(fp16.empty());
  check_within_tolerance(w16, fp16.front());
  check_within_tolerance(w16, fp16.back());
}

TEST(FusionNorm, ResidualAddFusedIntoTheNormWritesBothOutputs) {
  // h = x + attn; y = RMSNorm(h); h is also read by the next residual Add: one reduction
  // kernel writes y and h.
  for (const char* op : {"RMSNormalization", "LayerNormalization"}) {
    SCOPED_TRACE(op);
    Graph g;
    g.opset = 17;
    add_input(g, "x", {2, 7, 64});
    add_input(g, "attn", {2, 7, 64});
    add_input(g, "mlp", {2, 7, 64});
    add_initializer(g, "w", random_tensor({64}, 4, 0.5f, 1.5f));
    add_node(g, "Add", {"x", "attn"}, {"h"});
    add_node(g, op, {"h", "w"}, {"y"}, attrs({{"epsilon", 1e-6f}}));
    add_node(g, "Add", {"h", "mlp"}, {"next"});
    g.outputs = {"y", "next"};
    g = with_types(g);
    const auto cands = generate_candidates(g);
    const Candidate* c = nullptr;
    for (const auto& cand : cands)
      if (cand.kind == ClusterKind::reduction && cand.nodes == std::vector<size_t>{0, 1}) c = &cand;
    ASSERT_NE(c, nullptr);
    const Workload w = make_workload(g, c->nodes, ClusterKind::reduction);
    ASSERT_EQ(w.graph.outputs.size(), 2u);  // the sum and the norm
    for (const auto& v : pick(fp32_variants(w), {[](const Variant& v) { return v.param("cache") == 0; },
                                                 [](const Variant& v) { return v.param("vec") == 4; }}))
      check_within_tolerance(w, v);
    const Graph g16 = apply_precision(g, Precision::fp16);
    const Workload w16 = make_workload(g16, c->nodes, ClusterKind::reduction);
    const auto fp16 = enumerate_variants(w16, a100(), SpaceOptions{{"fp32"}});  // fp32 statistics
    ASSERT_FALSE(fp16.empty());
    check_within_tolerance(w16, fp16.front());
  }
}

TEST(FusionNorm, EmbeddingLookupIsComputedInTheFirstNormsLoads) {
  // The token lookup in front of the first norm, as torch 2.x exports it: LLaMA's
  // Gather -> RMSNorm with the lookup also read by the first residual Add; GPT-2's
  // Reshape(ids) -> Gather -> Add(positions) -> LayerNorm, the sum read by the residual too;
  // BERT's Gather -> Add(positions) -> LayerNorm, read by the norm alone. One reduction
  // kernel each, writing the lookup (or sum) as a second output where others read it.
  struct Case {
    const char* name;
    bool reshape, positions, residual;
    const char* norm;
    std::vector<size_t> nodes;
  };
  for (const Case& k : {Case{"llama", false, false, true, "RMSNormalization", {0, 1}},
                        Case{"gpt2", true, true, true, "LayerNormalization", {0, 1, 2, 3}},
                        Case{"bert", false, true, false, "LayerNormalization", {0, 1, 2}}}) {
    SCOPED_TRACE(k.name);
    Graph g;
    g.opset = 20;
    add_input(g, "ids", {1, 7}, DType::i64);
    add_input(g, "mlp", {1, 7, 64});
    add_initializer(g, "emb", random_tensor({32, 64}, 3));
    add_initializer(g, "pos", random_tensor({1, 7, 64}, 5));
    add_initializer(g, "w", random_tensor({64}, 4, 0.5f, 1.5f));
    add_initializer(g, "shape", Tensor::from_vector<int64_t>({2}, {-1, 7}));
    std::string ids = "ids";
    if (k.reshape) {
      add_node(g, "Reshape", {"ids", "shape"}, {"ids2"});
      ids = "ids2";
    }
    add_node(g, "Gather", {"emb", ids}, {"e"}, attrs({{"axis", int64_t{0}}}));
    std::string h = "e";
    if (k.positions) {
      add_node(g, "Add", {"e", "pos"}, {"h"});
      h = "h";
    }
    add_node(g, k.norm, {h, "w"}, {"y"}, attrs({{"epsilon", 1e-6f}}));
    g.outputs = {"y"};
    if (k.residual) {
      add_node(g, "Add", {h, "mlp"}, {"next"});
      g.outputs.push_back("next");
    }
    // with_types would feed random floats to `ids`: the types are set here.
    g.tensors["ids2"] = TensorInfo{DType::i64, {1, 7}};
    for (const char* t : {"e", "h", "y", "next"}) g.tensors[t] = TensorInfo{DType::f32, {1, 7, 64}};
    const auto cands = generate_candidates(g);
    const Candidate* c = largest(cands, ClusterKind::reduction);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->nodes, k.nodes) << c->pattern;
    const Workload w = make_workload(g, c->nodes, ClusterKind::reduction);
    EXPECT_EQ(w.graph.outputs.size(), k.residual ? 2u : 1u);  // the norm (and its input)
    const std::map<std::string, Tensor> given = {
        {"ids", Tensor::from_vector<int64_t>({1, 7}, {3, 0, 31, 7, 7, 12, 25})}};
    for (const auto& v : pick(fp32_variants(w), {[](const Variant& v) { return v.param("cache") == 0; },
                                                 [](const Variant& v) { return v.param("vec") == 4; }}))
      check_within_tolerance(w, v, given);
    const Graph g16 = apply_precision(g, Precision::fp16);
    const auto cands16 = generate_candidates(g16);
    const Candidate* c16 = largest(cands16, ClusterKind::reduction);
    ASSERT_NE(c16, nullptr);
    EXPECT_EQ(c16->pattern, c->pattern);
    const Workload w16 = make_workload(g16, c16->nodes, ClusterKind::reduction);
    const auto fp16 = enumerate_variants(w16, a100(), SpaceOptions{{"fp32"}});  // fp32 statistics
    ASSERT_FALSE(fp16.empty());
    check_within_tolerance(w16, fp16.front(), given);
  }
}

TEST(FusionNorm, NormInputWithoutALookupGetsNoCone) {
  // A norm whose input is computed by injective ops with no Gather (a scale of an input)
  // keeps the rules it had: no cone candidate beyond the elementwise prologue.
  Graph g;
  g.opset = 20;
  add_input(g, "x", {1, 7, 64});
  add_initializer(g, "w", random_tensor({64}, 4, 0.5f, 1.5f));
  add_initializer(g, "perm_shape", Tensor::from_vector<int64_t>({3}, {1, 7, 64}));
  add_node(g, "Reshape", {"x", "perm_shape"}, {"r"});
  add_node(g, "RMSNormalization", {"r", "w"}, {"y"}, attrs({{"epsilon", 1e-6f}}));
  g.outputs = {"y"};
  g = with_types(g);
  for (const auto& c : generate_candidates(g)) EXPECT_EQ(c.nodes.size(), 1u) << c.pattern;
}

TEST(FusionNorm, SwiGluIsComputedInTheDownProjectionsLoads) {
  // gate/up merged into one GEMM (fuse_sibling_matmuls), then silu(gate) * up over its two
  // slices: the down projection reads A through them, no elementwise kernel in between.
  Graph g;
  g.opset = 17;
  add_input(g, "h", {1, 6, 32});
  add_input(g, "gu", {1, 6, 96});
  add_initializer(g, "wd", random_tensor({48, 32}, 3));
  auto slice = [&](const std::string& out, int64_t from, int64_t to) {
    const std::string s = out + "_s", e = out + "_e", ax = out + "_a";
    add_initializer(g, s, Tensor::from_vector<int64_t>({1}, {from}));
    add_initializer(g, e, Tensor::from_vector<int64_t>({1}, {to}));
    add_initializer(g, ax, Tensor::from_vector<int64_t>({1}, {-1}));
    add_node(g, "Slice", {"gu", s, e, ax}, {out});
  };
  slice("gate", 0, 48);
  slice("up", 48, 96);
  add_node(g, "Sigmoid", {"gate"}, {"sig"});
  add_node(g, "Mul", {"gate", "sig"}, {"silu"});
  add_node(g, "Mul", {"silu", "up"}, {"act"});
  add_node(g, "MatMul", {"act", "wd"}, {"down"});
  add_node(g, "Add", {"h", "down"}, {"out"});
  g.outputs = {"out"};
  g = with_types(g);
  const auto cands = generate_candidates(g);
  const Candidate* c = largest(cands, ClusterKind::gemm);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->nodes.size(), g.nodes.size()) << c->pattern;
  const Workload w = make_workload(g, c->nodes, ClusterKind::gemm);
  const auto fp32 = fp32_variants(w);
  ASSERT_FALSE(fp32.empty());
  check_within_tolerance(w, fp32.front());
  check_within_tolerance(w, fp32.back());
  const Graph g16 = apply_precision(g, Precision::fp16);
  const auto cands16 = generate_candidates(g16);
  const Candidate* c16 = largest(cands16, ClusterKind::gemm);
  ASSERT_NE(c16, nullptr);
  const Workload w16 = make_workload(g16, c16->nodes, ClusterKind::gemm);
  const auto fp16 = enumerate_variants(w16, a100(), SpaceOptions{{"fp16"}});
  ASSERT_FALSE(fp16.empty());
  check_within_tolerance(w16, fp16.front());
}

TEST(FusionGelu, Gpt2TanhGeluIsComputedInTheProjectionsLoads) {
  // GPT-2's MLP as torch 2.x's dynamo exporter writes it (Conv1D as Gemm on 2-D views):
  // Gemm(c_fc) -> Reshape -> tanh GELU spelled out -> Reshape -> Gemm(c_proj). fuse_gelu
  // makes the GELU one Gelu(approximate="tanh"); the second Gemm reads its A through the
  // Reshapes and the Gelu (the Gemm A cone), so no elementwise kernel sits between the GEMMs.
  Graph g;
  g.opset = 20;
  add_input(g, "x", {6, 32});
  add_initializer(g, "w1", random_tensor({32, 64}, 3));
  add_initializer(g, "b1", random_tensor({64}, 4));
  add_initializer(g, "w2", random_tensor({64, 32}, 5));
  add_initializer(g, "b2", random_tensor({32}, 6));
  add_initializer(g, "shape3", Tensor::from_vector<int64_t>({3}, {1, 6, 64}));
  add_initializer(g, "shape2", Tensor::from_vector<int64_t>({2}, {-1, 64}));
  for (const auto& [name, v] : std::vector<std::pair<std::string, float>>{
           {"half", 0.5f}, {"three", 3.f}, {"cubic", 0.044715f}, {"s2pi", 0.7978846f}, {"one", 1.f}})
    add_initializer(g, name, Tensor::scalar<float>(v));
  add_node(g, "Gemm", {"x", "w1", "b1"}, {"fc"});
  add_node(g, "Reshape", {"fc", "shape3"}, {"fc3"});
  add_node(g, "Mul", {"fc3", "half"}, {"h"});
  add_node(g, "Pow", {"fc3", "three"}, {"c"});
  add_node(g, "Mul", {"c", "cubic"}, {"k"});
  add_node(g, "Add", {"fc3", "k"}, {"s"});
  add_node(g, "Mul", {"s", "s2pi"}, {"b"});
  add_node(g, "Tanh", {"b"}, {"t"});
  add_node(g, "Add", {"t", "one"}, {"a"});
  add_node(g, "Mul", {"h", "a"}, {"act"});
  add_node(g, "Reshape", {"act", "shape2"}, {"act2"});
  add_node(g, "Gemm", {"act2", "w2", "b2"}, {"out"});
  g.outputs = {"out"};
  g = fuse_gelu(with_types(g));
  ASSERT_EQ(g.nodes.size(), 5u);
  ASSERT_EQ(g.nodes[2].op, "Gelu");
  EXPECT_EQ(g.nodes[2].attrs.get_string("approximate"), "tanh");
  const auto cands = generate_candidates(g);
  const Candidate* c = largest(cands, ClusterKind::gemm);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->nodes, (std::vector<size_t>{1, 2, 3, 4})) << c->pattern;
  EXPECT_EQ(c->pattern, "reshape+gelu+reshape+gemm");
  const Workload w = make_workload(g, c->nodes, ClusterKind::gemm);
  const auto fp32 = fp32_variants(w);
  ASSERT_FALSE(fp32.empty());
  check_within_tolerance(w, fp32.front());
  check_within_tolerance(w, fp32.back());
  const Graph g16 = apply_precision(g, Precision::fp16);
  const auto cands16 = generate_candidates(g16);
  const Candidate* c16 = largest(cands16, ClusterKind::gemm);
  ASSERT_NE(c16, nullptr);
  EXPECT_EQ(c16->pattern, "reshape+gelu+reshape+gemm");
  const Workload w16 = make_workload(g16, c16->nodes, ClusterKind::gemm);
  const auto fp16 = enumerate_variants(w16, a100(), SpaceOptions{{"fp16"}});
  ASSERT_FALSE(fp16.empty());
  check_within_tolerance(w16, fp16.front());
}

// ---- SwiGLU / GeGLU in the gate/up GEMM's epilogue ---------------------------------------

enum class Glu { silu, silu_reversed, gelu_erf, gelu_tanh_op, gelu_tanh_spelled, relu };

const char* glu_name(Glu a) {
  switch (a) {
    case Glu::silu: return "silu";
    case Glu::silu_reversed: return "silu_reversed";
    case Glu::gelu_erf: return "gelu_erf";
    case Glu::gelu_tanh_op: return "gelu_tanh_op";
    case Glu::gelu_tanh_spelled: return "gelu_tanh_spelled";
    case Glu::relu: return "relu";
  }
  return "?";
}

// LLaMA's MLP as exporters write it: gate = x Wg, up = x Wu (two sibling MatMuls), act(gate)
// * up, then the down projection and the residual Add. x is [1, 7, 32], F = 45 (odd: the
// product has an odd width, the merged GEMM 90 columns).
struct GluModel {
  static constexpr int64_t kK = 32, kF = 45;
  Graph g;
  int n = 0;

  std::string node(const std::string& op, std::vector<std::string> in, Attributes a = {}) {
    const std::string out = fmt::format("m{}", n++);
    add_node(g, op, std::move(in), {out}, std::move(a)).name = "n_" + out;
    return out;
  }
  std::string scalar(float v) {
    const std::string name = fmt::format("k{}", n++);
    add_initializer(g, name, Tensor::scalar<float>(v));
    return name;
  }
  std::string act(Glu a, const std::string& x) {
    switch (a) {
      case Glu::silu: return node("Mul", {x, node("Sigmoid", {x})});
      case Glu::silu_reversed: return node("Mul", {node("Sigmoid", {x}), x});
      case Glu::gelu_erf: {  // fuse_gelu makes it one Gelu
        const std::string e = node("Erf", {node("Div", {x, scalar(std::sqrt(2.f))})});
        return node("Mul", {node("Mul", {x, node("Add", {e, scalar(1.f)})}), scalar(0.5f)});
      }
      case Glu::gelu_tanh_op: return node("Gelu", {x}, attrs({{"approximate", std::string("tanh")}}));
      case Glu::gelu_tanh_spelled: {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): stays
        const std::string cube = node("Mul", {node("Pow", {x, scalar(3.f)}), scalar(0.044715f)});
        const std::string t = node("Tanh", {node("Mul", {node("Add", {x, cube}), scalar(0.7978845608f)})});
        return node("Mul", {node("Mul", {x, scalar(0.5f)}), node("Add", {t, scalar(1.f)})});
      }
      case Glu::relu: return node("Relu", {x});
    }
    return x;
  }
  // `prologue`: x = Tanh(x_in * 0.5), two injective nodes only the gate/up MatMul reads:
  // its A prologue in the same cluster (as llama23's decomposed RMSNorm is).
  explicit GluModel(Glu a, bool prologue = false) {
    g.opset = a == Glu::gelu_tanh_op ? 20 : 17;
    if (prologue) {
      add_input(g, "x_in", {1, 7, kK});
      add_node(g, "Tanh", {node("Mul", {"x_in", scalar(0.5f)})}, {"x"}).name = "n_x";
    } else {
      add_input(g, "x", {1, 7, kK});
    }
    add_input(g, "res", {1, 7, kK});
    add_initializer(g, "wg", random_tensor({kK, kF}, 21));
    add_initializer(g, "wu", random_tensor({kK, kF}, 22));
    add_initializer(g, "wd", random_tensor({kF, kK}, 23));
    const std::string gate = node("MatMul", {"x", "wg"});
    const std::string up = node("MatMul", {"x", "wu"});
    const std::string p = a == Glu::silu_reversed ? node("Mul", {"m1", act(a, gate)}) : node("Mul", {act(a, gate), up});
    g.outputs = {node("Add", {"res", node("MatMul", {p, "wd"})})};
    g = with_types(g);
  }
};

// The MatMul reading x in `g`.
size_t gate_up_matmul(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == "MatMul" && g.nodes[i].input(0) == "x") return i;
  ADD_FAILURE() << "no MatMul reads x";
  return 0;
}

// The gemm candidate of the gate/up MatMul with the most nodes that does not reach the down
// projection: its GLU epilogue.
const Candidate* glu_candidate(const Graph& g, const std::vector<Candidate>& cands) {
  const size_t mm = gate_up_matmul(g);
  const Candidate* best = nullptr;
  for (const auto& c : cands) {
    if (c.kind != ClusterKind::gemm || std::find(c.nodes.begin(), c.nodes.end(), mm) == c.nodes.end()) continue;
    if (std::count_if(c.nodes.begin(), c.nodes.end(), [&](size_t i) { return g.nodes[i].op == "MatMul"; }) != 1)
      continue;
    if (!best || c.nodes.size() > best->nodes.size()) best = &c;
  }
  return best;
}

TEST(FusionGlu, SimplifyInterleavesTheMergedGateUpColumns) {
  for (Glu a : {Glu::silu, Glu::silu_reversed, Glu::gelu_erf, Glu::gelu_tanh_op, Glu::gelu_tanh_spelled, Glu::relu}) {
    SCOPED_TRACE(glu_name(a));
    const GluModel m(a);
    const Graph s = simplify(m.g);
    expect_well_formed(s);
    // One MatMul over [K, 2F] weights whose column 2j is gate column j and 2j + 1 up column j.
    const Node& mm = s.nodes[gate_up_matmul(s)];
    const Tensor& w = s.initializers.at(mm.input(1));
    ASSERT_EQ(w.shape(), (Shape{GluModel::kK, 2 * GluModel::kF}));
    const auto wv = w.to_float_vector();
    const auto gv = m.g.initializers.at("wg").to_float_vector();
    const auto uv = m.g.initializers.at("wu").to_float_vector();
    for (int64_t k = 0; k < GluModel::kK; ++k)
      for (int64_t j = 0; j < GluModel::kF; ++j) {
        ASSERT_EQ(wv[k * 2 * GluModel::kF + 2 * j], gv[k * GluModel::kF + j]) << k << "," << j;
        ASSERT_EQ(wv[k * 2 * GluModel::kF + 2 * j + 1], uv[k * GluModel::kF + j]) << k << "," << j;
      }
    // Its output read by the even and the odd columns' Slices, which the template pairs.
    const auto split = glu_split(s, gate_up_matmul(s));
    ASSERT_TRUE(split.has_value());
    EXPECT_EQ(op_count(s, "Slice"), 2);
    // The same values as the graph before (reference executor, both graphs).
    expect_same_outputs(m.g, s);
  }
}

TEST(FusionGlu, HalvesReadElsewhereAndThreeSiblingsAreNotInterleaved) {
  // `up` also read by another output: the product is not the only thing the halves feed.
  GluModel m(Glu::silu);
  m.g.outputs.push_back("m1");
  Graph s = simplify(m.g);
  EXPECT_FALSE(glu_split(s, gate_up_matmul(s)).has_value());
  EXPECT_NE(s.initializers.count(s.nodes[gate_up_matmul(s)].input(1)), 0u);
  for (const auto& n : s.nodes) {
    if (n.op == "Slice") {
      EXPECT_FALSE(n.has_input(4)) << "a stepped Slice in a graph left as it was";
    }
  }
  // Q/K/V: three sibling projections merged, never interleaved.
  Graph g;
  g.opset = 17;
  add_input(g, "x", {1, 5, 16});
  for (const char* w : {"wq", "wk", "wv"}) add_initializer(g, w, random_tensor({16, 16}, 31));
  add_node(g, "MatMul", {"x", "wq"}, {"q"});
  add_node(g, "MatMul", {"x", "wk"}, {"k"});
  add_node(g, "MatMul", {"x", "wv"}, {"v"});
  add_node(g, "Mul", {"q", "k"}, {"qk"});
  add_node(g, "Mul", {"qk", "v"}, {"o"});
  g.outputs = {"o"};
  s = simplify(with_types(g));
  EXPECT_EQ(op_count(s, "Slice"), 3);
  EXPECT_FALSE(glu_split(s, gate_up_matmul(s)).has_value());
}

// The GLU epilogue's kernels: one gemm cluster {gate/up MatMul, Slices, act, product} whose
// only output is the [1, 7, F] product; fp32 variants of both thread-tile widths and every
// pipeline, tf32, fp16, bf16 and sm_70's m8n8k4, each on the host emulator against the
// reference with random weights (a wrong pairing of columns, or gate and up swapped, gives
// another product), within variant_tolerance.
TEST(FusionGlu, EpilogueWritesOnlyTheProductOnEveryPrecisionPath) {
  for (auto [a, prologue] : {std::pair{Glu::silu, false}, std::pair{Glu::gelu_erf, false},
                             std::pair{Glu::gelu_tanh_spelled, false}, std::pair{Glu::silu, true}}) {
    SCOPED_TRACE(fmt::format("{}{}", glu_name(a), prologue ? " with an A prologue" : ""));
    const Graph s = simplify(GluModel(a, prologue).g);
    const auto cands = generate_candidates(s);
    const Candidate* c = glu_candidate(s, cands);
    ASSERT_NE(c, nullptr);
    if (prologue) {
      EXPECT_EQ(c->pattern, "mul+tanh+matmul+slice+slice+sigmoid+mul+mul");
    }
    const Workload w = make_workload(s, c->nodes, ClusterKind::gemm);
    ASSERT_EQ(w.graph.outputs.size(), 1u) << c->pattern;
    EXPECT_EQ(w.graph.info(w.graph.outputs[0]).shape, (Shape{1, 7, GluModel::kF})) << c->pattern;
    EXPECT_TRUE(analyze_workload(w).glu) << c->pattern;
    const auto fp32 = fp32_variants(w);
    ASSERT_FALSE(fp32.empty());
    for (const auto& v : fp32) EXPECT_EQ(v.param("split_k"), 1) << v.key();
    for (const auto& v : pick(fp32, {[](const Variant& v) { return v.param("thread_n") == 2; },
                                     [](const Variant& v) { return v.param("thread_n") == 8; },
                                     [](const Variant& v) { return v.param("stages") == 3; },
                                     [](const Variant& v) { return v.param("stages") == 1; }}))
      check_within_tolerance(w, v);
    const auto tf32 = enumerate_variants(w, a100(), SpaceOptions{{"tf32"}});
    ASSERT_FALSE(tf32.empty());
    check_within_tolerance(w, tf32.front());
    for (Precision p : {Precision::fp16, Precision::bf16}) {
      const Graph gp = apply_precision(s, p);
      const auto cands_p = generate_candidates(gp);
      const Candidate* cp = glu_candidate(gp, cands_p);
      ASSERT_NE(cp, nullptr);
      const Workload wp = make_workload(gp, cp->nodes, ClusterKind::gemm);
      ASSERT_TRUE(analyze_workload(wp).glu) << cp->pattern;
      const std::string name = p == Precision::fp16 ? "fp16" : "bf16";
      const auto vs = enumerate_variants(wp, a100(), SpaceOptions{{name}});
      ASSERT_FALSE(vs.empty());
      for (const auto& v : vs) EXPECT_EQ(v.param("split_k"), 1) << v.key();
      check_within_tolerance(wp, vs.front());
      check_within_tolerance(wp, vs.back());
      if (p == Precision::fp16) {
        const auto volta = enumerate_variants(wp, GpuCatalog::builtin().require("v100"), SpaceOptions{{"fp16"}});
        ASSERT_FALSE(volta.empty());
        EXPECT_EQ(volta.front().param("m8n8k4"), 1);
        check_within_tolerance(wp, volta.front());
      }
    }
  }
}

TEST(FusionGlu, ProductIsNotRecomputedByTheDownProjection) {
  // Both forms stay candidates (the product in the gate/up epilogue, or in the down
  // projection's loads); the GLU one writes F columns instead of 2F.
  const Graph s = simplify(GluModel(Glu::silu).g);
  const auto cands = generate_candidates(s);
  const Candidate* c = glu_candidate(s, cands);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->pattern, "matmul+slice+slice+sigmoid+mul+mul");
  const Workload glu = make_workload(s, c->nodes, ClusterKind::gemm);
  const size_t mm = gate_up_matmul(s);
  const Workload plain = make_workload(s, {mm}, ClusterKind::gemm);
  EXPECT_EQ(plain.bytes - glu.bytes, int64_t{7} * GluModel::kF * 4);
}

}  // namespace
}  // namespace dc
