// Training plans (docs/training.md, "Training plans"): plan.json's "training" both ways and
// its validation, and training steps on the host emulator (every kernel of the step, the
// state carried between steps by the runtime) against the CPU reference's steps.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_catalog.h"
#include "passes/training_state.h"
#include "plan/plan_io.h"
#include "plan_build.h"
#include "plan_estimate.h"
#include "ref/compare.h"
#include "ref/train_step.h"
#include "runtime.h"
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
  EXPECT_EQ(p.outputs.size(), 2 + p.training->state.size());
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
  EXPECT_NE(testing::user_error_of([&] { validate_plan(bad); }).find("is not an output after the model's"),
            std::string::npos);
}

// Three AdamW steps of tiny_cnn: the plan's kernels on the host emulator, the runtime carrying
// the state, against the CPU reference's steps on the same batch. A state not carried (or
// carried into the wrong weight) changes the second and third losses and the updates. The
// conv bias before the first BatchNorm is frozen (its gradient is rounding noise).
TEST(TrainingPlan, StepsOnTheEmulatorFollowTheReferenceSteps) {
  Graph g = testing::training_step("tiny_cnn", OptimizerKind::adamw, {"stem.0.bias"});
  const ExecPlan p = estimated_training_plan(g);
  rt::Runtime r(p, rt::make_emulator_backend(rt::EmulatorBackendOptions{::testing::TempDir() + "dc-emulator-test-cache"}));
  const Tensor x = testing::random_tensor(r.input_info(0).shape, 21);
  Tensor labels(DType::i64, r.input_info(1).shape);
  for (int64_t i = 0; i < labels.numel(); ++i) labels.mutable_data<int64_t>()[i] = (7 * i + 3) % 10;
  r.set_input(0, x);
  r.set_input(1, labels);
  const ref::TensorMap inputs = {{g.inputs[0], x}, {g.inputs[1], labels}};
  const std::map<std::string, Tensor> before = g.initializers;
  for (int k = 0; k < 3; ++k) {
    r.train_step();
    const ref::TensorMap want = ref::run_training_step(g, inputs);
    const double loss = r.output(0).to_float_vector()[0], ref_loss = ref::loss_value(g, want);
    EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss)) << "step " << k + 1;
  }
  EXPECT_EQ(r.weight(std::string(kStepTensor)).to_int64_vector(), std::vector<int64_t>{3});
  for (const StateUpdate& u : training_state_updates(g)) {
    const Tensor& old = before.at(u.state);
    if (old.dtype() != DType::f32) continue;
    const auto got = r.weight(u.state).to_float_vector(), want = g.initializers.at(u.state).to_float_vector();
    const auto o = old.to_float_vector();
    Tensor dg(DType::f32, old.shape()), dw(DType::f32, old.shape());
    for (size_t i = 0; i < o.size(); ++i) {
      dg.mutable_data<float>()[i] = got[i] - o[i];
      dw.mutable_data<float>()[i] = want[i] - o[i];
    }
    const ref::Comparison c = ref::compare_tensors(dg, dw, 1e-3, 1e-7);  // verify --train's bound
    EXPECT_TRUE(c.pass) << u.state << ": update rel L2 " << c.rel_l2_error << " " << c.problem;
  }
  // Without its "training" the same plan is an inference plan: no training step.
  ExecPlan inference = p;
  inference.training.reset();
  rt::Runtime ri(inference, rt::make_emulator_backend(rt::EmulatorBackendOptions{}));
  EXPECT_NE(testing::user_error_of([&] { ri.train_step(); }).find("computes inference"), std::string::npos);
}

}  // namespace
}  // namespace dc
