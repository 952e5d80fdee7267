// The weight gradient of a grouped Conv (C / group > 1) in conv_implicit_gemm's
// weight-gradient mode, the groups as the GEMM's batch (docs/codegen.md "Weight-gradient
// mode", docs/training.md "Convolution gradients"): the rule emits one dc.ConvGradWeight that
// reads X and dY as stored (no Transpose); per group g the kernel multiplies dY's filters of
// group g by the im2col gather of X's channels of group g and writes dW [M, C / group, k...].
// 2 and 4 groups, strided, padded, dilated, 1-D to 3-D, no size a tile multiple, batch 1 and
// more, with and without split-K, on every precision path and storage type, on the host
// emulator against the CPU reference (fresh random inputs, poisoned outputs, the error
// model's bound).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "candidates.h"
#include "conv_gradient_testing.h"
#include "estimator.h"
#include "estimator_testing.h"
#include "param_space.h"
#include "passes/training/add_gradients.h"
#include "ref/im2col.h"

namespace dc {
namespace {

struct GroupedCase {
  const char* name;
  Shape x, w;
  Attributes attrs;
};

Attributes attrs(std::vector<int64_t> strides, std::vector<int64_t> pads, std::vector<int64_t> dilations,
                 int64_t group) {
  Attributes a;
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  a.set("group", group);
  return a;
}

std::vector<GroupedCase> cases() {
  return {
      // 9 rows, stride 2, pads 1: the 9th row is past the last window.
      {"g2_strided_padded", {2, 8, 9, 7}, {6, 4, 3, 3}, attrs({2, 2}, {1, 1, 1, 1}, {1, 1}, 2)},
      {"g4_dilated_asymmetric_pads", {3, 8, 10, 9}, {8, 2, 3, 3}, attrs({1, 1}, {2, 0, 1, 2}, {2, 1}, 4)},
      // K = 4 x 16 x 16 = 1024 against 2 x 4 x 36 outputs: split-K offered.
      {"g2_long_k", {4, 8, 16, 16}, {8, 4, 3, 3}, attrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 2)},
      {"g4_batch_1_conv_1d", {1, 8, 15}, {12, 2, 5}, attrs({3}, {2, 2}, {1}, 4)},
      // P = 64: dY in vectors (16-byte copies on the tensor-core paths).
      {"g2_pointwise_vectors", {3, 16, 8, 8}, {12, 8, 1, 1}, attrs({1, 1}, {0, 0, 0, 0}, {1, 1}, 2)},
      {"g2_conv_3d_strided", {2, 4, 5, 6, 7}, {6, 2, 2, 3, 3}, attrs({1, 2, 2}, {0, 1, 1, 1, 1, 0}, {1, 1, 1}, 2)},
      // 64 filters a group: blocks of 4 warps, within the tf32 path's register bound.
      {"g4_wide_padded", {2, 16, 7, 6}, {256, 4, 3, 3}, attrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 4)},
      {"g2_wide_strided_odd_plane", {3, 12, 9, 9}, {128, 6, 3, 3}, attrs({2, 2}, {1, 1, 1, 1}, {1, 1}, 2)},
  };
}

// The one workload of c's weight gradient as the rule emits it (the forward Conv, which it
// does not read, removed), X and dY stored as `storage`, dW as `dw_storage`.
Workload weight_gradient_workload(const GroupedCase& c, DType storage, DType dw_storage) {
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
  const auto grads = add_vector_jacobian_product(g, {{"y", "dy"}}, {"w"});
  g.nodes.erase(g.nodes.begin());
  g.tensors.erase("y");
  g.outputs = {grads.at("w")};
  for (const std::string t : {"x", "dy"}) g.tensors[t].dtype = storage;
  g.tensors[g.outputs[0]].dtype = dw_storage;
  EXPECT_EQ(g.nodes.size(), 1u) << "the rule's one node";
  const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
  for (const auto& w : set.workloads)
    if (w.graph.nodes.size() == 1 && w.graph.nodes[0].op == "dc.ConvGradWeight") return w;
  ADD_FAILURE() << "no dc.ConvGradWeight workload";
  return {};
}

// The runs of a case: f32 storage on every path; f16 / bf16 storage (and AMP's f16 X and dY
// with an f32 dW) for three of the cases.
std::vector<std::tuple<DType, std::string, DType>> runs_of(const GroupedCase& c) {
  std::vector<std::tuple<DType, std::string, DType>> runs = {{DType::f32, "fp32", DType::f32},
                                                             {DType::f32, "tf32", DType::f32},
                                                             {DType::f32, "fp16", DType::f32},
                                                             {DType::f32, "bf16", DType::f32}};
  const std::string n = c.name;
  if (n == "g2_strided_padded" || n == "g2_long_k" || n == "g2_pointwise_vectors") {
    runs.push_back({DType::f16, "fp16", DType::f16});
    runs.push_back({DType::bf16, "bf16", DType::bf16});
    runs.push_back({DType::f16, "fp16", DType::f32});
  }
  return runs;
}

// The space's first variant, and the first split-K, vector and cp.async ones where offered.
std::vector<const Variant*> picked_variants(const std::vector<Variant>& space) {
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
  return picked;
}

TEST(CodegenGroupedWeightGradient, EveryPathMatchesTheReference) {
  const GpuSpec gpu = testing::spec_a100();
  std::map<std::string, int> checked;
  int split = 0, vectors = 0, copies16 = 0, stored = 0;
  std::set<std::string> compiled;  // NVRTC (sm_80): the first variant of each path, storage, split
  for (const GroupedCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const int64_t group = c.attrs.get_int("group", 1);
    for (const auto& [storage, path, dw_storage] : runs_of(c)) {
      SCOPED_TRACE(fmt::format("{} storage, {} path, {} dW", dtype_name(storage), path, dtype_name(dw_storage)));
      const Workload w = weight_gradient_workload(c, storage, dw_storage);
      ASSERT_EQ(w.graph.nodes.size(), 1u);
      EXPECT_EQ(w.kind, ClusterKind::conv);
      EXPECT_EQ(w.graph.nodes[0].attrs.get_int("group", 1), group);
      const WorkloadShape s = analyze_workload(w);
      EXPECT_TRUE(s.weight_grad);
      EXPECT_EQ(s.batch, group);
      EXPECT_EQ(s.m, c.w[0] / group);
      EXPECT_EQ(s.n, shape_numel(c.w) / c.w[0]);
      const auto space = enumerate_variants(w, gpu, SpaceOptions{{path}});
      if (path == "fp32") {
        ASSERT_FALSE(space.empty());
      }
      if (space.empty()) {
        std::cout << c.name << ": no " << path << " variant\n";
        continue;
      }
      for (const Variant* v : picked_variants(space)) {
        const Estimate e = estimate(w, *v, gpu);
        EXPECT_TRUE(std::isfinite(e.seconds) && e.seconds > 0 && e.bound != "unfit") << e.bound;
        const GeneratedKernel k = generate_kernel(w, *v);
        EXPECT_EQ(k.launches.front().grid[2], group * v->param_or("split_k", 1));
        split += v->param_or("split_k", 1) > 1;
        vectors += k.source.find("float4 dc_q") != std::string::npos;
        copies16 += k.source.find("dc_cp_async_16(") != std::string::npos;
        stored += storage != DType::f32;
        const bool splits = v->param_or("split_k", 1) > 1;
        const std::string kind = fmt::format("{} {}{}", path, dtype_name(storage), splits ? " split" : "");
        testing::check_variant_on_emulator(w, *v, compiled.insert(kind).second);
        ++checked[path];
      }
    }
  }
  std::cout << "checked fp32 " << checked["fp32"] << ", tf32 " << checked["tf32"] << ", fp16 " << checked["fp16"]
            << ", bf16 " << checked["bf16"] << "; split-K " << split << "\n";
  for (const std::string p : {"fp32", "fp16", "bf16"}) EXPECT_GE(checked[p], 12) << p;
  EXPECT_GE(checked["tf32"], 2);  // the wide cases
  EXPECT_GE(split, 6);            // g2_long_k's split-K, atomics into dW or through the epilogue
  EXPECT_GE(vectors, 1);          // dY in float4 loads (P = 64)
  EXPECT_GE(copies16, 1);         // f16 dY in 16-byte cp.async copies
  EXPECT_GE(stored, 9);           // f16 / bf16 storage
  EXPECT_GE(compiled.size(), 8u);
}

}  // namespace
}  // namespace dc
