// Backward elementwise DAGs as one kernel (docs/training.md, "Fused backward chains"): each
// maximal elementwise chain is also offered with its operand cone (coordinator/candidates.cpp,
// rule 6), so BatchNorm's dX, whose x_hat branch and per-channel scalars the linear chain
// left out, is one elementwise kernel. tiny_cnn's SGD step: the plan's clusters, and its
// steps on the host emulator against the CPU reference's.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "gpu/gpu_catalog.h"
#include "plan_build.h"
#include "plan_estimate.h"
#include "runtime.h"
#include "emulated_steps_testing.h"
#include "testing.h"
#include "train_options.h"
#include "train_recompute.h"
#include "training_testing.h"

namespace dc {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The BatchNorm layer a gradient node belongs to ("grad//res/res.1/BatchNormalization/Mul58"
// -> "/res/res.1"), or "" for other nodes (forward, recomputed, other gradients).
std::string batch_norm_of(const Node& n) {
  if (!starts_with(n.name, "grad/") || starts_with(n.name, "grad/recompute/")) return "";
  const size_t at = n.name.find("/BatchNormalization/");
  if (at == std::string::npos) return "";
  return n.name.substr(5, at - 5);
}

struct StepPlan {
  Graph step;
  ModelPlan plan;
};

// `recompute`: the cheap forward chains computed again in the backward pass, as `plan
// --train` does (coordinator/train_recompute.h), so that the next Conv is the only reader
// of a forward BatchNorm-apply + ReLU.
StepPlan sgd_step(bool recompute = false) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  StepPlan s{testing::training_step("tiny_cnn", OptimizerKind::sgd), {}};
  if (recompute) cli::recompute_cheap_chains(s.step);
  s.plan = plan_by_estimate(s.step, {&catalog.require("h100")}, PlanOptions{});
  return s;
}

TEST(TrainFusedBackward, BatchNormGradientIsTwoKernels) {
  const StepPlan s = sgd_step();
  const Graph& g = s.step;
  std::map<std::string, int> clusters, dx_clusters;  // per BatchNorm layer
  int kernels = 0;
  for (size_t c : s.plan.gpus.at(0).cover.chosen) {
    const Candidate& cand = s.plan.candidates[c];
    if (cand.free_view) continue;
    ++kernels;
    std::map<std::string, int> subs, muls;  // the layer's gradient nodes in this kernel
    for (size_t i : cand.nodes) {
      const std::string layer = batch_norm_of(g.nodes[i]);
      if (layer.empty()) continue;
      subs[layer] += g.nodes[i].op == "Sub";
      muls[layer] += g.nodes[i].op == "Mul";
    }
    SCOPED_TRACE(cand.pattern);
    for (const auto& [layer, n] : muls) {
      ++clusters[layer];
      if (subs[layer] != 2) continue;
      // The whole dX: x_hat (x - mean), dY - the mean part, and the Muls: x_hat's invstd,
      // dB / count, dscale / count, x_hat dscale, scale invstd, the product.
      ++dx_clusters[layer];
      EXPECT_EQ(n, 6) << layer;
    }
  }
  // tiny_cnn's four BatchNorms: dB and dscale one kernel (sibling sums), dX one. Before: six
  // each (x_hat with dscale, dB / count, dscale / count, and the rest of dX separate), 74
  // kernels (views not counted); the chains with their cones 62; the ReduceSums computing
  // their inputs 59; three bias gradients computed by their weight gradients' GEMMs 58; dB
  // and dscale as one kernel 54; the statistics' update in the batch statistics'
  // ReduceMeans (no dc.BatchNormStats kernels) 50.
  ASSERT_EQ(clusters.size(), 4u);
  for (const auto& [layer, n] : clusters) {
    EXPECT_EQ(n, 2) << layer;
    EXPECT_EQ(dx_clusters[layer], 1) << layer;
  }
  EXPECT_EQ(kernels, 50);
}

// A ReduceSum whose input others read too (a bias or BatchNorm gradient's dY, also read by the
// data and weight gradients) computes that input in its own kernel and writes it (rule 5's
// exposed input, coordinator/candidates.cpp `input_cone`): in tiny_cnn the two ReLU masks that
// follow a pooling gradient (Where(y > 0, dY, 0)) and the stem's BatchNorm dX, which the stem
// conv's bias gradient sums. Before, each was an elementwise kernel of its own. Since the
// bias gradients are their weight gradients' second outputs (docs/training.md "Bias gradients
// in the weight-gradient GEMM"), the cover takes that for the stem conv's and one masked
// conv's bias instead: one mask is computed by a ReduceSum, one and the stem's dX are
// elementwise kernels, and the step has one kernel fewer (BatchNormGradientIsTwoKernels).
TEST(TrainFusedBackward, ReduceSumComputesTheGradientItSums) {
  const StepPlan s = sgd_step();
  const Graph& g = s.step;
  int masks_alone = 0, masks_in_reductions = 0, dx_in_reductions = 0;
  for (size_t c : s.plan.gpus.at(0).cover.chosen) {
    const Candidate& cand = s.plan.candidates[c];
    int wheres = 0, reduce_sums = 0, subs = 0;
    for (size_t i : cand.nodes) {
      wheres += g.nodes[i].op == "Where" && starts_with(g.nodes[i].name, "grad/");
      reduce_sums += g.nodes[i].op == "ReduceSum";
      subs += g.nodes[i].op == "Sub" && !batch_norm_of(g.nodes[i]).empty();
    }
    SCOPED_TRACE(cand.pattern);
    if (cand.kind == ClusterKind::elementwise) masks_alone += wheres;
    if (cand.kind != ClusterKind::reduction || reduce_sums == 0) continue;
    masks_in_reductions += wheres;
    if (subs == 2) {  // the whole BatchNorm dX before the conv bias's ReduceSum
      ++dx_in_reductions;
      EXPECT_EQ(reduce_sums, 1);
    }
  }
  EXPECT_EQ(masks_alone, 1);
  EXPECT_EQ(masks_in_reductions, 1);
  EXPECT_EQ(dx_in_reductions, 0);
}

// The forward BatchNorm-apply + ReLU before a convolution is that Conv's computed X (rule 3's
// cone, docs/candidates.md) once recompute leaves the Conv its only reader: in tiny_cnn the
// second 3x3 conv's (conv_implicit_gemm) and the depthwise conv's, after the residual Add
// (depthwise_direct); both pad 1, so the emulated steps below check that padded taps read 0.
// Before: a kernel of their own each.
TEST(TrainFusedBackward, ForwardBatchNormReluIsTheNextConvsInput) {
  const StepPlan s = sgd_step(true);
  const Graph& g = s.step;
  std::map<ClusterKind, int> computed_inputs;
  for (size_t c : s.plan.gpus.at(0).cover.chosen) {
    const Candidate& cand = s.plan.candidates[c];
    int convs = 0, relus = 0, subs = 0;
    for (size_t i : cand.nodes) {
      const Node& n = g.nodes[i];
      if (starts_with(n.name, "grad/")) continue;
      convs += n.op == "Conv";
      relus += n.op == "Relu";
      subs += n.op == "Sub";
    }
    if (convs == 1 && relus == 1 && subs == 1) ++computed_inputs[cand.kind];
  }
  EXPECT_EQ(computed_inputs[ClusterKind::conv], 1);
  EXPECT_EQ(computed_inputs[ClusterKind::depthwise], 1);
}

// Three SGD steps (momentum 0.9, weight decay 0.01) of tiny_cnn's estimated plan on the host
// emulator against the CPU reference's steps.
void expect_sgd_steps_follow_reference(bool recompute) {
  StepPlan s = sgd_step(recompute);
  TrainingSpec spec;
  spec.optimizer = OptimizerKind::sgd;
  spec.momentum = 0.9;
  spec.weight_decay = 0.01;
  const PlanTraining t = cli::plan_training(spec, "tiny_cnn.onnx", Precision::fp32);
  const ExecPlan p = build_estimated_plan(s.step, s.plan, 0, PlanOptions{}, &t);
  rt::Runtime r(p, rt::make_emulator_backend(rt::EmulatorBackendOptions{::testing::TempDir() + "dc-emulator-test-cache"}));
  EXPECT_EQ(testing::expect_emulator_steps_follow_reference(r, s.step, 23, 3, 1), 42)
      << "17 weights and their momenta, 4 BatchNorms' running means and variances";
}

// A wrong value in the fused dX (a branch read at the wrong coordinates, a per-channel scalar
// broadcast wrongly) changes the losses after the first step and the updates.
TEST(TrainFusedBackward, StepsOnTheEmulatorFollowTheReferenceSteps) { expect_sgd_steps_follow_reference(false); }

// With recompute the plan has the two Convs computing their X (above): a padded tap reading
// relu(BN(0)) instead of 0 changes the conv outputs, the loss and the updates.
TEST(TrainFusedBackward, StepsWithRecomputeOnTheEmulatorFollowTheReferenceSteps) {
  expect_sgd_steps_follow_reference(true);
}

}  // namespace
}  // namespace dc
