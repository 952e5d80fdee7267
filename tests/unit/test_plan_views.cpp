// Views are not kernels: which nodes are views (view_byte_offsets), how assemble_plan makes
// them `view` tensors instead of steps (also into a model output), and that such a plan
// runs on the host emulator with the reference executor's results.
#include <gtest/gtest.h>

#include <algorithm>

#include "candidates.h"
#include "gpu/gpu_catalog.h"
#include "pass_testing.h"
#include "plan/plan.h"
#include "plan_build.h"
#include "plan_views.h"
#include "ref/executor.h"
#include "runtime.h"

namespace dc {
namespace {

using testing::add_initializer;
using testing::add_input;
using testing::add_node;

Tensor ints(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v); }

const Node& only_node(const Graph& g) { return g.nodes.at(0); }

Attributes axis(int64_t a) {
  Attributes attrs;
  attrs.set("axis", a);
  return attrs;
}

TEST(ViewOffsets, SplitAlongTheOutermostNonUnitAxisIsTwoViews) {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {1, 4, 64});
  add_initializer(g, "sizes", ints({2, 2}));
  add_node(g, "Split", {"x", "sizes"}, {"a", "b"}, axis(1));
  g = testing::with_types(g);
  const auto offsets = view_byte_offsets(g, only_node(g), 256);
  ASSERT_TRUE(offsets.has_value());
  EXPECT_EQ(*offsets, (std::vector<int64_t>{0, 2 * 64 * 4}));
}

TEST(ViewOffsets, SplitAlongAnInnerAxisIsAKernel) {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {4, 128});
  add_initializer(g, "sizes", ints({64, 64}));
  add_node(g, "Split", {"x", "sizes"}, {"a", "b"}, axis(1));
  g = testing::with_types(g);
  EXPECT_FALSE(view_byte_offsets(g, only_node(g), 256).has_value());
}

TEST(ViewOffsets, SliceOfRowsIsAViewWhenAligned) {
  for (const auto& [start, aligned] : std::vector<std::pair<int64_t, bool>>{{2, true}, {1, false}}) {
    Graph g;
    g.opset = 17;
    add_input(g, "x", {8, 32});
    add_initializer(g, "starts", ints({start}));
    add_initializer(g, "ends", ints({start + 3}));
    add_initializer(g, "axes", ints({0}));
    add_node(g, "Slice", {"x", "starts", "ends", "axes"}, {"y"});
    g = testing::with_types(g);
    const auto offsets = view_byte_offsets(g, only_node(g), 256);
    ASSERT_EQ(offsets.has_value(), aligned) << "start " << start;
    if (aligned) {
      EXPECT_EQ(*offsets, std::vector<int64_t>{start * 32 * 4});
    }
  }
}

TEST(ViewOffsets, ColumnSliceAndComputingOpsAreNotViews) {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {8, 128});
  add_initializer(g, "starts", ints({64}));
  add_initializer(g, "ends", ints({128}));
  add_initializer(g, "axes", ints({1}));
  add_node(g, "Slice", {"x", "starts", "ends", "axes"}, {"y"});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Flatten", {"x"}, {"f"});
  g = testing::with_types(g);
  EXPECT_FALSE(view_byte_offsets(g, g.nodes[0], 256).has_value());
  EXPECT_FALSE(view_byte_offsets(g, g.nodes[1], 256).has_value());
  EXPECT_EQ(view_byte_offsets(g, g.nodes[2], 256), std::vector<int64_t>{0});
}

// x -> Relu -> a -> Split(rows) -> s0, s1; Sigmoid(s0) + s1 -> c -> Reshape -> y (output).
Graph view_graph() {
  Graph g;
  g.name = "views";
  g.opset = 17;
  add_input(g, "x", {8, 64});
  add_initializer(g, "sizes", ints({4, 4}));
  add_initializer(g, "shape", ints({2, 128}));
  add_node(g, "Relu", {"x"}, {"a"});
  add_node(g, "Split", {"a", "sizes"}, {"s0", "s1"}, axis(0));
  add_node(g, "Sigmoid", {"s0"}, {"b"});
  add_node(g, "Add", {"b", "s1"}, {"c"});
  add_node(g, "Reshape", {"c", "shape"}, {"y"});
  g.outputs = {"y"};
  return testing::with_types(g);
}

ExecPlan singleton_plan(const Graph& g) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  const std::vector<Candidate> candidates = generate_candidates(g);
  std::vector<StepChoice> choices;
  for (size_t n = 0; n < g.nodes.size(); ++n) choices.push_back({n, std::nullopt, 0, 0});
  PlanOrigin origin;
  origin.gpu = &catalog.require("a100");
  return assemble_plan(g, candidates, choices, origin);
}

const PlanTensor& named(const ExecPlan& p, const std::string& name) {
  for (const auto& t : p.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

TEST(PlanViews, SplitAndReshapeLaunchNothing) {
  const Graph g = view_graph();
  const ExecPlan p = singleton_plan(g);
  ASSERT_EQ(p.steps.size(), 3u);  // Relu, Sigmoid, Add
  ASSERT_EQ(p.views.size(), 2u);
  for (const auto& s : p.steps)
    for (const auto& n : s.nodes) EXPECT_TRUE(n.find("Split") == std::string::npos && n.find("Reshape") == std::string::npos) << n;
  const PlanTensor& s1 = named(p, "s1");
  EXPECT_EQ(s1.kind, PlanTensorKind::view);
  EXPECT_EQ(p.tensors[static_cast<size_t>(s1.view_of)].name, "a");
  EXPECT_EQ(s1.offset, 4 * 64 * 4);
  // `a` is read through s1 by the last step: it stays live until then.
  EXPECT_EQ(named(p, "a").last_step, 2);
  // c is the model output's bytes: the Add writes straight into y.
  const PlanTensor& c = named(p, "c");
  EXPECT_EQ(c.kind, PlanTensorKind::view);
  EXPECT_EQ(p.tensors[static_cast<size_t>(c.view_of)].name, "y");
}

TEST(PlanViews, AViewPlanRunsOnTheEmulatorLikeTheReference) {
  const Graph g = view_graph();
  rt::Runtime r(singleton_plan(g), rt::make_emulator_backend(rt::EmulatorBackendOptions{
                                       ::testing::TempDir() + "dc-emulator-test-cache"}));
  for (uint32_t seed : {31u, 32u}) {
    const Tensor x = testing::random_tensor({8, 64}, seed);
    r.set_input(0, x);
    r.run();
    testing::expect_tensor_near(r.output(0), ref::run_graph(g, {{"x", x}}).at("y"), 1e-6f, 1e-6f);
  }
}

}  // namespace
}  // namespace dc
