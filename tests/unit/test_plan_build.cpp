// Plan assembly and the memory plan: execution order of chosen clusters, tensor binding,
// liveness, and an arena that never lets two live tensors share a byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "gpu/gpu_catalog.h"
#include "ir/error.h"
#include "onnx/import.h"
#include "passes/simplify.h"
#include "plan/memory_plan.h"
#include "plan_build.h"
#include "testing.h"

namespace dc {
namespace {

using testing::make_node;

const GpuSpec& gpu(const char* name) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  return catalog.require(name);
}

bool overlap(int64_t a, int64_t an, int64_t b, int64_t bn) { return a < b + bn && b < a + an; }

void expect_no_live_overlap(const std::vector<MemoryRequest>& r, const MemoryLayout& l) {
  for (size_t i = 0; i < r.size(); ++i)
    for (size_t j = i + 1; j < r.size(); ++j)
      if (r[i].first <= r[j].last && r[j].first <= r[i].last) {
        EXPECT_FALSE(overlap(l.offsets[i], r[i].bytes, l.offsets[j], r[j].bytes))
            << "requests " << i << " and " << j << " are live together and share bytes";
      }
}

TEST(MemoryPlan, ChainReusesTwoSlots) {
  // t_i written at step i, read at step i+1: at most two live at once.
  std::vector<MemoryRequest> r;
  for (int i = 0; i < 10; ++i) r.push_back({1000, i, i + 1});
  const MemoryLayout l = plan_memory(r, 256);
  expect_no_live_overlap(r, l);
  EXPECT_EQ(l.total_bytes, 2 * 1024);
  EXPECT_EQ(l.peak_live_bytes, 2 * 1024);
  for (int64_t o : l.offsets) EXPECT_EQ(o % 256, 0);
}

TEST(MemoryPlan, RandomRequestsNeverAliasLiveTensorsAndBeatOneBufferEach) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<MemoryRequest> r;
    int64_t unshared = 0;
    for (int i = 0; i < 40; ++i) {
      const int first = static_cast<int>(rng() % 30);
      const int last = first + static_cast<int>(rng() % 5);
      const int64_t bytes = 1 + static_cast<int64_t>(rng() % 100000);
      r.push_back({bytes, first, last});
      unshared += (bytes + 255) / 256 * 256;
    }
    const MemoryLayout l = plan_memory(r, 256);
    expect_no_live_overlap(r, l);
    EXPECT_GE(l.total_bytes, l.peak_live_bytes);
    EXPECT_LT(l.total_bytes, unshared);
    for (size_t i = 0; i < r.size(); ++i) EXPECT_LE(l.offsets[i] + r[i].bytes, l.total_bytes);
  }
}

// x -> A = Relu(x), B = Sigmoid(x), C = Add(A, B): cluster {A, C} needs cluster {B}'s output
// although its first node comes first.
Graph diamond() {
  Graph g;
  g.name = "diamond";
  g.opset = 17;
  g.inputs = {"x"};
  g.outputs = {"c"};
  g.tensors["x"] = {DType::f32, {2, 8}};
  for (const char* t : {"a", "b", "c"}) g.tensors[t] = {DType::f32, {2, 8}};
  g.nodes.push_back(make_node("Relu", {"x"}, {"a"}));
  g.nodes.push_back(make_node("Sigmoid", {"x"}, {"b"}));
  g.nodes.push_back(make_node("Add", {"a", "b"}, {"c"}));
  return g;
}

TEST(AssemblePlan, OrdersClustersByDataDependenciesAndBindsTensors) {
  const Graph g = diamond();
  std::vector<Candidate> cands = {{{0}, ClusterKind::elementwise, "relu"},
                                  {{1}, ClusterKind::elementwise, "sigmoid"},
                                  {{2}, ClusterKind::elementwise, "add"},
                                  {{0, 2}, ClusterKind::elementwise, "relu+add"}};
  ASSERT_TRUE(is_legal(g, cands[3].nodes));
  PlanOrigin origin;
  origin.gpu = &gpu("a100");
  const ExecPlan p = assemble_plan(g, cands, {{3, std::nullopt, 0, 0}, {1, std::nullopt, 0, 0}}, origin);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_EQ(p.steps[0].cluster, "sigmoid#1");
  EXPECT_EQ(p.steps[1].cluster, "relu+add#3");
  EXPECT_EQ(p.steps[1].nodes, (std::vector<std::string>{g.nodes[0].name, g.nodes[2].name}));
  EXPECT_EQ(p.reference_steps, 2);
  // b is the only intermediate: written by step 0, read by step 1.
  int b = -1;
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].name == "b") b = static_cast<int>(i);
  ASSERT_GE(b, 0);
  EXPECT_EQ(p.tensors[static_cast<size_t>(b)].kind, PlanTensorKind::intermediate);
  EXPECT_EQ(p.tensors[static_cast<size_t>(b)].first_step, 0);
  EXPECT_EQ(p.tensors[static_cast<size_t>(b)].last_step, 1);
  EXPECT_NE(std::find(p.steps[1].buffers.begin(), p.steps[1].buffers.end(), b), p.steps[1].buffers.end());
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.tensors[static_cast<size_t>(p.outputs[0])].name, "c");
  EXPECT_EQ(p.tensors[static_cast<size_t>(p.inputs[0])].kind, PlanTensorKind::input);
}

// x -> Y = MatMul(x, w); w@next = dc.SgdUpdate(w, g); Z = MatMul(x, w), the last node in
// node order but reading w, which the update writes in place (docs/training.md "State between
// steps"): no data edge orders Z before the update, so the plan must add one.
Graph update_before_a_later_reader() {
  Graph g;
  g.name = "update_order";
  g.opset = 17;
  g.inputs = {"x", "g"};
  g.outputs = {"y", "w@next", "z"};
  g.tensors["x"] = {DType::f32, {2, 4}};
  for (const char* t : {"w", "g", "w@next"}) g.tensors[t] = {DType::f32, {4, 4}};
  for (const char* t : {"y", "z"}) g.tensors[t] = {DType::f32, {2, 4}};
  g.initializers["w"] = testing::random_tensor({4, 4}, 7);
  Attributes a;
  a.set("lr", 0.1f);
  a.set("momentum", 0.0f);
  a.set("weight_decay", 0.0f);
  g.nodes.push_back(make_node("MatMul", {"x", "w"}, {"y"}));
  g.nodes.push_back(make_node("dc.SgdUpdate", {"w", "g"}, {"w@next"}, a));
  g.nodes.push_back(make_node("MatMul", {"x", "w"}, {"z"}));
  return g;
}

TEST(AssemblePlan, AnOptimizerUpdateRunsAfterEveryReaderOfTheTensorItWrites) {
  const Graph g = update_before_a_later_reader();
  std::vector<Candidate> cands = {{{0}, ClusterKind::gemm, "matmul"},
                                  {{1}, ClusterKind::opaque, "dc.sgdupdate"},
                                  {{2}, ClusterKind::gemm, "matmul"}};
  PlanOrigin origin;
  origin.gpu = &gpu("a100");
  const ExecPlan p =
      assemble_plan(g, cands, {{0, std::nullopt, 0, 0}, {1, std::nullopt, 0, 0}, {2, std::nullopt, 0, 0}}, origin);
  ASSERT_EQ(p.steps.size(), 3u);
  // By first node alone the update would run second, before Z's MatMul reads w.
  EXPECT_EQ(p.steps[0].nodes, (std::vector<std::string>{g.nodes[0].name}));
  EXPECT_EQ(p.steps[1].nodes, (std::vector<std::string>{g.nodes[2].name}));
  EXPECT_EQ(p.steps[2].nodes, (std::vector<std::string>{g.nodes[1].name}));
}

TEST(AssemblePlan, OutputThatIsAModelInputIsRefused) {
  Graph g = diamond();
  g.outputs.push_back("x");
  std::vector<Candidate> cands = {{{0}, ClusterKind::elementwise, "relu"},
                                  {{1}, ClusterKind::elementwise, "sigmoid"},
                                  {{2}, ClusterKind::elementwise, "add"}};
  PlanOrigin origin;
  origin.gpu = &gpu("a100");
  try {
    assemble_plan(g, cands, {{0, std::nullopt, 0, 0}, {1, std::nullopt, 0, 0}, {2, std::nullopt, 0, 0}}, origin);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

Graph load_example(const std::string& name) {
  return simplify(import_onnx_file(std::string(DC_SOURCE_DIR) + "/examples/" + name + "/model.onnx"));
}

TEST(EstimatedPlan, TinyCnnCoversEveryNodeOnceSharesMemoryAndReusesModules) {
  const Graph g = load_example("tiny_cnn");
  const ExecPlan p = build_estimated_plan(g, gpu("h100"));
  std::multiset<std::string> covered;
  for (const auto& s : p.steps) covered.insert(s.nodes.begin(), s.nodes.end());
  for (const auto& v : p.views) covered.insert(v.nodes.begin(), v.nodes.end());
  EXPECT_EQ(covered.size(), g.nodes.size());
  EXPECT_EQ(p.views.size(), 1u);  // the Flatten before the Gemm launches nothing
  for (const auto& n : g.nodes) EXPECT_EQ(covered.count(n.name), 1u) << n.name;
  EXPECT_LT(p.steps.size(), g.nodes.size());  // something was fused
  EXPECT_EQ(p.reference_steps, 0);
  EXPECT_GT(p.estimated_total_us, 0);
  EXPECT_EQ(p.gpu_arch, "sm_90");
  EXPECT_LT(p.arena_bytes, p.unshared_bytes);

  // Every tensor is written before it is read; live intermediates never share bytes.
  std::vector<MemoryRequest> req;
  std::vector<int64_t> offsets;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const PlanTensor& t = p.tensors[i];
    if (t.kind == PlanTensorKind::weight) {
      EXPECT_TRUE(p.values[i].defined()) << t.name;
    }
    if (t.kind != PlanTensorKind::intermediate && t.kind != PlanTensorKind::scratch) continue;
    EXPECT_LE(t.first_step, t.last_step);
    EXPECT_LE(t.offset + t.bytes(), p.arena_bytes);
    req.push_back({t.bytes(), t.first_step, t.last_step});
    offsets.push_back(t.offset);
  }
  MemoryLayout l;
  l.offsets = offsets;
  expect_no_live_overlap(req, l);
}

TEST(EstimatedPlan, ReferenceOnlyPlanHasOneStepPerNodeAndSharesIdenticalModules) {
  const Graph g = load_example("tiny_transformer");
  const ExecPlan p = build_estimated_plan(g, gpu("a100"), {}, true);
  EXPECT_EQ(p.steps.size() + p.views.size(), g.nodes.size());  // Reshapes are views
  EXPECT_EQ(p.reference_steps, static_cast<int>(p.steps.size()));
  std::set<std::pair<std::string, std::string>> distinct;
  for (const auto& s : p.steps) distinct.insert({s.workload, s.variant_key});
  EXPECT_EQ(p.modules.size(), distinct.size());
}

}  // namespace
}  // namespace dc
