// Convolution gradients on the tuned implicit-GEMM template (common/passes/gradients/
// grad_conv.cpp, docs/training.md "Convolution gradients"): the data gradient as
// ConvTranspose(dY, W); the weight gradient as dc.ConvGradWeight (the template's
// weight-gradient mode, groups as its batch), of a depthwise one as a Conv per image.
//  - ConvGradients.*: the lowered gradients equal the dc.ConvGradData / dc.ConvGradWeight
//    reference ops (an independent SGEMM + col2im / im2col + SGEMM) on fresh random inputs,
//    for strided convolutions that drop input rows, asymmetric pads, dilations, 1x1 stride 2,
//    odd sizes, a long K, batch 1, 1-D, grouped and depthwise convolutions (batch 1 too).
//  - CodegenConvGradients.*: every Conv / ConvTranspose / dc.ConvGradWeight workload of those
//    gradients, on every precision path the template offers (fp32, tf32, fp16, bf16; split-K
//    where offered), on the
//    host emulator against the CPU reference: fresh random inputs, NaN-poisoned outputs, the
//    error model's bound (variant_tolerance, docs/precision.md); NVRTC compiles one variant a
//    path for sm_80. The ReLU mask Where(a > 0, dX, 0) after the data gradient (and after a
//    residual gradient sum's Add) is one workload with the ConvTranspose, checked the same way
//    (also with f16/bf16 storage, and reading a mask other nodes share as a bool input).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "candidates.h"
#include "conv_gradient_testing.h"
#include "emulator.h"
#include "estimator.h"
#include "estimator_testing.h"
#include "generate.h"
#include "ir/tolerance.h"
#include "ir/workload.h"
#include "nvrtc.h"
#include "param_space.h"
#include "passes/apply_precision.h"
#include "passes/training/add_gradients.h"
#include "random_inputs.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "ref/im2col.h"
#include "testing.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

struct ConvCase {
  const char* name;
  Shape x, w;
  Attributes attrs;
};

Attributes conv_attrs(std::vector<int64_t> strides, std::vector<int64_t> pads, std::vector<int64_t> dilations,
                      int64_t group = 1) {
  Attributes a;
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  a.set("group", group);
  return a;
}

std::vector<ConvCase> cases() {
  Attributes same = conv_attrs({2, 2}, {0, 0, 0, 0}, {1, 1}, 4);
  same.erase("pads");
  same.set("auto_pad", std::string("SAME_UPPER"));
  return {
      // 8 rows, stride 2, pads 1: 4 windows reach 7 rows, the 8th is dropped.
      {"strided_dropped_row", {2, 4, 8, 7}, {6, 4, 3, 3}, conv_attrs({2, 2}, {1, 1, 1, 1}, {1, 1})},
      {"asymmetric_pads_dilated", {2, 3, 9, 8}, {5, 3, 3, 2}, conv_attrs({1, 1}, {2, 0, 1, 1}, {2, 3})},
      // The swapped Conv's end pad would be -1: its extra output row is sliced off.
      {"pointwise_stride_2", {2, 8, 8, 8}, {16, 8, 1, 1}, conv_attrs({2, 2}, {0, 0, 0, 0}, {1, 1})},
      {"odd_sizes", {3, 5, 11, 13}, {7, 5, 3, 3}, conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1})},
      // The weight gradient's K = 4 x 16 x 16 = 1024 against 72 x 8 outputs: split-K offered.
      {"long_k", {4, 8, 16, 16}, {8, 8, 3, 3}, conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1})},
      // Batch 1: the swaps of batch and channels are reshapes.
      {"batch_1_strided", {1, 6, 10, 10}, {10, 6, 3, 3}, conv_attrs({2, 2}, {1, 1, 1, 1}, {1, 1})},
      {"conv_1d", {2, 4, 15}, {6, 4, 5}, conv_attrs({3}, {2, 2}, {1})},
      // Grouped and depthwise: ConvTranspose with groups; the grouped weight gradient in the
      // weight-gradient mode, the depthwise one a Conv with a group per (image, channel) (the
      // direct template).
      {"grouped", {2, 4, 7, 6}, {6, 2, 3, 3}, conv_attrs({2, 1}, {1, 0, 1, 2}, {1, 2}, 2)},
      {"grouped_batch_1_multiplier_2", {1, 6, 7, 7}, {12, 2, 3, 3}, conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 3)},
      {"depthwise_same", {2, 4, 6, 6}, {4, 1, 3, 3}, same},
      {"depthwise_batch_1_strided", {1, 5, 9, 8}, {5, 1, 3, 3}, conv_attrs({2, 2}, {1, 1, 1, 1}, {1, 1}, 5)},
  };
}

// Graph inputs x, w, dy; outputs dx and dw, Conv's gradients as the rule lowers them (the
// forward Conv, which they do not read, removed).
Graph gradient_graph(const ConvCase& c, const std::vector<std::string>& wrt = {"x", "w"}) {
  Graph g;
  g.opset = 17;
  g.inputs = {"x", "w"};
  g.tensors["x"] = {DType::f32, c.x};
  g.tensors["w"] = {DType::f32, c.w};
  Node conv;
  conv.name = "conv";
  conv.op = "Conv";
  conv.inputs = {"x", "w"};
  conv.outputs = {"y"};
  conv.attrs = c.attrs;
  g.nodes.push_back(conv);
  const ref::Window win = ref::make_window(conv, {"Conv", false}, Shape(c.x.begin() + 2, c.x.end()),
                                           Shape(c.w.begin() + 2, c.w.end()));
  Shape y{c.x[0], c.w[0]};
  for (int64_t e : win.out_dims()) y.push_back(e);
  g.tensors["y"] = {DType::f32, y};
  g.tensors["dy"] = g.tensors["y"];
  g.inputs.push_back("dy");
  const auto grads = add_vector_jacobian_product(g, {{"y", "dy"}}, std::set<std::string>(wrt.begin(), wrt.end()));
  g.nodes.erase(g.nodes.begin());
  g.tensors.erase("y");
  for (const auto& t : wrt) g.outputs.push_back(grads.at(t));
  return g;
}

Tensor random_f32(const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor t(DType::f32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

using testing::fresh_seed;

TEST(ConvGradients, LoweringEqualsTheReferenceGradientOps) {
  for (const ConvCase& c : cases()) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE(fmt::format("{} (seed {})", c.name, seed));
    Graph g = gradient_graph(c);
    // The reference ops beside the lowering, on the same inputs.
    Node data, weight;
    data.name = "ref_data";
    data.op = "dc.ConvGradData";
    data.inputs = {"dy", "w"};
    data.outputs = {"ref_dx"};
    data.attrs = c.attrs;
    data.attrs.set("input_shape", std::vector<int64_t>(c.x.begin(), c.x.end()));
    weight.name = "ref_weight";
    weight.op = "dc.ConvGradWeight";
    weight.inputs = {"x", "dy"};
    weight.outputs = {"ref_dw"};
    weight.attrs = c.attrs;
    weight.attrs.set("weight_shape", std::vector<int64_t>(c.w.begin(), c.w.end()));
    g.nodes.push_back(data);
    g.nodes.push_back(weight);
    g.tensors["ref_dx"] = {DType::f32, c.x};
    g.tensors["ref_dw"] = {DType::f32, c.w};
    g.outputs.push_back("ref_dx");
    g.outputs.push_back("ref_dw");
    std::mt19937 rng(seed);
    ref::TensorMap in;
    for (const auto& name : g.inputs) in[name] = random_f32(g.info(name).shape, rng);
    const auto out = ref::run_graph(g, in);
    // Both sides sum the same products in f32 with different orders (K up to 2 x 16 x 16).
    const Shape& dy = g.info("dy").shape;
    const int64_t k = std::max(shape_numel(c.w) / c.w[1], shape_numel(dy) / dy[1]);
    const Tolerance tol = kernel_tolerance("fp32", DType::f32, k);
    for (const auto& [lowered, reference] : {std::pair{g.outputs[0], std::string("ref_dx")},
                                             std::pair{g.outputs[1], std::string("ref_dw")}}) {
      ASSERT_EQ(out.at(lowered).shape(), out.at(reference).shape()) << lowered;
      const ref::Comparison cmp = ref::compare_tensors(out.at(lowered), out.at(reference), tol.rtol, tol.atol);
      EXPECT_TRUE(cmp.pass) << lowered << ": rel L2 " << cmp.rel_l2_error << ", max abs " << cmp.max_abs_error
                            << " " << cmp.problem;
    }
  }
}

TEST(ConvGradients, UsesTheTemplateOpsOnly) {
  // Which ops the lowering emits: no naive dc.* op, grouped or not; one ConvTranspose; the
  // weight gradient one dc.ConvGradWeight, or (depthwise) one Conv of a group per (image,
  // channel); never a Transpose.
  for (const ConvCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const Graph g = gradient_graph(c);
    int transposes = 0, conv_transposes = 0, convs = 0, naive = 0, weight_grads = 0, reduce_sums = 0;
    for (const auto& n : g.nodes) {
      transposes += n.op == "Transpose";
      reduce_sums += n.op == "ReduceSum";
      conv_transposes += n.op == "ConvTranspose";
      weight_grads += n.op == "dc.ConvGradWeight";
      if (n.op == "Conv") {
        ++convs;
        const int64_t per_image = c.w[1] == 1 ? c.x[0] : 1;  // depthwise: a group per (image, channel)
        EXPECT_EQ(n.attrs.get_int("group", 1), c.attrs.get_int("group", 1) * per_image);
      }
      naive += n.op.starts_with("dc.") && n.op != "dc.ConvGradWeight";
    }
    EXPECT_EQ(conv_transposes, 1);
    EXPECT_EQ(naive, 0);
    EXPECT_EQ(transposes, 0);
    const int64_t n = c.x[0], cg = c.w[1];
    if (cg > 1) {  // the template's weight-gradient mode: X and dY as stored
      EXPECT_EQ(weight_grads, 1);
      EXPECT_EQ(convs, 0);
      EXPECT_EQ(reduce_sums, 0);
      continue;
    }
    // Depthwise: one group per (image, channel), views only, a sum over images.
    EXPECT_EQ(weight_grads, 0);
    EXPECT_EQ(convs, 1);
    EXPECT_EQ(reduce_sums, n > 1 ? 1 : 0);
  }
}

void check_variant(const Workload& w, const Variant& v, bool nvrtc) {
  testing::check_variant_on_emulator(w, v, nvrtc);
}

bool is_conv_workload(const Workload& w) {
  for (const auto& n : w.graph.nodes)
    if (n.op == "Conv" || n.op == "ConvTranspose" || n.op == "dc.ConvGradWeight") return true;
  return false;
}

bool is_weight_gradient_mode(const Workload& w) {
  return std::any_of(w.graph.nodes.begin(), w.graph.nodes.end(),
                     [](const Node& n) { return n.op == "dc.ConvGradWeight"; });
}

TEST(CodegenConvGradients, EveryPrecisionPathMatchesTheReference) {
  const GpuSpec gpu = testing::spec_a100();
  const std::vector<std::string> paths = {"fp32", "tf32", "fp16", "bf16"};
  // Workloads checked per path, of those not in the weight-gradient mode (the small filter
  // counts here give it tf32 blocks of one or two warps, above the tf32 register bound;
  // WeightGradientModeEdgeShapes and the grouped tests cover its paths).
  std::map<std::string, int> covered;
  int workloads = 0, plain = 0, fused = 0, split = 0, grouped = 0, direct_count = 0, weight_mode = 0,
      weight_mode_plain = 0;
  for (const ConvCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const Graph g = gradient_graph(c);
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    int heavy = 0;
    for (const auto& w : set.workloads) {
      // A grouped Conv is a depthwise-kind cluster: the direct template for one channel per
      // group, else the implicit GEMM with the groups as its batch.
      if (!is_conv_workload(w) || (w.kind != ClusterKind::conv && w.kind != ClusterKind::depthwise)) continue;
      ++heavy;
      ++workloads;
      const bool transposes = std::any_of(w.graph.nodes.begin(), w.graph.nodes.end(),
                                          [](const Node& n) { return n.op == "Transpose"; });
      const bool direct = analyze_workload(w).family == Family::depthwise;  // fp32 path only
      grouped += w.kind == ClusterKind::depthwise;
      const bool mode = is_weight_gradient_mode(w);  // its paths: WeightGradientModeEdgeShapes
      weight_mode += mode;
      (direct ? direct_count : transposes ? fused : mode ? weight_mode_plain : plain) += 1;
      SCOPED_TRACE(w.canonical.substr(0, 160));
      bool nvrtc = true;  // one NVRTC compile a workload (the emulator runs them all)
      for (const std::string& p : paths) {
        const auto space = enumerate_variants(w, gpu, SpaceOptions{{p}});
        if (p == "fp32") {
          ASSERT_FALSE(space.empty());
        }
        if (space.empty()) {
          std::cout << c.name << ": no " << p << " variant for " << w.canonical.substr(0, 80) << "\n";
          continue;
        }
        if (!transposes && !direct && !mode) ++covered[p];
        // The space's first variant (its last too on the CUDA-core path), and a split-K one
        // where offered.
        std::vector<const Variant*> picked = {&space.front()};
        if (p == "fp32") picked.push_back(&space.back());
        for (const auto& v : space)
          if (v.param_or("split_k", 1) > 1) {
            picked.push_back(&v);
            ++split;
            break;
          }
        for (const Variant* v : picked) {
          check_variant(w, *v, nvrtc);
          nvrtc = false;
        }
      }
    }
    EXPECT_GE(heavy, 1);
  }
  std::cout << "plain " << plain << ", fused " << fused << ", weight-gradient mode " << weight_mode << "\n";
  EXPECT_GE(plain, 10);
  EXPECT_EQ(weight_mode, 9);  // the seven group-1 and two grouped cases' weight gradients
  EXPECT_EQ(weight_mode_plain, 9);
  EXPECT_EQ(fused, 0);  // no Transpose left in any convolution gradient
  for (const std::string& p : paths) EXPECT_GE(covered[p], plain - 2) << p;
  EXPECT_GE(split, 4);  // the weight gradients' long K offers split-K
  EXPECT_GE(grouped, 2);       // the two depthwise cases' weight gradients
  EXPECT_GE(direct_count, 1);  // depthwise at batch 1: one channel per group
}

// The weight-gradient mode's edge shapes: the group-1 cases above (strides that drop rows,
// asymmetric pads with dilations, 1x1 stride 2 on an even extent, odd sizes, a long K,
// batch 1, 1-D) and dilation 2 with pads, dY read in vectors (P = 64), a 3-D convolution.
std::vector<ConvCase> weight_gradient_cases() {
  std::vector<ConvCase> out;
  for (const ConvCase& c : cases())
    if (c.attrs.get_int("group", 1) == 1 && c.w[1] > 1) out.push_back(c);
  out.push_back({"dilated_2_padded", {2, 6, 10, 9}, {9, 6, 3, 3}, conv_attrs({1, 1}, {2, 2, 2, 1}, {2, 2})});
  out.push_back({"pointwise_vectors", {3, 16, 8, 8}, {12, 16, 1, 1}, conv_attrs({1, 1}, {0, 0, 0, 0}, {1, 1})});
  out.push_back({"conv_3d_strided", {2, 3, 5, 6, 7}, {4, 3, 2, 3, 3},
                 conv_attrs({1, 2, 2}, {0, 1, 1, 1, 1, 0}, {1, 1, 1})});
  // 64 and more filters: blocks of 4 warps, the tf32 path's register bound (the small cases
  // above have tf32 blocks of one or two warps only, estimated above 200 registers).
  out.push_back({"wide_padded", {2, 8, 7, 6}, {64, 8, 3, 3}, conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1})});
  out.push_back({"wide_strided_odd_plane", {3, 16, 9, 9}, {64, 16, 3, 3}, conv_attrs({2, 2}, {1, 1, 1, 1}, {1, 1})});
  out.push_back({"wide_dilated_2", {2, 8, 10, 10}, {96, 8, 3, 3}, conv_attrs({1, 1}, {2, 2, 2, 2}, {2, 2})});
  return out;
}

// The one workload of c's weight gradient as the rule emits it, X and dY stored as `storage`,
// dW as `dw_storage`: the dc.ConvGradWeight node alone, X and dY its inputs (no Transposes).
Workload weight_gradient_workload(const ConvCase& c, DType storage, DType dw_storage) {
  Graph g = gradient_graph(c, {"w"});
  for (const std::string t : {"x", "dy"}) g.tensors[t].dtype = storage;
  g.tensors[g.outputs[0]].dtype = dw_storage;
  const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
  for (const auto& w : set.workloads)
    if (is_weight_gradient_mode(w)) {
      EXPECT_EQ(w.graph.nodes.size(), 1u);
      EXPECT_EQ(w.kind, ClusterKind::conv);
      return w;
    }
  ADD_FAILURE() << "no dc.ConvGradWeight workload";
  return {};
}

TEST(CodegenConvGradients, WeightGradientModeEdgeShapes) {
  // dc.ConvGradWeight on conv_implicit_gemm's weight-gradient mode: dY read by address (in
  // vectors / 16-byte cp.async copies where P allows), X through the im2col gather, dW
  // written as [M, C, k...]; per path the first variant, a split-K, a vector and a cp.async
  // one where offered, on the host emulator against the CPU reference (fresh inputs, NaN-
  // poisoned outputs, variant_tolerance); f32 storage on every path, f16 / bf16 storage on
  // their paths.
  const GpuSpec gpu = testing::spec_a100();
  std::map<std::string, int> checked;
  int split = 0, vectors = 0, copies16 = 0, gathers = 0;
  // NVRTC (sm_80) compiles the first variant of each path and storage type, and the first
  // split-K one of each path; the emulator runs them all.
  std::set<std::string> compiled;
  for (const ConvCase& c : weight_gradient_cases()) {
    SCOPED_TRACE(c.name);
    std::vector<std::tuple<DType, std::string, DType>> runs = {{DType::f32, "fp32", DType::f32},
                                                               {DType::f32, "tf32", DType::f32},
                                                               {DType::f32, "fp16", DType::f32},
                                                               {DType::f32, "bf16", DType::f32}};
    if (std::string(c.name) == "strided_dropped_row" || std::string(c.name) == "pointwise_vectors" ||
        std::string(c.name) == "long_k") {
      runs.push_back({DType::f16, "fp16", DType::f16});
      runs.push_back({DType::bf16, "bf16", DType::bf16});
      runs.push_back({DType::f16, "fp16", DType::f32});  // AMP: dW for the f32 master weights
    }
    for (const auto& [storage, path, dw_storage] : runs) {
      SCOPED_TRACE(fmt::format("{} storage, {} path, {} dW", dtype_name(storage), path, dtype_name(dw_storage)));
      const Workload w = weight_gradient_workload(c, storage, dw_storage);
      ASSERT_FALSE(w.graph.nodes.empty());
      const WorkloadShape s = analyze_workload(w);
      EXPECT_TRUE(s.weight_grad);
      EXPECT_EQ(s.m, c.w[0]);
      EXPECT_EQ(s.n, shape_numel(c.w) / c.w[0]);
      const auto space = enumerate_variants(w, gpu, SpaceOptions{{path}});
      if (path == "fp32") {
        ASSERT_FALSE(space.empty());
      }
      if (space.empty()) {
        std::cout << c.name << ": no " << path << " variant\n";
        continue;
      }
      std::vector<const Variant*> picked = {&space.front()};
      auto pick = [&](auto pred) {
        for (const auto& v : space)
          if (pred(v)) {
            if (std::find(picked.begin(), picked.end(), &v) == picked.end()) picked.push_back(&v);
            return;
          }
      };
      pick([](const Variant& v) { return v.param_or("split_k", 1) > 1; });
      pick([](const Variant& v) { return v.param_or("vec", 1) >= 4; });
      pick([](const Variant& v) { return v.param_or("stages", 1) >= 3; });
      for (const Variant* v : picked) {
        // The key round-trips through the space, and the estimator prices the mode.
        const std::optional<Variant> back = Variant::from_key(v->key(), w, gpu);
        ASSERT_TRUE(back.has_value()) << v->key();
        EXPECT_EQ(back->regs_per_thread, v->regs_per_thread);
        EXPECT_EQ(back->smem_bytes, v->smem_bytes);
        const Estimate e = estimate(w, *v, gpu);
        EXPECT_TRUE(std::isfinite(e.seconds) && e.seconds > 0 && e.bound != "unfit") << e.bound;
        EXPECT_GT(e.dram_bytes, 0.0);
        const GeneratedKernel k = generate_kernel(w, *v);
        split += v->param_or("split_k", 1) > 1;
        vectors += k.source.find("float4 dc_q") != std::string::npos;
        copies16 += k.source.find("dc_cp_async_16(") != std::string::npos;
        gathers += k.source.find("_tap = ") != std::string::npos;
        const std::string kind = fmt::format("{} {}{}", path, dtype_name(storage), v->param_or("split_k", 1) > 1 ? " split" : "");
        check_variant(w, *v, compiled.insert(kind).second);
        ++checked[path];
      }
    }
  }
  for (const std::string p : {"fp32", "fp16", "bf16"}) EXPECT_GE(checked[p], 13) << p;
  EXPECT_GE(checked["tf32"], 3);  // the wide cases
  EXPECT_GE(split, 8);     // the long K's split-K, atomics into dW or through the epilogue
  EXPECT_GE(vectors, 1);   // dY in float4 loads (P = 64)
  EXPECT_GE(copies16, 1);  // f16 dY in 16-byte cp.async copies
  EXPECT_EQ(gathers, checked["fp32"] + checked["tf32"] + checked["fp16"] + checked["bf16"]);
  EXPECT_GE(compiled.size(), 8u);
}

TEST(CodegenConvGradients, WeightGradientModeTakesAnEpilogue) {
  // A gradient sum after the weight gradient (a weight read twice): Add(dW, other) is the
  // mode's epilogue, through the split-K scratch and epilogue kernel where split.
  ConvCase c = cases()[4];  // long_k: split-K offered
  ASSERT_EQ(std::string(c.name), "long_k");
  Graph g = gradient_graph(c, {"w"});
  const std::string dw = g.outputs[0];
  g.tensors["other"] = g.info(dw);
  g.inputs.push_back("other");
  Node add;
  add.name = "sum";
  add.op = "Add";
  add.inputs = {dw, "other"};
  add.outputs = {"dw_sum"};
  g.nodes.push_back(add);
  g.tensors["dw_sum"] = g.info(dw);
  g.outputs = {"dw_sum"};
  const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
  const Workload* fused = nullptr;
  for (const auto& w : set.workloads)
    if (is_weight_gradient_mode(w) && w.graph.nodes.size() == 2) fused = &w;
  ASSERT_NE(fused, nullptr) << "no dc.ConvGradWeight + Add workload";
  int checked = 0, split = 0;
  for (const std::string p : {"fp32", "fp16"}) {
    const auto space = enumerate_variants(*fused, testing::spec_a100(), SpaceOptions{{p}});
    ASSERT_FALSE(space.empty()) << p;
    check_variant(*fused, space.front(), false);
    ++checked;
    for (const auto& v : space)
      if (v.param_or("split_k", 1) > 1) {
        EXPECT_EQ(generate_kernel(*fused, v).launches.size(), 2u);  // scratch, then the epilogue
        check_variant(*fused, v, false);
        ++split;
        break;
      }
  }
  EXPECT_EQ(checked, 2);
  EXPECT_GE(split, 1);
}

// Graph inputs a (a saved Relu output), w, dy: the gradient of Relu's input through Conv(a,
// w) as the rules lower it, ConvTranspose(dy, w) masked by Where(a > 0, ., 0); with
// `residual`, a (of the Conv output's shape) also feeds an Add after the Conv, whose gradient
// sum is an Add before the mask. The forward nodes, which the gradient does not read, removed.
Graph masked_data_gradient_graph(const ConvCase& c, bool residual) {
  Graph g;
  g.opset = 17;
  g.inputs = {"x", "w"};
  g.tensors["x"] = {DType::f32, c.x};
  g.tensors["a"] = {DType::f32, c.x};
  g.tensors["w"] = {DType::f32, c.w};
  Node relu;
  relu.name = "relu";
  relu.op = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {"a"};
  Node conv;
  conv.name = "conv";
  conv.op = "Conv";
  conv.inputs = {"a", "w"};
  conv.outputs = {"y"};
  conv.attrs = c.attrs;
  g.nodes = {relu, conv};
  const ref::Window win = ref::make_window(conv, {"Conv", false}, Shape(c.x.begin() + 2, c.x.end()),
                                           Shape(c.w.begin() + 2, c.w.end()));
  Shape y{c.x[0], c.w[0]};
  for (int64_t e : win.out_dims()) y.push_back(e);
  g.tensors["y"] = {DType::f32, y};
  std::string out = "y";
  if (residual) {
    EXPECT_EQ(y, c.x) << "a residual needs a shape-preserving Conv";
    Node add;
    add.name = "residual";
    add.op = "Add";
    add.inputs = {"y", "a"};
    add.outputs = {"z"};
    g.nodes.push_back(add);
    g.tensors["z"] = {DType::f32, y};
    out = "z";
  }
  g.tensors["dy"] = g.tensors[out];
  g.inputs.push_back("dy");
  const auto grads = add_vector_jacobian_product(g, {{out, "dy"}}, {"x"});
  g.nodes.erase(g.nodes.begin(), g.nodes.begin() + (residual ? 3 : 2));
  g.tensors.erase("y");
  g.tensors.erase("z");
  g.inputs = {"a", "w", "dy"};
  g.tensors.erase("x");
  g.outputs = {grads.at("x")};
  return g;
}

TEST(CodegenConvGradients, ReluMaskFusesIntoTheDataGradient) {
  // The ReLU gradient's Where(a > 0, dX, 0) and its compare are the ConvTranspose's epilogue
  // (after a residual gradient sum's Add where there is one): one workload computes the
  // masked data gradient, on every precision path, checked like the others above.
  const GpuSpec gpu = testing::spec_a100();
  const std::vector<std::string> paths = {"fp32", "tf32", "fp16", "bf16"};
  std::vector<std::pair<ConvCase, bool>> masked;
  for (const ConvCase& c : cases())
    if (std::string(c.name) == "strided_dropped_row" || std::string(c.name) == "grouped" ||
        std::string(c.name) == "conv_1d")
      masked.push_back({c, false});
  masked.push_back({{"residual_same_shape", {2, 6, 7, 9}, {6, 6, 3, 3}, conv_attrs({1, 1}, {1, 1, 1, 1}, {1, 1})}, true});
  int checked = 0, paths_checked = 0, stored_checked = 0;
  for (const auto& [c, residual] : masked) {
    SCOPED_TRACE(c.name);
    const Graph g = masked_data_gradient_graph(c, residual);
    // Tensors stored in f16 / bf16 (AMP's storage): the same fusion, checked on that path.
    for (const auto& [prec, path] : {std::pair{Precision::fp16, "fp16"}, std::pair{Precision::bf16, "bf16"}}) {
      SCOPED_TRACE(path);
      const Graph gs = apply_precision(g, prec);
      const WorkloadSet stored = dedupe_workloads(gs, generate_candidates(gs));
      const Workload* fused_stored = nullptr;
      DType dx = DType::f32;  // the ConvTranspose's output, rounded to it before the mask
      for (const auto& w : stored.workloads) {
        int mask_ops = 0;
        for (const auto& n : w.graph.nodes) {
          mask_ops += n.op == "ConvTranspose" || n.op == "Greater" || n.op == "Where";
          if (n.op == "ConvTranspose") dx = w.graph.info(n.outputs[0]).dtype;
        }
        if (mask_ops == 3) {
          fused_stored = &w;
          break;
        }
      }
      ASSERT_NE(fused_stored, nullptr) << "no ConvTranspose + mask workload";
      EXPECT_EQ(dx, prec == Precision::fp16 ? DType::f16 : DType::bf16);
      const auto space = enumerate_variants(*fused_stored, gpu, SpaceOptions{{path}});
      ASSERT_FALSE(space.empty());
      check_variant(*fused_stored, space.front(), false);
      ++stored_checked;
    }
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    const Workload *fused = nullptr, *plain = nullptr;
    for (const auto& w : set.workloads) {
      std::vector<std::string> ops;
      for (const auto& n : w.graph.nodes) ops.push_back(n.op);
      std::sort(ops.begin(), ops.end());
      std::vector<std::string> want = {"ConvTranspose", "Greater", "Where"};
      if (residual) want.push_back("Add");
      std::sort(want.begin(), want.end());
      if (ops == want) fused = &w;
      if (ops == std::vector<std::string>{"ConvTranspose"}) plain = &w;
    }
    ASSERT_NE(fused, nullptr) << "no ConvTranspose + mask workload";
    ASSERT_NE(plain, nullptr) << "no ConvTranspose workload";
    EXPECT_EQ(fused->kind, ClusterKind::conv);
    // The compare reads the saved output a, not a bool mask.
    const auto& src = fused->source_inputs;
    EXPECT_NE(std::find(src.begin(), src.end(), "a"), src.end());
    for (const auto& in : fused->graph.inputs) EXPECT_EQ(fused->graph.info(in).dtype, DType::f32) << in;
    bool nvrtc = true;
    for (const std::string& p : paths) {
      // The mask costs no path: the paths of the ConvTranspose alone (conv_1d's data
      // gradient has no tf32 variant either way).
      const auto space = enumerate_variants(*fused, gpu, SpaceOptions{{p}});
      ASSERT_EQ(space.empty(), enumerate_variants(*plain, gpu, SpaceOptions{{p}}).empty()) << p;
      if (space.empty()) continue;
      ++paths_checked;
      std::vector<const Variant*> picked = {&space.front()};
      if (p == "fp32") picked.push_back(&space.back());
      for (const auto& v : space)
        if (v.param_or("split_k", 1) > 1) {
          picked.push_back(&v);
          break;
        }
      for (const Variant* v : picked) {
        check_variant(*fused, *v, nvrtc);
        nvrtc = false;
        ++checked;
      }
    }
  }
  EXPECT_GE(paths_checked, 4 * 4 - 1);
  EXPECT_GE(checked, paths_checked + 4);
  EXPECT_EQ(stored_checked, 2 * static_cast<int>(masked.size()));
}

TEST(CodegenConvGradients, SharedReluMaskIsReadByTheEpilogue) {
  // A mask another node also reads stays a kernel of its own; the data gradient's epilogue
  // reads it, a bool tensor, beside its accumulators.
  const ConvCase c = cases().front();
  Graph g = masked_data_gradient_graph(c, false);
  std::string mask;
  for (const auto& n : g.nodes)
    if (n.op == "Greater") mask = n.outputs[0];
  ASSERT_FALSE(mask.empty());
  Node cast;
  cast.name = "mask_reader";
  cast.op = "Cast";
  cast.inputs = {mask};
  cast.outputs = {"mask_f"};
  cast.attrs.set("to", int64_t{1});
  g.nodes.push_back(cast);
  g.tensors["mask_f"] = {DType::f32, g.info(mask).shape};
  g.outputs.push_back("mask_f");
  const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
  const Workload* fused = nullptr;
  for (const auto& w : set.workloads)
    if (w.graph.nodes.size() == 2 && w.graph.nodes[0].op == "ConvTranspose" && w.graph.nodes[1].op == "Where")
      fused = &w;
  ASSERT_NE(fused, nullptr) << "no ConvTranspose + Where workload";
  int bool_inputs = 0;
  for (const auto& in : fused->graph.inputs) bool_inputs += fused->graph.info(in).dtype == DType::boolean;
  EXPECT_EQ(bool_inputs, 1);
  for (const std::string p : {"fp32", "fp16"}) {
    const auto space = enumerate_variants(*fused, testing::spec_a100(), SpaceOptions{{p}});
    ASSERT_FALSE(space.empty()) << p;
    check_variant(*fused, space.front(), p == "fp32");
  }
}

}  // namespace
}  // namespace dc
