// Mixed-precision training steps (passes/training/mixed_precision.h, docs/training.md
// "Mixed precision"): the fp16/bf16 step on the CPU reference against the fp32 step within
// docs/precision.md's bound, fp16's dynamic loss scaling (an overflow skips the step and
// halves the scale; growth after the interval), and the emulated plan against the reference.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "gpu/gpu_catalog.h"
#include "ir/multi_cast.h"
#include "ir/nonfinite_check.h"
#include "ir/optimizer_update.h"
#include "ir/precision.h"
#include "ir/training_tolerance.h"
#include "multi_cast_testing.h"
#include "pass_testing.h"
#include "passes/apply_precision.h"
#include "passes/training/mixed_precision.h"
#include "passes/training_state.h"
#include "plan_build.h"
#include "plan_estimate.h"
#include "plan/state_alias.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "ref/train_step.h"
#include "runtime.h"
#include "testing.h"
#include "train_options.h"
#include "tune_config.h"
#include "training_testing.h"

namespace dc {
namespace {

Precision precision_of(DType mixed) {
  return mixed == DType::f16 ? Precision::fp16 : mixed == DType::bf16 ? Precision::bf16 : Precision::fp32;
}

// tiny_cnn's step (SGD, momentum 0.9) with the given mixed precision, as `plan --train
// --precision` builds it (before recompute).
Graph amp_step(DType mixed, double init_scale = 65536, int64_t growth_interval = 2000,
               OptimizerKind optimizer = OptimizerKind::sgd) {
  return apply_precision(testing::training_step("tiny_cnn", optimizer, {}, [&](TrainingSpec& s) {
                           s.mixed_precision = mixed;
                           s.loss_scale_init = init_scale;
                           s.loss_scale_growth_interval = growth_interval;
                         }),
                         precision_of(mixed));
}

ref::TensorMap batch(const Graph& g, double input_scale = 1.0) {
  Tensor labels(DType::i64, g.info(g.inputs[1]).shape);
  for (int64_t i = 0; i < labels.numel(); ++i) labels.mutable_data<int64_t>()[i] = (3 * i + 5) % 10;
  Tensor x = testing::random_tensor(g.info(g.inputs[0]).shape, 31);
  for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] *= static_cast<float>(input_scale);
  return {{g.inputs[0], x}, {g.inputs[1], labels}};
}

Tensor update_of(const Tensor& after, const Tensor& before) {
  Tensor d(DType::f32, before.shape());
  const auto a = after.to_float_vector(), b = before.to_float_vector();
  for (size_t i = 0; i < a.size(); ++i) d.mutable_data<float>()[i] = a[i] - b[i];
  return d;
}

float scalar(const Graph& g, std::string_view t) { return g.initializers.at(std::string(t)).to_float_vector().at(0); }

TEST(TrainAmp, AttentionFusesWithItsLogSumExpInF32) {
  // The transformer's AMP step fuses its attention as the f32 step does: dc.Attention's Q, Kt,
  // V and O in the reduced type, its log-sum-exp f32 (training_fp32_tensors); the backward's
  // gradients in the reduced type too.
  for (DType mixed : {DType::bf16, DType::f16}) {
    const Graph g = apply_precision(testing::training_step("tiny_transformer", OptimizerKind::adamw, {},
                                                           [&](TrainingSpec& s) { s.mixed_precision = mixed; }),
                                    precision_of(mixed));
    int forward = 0, backward = 0;
    for (const Node& n : g.nodes) {
      if (n.op == "dc.Attention") {
        ++forward;
        EXPECT_EQ(g.info(n.input(0)).dtype, mixed);
        EXPECT_EQ(g.info(n.outputs[0]).dtype, mixed);
        EXPECT_EQ(g.info(n.outputs[1]).dtype, DType::f32);
      } else if (n.op == "dc.AttentionGrad") {
        ++backward;
        EXPECT_EQ(g.info(n.input(5)).dtype, DType::f32);
        for (const auto& o : n.outputs) {
          if (o.empty()) continue;
          EXPECT_EQ(g.info(o).dtype, mixed) << o;
        }
      }
    }
    EXPECT_EQ(forward, 1);
    EXPECT_EQ(backward, 1);
  }
}

TEST(TrainAmp, StepKeepsMasterWeightsAndOptimizerStateInF32) {
  for (DType mixed : {DType::f16, DType::bf16}) {
    const Graph g = amp_step(mixed);
    int casts = 0, reduced = 0;
    for (const StateUpdate& u : training_state_updates(g))
      if (u.state != "train.step") {
        EXPECT_EQ(g.info(u.state).dtype, DType::f32) << u.state;
      }
    for (const Node& n : g.nodes) {
      if (n.op == kMultiCast) {  // the weights' copies (merge_compute_casts)
        for (const auto& copy : n.outputs) {
          ++casts;
          EXPECT_EQ(g.info(copy).dtype, mixed) << copy;
        }
      }
      if (n.op == "dc.SgdUpdate") {
        const OptimizerUpdateLayout l = optimizer_update_layout(n);
        for (size_t t = 0; t < l.tensors; ++t)
          EXPECT_EQ(g.info(n.input(l.input(t, 1))).dtype, DType::f32) << "gradient of " << n.input(l.input(t, 0));
      }
      // The convolution gradients (grad_conv.cpp): ConvTranspose and the swapped Conv.
      const bool conv_gradient = n.op == "ConvTranspose" || n.op == "Conv";
      if (n.name.starts_with("grad/") && conv_gradient) reduced += g.info(n.outputs[0]).dtype == mixed;
    }
    EXPECT_GE(casts, 5) << "each conv and gemm weight is cast once";
    EXPECT_GE(reduced, 5) << "the backward convolutions store their results in the reduced type";
    EXPECT_EQ(g.initializers.count(std::string(kLossScale)), mixed == DType::f16 ? 1u : 0u);
  }
}

// The worst rel-L2 over the loss of each step and every f32 state's update after `steps`
// steps of tiny_cnn, the AMP step against the fp32 step (both on the CPU reference).
struct StepDeviation {
  double loss = 0;    // the worst step's loss, relative
  double step = 0;    // every update as one vector (the step's direction and size), rel-L2
  double update = 0;  // the worst single tensor's update, rel-L2 (a measured figure only)
  std::string worst;
};

// Fills d.step and d.update: the updates `got(STATE) - before` against `want`'s.
template <typename Got>
void step_deviation(const Graph& want, const std::map<std::string, Tensor>& before, Got got_state, StepDeviation& d) {
  double diff2 = 0, want2 = 0;
  for (const StateUpdate& u : training_state_updates(want)) {
    if (before.at(u.state).dtype() != DType::f32) continue;
    const Tensor w = update_of(want.initializers.at(u.state), before.at(u.state));
    const Tensor o = update_of(got_state(u.state), before.at(u.state));
    const double e = ref::compare_tensors(o, w, 1, 0).rel_l2_error;
    if (e > d.update) d.update = e, d.worst = u.state;
    const auto wv = w.to_float_vector(), ov = o.to_float_vector();
    for (size_t i = 0; i < wv.size(); ++i) {
      diff2 += (double(ov[i]) - wv[i]) * (double(ov[i]) - wv[i]);
      want2 += double(wv[i]) * wv[i];
    }
  }
  d.step = std::sqrt(diff2 / want2);
}

StepDeviation amp_against_fp32(DType mixed, OptimizerKind optimizer, int steps) {
  const std::set<std::string> freeze{"stem.0.bias"};  // a gradient of rounding noise only (BatchNorm follows)
  Graph fp32 = testing::training_step("tiny_cnn", optimizer, freeze);
  Graph g = apply_precision(testing::training_step("tiny_cnn", optimizer, freeze, [&](TrainingSpec& s) {
                              s.mixed_precision = mixed;
                              s.loss_scale_init = 1024;
                            }),
                            precision_of(mixed));
  const ref::TensorMap x = batch(fp32);
  const std::map<std::string, Tensor> before = fp32.initializers;
  StepDeviation d;
  for (int k = 0; k < steps; ++k) {
    const double want = ref::loss_value(fp32, ref::run_training_step(fp32, x));
    const double got = ref::loss_value(g, ref::run_training_step(g, x));
    d.loss = std::max(d.loss, std::abs(got - want) / std::abs(want));
  }
  step_deviation(fp32, before, [&](const std::string& s) { return g.initializers.at(s); }, d);
  return d;
}

TEST(TrainAmp, StepMatchesTheFp32StepWithinTheErrorModel) {
  for (DType mixed : {DType::f16, DType::bf16}) {
    for (auto [optimizer, steps] : {std::pair{OptimizerKind::sgd, 1}, std::pair{OptimizerKind::adamw, 3}}) {
      const StepDeviation d = amp_against_fp32(mixed, optimizer, steps);
      std::printf("%s %s x%d: loss rel %.3e, step rel L2 %.3e, worst update rel L2 %.3e (%s)\n",
                  std::string(dtype_name(mixed)).c_str(), std::string(optimizer_name(optimizer)).c_str(), steps,
                  d.loss, d.step, d.update, d.worst.c_str());
      const StepTolerance tol = mixed_precision_step_tolerance(precision_of(mixed));
      EXPECT_LE(d.loss, tol.loss);
      EXPECT_LE(d.step, tol.step);
      EXPECT_GT(d.step, 0) << "the reduced-precision step rounds somewhere";
    }
  }
}

// Every piece of state but the BatchNorm running statistics (the forward pass updates them
// whether or not the step is skipped, as in PyTorch) and the loss scaling's own.
bool gated(const std::string& state) {
  return !state.ends_with("running_mean") && !state.ends_with("running_var") && state != kLossScale &&
         state != kLossScaleGrowth;
}

TEST(TrainAmp, OverflowSkipsTheStepAndHalvesTheScale) {
  for (OptimizerKind optimizer : {OptimizerKind::sgd, OptimizerKind::adamw}) {
    Graph g = amp_step(DType::f16, /*init_scale=*/std::ldexp(1.0, 40), 2000, optimizer);
    const std::map<std::string, Tensor> before = g.initializers;
    const ref::TensorMap out = ref::run_training_step(g, batch(g));
    EXPECT_TRUE(std::isfinite(ref::loss_value(g, out))) << "the loss itself is not scaled";
    int compared = 0;
    for (const StateUpdate& u : training_state_updates(g)) {
      if (!gated(u.state)) continue;
      const Tensor& a = before.at(u.state);
      const Tensor& b = g.initializers.at(u.state);
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << u.state << " changed in a skipped step";
      ++compared;
    }
    EXPECT_GT(compared, 17) << "weights, optimizer state and the step counter";
    EXPECT_EQ(scalar(g, kLossScale), static_cast<float>(std::ldexp(1.0, 39)));
    EXPECT_EQ(scalar(g, kLossScaleGrowth), 0.f);
    // The same step at a scale that does not overflow updates the weights.
    Graph ok = amp_step(DType::f16, 1024, 2000, optimizer);
    ref::run_training_step(ok, batch(ok));
    EXPECT_NE(ok.initializers.at("fc.weight").to_float_vector(), before.at("fc.weight").to_float_vector());
    EXPECT_EQ(scalar(ok, kLossScale), 1024.f);
  }
}

TEST(TrainAmp, ScaleGrowsAfterTheIntervalOfFiniteSteps) {
  Graph g = amp_step(DType::f16, /*init_scale=*/256, /*growth_interval=*/3);
  const ref::TensorMap x = batch(g);
  const float want_scale[] = {256, 256, 512, 512, 512, 1024};
  const float want_growth[] = {1, 2, 0, 1, 2, 0};
  for (int k = 0; k < 6; ++k) {
    ref::run_training_step(g, x);
    EXPECT_EQ(scalar(g, kLossScale), want_scale[k]) << "after step " << k + 1;
    EXPECT_EQ(scalar(g, kLossScaleGrowth), want_growth[k]) << "after step " << k + 1;
  }
  EXPECT_EQ(g.initializers.at("train.step").to_int64_vector().at(0), 6);
}

// The fp16 step's overflow check and unscaling (ir/nonfinite_check.h, ir/optimizer_update.h):
// one dc.NonFiniteCheck over every gradient the updates read, no node per gradient, and the
// updates reading the scaled gradients and S themselves; the planned step (h100 estimates)
// has a fixed few kernels more than the bf16 step (which has no loss scaling), not a few
// per trained tensor (`plan --train` of tiny_cnn, 2026-11-30: 110 kernels before, 77 now; bf16 71).
TEST(TrainAmp, Fp16StepChecksEveryGradientInOneKernelAndUnscalesInTheUpdates) {
  const Graph g = amp_step(DType::f16);
  std::set<std::string> updated_gradients, checked;
  int checks = 0;
  for (const Node& n : g.nodes) {
    if (n.name.starts_with(kAmpPrefix)) {
      EXPECT_NE(n.op, "Reciprocal") << n.name;  // 1/S: in the updates
    }
    for (const char* per_tensor : {"amp/unscaled/", "amp/zeroed", "amp/nonfinite/"})
      EXPECT_FALSE(n.name.starts_with(per_tensor)) << n.name;
    if (n.op == "dc.NonFiniteCheck") {
      ++checks;
      checked.insert(n.inputs.begin(), n.inputs.end());
    }
    if (!is_optimizer_update(n.op)) continue;
    const OptimizerUpdateLayout l = optimizer_update_layout(n);
    EXPECT_TRUE(l.scaled && l.gated) << n.name;
    EXPECT_EQ(n.input(l.scale()), kLossScale) << n.name;
    for (size_t t = 0; t < l.tensors; ++t) updated_gradients.insert(n.input(l.input(t, 1)));
  }
  EXPECT_EQ(checks, 1);
  EXPECT_EQ(checked, updated_gradients) << "the check reads exactly the gradients the updates read";
  EXPECT_GE(checked.size(), 17u);
  static const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& gpu = catalog.require("h100");
  std::map<DType, size_t> kernels;
  for (DType mixed : {DType::f16, DType::bf16}) {
    const Graph step = amp_step(mixed);
    PlanOptions opts;
    set_plan_precision(&opts, precision_of(mixed));
    kernels[mixed] = plan_by_estimate(step, {&gpu}, opts).gpus.at(0).cover.chosen.size();
  }
  std::printf("tiny_cnn step kernels: fp16 %zu, bf16 %zu\n", kernels[DType::f16], kernels[DType::bf16]);
  // The check and its count, and GradScaler's bookkeeping (the step counter's gate, the
  // growth count, its test, the scale's and the count's next values), scalar kernels.
  EXPECT_LE(kernels[DType::f16], kernels[DType::bf16] + 2 + 4);
}

// A model with more gradients than one check's kernel arguments allow gets a check per
// kNonFiniteCheckMaxInputs of them; an inf in the last gradient of the last check, or a NaN
// in the first, still clears all_finite.
TEST(TrainAmp, OverflowCheckSplitsAtTheKernelArgumentLimit) {
  Graph g;
  g.opset = 17;
  std::map<std::string, std::string> gradients;
  for (int i = 0; i < 130; ++i) {
    const std::string grad = fmt::format("grad{:03}", i);
    g.inputs.push_back(grad);
    g.tensors[grad] = TensorInfo{DType::f32, {i % 5 + 1, 3}};
    gradients[fmt::format("w{:03}", i)] = grad;
  }
  g.outputs = {check_gradients_finite(g, gradients)};
  int checks = 0;
  for (const Node& n : g.nodes)
    if (n.op == "dc.NonFiniteCheck") {
      ++checks;
      EXPECT_LE(n.inputs.size(), kNonFiniteCheckMaxInputs);
    }
  EXPECT_EQ(checks, 2);
  for (int planted : {-1, 0, 129}) {
    ref::TensorMap in;
    for (size_t i = 0; i < g.inputs.size(); ++i)
      in[g.inputs[i]] = testing::random_tensor(g.info(g.inputs[i]).shape, static_cast<uint32_t>(i + 1));
    if (planted == 0) in.at(g.inputs.front()).mutable_data<float>()[0] = std::nanf("");
    if (planted == 129) in.at(g.inputs.back()).mutable_data<float>()[14] = INFINITY;
    const Tensor finite = ref::run_graph(g, in).at(g.outputs[0]);
    EXPECT_EQ(finite.data<bool>()[0], planted < 0) << "planted in gradient " << planted;
  }
}

TEST(TrainAmp, EmulatedPlanMatchesTheReferenceStep) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& gpu = catalog.require("h100");
  for (DType mixed : {DType::f16, DType::bf16}) {
    Graph g = amp_step(mixed, 1024);
    PlanOptions opts;
    set_plan_precision(&opts, precision_of(mixed));
    TrainingSpec spec;
    spec.momentum = 0.9;
    spec.weight_decay = 0.01;
    spec.loss_scale_init = 1024;
    const PlanTraining t = cli::plan_training(spec, std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx",
                                              precision_of(mixed));
    const ExecPlan p = build_estimated_plan(g, plan_by_estimate(g, {&gpu}, opts), 0, opts, &t);
    ASSERT_TRUE(p.training && p.training->mixed_precision);
    EXPECT_EQ(p.training->mixed_precision->dtype, dtype_name(mixed));
    const ref::TensorMap x = batch(g);
    const std::map<std::string, Tensor> before = g.initializers;
    rt::Runtime run(p, rt::make_emulator_backend(rt::EmulatorBackendOptions{::testing::TempDir() + "dc-emulator-test-cache"}));
    run.set_input(0, x.at(g.inputs[0]));
    run.set_input(1, x.at(g.inputs[1]));
    for (int step = 1; step <= 2; ++step) {
      const double want = ref::loss_value(g, ref::run_training_step(g, x));
      run.train_step();
      EXPECT_NEAR(run.output(0).to_float_vector()[0], want, mixed_precision_step_tolerance(precision_of(mixed)).loss * std::abs(want))
          << "step " << step;
    }
    // The plan rounds where the reference does, but its tensor-core GEMMs also round f32
    // operands and sum in another order: as far from the reference as the AMP step is from fp32.
    StepDeviation d;
    step_deviation(g, before, [&](const std::string& s) { return run.weight(s); }, d);
    std::printf("%s emulated: step rel L2 %.3e, worst update %.3e (%s)\n", std::string(dtype_name(mixed)).c_str(),
                d.step, d.update, d.worst.c_str());
    EXPECT_LE(d.step, mixed_precision_step_tolerance(precision_of(mixed)).step);
    if (mixed == DType::f16) {
      EXPECT_EQ(run.weight(std::string(kLossScale)).to_float_vector().at(0), scalar(g, kLossScale));
    }
  }
}

}  // namespace
}  // namespace dc

namespace dc {
namespace {

// fp16's updates all read the loss scale and the overflow flag, which none of them writes:
// with one update per tensor the plan orders them (each after every other reader of its
// tensors' own inputs, for the in-place writes) without waiting on each other, and every
// weight and momentum is updated in place. An order that made the updates wait on each
// other's shared inputs is a cycle: the plan could not be built.
TEST(TrainAmp, Fp16PlanOfOneUpdatePerTensorUpdatesEveryWeightInPlace) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  Graph g = apply_precision(testing::training_step("tiny_cnn", OptimizerKind::sgd, {}, [](TrainingSpec& s) {
                              s.mixed_precision = DType::f16;
                              s.optimizer_bucket_bytes = 0;
                            }),
                            Precision::fp16);
  int updates = 0;
  for (const Node& n : g.nodes) updates += is_optimizer_update(n.op);
  ASSERT_EQ(updates, 17);
  PlanOptions opts;
  set_plan_precision(&opts, Precision::fp16);
  TrainingSpec spec;
  spec.momentum = 0.9;
  const PlanTraining t = cli::plan_training(spec, std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx",
                                            Precision::fp16);
  ExecPlan p;
  ASSERT_NO_THROW(p = build_estimated_plan(g, plan_by_estimate(g, {&catalog.require("h100")}, opts), 0, opts, &t));
  int in_place = 0;
  for (const PlanStateUpdate& u : p.training->state) in_place += is_in_place(p, u);
  EXPECT_EQ(in_place, 34) << "17 weights and their momenta";
}

}  // namespace
}  // namespace dc

namespace dc {
namespace {

// The reduced copy's dtype as a dc.MultiCast's or a Cast's attribute `to`.
Attributes cast_to(DType to) {
  Attributes a;
  a.set("to", static_cast<int64_t>(to));
  return a;
}

// dc.MultiCast on the CPU reference (ir/multi_cast.h): every element of every weight rounded
// to nearest even as written out in double arithmetic (ties both ways, f16's and bf16's
// subnormals, f32 subnormals, past fp16's range to inf, inf and NaN kept, signed zeros),
// and each copy the same values as the Cast of its weight.
TEST(TrainAmp, MultiCastRoundsEachWeightAsItsCast) {
  const std::vector<Shape> shapes = {{37}, {3, 5}, {2, 2, 67}};
  for (DType to : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(to));
    Graph g;
    g.opset = 17;
    Node multi = testing::make_node(kMultiCast, {}, {}, cast_to(to));
    ref::TensorMap in;
    for (size_t t = 0; t < shapes.size(); ++t) {
      const std::string w = fmt::format("w{}", t), c = fmt::format("c{}", t), k = fmt::format("k{}", t);
      g.inputs.push_back(w);
      g.tensors[w] = TensorInfo{DType::f32, shapes[t]};
      g.tensors[c] = g.tensors[k] = TensorInfo{to, shapes[t]};
      multi.inputs.push_back(w);
      multi.outputs.push_back(c);
      g.nodes.push_back(testing::make_node("Cast", {w}, {k}, cast_to(to)));
      g.outputs.insert(g.outputs.end(), {c, k});
      in[w] = testing::cast_test_values(shapes[t], static_cast<uint32_t>(70 + t));
    }
    g.nodes.push_back(multi);
    const ref::TensorMap out = ref::run_graph(g, in);
    for (size_t t = 0; t < shapes.size(); ++t) {
      const Tensor& copy = out.at(fmt::format("c{}", t));
      ASSERT_EQ(copy.dtype(), to);
      const float* w = in.at(fmt::format("w{}", t)).data<float>();
      int wrong = 0;
      for (int64_t e = 0; e < copy.numel(); ++e) {
        const double want = testing::hand_round(w[e], to), got = testing::reduced_value(copy, e);
        const bool same = std::isnan(want) ? std::isnan(got) : got == want && std::signbit(got) == std::signbit(want);
        if (!same && ++wrong <= 3) ADD_FAILURE() << "tensor " << t << " element " << e << ": " << w[e] << " -> " << got << ", want " << want;
      }
      EXPECT_EQ(wrong, 0) << "tensor " << t;
      EXPECT_TRUE(testing::same_values(copy, out.at(fmt::format("k{}", t)))) << "tensor " << t << " against its Cast";
    }
  }
}

// The AMP steps of tiny_cnn cast their weights in one dc.MultiCast (to the reduced type, the
// copies stored in it) and in no Cast of their own; it comes before every reader of a copy and
// before the optimizer's update, which writes the weights in place.
TEST(TrainAmp, StepCastsEveryWeightInOneMultiCast) {
  for (DType mixed : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(mixed));
    const Graph g = amp_step(mixed);
    std::vector<size_t> multi;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (n.op == kMultiCast) multi.push_back(i);
      if (n.op == "Cast" && g.initializers.count(n.input(0)))
        ADD_FAILURE() << n.name << " casts weight " << n.input(0) << " on its own";
    }
    ASSERT_EQ(multi.size(), 1u);
    const Node& m = g.nodes[multi[0]];
    EXPECT_EQ(m.attrs.get_int("to"), static_cast<int64_t>(mixed));
    EXPECT_EQ(m.inputs.size(), 9u) << "tiny_cnn's weights and biases that a Conv or the Gemm reads";
    ASSERT_EQ(m.inputs.size(), m.outputs.size());
    for (size_t t = 0; t < m.inputs.size(); ++t) {
      EXPECT_EQ(g.info(m.input(t)).dtype, DType::f32) << m.input(t);
      EXPECT_TRUE(g.initializers.count(m.input(t))) << m.input(t) << " is a weight";
      EXPECT_EQ(m.outputs[t], m.input(t) + std::string(kComputeSuffix));
      EXPECT_EQ(g.info(m.outputs[t]).dtype, mixed) << m.outputs[t];
    }
    const auto uses = g.consumers();
    for (const auto& copy : m.outputs)
      for (size_t reader : uses.at(copy)) {
        EXPECT_GT(reader, multi[0]) << g.nodes[reader].name << " reads " << copy;
      }
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (is_optimizer_update(g.nodes[i].op)) {
        EXPECT_GT(i, multi[0]) << g.nodes[i].name;
      }
    }
  }
}

// More weights than one dc.MultiCast's kernel arguments allow: a node per kMultiCastMaxInputs
// of them, each where its first Cast was; the step's values are the Casts'.
TEST(TrainAmp, MultiCastSplitsAtTheKernelArgumentLimit) {
  using testing::add_initializer, testing::add_node;
  Graph g;
  g.opset = 17;
  g.inputs = {"x"};
  g.tensors["x"] = TensorInfo{DType::f32, {2, 3}};
  std::set<std::string> weights;
  for (int i = 0; i < 70; ++i) {
    const std::string w = fmt::format("w{:02}", i), y = fmt::format("y{:02}", i);
    add_initializer(g, w, testing::random_tensor({3, 3}, static_cast<uint32_t>(100 + i)));
    add_node(g, "MatMul", {"x", w}, {y});
    g.tensors[y] = TensorInfo{DType::f32, {2, 3}};
    g.outputs.push_back(y);
    weights.insert(w);
  }
  cast_weights_for_compute(g, weights);
  Graph merged = g;
  merge_compute_casts(merged);
  for (Graph* step : {&g, &merged})  // the copies in bf16, as apply_precision stores them
    for (Node& n : step->nodes)
      if (n.op == "Cast" || n.op == kMultiCast) {
        n.attrs.set("to", static_cast<int64_t>(DType::bf16));
        for (const auto& o : n.outputs) step->tensors[o].dtype = DType::bf16;
      }
  std::vector<size_t> sizes;
  for (size_t i = 0; i < merged.nodes.size(); ++i) {
    const Node& n = merged.nodes[i];
    EXPECT_NE(n.op, "Cast") << n.name;
    if (n.op != kMultiCast) continue;
    sizes.push_back(n.inputs.size());
    EXPECT_EQ(merged.nodes.at(i + 1).input(1), n.outputs[0]) << "the MatMul reading its first copy follows it";
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{kMultiCastMaxInputs, 70 - kMultiCastMaxInputs}));
  const ref::TensorMap x = {{"x", testing::random_tensor({2, 3}, 9)}};
  const ref::TensorMap want = ref::run_graph(g, x), got = ref::run_graph(merged, x);
  for (const auto& y : g.outputs) EXPECT_TRUE(testing::same_values(got.at(y), want.at(y))) << y;
}

// A frozen one-element weight is a constant that a kernel may bake in (is_structural_constant):
// it keeps its own Cast, and the MultiCast takes the others.
TEST(TrainAmp, AWeightAKernelMayBakeInKeepsItsOwnCast) {
  using testing::add_initializer, testing::add_node;
  Graph g;
  g.opset = 17;
  g.inputs = {"x"};
  g.tensors["x"] = TensorInfo{DType::f32, {2, 3}};
  add_initializer(g, "s", testing::random_tensor({1}, 5));
  add_initializer(g, "w", testing::random_tensor({3, 3}, 6));
  add_initializer(g, "v", testing::random_tensor({3, 3}, 7));
  add_node(g, "Gemm", {"x", "w", "s"}, {"y"});  // s: a bias broadcast from one element
  add_node(g, "MatMul", {"y", "v"}, {"z"});
  for (const char* t : {"y", "z"}) g.tensors[t] = TensorInfo{DType::f32, {2, 3}};
  g.outputs = {"z"};
  cast_weights_for_compute(g, {"s", "w", "v"});
  merge_compute_casts(g);
  std::vector<std::string> cast, multi;
  for (const Node& n : g.nodes) {
    if (n.op == "Cast") cast.push_back(n.input(0));
    if (n.op == kMultiCast) multi.insert(multi.end(), n.inputs.begin(), n.inputs.end());
  }
  EXPECT_EQ(cast, (std::vector<std::string>{"s"}));
  EXPECT_EQ(multi, (std::vector<std::string>{"w", "v"}));
}

}  // namespace
}  // namespace dc
