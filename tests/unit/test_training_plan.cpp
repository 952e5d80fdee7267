// Training plans (docs/training.md, "Training plans"): plan.json's "training" both ways and
// its validation, and training steps on the host emulator (every kernel of the step, the
// state carried between steps by the runtime) against the CPU reference's steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_catalog.h"
#include "passes/training_state.h"
#include "ir/join.h"
#include "plan/memory_report.h"
#include "plan/plan_io.h"
#include "plan/state_alias.h"
#include "plan_build.h"
#include "plan_estimate.h"
#include "ref/compare.h"
#include "ref/train_step.h"
#include "runtime.h"
#include "template_optimizer.h"
#include "emulated_steps_testing.h"
#include "testing.h"
#include "training_testing.h"

namespace dc {
namespace {

PlanTraining adamw_description() {
  PlanTraining t;
  t.loss = "cross_entropy";
  t.labels = "labels";
  t.optimizer = "adamw";
  t.hyperparameters = {{"lr", 1e-3}, {"weight_decay", 0.01}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}};
  t.source_model = std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx";
  return t;
}

ExecPlan estimated_training_plan(const Graph& g) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& gpu = catalog.require("h100");
  const ModelPlan mp = plan_by_estimate(g, {&gpu}, PlanOptions{});
  const PlanTraining t = adamw_description();
  return build_estimated_plan(g, mp, 0, PlanOptions{}, &t);
}

int tensor_id(const ExecPlan& p, const std::string& name) {
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

TEST(TrainingPlan, RecordsEveryStateAndRoundTripsThroughPlanJson) {
  const Graph g = testing::training_step("tiny_cnn", OptimizerKind::adamw);
  const ExecPlan p = estimated_training_plan(g);
  ASSERT_TRUE(p.training);
  // One pair per STATE@next output of the step graph; the loss and the logits first.
  EXPECT_EQ(p.training->state.size(), training_state_updates(g).size());
  EXPECT_EQ(p.training->model_outputs, 2);
  // The optimizer's states are updated in place (TrainingPlan.EveryOptimizerStateIsUpdatedInPlace):
  // the other pairs' next values stay outputs after the model's.
  EXPECT_EQ(p.outputs.size(), 2 + copied_state_updates(p).size());
  const int step = tensor_id(p, std::string(kStepTensor));
  ASSERT_GE(step, 0);
  EXPECT_EQ(p.tensors[static_cast<size_t>(step)].kind, PlanTensorKind::weight)
      << "the step counter must be a buffer the runtime updates, never a constant in a kernel";

  const std::string dir = ::testing::TempDir() + "dc-training-plan";
  std::filesystem::remove_all(dir);
  write_plan(p, dir);
  const ExecPlan back = read_plan(dir);
  ASSERT_TRUE(back.training);
  EXPECT_EQ(back.training->loss, "cross_entropy");
  EXPECT_EQ(back.training->optimizer, "adamw");
  EXPECT_EQ(back.training->hyperparameters, p.training->hyperparameters);
  EXPECT_EQ(back.training->source_model, p.training->source_model);
  EXPECT_EQ(back.training->model_outputs, 2);
  ASSERT_EQ(back.training->state.size(), p.training->state.size());
  for (size_t i = 0; i < back.training->state.size(); ++i) {
    EXPECT_EQ(back.training->state[i].state, p.training->state[i].state);
    EXPECT_EQ(back.training->state[i].next, p.training->state[i].next);
  }
  std::filesystem::remove_all(dir);
}

TEST(TrainingPlan, ValidationRefusesAStateThatIsNotAWeight) {
  const ExecPlan good = estimated_training_plan(testing::training_step("tiny_cnn", OptimizerKind::sgd));
  ExecPlan bad = good;
  bad.training->state[0].state = bad.inputs[0];
  EXPECT_NE(testing::user_error_of([&] { validate_plan(bad); }).find("is not a weight"), std::string::npos);
  bad = good;
  bad.training->state[0].next = bad.outputs[0];  // the loss
  EXPECT_NE(testing::user_error_of([&] { validate_plan(bad); }).find("is neither an output after the model's"),
            std::string::npos);
}

// Every optimizer state of tiny_cnn (17 weights and biases; SGD: one momentum each, AdamW: two
// moments each) is written in place by its update, and is no longer an output: the memory
// report's next state is only what is still copied (BatchNorm's running statistics, the step
// counter). AdamW's step counter is read by the update, so it stays copied.
TEST(TrainingPlan, EveryOptimizerStateIsUpdatedInPlace) {
  for (const auto& [kind, per_weight] : {std::pair{OptimizerKind::sgd, 2}, std::pair{OptimizerKind::adamw, 3}}) {
    const Graph g = testing::training_step("tiny_cnn", kind);
    PlanTraining t = adamw_description();
    t.optimizer = kind == OptimizerKind::sgd ? "sgd" : "adamw";
    static const GpuCatalog catalog = GpuCatalog::builtin();
    const ModelPlan mp = plan_by_estimate(g, {&catalog.require("h100")}, PlanOptions{});
    const ExecPlan p = build_estimated_plan(g, mp, 0, PlanOptions{}, &t);
    int aliased = 0, trained = 0, bn_stats = 0;
    std::vector<std::string> copied;
    for (const PlanStateUpdate& u : p.training->state) {
      const std::string& name = p.tensors[static_cast<size_t>(u.state)].name;
      if (is_in_place(p, u)) {
        ++aliased;
        EXPECT_EQ(std::find(p.outputs.begin(), p.outputs.end(), u.next), p.outputs.end()) << name;
      } else {
        copied.push_back(name);
        bn_stats += name.find("running_") != std::string::npos;
      }
      trained += name.find('@') == std::string::npos && name.find("running_") == std::string::npos &&
                 name != kStepTensor;
    }
    EXPECT_EQ(trained, 17);
    EXPECT_EQ(aliased, 17 * per_weight) << join(copied, ", ");
    EXPECT_EQ(bn_stats, 8);
    EXPECT_EQ(copied.size(), 9u) << join(copied, ", ");  // 8 running statistics, train.step
    const PlanMemoryReport m = memory_report(p);
    int64_t copied_bytes = 0;
    for (const PlanStateUpdate& u : copied_state_updates(p)) copied_bytes += p.tensors[static_cast<size_t>(u.next)].bytes();
    EXPECT_EQ(m.state_next, copied_bytes);
    EXPECT_LT(m.state_next, 1024);
  }
}

// A hand-edited plan that aliases a state whose old value a later step still reads, or that
// a kernel other than an optimizer update writes in place, is refused by validate_plan.
TEST(TrainingPlan, ValidationRefusesAnUnsafeInPlaceUpdate) {
  const ExecPlan good = estimated_training_plan(testing::training_step("tiny_cnn", OptimizerKind::sgd));
  const auto alias = [](ExecPlan& p, size_t pair) {
    const PlanStateUpdate u = p.training->state[pair];
    PlanTensor& n = p.tensors[static_cast<size_t>(u.next)];
    n.kind = PlanTensorKind::view;
    n.view_of = u.state;
    n.offset = 0;
    p.outputs.erase(std::find(p.outputs.begin(), p.outputs.end(), u.next));
  };
  const auto pair_of = [&](const ExecPlan& p, const std::string& state) {
    for (size_t i = 0; i < p.training->state.size(); ++i)
      if (p.tensors[static_cast<size_t>(p.training->state[i].state)].name == state) return i;
    ADD_FAILURE() << "no state " << state;
    return size_t{0};
  };
  // fc.weight is aliased: its update runs after the forward Gemm and the data gradient that
  // read it. Append a copy of its last reader after the update: it would read the new value.
  ExecPlan bad = good;
  ASSERT_TRUE(is_in_place(bad, bad.training->state[pair_of(bad, "fc.weight")]));
  const int w = tensor_id(bad, "fc.weight");
  size_t update = 0, last_read = 0;
  for (size_t s = 0; s < bad.steps.size(); ++s) {
    const GeneratedKernel& m = bad.modules[static_cast<size_t>(bad.steps[s].module)];
    for (size_t j = 0; j < m.buffers.size(); ++j)
      if (bad.steps[s].buffers[j] == w && m.buffers[j].role == BufferRole::input)
        (is_optimizer_update_kernel(m) ? update : last_read) = s;
  }
  ASSERT_GT(update, last_read);
  bad.steps.push_back(bad.steps[last_read]);
  const int again = static_cast<int>(bad.steps.size()) - 1;
  for (int& id : bad.steps.back().buffers)  // scratch of its own
    if (bad.tensors[static_cast<size_t>(id)].kind == PlanTensorKind::scratch) {
      PlanTensor t = bad.tensors[static_cast<size_t>(id)];
      t.first_step = t.last_step = again;
      id = static_cast<int>(bad.tensors.size());
      bad.tensors.push_back(t);
      bad.values.emplace_back();
    }
  bad.arena_bytes = 0;
  for (PlanTensor& t : bad.tensors)  // one buffer per arena tensor, intermediates live to the end
    if (t.kind == PlanTensorKind::intermediate || t.kind == PlanTensorKind::scratch) {
      t.offset = bad.arena_bytes;
      if (t.kind == PlanTensorKind::intermediate) t.last_step = again;
      bad.arena_bytes += (t.bytes() + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
    }
  std::string e = testing::user_error_of([&] { validate_plan(bad); });
  EXPECT_NE(e.find("cannot update tensors[" + std::to_string(w) + "] 'fc.weight' in place: step " +
                   std::to_string(again)),
            std::string::npos) << e;
  EXPECT_NE(e.find("reads 'fc.weight' after step " + std::to_string(update)), std::string::npos) << e;
  // The same plan unaliased is valid, and alias_state_updates leaves fc.weight copied.
  const PlanStateUpdate fc = bad.training->state[pair_of(bad, "fc.weight")];
  PlanTensor& next = bad.tensors[static_cast<size_t>(fc.next)];
  next.kind = PlanTensorKind::output;
  next.view_of = next.offset = -1;
  bad.outputs.push_back(fc.next);
  EXPECT_NO_THROW(validate_plan(bad));
  EXPECT_EQ(alias_state_updates(bad), 0);
  EXPECT_FALSE(is_in_place(bad, fc));

  // BatchNorm's running mean, written by its naive forward kernel: not an optimizer update.
  bad = good;
  alias(bad, pair_of(bad, "stem.1.running_mean"));
  e = testing::user_error_of([&] { validate_plan(bad); });
  EXPECT_NE(e.find("not an optimizer update"), std::string::npos) << e;
}

// Three AdamW steps of tiny_cnn: the plan's kernels on the host emulator, the runtime carrying
// the state, against the CPU reference's steps on the same batch. A state not carried (or
// carried into the wrong weight) changes the second and third losses and the updates. The
// conv bias before the first BatchNorm is frozen (its gradient is rounding noise).
TEST(TrainingPlan, StepsOnTheEmulatorFollowTheReferenceSteps) {
  Graph g = testing::training_step("tiny_cnn", OptimizerKind::adamw, {"stem.0.bias"});
  const ExecPlan p = estimated_training_plan(g);
  rt::Runtime r(p, rt::make_emulator_backend(rt::EmulatorBackendOptions{::testing::TempDir() + "dc-emulator-test-cache"}));
  EXPECT_GT(testing::expect_emulator_steps_follow_reference(r, g, 21, 7, 3), 0);
  EXPECT_EQ(r.weight(std::string(kStepTensor)).to_int64_vector(), std::vector<int64_t>{3});
  // An inference plan of the same step graph (no "training", so nothing aliased): no training
  // step. The training plan without its "training" writes weights: refused.
  ExecPlan stripped = p;
  stripped.training.reset();
  EXPECT_NE(testing::user_error_of([&] { validate_plan(stripped); }).find("writes weight"), std::string::npos);
  static const GpuCatalog catalog = GpuCatalog::builtin();
  const ModelPlan mp = plan_by_estimate(g, {&catalog.require("h100")}, PlanOptions{});
  const ExecPlan inference = build_estimated_plan(g, mp, 0, PlanOptions{}, nullptr);
  rt::Runtime ri(inference, rt::make_emulator_backend(rt::EmulatorBackendOptions{}));
  EXPECT_NE(testing::user_error_of([&] { ri.train_step(); }).find("computes inference"), std::string::npos);
}

}  // namespace
}  // namespace dc
