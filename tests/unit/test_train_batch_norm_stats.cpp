// BatchNorm's per-channel statistics in a training step (docs/training.md "The normalisation
// as elementwise ops"): the running statistics' update and the inverse std are elementwise
// ops over [C] (lower_batch_norm.h) that the candidate generator fuses into the batch
// statistics' ReduceMeans as row-space outputs: no kernel of their own. The plan's clusters,
// and three steps on the host emulator against the reference and against the running
// statistics computed here in double.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "ir/state_names.h"
#include "pass_testing.h"
#include "passes/training/lower_batch_norm.h"
#include "testing.h"
#include "training_step_testing.h"

namespace dc {
namespace {

constexpr float kMomentum = 0.8f;  // not the default 0.9: the node's attribute is what counts

// x [2, 4, 6, 6] -> BatchNorm "bn0" -> Conv [10, 4, 3, 3] (pads 1) -> BatchNorm "bn1" -> Relu
// -> GlobalAveragePool -> Reshape [2, 10]: logits. bn0 normalises the input itself, so its
// batch statistics are the same at every step.
Graph bn_model() {
  using testing::add_initializer, testing::add_node;
  Graph g;
  g.opset = 17;
  testing::add_input(g, "x", {2, 4, 6, 6});
  const auto batch_norm = [&](const std::string& name, const std::string& in, const std::string& out, int64_t c,
                              uint32_t seed) {
    add_initializer(g, name + ".scale", testing::random_tensor({c}, seed, 0.5f, 1.5f));
    add_initializer(g, name + ".bias", testing::random_tensor({c}, seed + 1));
    add_initializer(g, name + ".mean", testing::random_tensor({c}, seed + 2));
    add_initializer(g, name + ".var", testing::random_tensor({c}, seed + 3, 0.5f, 1.5f));
    add_node(g, "BatchNormalization", {in, name + ".scale", name + ".bias", name + ".mean", name + ".var"}, {out},
             testing::attrs({{"momentum", kMomentum}, {"epsilon", 1e-3f}}))
        .name = name;
  };
  batch_norm("bn0", "x", "n0", 4, 10);
  add_initializer(g, "w", testing::random_tensor({10, 4, 3, 3}, 20, -0.3f, 0.3f));
  add_node(g, "Conv", {"n0", "w"}, {"c"}, testing::attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  batch_norm("bn1", "c", "n1", 10, 30);
  add_node(g, "Relu", {"n1"}, {"r"});
  add_node(g, "GlobalAveragePool", {"r"}, {"p"});
  add_initializer(g, "rows", Tensor::from_vector<int64_t>({2}, {2, 10}));
  add_node(g, "Reshape", {"p", "rows"}, {"logits"});
  g.outputs = {"logits"};
  return testing::with_types(g);
}

// The nodes of the chosen kernel holding node `name`.
std::set<size_t> kernel_of(const testing::EstimatedStep& s, const std::string& name) {
  const Graph& g = s.step;
  for (size_t c : s.plan.gpus.at(0).cover.chosen) {
    const Candidate& cand = s.plan.candidates[c];
    for (size_t i : cand.nodes)
      if (g.nodes[i].name == name) {
        EXPECT_EQ(cand.kind, ClusterKind::reduction) << name;
        return {cand.nodes.begin(), cand.nodes.end()};
      }
  }
  ADD_FAILURE() << "no chosen kernel holds " << name;
  return {};
}

// The node named `name`.
const Node& node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return n;
  ADD_FAILURE() << "no node " << name;
  return g.nodes.front();
}

// No dc.BatchNormStats kernel, no kernel for the statistics alone: the variance's ReduceMean
// writes the running variance and invstd, the mean's the running mean. Before (a
// dc.BatchNormStats node): one opaque naive kernel per BatchNorm.
TEST(TrainBatchNormStats, RunningStatisticsAndInvstdAreOutputsOfTheBatchStatistics) {
  const testing::EstimatedStep s = testing::estimated_step(bn_model(), testing::sgd_momentum_spec());
  const Graph& g = s.step;
  for (const Node& n : g.nodes) EXPECT_NE(n.op, "dc.BatchNormStats");
  for (const std::string bn : {"bn0", "bn1"}) {
    SCOPED_TRACE(bn);
    const std::set<size_t> var = kernel_of(s, bn + "/batch_var"), mean = kernel_of(s, bn + "/batch_mean");
    const auto written_by = [&](const std::set<size_t>& kernel, const std::string& t) {
      return kernel.count(*g.producer(t)) == 1;
    };
    EXPECT_TRUE(written_by(var, next_name(bn + ".var")));
    EXPECT_TRUE(written_by(var, node_named(g, batch_norm_invstd_node(bn)).outputs.at(0)));
    EXPECT_TRUE(written_by(mean, next_name(bn + ".mean")));
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!g.nodes[i].name.starts_with(batch_norm_stats_prefix(bn))) continue;
      EXPECT_TRUE(var.count(i) || mean.count(i)) << g.nodes[i].name << " is in a kernel of its own";
    }
  }
}

// Three SGD steps on the host emulator against the reference's (every state's update,
// running statistics included), and bn0's running statistics, whose batch statistics are
// those of the fixed input, against ONNX's momentum in double: mean' = mean m^3 + mu (1 -
// m^3), var' the same with the unbiased variance (count 72 a channel). A wrong momentum or
// a biased variance is off by far more than f32's few roundings a step.
TEST(TrainBatchNormStats, StepsFollowTheReferenceAndTheRunningStatisticsTheirFormula) {
  const TrainingSpec spec = testing::sgd_momentum_spec();
  testing::EstimatedStep s = testing::estimated_step(bn_model(), spec);
  const Graph model = bn_model();
  const int compared = testing::expect_plan_steps_follow_reference(s, spec, "bn_model.onnx", 43, 3, 1);
  EXPECT_EQ(compared, 2 + 4 + 4 + 2 * 2) << "w and its momentum, 2 x (scale, bias and their momenta), 2 x 2 running statistics";
  const auto x = testing::random_tensor({2, 4, 6, 6}, 43).to_float_vector();
  const double m3 = std::pow(static_cast<double>(kMomentum), 3), count = 72;
  const auto mean = s.step.initializers.at("bn0.mean").to_float_vector();
  const auto var = s.step.initializers.at("bn0.var").to_float_vector();
  const auto mean0 = model.initializers.at("bn0.mean").to_float_vector();
  const auto var0 = model.initializers.at("bn0.var").to_float_vector();
  for (int64_t c = 0; c < 4; ++c) {
    double sum = 0, sq = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t k = 0; k < 36; ++k) sum += x[(b * 4 + c) * 36 + k];
    const double mu = sum / count;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t k = 0; k < 36; ++k) sq += std::pow(x[(b * 4 + c) * 36 + k] - mu, 2);
    const double want_mean = mean0[c] * m3 + mu * (1 - m3), want_var = var0[c] * m3 + sq / (count - 1) * (1 - m3);
    // f32's unit roundoff times the reduction's length and a few roundings a step.
    const double u = (count + 16) * std::ldexp(1.0, -24);
    EXPECT_NEAR(mean[c], want_mean, u * (std::abs(mean0[c]) + std::abs(mu))) << "channel " << c;
    EXPECT_NEAR(var[c], want_var, u * (std::abs(var0[c]) + sq / (count - 1))) << "channel " << c;
  }
}

}  // namespace
}  // namespace dc
