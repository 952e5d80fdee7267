// BatchNorm in a mixed-precision training step (docs/training.md "The normalisation as
// elementwise ops"): lowered to its per-channel statistics over [C] and the chain ((X - mean) * invstd) * scale
// + B as in the f32 step, with PyTorch autocast's dtypes: X and Y in the reduced type, the
// statistics and the chain's intermediates f32 (training_fp32_tensors), so the fused kernel
// rounds once, at the store of Y.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/gpu_catalog.h"
#include "ir/precision.h"
#include "ir/tolerance.h"
#include "pass_testing.h"
#include "passes/apply_precision.h"
#include "passes/training/lower_batch_norm.h"
#include "passes/training/mixed_precision.h"
#include "plan_estimate.h"
#include "ref/executor.h"
#include "testing.h"
#include "training_testing.h"
#include "tune_config.h"

namespace dc {
namespace {

Precision precision_of(DType mixed) { return mixed == DType::f16 ? Precision::fp16 : Precision::bf16; }

Graph amp_step(DType mixed) {
  return apply_precision(testing::training_step("tiny_cnn", OptimizerKind::sgd, {},
                                                [&](TrainingSpec& s) { s.mixed_precision = mixed; }),
                         precision_of(mixed));
}

// One lowered BatchNorm of the step: its tensors by role, read back from Y along the chain
// Add(Mul(Mul(Sub(X, mean), invstd), scale), B), whose per-channel operands are Reshapes.
struct LoweredBatchNorm {
  std::string name;
  std::vector<std::string> statistics;  // read and written by its statistics nodes
  double epsilon = 0;
  std::string x, y, mean, invstd, scale, bias;
  std::vector<std::string> intermediates;  // the chain's, between X and Y
};

LoweredBatchNorm lowered_batch_norm(const Graph& g, const Node& invstd) {
  LoweredBatchNorm bn;
  bn.name = invstd.name.substr(0, invstd.name.size() - batch_norm_invstd_node("").size());
  const std::string chain = batch_norm_apply_prefix(bn.name);
  for (const Node& n : g.nodes) {
    if (n.name.starts_with(chain) && n.op == "Add") bn.y = n.outputs[0];
    if (!n.name.starts_with(batch_norm_stats_prefix(bn.name))) continue;
    for (const auto& t : n.inputs)
      if (!g.is_constant(t) || g.info(t).shape.size() == 1) bn.statistics.push_back(t);  // not the scalar constants
    bn.statistics.insert(bn.statistics.end(), n.outputs.begin(), n.outputs.end());
  }
  const auto producer = [&](const std::string& t) -> const Node& { return g.nodes[*g.producer(t)]; };
  // invstd = Reciprocal(Sqrt(Add(batch variance, epsilon)))
  bn.epsilon = g.initializers.at(producer(producer(invstd.input(0)).input(0)).input(1)).to_float_vector().at(0);
  const auto per_channel = [&](const Node& n) { return producer(n.input(1)).input(0); };  // through its Reshape
  const Node& add = producer(bn.y);
  const Node& scaled = producer(add.input(0));
  const Node& normed = producer(scaled.input(0));
  const Node& centred = producer(normed.input(0));
  bn.bias = per_channel(add);
  bn.scale = per_channel(scaled);
  bn.invstd = per_channel(normed);
  bn.mean = per_channel(centred);
  bn.x = centred.input(0);
  bn.intermediates = {centred.outputs[0], normed.outputs[0], scaled.outputs[0]};
  return bn;
}

std::vector<LoweredBatchNorm> lowered_batch_norms(const Graph& g) {
  std::vector<LoweredBatchNorm> out;
  for (const Node& n : g.nodes)
    if (n.name.ends_with(batch_norm_invstd_node(""))) out.push_back(lowered_batch_norm(g, n));
  return out;
}

TEST(TrainAmpBatchNorm, LoweredWithF32StatisticsAndReducedY) {
  for (DType mixed : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(mixed));
    const Graph g = amp_step(mixed);
    int naive = 0;
    for (const Node& n : g.nodes) naive += n.op == "dc.BatchNormTrain";
    EXPECT_EQ(naive, 0);
    const auto bns = lowered_batch_norms(g);
    ASSERT_EQ(bns.size(), 4u) << "tiny_cnn's BatchNorms";
    for (const LoweredBatchNorm& bn : bns) {
      SCOPED_TRACE(bn.name);
      EXPECT_GE(bn.statistics.size(), 9u);
      for (const auto& t : bn.statistics) EXPECT_EQ(g.info(t).dtype, DType::f32) << t;
      EXPECT_EQ(g.nodes[*g.producer(bn.mean)].name, bn.name + "/batch_mean");
      EXPECT_TRUE(g.nodes[*g.producer(bn.invstd)].name.ends_with(batch_norm_invstd_node("")));
      for (const auto& t : {bn.scale, bn.bias}) EXPECT_EQ(g.info(t).dtype, DType::f32) << t;
      for (const auto& t : bn.intermediates) EXPECT_EQ(g.info(t).dtype, DType::f32) << t;
      EXPECT_EQ(g.info(bn.x).dtype, mixed);
      EXPECT_EQ(g.info(bn.y).dtype, mixed);
    }
  }
}

// The forward values of the AMP step on the CPU reference, each BatchNorm against double
// arithmetic on the stored (reduced) X: the batch mean and inverse std within fp32's error
// (a few ulp over the reduction), Y within the reduced type's unit roundoff (its one
// rounding; absolute below its normal range) plus fp32's error on the chain's terms. Statistics or intermediates in the
// reduced type are off by its ulp (2^-8 bf16, 2^-11 f16), far outside.
TEST(TrainAmpBatchNorm, StatisticsAreFp32AndYIsRoundedOnce) {
  for (DType mixed : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(mixed));
    const Graph g = amp_step(mixed);
    const Tensor x = testing::random_tensor(g.info(g.inputs[0]).shape, 41);
    Tensor labels(DType::i64, g.info(g.inputs[1]).shape);
    for (int64_t i = 0; i < labels.numel(); ++i) labels.mutable_data<int64_t>()[i] = (7 * i + 3) % 10;
    const ref::TensorMap v =
        ref::run_graph(g, {{g.inputs[0], x}, {g.inputs[1], labels}}, ref::RunOptions{.keep_intermediates = true});
    const double u32 = unit_roundoff(DType::f32), u_s = unit_roundoff(mixed);
    // Below the normal range the store's rounding is absolute: half the subnormal spacing.
    const double tiny = mixed == DType::f16 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -134);
    for (const LoweredBatchNorm& bn : lowered_batch_norms(g)) {
      SCOPED_TRACE(bn.name);
      const Shape& xs = g.info(bn.x).shape;
      const int64_t channels = xs.at(1), inner = shape_numel(xs) / xs[0] / channels;
      const auto xv = v.at(bn.x).to_float_vector(), yv = v.at(bn.y).to_float_vector();
      const auto mean = v.at(bn.mean).to_float_vector(), invstd = v.at(bn.invstd).to_float_vector();
      const auto scale = g.initializers.at(bn.scale).to_float_vector(), bias = g.initializers.at(bn.bias).to_float_vector();
      int64_t y_outside = 0;
      const double eps = bn.epsilon;
      for (int64_t c = 0; c < channels; ++c) {
        double sum = 0, abs_sum = 0, sq = 0;
        const auto each = [&](auto f) {
          for (int64_t b = 0; b < xs[0]; ++b)
            for (int64_t k = 0; k < inner; ++k) f((b * channels + c) * inner + k);
        };
        each([&](int64_t i) { sum += xv[i], abs_sum += std::abs(xv[i]); });
        const double n = static_cast<double>(xs[0] * inner), m = sum / n;
        each([&](int64_t i) { sq += (xv[i] - m) * (xv[i] - m); });
        const double inv = 1 / std::sqrt(sq / n + eps);
        ASSERT_LE(std::abs(mean[c] - m), 16 * u32 * abs_sum / n) << "channel " << c;
        ASSERT_LE(std::abs(invstd[c] - inv), 16 * u32 * inv) << "channel " << c;
        each([&](int64_t i) {
          const double product = (xv[i] - m) * inv * scale[c], want = product + bias[c];
          const double bound = u_s * std::abs(want) + 16 * u32 * (std::abs(product) + std::abs(bias[c])) + tiny;
          y_outside += std::abs(yv[i] - want) > bound;
        });
      }
      EXPECT_EQ(y_outside, 0) << "elements of Y outside the bound";
    }
  }
}

// Conv -> BatchNorm -> ReLU, `blocks` times, [2, 4, 6, 6], and an mse loss on the last.
Graph conv_stack(int blocks) {
  using testing::add_initializer, testing::add_input, testing::add_node;
  Graph g;
  g.opset = 17;
  add_input(g, "x", {2, 4, 6, 6});
  std::string t = "x";
  for (int b = 0; b < blocks; ++b) {
    const std::string p = "b" + std::to_string(b);
    add_initializer(g, p + ".w", testing::random_tensor({4, 4, 3, 3}, 100 + b, -0.3f, 0.3f));
    add_initializer(g, p + ".scale", testing::random_tensor({4}, 200 + b, 0.5f, 1.5f));
    add_initializer(g, p + ".bias", testing::random_tensor({4}, 300 + b));
    add_initializer(g, p + ".mean", testing::random_tensor({4}, 400 + b));
    add_initializer(g, p + ".var", testing::random_tensor({4}, 500 + b, 0.5f, 1.5f));
    add_node(g, "Conv", {t, p + ".w"}, {p + ".c"}, testing::attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    add_node(g, "BatchNormalization", {p + ".c", p + ".scale", p + ".bias", p + ".mean", p + ".var"}, {p + ".n"});
    add_node(g, "Relu", {p + ".n"}, {p + ".r"});
    t = p + ".r";
  }
  g.outputs = {t};
  return testing::with_types(g);
}

// Each weight's compute Cast sits just before its first reader, so the gradient pass puts
// the Cast of its gradient back to f32 next to the weight gradient; with the Casts at the
// front of the step, every "weight gradient + its Cast" candidate spanned the backward pass
// and the cover's search (in node order) ran out of states at about 18 convolutions: a
// greedy cover, and the BatchNorm chains unfused (ResNet-18's bf16 step: 322 kernels, 1321.7
// us h100 estimate, against 242 and 1032.3 us exact). After the gradient pass the forward
// Casts become one dc.MultiCast at the first one's place (merge_compute_casts); the gradients'
// Casts stay where they are.
TEST(TrainAmpBatchNorm, WeightCastsSitBesideTheirReadersAndTheCoverIsExact) {
  TrainingSpec spec;
  spec.loss = LossKind::mse;
  spec.labels = "target";
  spec.mixed_precision = DType::bf16;
  spec.momentum = 0.9;
  const Graph g = apply_precision(build_training_graph(conv_stack(24), spec), Precision::bf16);
  int casts = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op == "dc.MultiCast") {  // the forward Casts, merged once the gradient pass placed theirs
      casts += static_cast<int>(n.inputs.size());
      ASSERT_LT(i + 1, g.nodes.size());
      EXPECT_EQ(g.nodes[i + 1].input(1), n.outputs[0]) << "the first Conv follows " << n.name;
    } else if (n.name.starts_with("grad/compute_cast/")) {
      const size_t gradient = *g.producer(n.input(0));
      EXPECT_LE(i - gradient, 2u) << n.name << " is " << i - gradient << " nodes after the weight gradient";
    }
  }
  EXPECT_EQ(casts, 24);
  static const GpuCatalog catalog = GpuCatalog::builtin();
  PlanOptions opts;
  set_plan_precision(&opts, Precision::bf16);
  const ModelPlan plan = plan_by_estimate(g, {&catalog.require("h100")}, opts);
  EXPECT_TRUE(plan.gpus.at(0).cover.exact);
}

}  // namespace
}  // namespace dc
