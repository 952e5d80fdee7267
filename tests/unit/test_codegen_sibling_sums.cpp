// Sibling sums (docs/codegen.md "Sibling sums"): ReduceSum/ReduceMean nodes over the same
// rows whose prologues read one tensor are one candidate cluster (coordinator/candidates.cpp)
// and one row_reduce kernel with an accumulator per reduction. BatchNorm's backward form
// (sum dY and sum dY x_hat over axes 0, 2, 3 of NCHW, batch > 1, odd extents) and
// LayerNorm's (the two row means over the last axis, one row length a multiple of 4 so
// that vector loads are offered), f32, f16 and bf16 storage, a spread of the parameter
// space, on the host emulator against the CPU reference (fresh random inputs, poisoned
// outputs, variant_tolerance); NVRTC compiles one variant a case for sm_80.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "candidates.h"
#include "conv_gradient_testing.h"
#include "estimator_testing.h"
#include "ir/workload.h"
#include "op_cases.h"
#include "param_space.h"
#include "pass_testing.h"
#include "variant_params.h"

namespace dc {
namespace {

using testing::add_input;
using testing::add_node;

void add_axes(Graph& g, const std::vector<int64_t>& axes) {
  testing::add_initializer(g, "axes", Tensor::from_vector<int64_t>({static_cast<int64_t>(axes.size())}, axes));
}

// db = ReduceSum(dy), dscale = ReduceSum(dy * (x - mean) * invstd) over axes 0, 2, 3.
Graph batch_norm_sums(const Shape& x) {
  Graph g;
  g.opset = 17;
  const Shape channel{1, x[1], 1, 1};
  add_input(g, "dy", x);
  add_input(g, "x", x);
  add_input(g, "mean", channel);
  add_input(g, "invstd", channel);
  add_axes(g, {0, 2, 3});
  add_node(g, "ReduceSum", {"dy", "axes"}, {"db"});
  add_node(g, "Sub", {"x", "mean"}, {"xc"});
  add_node(g, "Mul", {"xc", "invstd"}, {"xh"});
  add_node(g, "Mul", {"dy", "xh"}, {"dyxh"});
  add_node(g, "ReduceSum", {"dyxh", "axes"}, {"dscale"});
  g.outputs = {"db", "dscale"};
  return testing::with_types(g);
}

// LayerNorm's backward means: a = dy * scale; m1 = mean(a), m2 = mean(a * xh) over the last axis.
Graph layer_norm_means(const Shape& x) {
  Graph g;
  g.opset = 17;
  add_input(g, "dy", x);
  add_input(g, "scale", {x.back()});
  add_input(g, "xh", x);
  add_axes(g, {-1});
  add_node(g, "Mul", {"dy", "scale"}, {"a"});
  add_node(g, "ReduceMean", {"a", "axes"}, {"m1"});
  add_node(g, "Mul", {"a", "xh"}, {"axh"});
  add_node(g, "ReduceMean", {"axh", "axes"}, {"m2"});
  g.outputs = {"a", "m1", "m2"};  // a is read by the data gradient too
  return testing::with_types(g);
}

// Every tensor of g stored as `dt` (the axes stay int64), types recomputed.
Graph stored_as(const Graph& g, DType dt) {
  std::map<std::string, DType> types;
  for (const auto& [name, info] : g.tensors)
    if (info.dtype == DType::f32) types[name] = dt;
  return testing::retyped(g, types);
}

// The candidate with both reductions: one reduction-kind workload.
Workload sibling_workload(const Graph& g) {
  const auto candidates = generate_candidates(g);
  const WorkloadSet set = dedupe_workloads(g, candidates);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Workload& w = set.workloads[set.candidate_workload[i]];
    int reductions = 0;
    for (const auto& n : w.graph.nodes) reductions += n.op == "ReduceSum" || n.op == "ReduceMean";
    if (w.kind == ClusterKind::reduction && reductions == 2) return w;
  }
  ADD_FAILURE() << "no candidate of both reductions";
  return {};
}

// A spread of the space: one and several warps a row (the shared-memory stage of each
// accumulator), several rows a block, each vector width; f16/bf16 storage (no vector
// loads) one and several warps.
std::vector<const Variant*> spread(const std::vector<Variant>& space, bool f32) {
  std::vector<const Variant*> picked;
  std::set<std::vector<int64_t>> seen;
  for (const auto& v : space) {
    const ReductionParams p = ReductionParams::of(v);
    const std::vector<int64_t> key =
        f32 ? std::vector<int64_t>{p.threads_per_row > 32, p.rows_per_block > 1, p.vec} : std::vector<int64_t>{p.threads_per_row > 32};
    if (seen.insert(key).second) picked.push_back(&v);
  }
  return picked;
}

struct SumsCase {
  const char* name;
  Graph graph;
};

TEST(CodegenSiblingSums, BatchNormAndLayerNormBackwardSumsInOneKernel) {
  const GpuSpec gpu = testing::spec_a100();
  const SumsCase cases[] = {
      {"batch_norm", batch_norm_sums({3, 5, 7, 9})},
      {"batch_norm_wide_plane", batch_norm_sums({2, 3, 19, 23})},
      {"layer_norm", layer_norm_means({3, 7, 37})},
      {"layer_norm_vec", layer_norm_means({2, 5, 44})},
  };
  int checked = 0, vectored = 0, block_rows = 0;
  for (const SumsCase& c : cases)
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(fmt::format("{} {}", c.name, dtype_name(dt)));
      const Workload w = sibling_workload(stored_as(c.graph, dt));
      ASSERT_FALSE(w.graph.nodes.empty());
      const auto space = enumerate_variants(w, gpu, SpaceOptions{{"fp32"}});
      ASSERT_FALSE(space.empty());
      bool nvrtc = dt == DType::f32;
      for (const Variant* v : spread(space, dt == DType::f32)) {
        testing::check_variant_on_emulator(w, *v, nvrtc);
        nvrtc = false;
        ++checked;
        vectored += ReductionParams::of(*v).vec > 1;
        block_rows += ReductionParams::of(*v).threads_per_row > 32;
      }
    }
  EXPECT_GE(checked, 30);
  EXPECT_GE(vectored, 2);
  EXPECT_GE(block_rows, 14);
}

// The estimator sees one row pass with two tree reductions (dY read once: the workload's bytes).
TEST(CodegenSiblingSums, TheWorkloadCountsOneTreeReductionPerSum) {
  const Workload w = sibling_workload(batch_norm_sums({3, 5, 7, 9}));
  const WorkloadShape s = analyze_workload(w);
  EXPECT_EQ(s.reductions_per_row, 2);
  EXPECT_EQ(s.row_len, 3 * 7 * 9);
  EXPECT_EQ(s.rows, 5);
}

// Refused pairs: a Max beside a Sum, sums over other axes, a mean of the deviations from
// the other's mean (a decomposed LayerNorm: the second reads the first's result).
TEST(CodegenSiblingSums, OtherReductionsStayApart) {
  const auto pairs = [](const Graph& g) {
    int n = 0;
    for (const auto& c : generate_candidates(g)) {
      int reductions = 0;
      for (size_t i : c.nodes) reductions += classify_op(g.nodes[i]) == OpClass::reduction;
      n += reductions > 1;
    }
    return n;
  };
  EXPECT_EQ(pairs(batch_norm_sums({3, 5, 7, 9})), 1) << "the sums themselves";
  for (const char* op : {"ReduceMax", "ReduceL2"}) {
    Graph g = batch_norm_sums({3, 5, 7, 9});
    g.nodes.back().op = op;
    EXPECT_EQ(pairs(g), 0) << op;
  }
  Graph other_axes = batch_norm_sums({3, 5, 7, 9});
  testing::add_initializer(other_axes, "axes23", Tensor::from_vector<int64_t>({2}, {2, 3}));
  other_axes.nodes.back().inputs[1] = "axes23";
  EXPECT_EQ(pairs(testing::with_types(other_axes)), 0) << "axes 2, 3 beside 0, 2, 3";
  Graph ln;
  ln.opset = 17;
  add_input(ln, "x", {3, 7, 37});
  add_axes(ln, {-1});
  add_node(ln, "ReduceMean", {"x", "axes"}, {"mean"});
  add_node(ln, "Sub", {"x", "mean"}, {"d"});
  add_node(ln, "Mul", {"d", "d"}, {"d2"});
  add_node(ln, "ReduceMean", {"d2", "axes"}, {"var"});
  ln.outputs = {"var"};
  EXPECT_EQ(pairs(testing::with_types(ln)), 0) << "the variance reads the mean";
}

}  // namespace
}  // namespace dc
