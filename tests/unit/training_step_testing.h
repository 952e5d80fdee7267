// A model's training step planned by estimate and run on the host emulator against the CPU
// reference's steps: the scaffolding of the training-plan tests that build their own model.
#pragma once

#include <string>

#include "emulated_steps_testing.h"
#include "gpu/gpu_catalog.h"
#include "passes/build_training_graph.h"
#include "passes/simplify_for_training.h"
#include "plan_build.h"
#include "plan_estimate.h"
#include "runtime.h"
#include "train_options.h"

namespace dc::testing {

// SGD at lr 0.1 with momentum 0.9 and weight decay 0.01: every state kind of SGD updated.
inline TrainingSpec sgd_momentum_spec() {
  TrainingSpec spec;
  spec.optimizer = OptimizerKind::sgd;
  spec.lr = 0.1;
  spec.momentum = 0.9;
  spec.weight_decay = 0.01;
  return spec;
}

struct EstimatedStep {
  Graph step;      // the training graph of the model
  ModelPlan plan;  // its plan by estimate for h100
};

inline EstimatedStep estimated_step(const Graph& model, const TrainingSpec& spec) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  EstimatedStep s{build_training_graph(simplify_for_training(model), spec), {}};
  s.plan = plan_by_estimate(s.step, {&catalog.require("h100")}, PlanOptions{});
  return s;
}

// Three steps of the plan on the host emulator, the runtime carrying the state, against the
// CPU reference's steps of the graph (expect_emulator_steps_follow_reference, whose seed and
// labels these are); `s.step`'s initializers end at the reference's third step. Returns how
// many states were compared.
inline int expect_plan_steps_follow_reference(EstimatedStep& s, const TrainingSpec& spec,
                                              const std::string& model_file, uint32_t seed,
                                              int64_t label_mul, int64_t label_add) {
  const PlanTraining t = cli::plan_training(spec, model_file, Precision::fp32);
  const ExecPlan p = build_estimated_plan(s.step, s.plan, 0, PlanOptions{}, &t);
  rt::Runtime r(p, rt::make_emulator_backend(
                       rt::EmulatorBackendOptions{::testing::TempDir() + "dc-emulator-test-cache"}));
  return expect_emulator_steps_follow_reference(r, s.step, seed, label_mul, label_add);
}

}  // namespace dc::testing
