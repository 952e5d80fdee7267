// A training step's memory (docs/training.md, "Memory"): the report of plan/memory_report.h,
// activations kept alive until their backward use, optimizer updates right after their
// gradient, and recomputation of cheap chains (coordinator/train_recompute.h), which must
// lower the peak and leave the step's loss and updates as they were.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "gpu/gpu_catalog.h"
#include "json/json.h"
#include "passes/training_state.h"
#include "ir/optimizer_update.h"
#include "plan/memory_report.h"
#include "plan/plan_io.h"
#include "plan_build.h"
#include "plan_estimate.h"
#include "ref/compare.h"
#include "ref/train_step.h"
#include "runtime.h"
#include "testing.h"
#include "train_recompute.h"
#include "training_testing.h"

namespace dc {
namespace {

ExecPlan sgd_plan(const Graph& g) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& gpu = catalog.require("h100");
  PlanTraining t;
  t.loss = "cross_entropy";
  t.labels = "labels";
  t.optimizer = "sgd";
  t.hyperparameters = {{"lr", 0.01}, {"weight_decay", 0.01}, {"momentum", 0.9}};
  t.source_model = std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx";
  return build_estimated_plan(g, plan_by_estimate(g, {&gpu}, PlanOptions{}), 0, PlanOptions{}, &t);
}

int64_t bytes_of(const Graph& g, const std::string& t) {
  return shape_numel(g.info(t).shape) * static_cast<int64_t>(dtype_size(g.info(t).dtype));
}

ref::TensorMap tiny_cnn_batch(const Graph& g) {
  Tensor labels(DType::i64, g.info(g.inputs[1]).shape);
  for (int64_t i = 0; i < labels.numel(); ++i) labels.mutable_data<int64_t>()[i] = (3 * i + 5) % 10;
  return {{g.inputs[0], testing::random_tensor(g.info(g.inputs[0]).shape, 31)}, {g.inputs[1], labels}};
}

TEST(TrainMemory, ReportSplitsTheStepsDeviceMemory) {
  const Graph g = testing::training_step("tiny_cnn", OptimizerKind::sgd);
  const ExecPlan p = sgd_plan(g);
  const PlanMemoryReport m = memory_report(p);
  int64_t trained = 0;
  for (const Node& n : g.nodes)
    if (n.op == "dc.SgdUpdate") {
      const OptimizerUpdateLayout l = optimizer_update_layout(n);
      for (size_t t = 0; t < l.tensors; ++t) trained += bytes_of(g, n.input(l.input(t, 0)));
    }
  EXPECT_EQ(m.weights, trained);
  EXPECT_EQ(m.optimizer_state, trained + 8) << "one momentum buffer per weight and the i64 step counter";
  EXPECT_GT(m.other_state, 0) << "the BatchNorm running statistics";
  // Weights and momentum are updated in place (plan/state_alias.h): only the BatchNorm running
  // statistics and the step counter have a next-state buffer the runtime copies.
  EXPECT_EQ(m.state_next, m.other_state + 8);
  EXPECT_EQ(m.arena, p.arena_bytes);
  EXPECT_LE(m.arena_peak_live, m.arena);
  EXPECT_EQ(m.total, m.weights + m.optimizer_state + m.other_state + m.constants + m.io + m.state_next + m.arena);
  EXPECT_EQ(m.gradients, trained) << "every gradient is materialized in the arena for its update";
  ASSERT_GT(m.backward_step, 0);
  ASSERT_FALSE(m.largest_saved.empty());
  EXPECT_EQ(m.largest_saved[0].bytes, 16 * 32 * 32 * 4) << m.largest_saved[0].name;

  // Every activation kept for the backward pass stays live until a backward step reads it:
  // ending its life before the backward pass (so that its bytes could be reused) is refused.
  int kept = 0;
  int64_t kept_bytes = 0;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const PlanTensor& t = p.tensors[i];
    if (t.kind != PlanTensorKind::intermediate || t.first_step >= m.backward_step || t.last_step < m.backward_step)
      continue;
    ++kept;
    kept_bytes += t.bytes();
    ExecPlan early = p;
    early.tensors[i].last_step = m.backward_step - 1;
    EXPECT_NE(testing::user_error_of([&] { validate_plan(early); }).find("after its last_step"), std::string::npos)
        << t.name;
  }
  EXPECT_EQ(kept, m.saved_count);
  EXPECT_EQ(kept_bytes, m.saved_bytes);

  // plan.json carries the report (derived: readers ignore it).
  const std::string dir = ::testing::TempDir() + "dc-train-memory";
  std::filesystem::remove_all(dir);
  write_plan(p, dir);
  std::ifstream f(dir + "/plan.json");
  std::stringstream text;
  text << f.rdbuf();
  const json::Value root = json::parse(text.str(), "plan.json");
  const json::Value* memory = root.find("memory");
  ASSERT_NE(memory, nullptr);
  int64_t saved = -1, total = -1;
  ASSERT_TRUE(memory->find("saved_for_backward") && memory->find("saved_for_backward")->find("bytes"));
  EXPECT_TRUE(memory->find("saved_for_backward")->find("bytes")->integer(&saved));
  EXPECT_TRUE(memory->find("total_bytes") && memory->find("total_bytes")->integer(&total));
  EXPECT_EQ(saved, m.saved_bytes);
  EXPECT_EQ(total, m.total);
  std::filesystem::remove_all(dir);
}

// Each bucket of updates runs right after its last gradient, and a bucket holds only
// updates whose gradients finish one after another: only the other members' gradients and
// other updates run between a gradient and its update.
void expect_updates_follow_their_gradients(const Graph& g, size_t want_updates, size_t want_nodes) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  size_t tensors = 0, nodes = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (g.nodes[k].op != "dc.AdamWUpdate") continue;
    ++nodes;
    const OptimizerUpdateLayout l = optimizer_update_layout(g.nodes[k]);
    tensors += l.tensors;
    std::set<size_t> gradients;
    std::set<std::string> weights;
    for (size_t t = 0; t < l.tensors; ++t) {
      gradients.insert(producer.at(g.nodes[k].input(l.input(t, 1))));
      weights.insert(g.nodes[k].input(l.input(t, 0)));
    }
    // Ready when its gradients are done and nothing else reads its weights any more (so the
    // plan updates them in place): no node after it reads one, and only updates wait between.
    size_t ready = *gradients.rbegin();
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (i == k) continue;
      for (const auto& in : g.nodes[i].inputs) {
        if (!weights.count(in)) continue;
        EXPECT_LT(i, k) << g.nodes[i].name << " reads " << in << " after " << g.nodes[k].name << " updated it";
        if (i < k) ready = std::max(ready, i);
      }
    }
    for (size_t i = ready + 1; i < k; ++i)
      EXPECT_EQ(g.nodes[i].op, "dc.AdamWUpdate") << g.nodes[k].name << " waits for " << g.nodes[i].name;
    // No gradient of another bucket finishes between this bucket's first and last one.
    for (size_t i = *gradients.begin(); i < *gradients.rbegin(); ++i)
      for (const auto& o : g.nodes[i].outputs)
        for (size_t j = k + 1; j < g.nodes.size(); ++j)
          if (g.nodes[j].op == "dc.AdamWUpdate") {
            const OptimizerUpdateLayout lj = optimizer_update_layout(g.nodes[j]);
            for (size_t t = 0; t < lj.tensors; ++t)
              EXPECT_NE(g.nodes[j].input(lj.input(t, 1)), o) << g.nodes[j].name << " belongs in " << g.nodes[k].name;
          }
  }
  EXPECT_EQ(tensors, want_updates);
  EXPECT_EQ(nodes, want_nodes);
  EXPECT_EQ(g.nodes.back().name, "optimizer/step");
}

TEST(TrainMemory, UpdatesRunRightAfterTheirGradientAndTheLastReadOfTheirWeight) {
  const Graph single = testing::training_step("tiny_cnn", OptimizerKind::adamw, {},
                                              [](TrainingSpec& s) { s.optimizer_bucket_bytes = 0; });
  size_t weights = 0;
  for (const Node& n : single.nodes) weights += n.op == "dc.AdamWUpdate";
  ASSERT_GT(weights, 10u);
  expect_updates_follow_their_gradients(single, weights, weights);
  // The default buckets: tiny_cnn's weights fit one bucket's bytes; AdamW's 7 buffers a
  // tensor cap a kernel at 18 tensors.
  const Graph bucketed = testing::training_step("tiny_cnn", OptimizerKind::adamw);
  expect_updates_follow_their_gradients(bucketed, weights, (weights + 17) / 18);
}

TEST(TrainMemory, RecomputeLowersThePeakAndLeavesTheStepUnchanged) {
  Graph kept = testing::training_step("tiny_cnn", OptimizerKind::sgd);
  Graph again = kept;
  const cli::RecomputeResult r = cli::recompute_cheap_chains(again);
  ASSERT_FALSE(r.tensors.empty());
  EXPECT_LT(r.peak_after, r.peak_before);
  bool stem = false;
  for (const auto& t : r.tensors)
    if (t.tensor == "/stem/stem.2/Relu_output_0")
      stem = t.ops == std::vector<std::string>{"Reshape", "Sub", "Reshape", "Mul", "Reshape",
                                               "Mul",     "Reshape", "Add", "Relu"};  // BatchNorm, ReLU
  EXPECT_TRUE(stem) << cli::describe_recompute(r);

  const ExecPlan p_kept = sgd_plan(kept), p_again = sgd_plan(again);
  const PlanMemoryReport m_kept = memory_report(p_kept), m_again = memory_report(p_again);
  EXPECT_LT(m_again.saved_bytes, m_kept.saved_bytes);
  EXPECT_LT(p_again.arena_bytes, p_kept.arena_bytes);
  for (const PlanTensor& t : p_again.tensors) {
    if (t.name != "/stem/stem.2/Relu_output_0") continue;
    EXPECT_LT(t.last_step, m_again.backward_step) << "recomputed, not kept";
  }

  // The same step on the CPU reference: loss and every update.
  const ref::TensorMap batch = tiny_cnn_batch(kept);
  const std::map<std::string, Tensor> before = kept.initializers;
  const ref::TensorMap out_kept = ref::run_training_step(kept, batch), out_again = ref::run_training_step(again, batch);
  EXPECT_NEAR(ref::loss_value(again, out_again), ref::loss_value(kept, out_kept), 1e-6);
  // The recomputed plan on the host emulator against the reference step without recompute.
  rt::Runtime run(p_again, rt::make_emulator_backend(rt::EmulatorBackendOptions{::testing::TempDir() + "dc-emulator-test-cache"}));
  run.set_input(0, batch.at(kept.inputs[0]));
  run.set_input(1, batch.at(kept.inputs[1]));
  run.train_step();
  EXPECT_NEAR(run.output(0).to_float_vector()[0], ref::loss_value(kept, out_kept), 1e-5);
  for (const StateUpdate& u : training_state_updates(kept)) {
    const Tensor& old = before.at(u.state);
    if (old.dtype() != DType::f32) continue;
    const auto o = old.to_float_vector(), want = kept.initializers.at(u.state).to_float_vector();
    const auto ref_again = again.initializers.at(u.state).to_float_vector(), dev = run.weight(u.state).to_float_vector();
    Tensor dw(DType::f32, old.shape()), dr(DType::f32, old.shape()), dd(DType::f32, old.shape());
    for (size_t i = 0; i < o.size(); ++i) {
      dw.mutable_data<float>()[i] = want[i] - o[i];
      dr.mutable_data<float>()[i] = ref_again[i] - o[i];
      dd.mutable_data<float>()[i] = dev[i] - o[i];
    }
    const ref::Comparison same = ref::compare_tensors(dr, dw, 1e-5, 1e-9);
    EXPECT_TRUE(same.pass) << u.state << ": reference update with recompute, rel L2 " << same.rel_l2_error;
    const ref::Comparison device = ref::compare_tensors(dd, dw, 1e-3, 1e-7);  // verify --train's bound
    EXPECT_TRUE(device.pass) << u.state << ": emulated update, rel L2 " << device.rel_l2_error;
  }
}

}  // namespace
}  // namespace dc
