// build_training_graph: the step graph's interface, one step of SGD and AdamW on the CPU
// reference against the formulas, BatchNorm's running statistics, Dropout's mask, frozen
// weights, and the errors for what it cannot train.
#include <cmath>
#include <cstring>

#include "ir/optimizer_update.h"
#include "pass_testing.h"
#include "passes/build_training_graph.h"
#include "passes/simplify.h"
#include "passes/simplify_for_training.h"
#include "passes/training/lower_batch_norm.h"
#include "passes/training_state.h"
#include "ref/philox.h"
#include "ref/train_step.h"

namespace dc::testing {
namespace {

// x[4,3] -> Gemm(W1[5,3], b1, transB) -> Relu -> Gemm(W2[5,3], b2) -> logits[4,3].
Graph mlp() {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {4, 3});
  add_initializer(g, "W1", random_tensor({5, 3}, 1));
  add_initializer(g, "b1", random_tensor({5}, 2));
  add_initializer(g, "W2", random_tensor({5, 3}, 3));
  add_initializer(g, "b2", random_tensor({3}, 4));
  add_node(g, "Gemm", {"x", "W1", "b1"}, {"h"}, attrs({{"transB", int64_t{1}}}));
  add_node(g, "Relu", {"h"}, {"r"});
  add_node(g, "Gemm", {"r", "W2", "b2"}, {"logits"});
  g.outputs = {"logits"};
  return with_types(g);
}

ref::TensorMap batch() {
  return {{"x", random_tensor({4, 3}, 9)},
          {"labels", Tensor::from_vector<int64_t>({4}, {0, 2, 1, 2})}};
}

double loss_of(Graph g, const std::string& w, const Tensor& value) {
  g.initializers[w] = value;
  return ref::loss_value(g, ref::run_graph(g, batch()));
}

TEST(TrainingGraph, InterfaceLossOutputsAndState) {
  TrainingSpec spec;
  spec.momentum = 0.9;
  const Graph t = build_training_graph(mlp(), spec);
  expect_well_formed(t);
  EXPECT_EQ(t.inputs, (std::vector<std::string>{"x", "labels"}));
  EXPECT_EQ(t.info("labels").dtype, DType::i64);
  EXPECT_EQ(t.info("labels").shape, (Shape{4}));
  ASSERT_GE(t.outputs.size(), 2u);
  EXPECT_EQ(t.info(t.outputs[0]).shape, Shape{});
  EXPECT_EQ(t.outputs[1], "logits");
  std::set<std::string> states;
  for (const auto& u : training_state_updates(t)) states.insert(u.state);
  EXPECT_EQ(states, (std::set<std::string>{"W1", "b1", "W2", "b2", "W1@momentum", "b1@momentum",
                                           "W2@momentum", "b2@momentum", "train.step"}));
  EXPECT_TRUE(is_training_graph(t));
}

// One SGD step: (W - W') / lr - wd W is the gradient, whose directional derivative matches
// the loss's central difference.
TEST(TrainingGraph, OneSgdStepFollowsTheLossGradient) {
  TrainingSpec spec;
  spec.lr = 0.1;
  spec.weight_decay = 0.01;
  spec.momentum = 0.9;
  Graph t = build_training_graph(mlp(), spec);
  const Graph before = t;
  const auto out = ref::run_training_step(t, batch());
  EXPECT_EQ(t.initializers.at("train.step").data<int64_t>()[0], 1);
  for (const char* w : {"W1", "b1", "W2", "b2"}) {
    SCOPED_TRACE(w);
    const Tensor& w0 = before.initializers.at(w);
    const Tensor& w1 = t.initializers.at(w);
    const Tensor v = random_tensor(w0.shape(), 77);
    double directional = 0;
    for (int64_t i = 0; i < w0.numel(); ++i) {
      const double g = (w0.data<float>()[i] - w1.data<float>()[i]) / spec.lr -
                       spec.weight_decay * w0.data<float>()[i];
      // PyTorch's buffer holds the decayed gradient: the whole first step's update / lr.
      EXPECT_NEAR(t.initializers.at(std::string(w) + "@momentum").data<float>()[i],
                  (w0.data<float>()[i] - w1.data<float>()[i]) / spec.lr, 1e-4);
      directional += g * v.data<float>()[i];
    }
    const double eps = 1e-3;
    Tensor plus(DType::f32, w0.shape()), minus(DType::f32, w0.shape());
    for (int64_t i = 0; i < w0.numel(); ++i) {
      plus.mutable_data<float>()[i] = w0.data<float>()[i] + static_cast<float>(eps) * v.data<float>()[i];
      minus.mutable_data<float>()[i] = w0.data<float>()[i] - static_cast<float>(eps) * v.data<float>()[i];
    }
    const double fd = (loss_of(before, w, plus) - loss_of(before, w, minus)) / (2 * eps);
    EXPECT_NEAR(directional, fd, 2e-2 * std::max(1.0, std::abs(fd)));
  }
  // The loss falls along the negative gradient.
  const double l0 = ref::loss_value(before, out);
  const double l1 = ref::loss_value(t, ref::run_graph(t, batch()));
  EXPECT_LT(l1, l0);
}

TEST(TrainingGraph, AdamWFirstStepIsSignedLearningRate) {
  TrainingSpec spec;
  spec.optimizer = OptimizerKind::adamw;
  spec.lr = 1e-3;
  spec.weight_decay = 0.1;
  Graph t = build_training_graph(mlp(), spec);
  const Graph before = t;
  ref::run_training_step(t, batch());
  for (const char* w : {"W1", "b2"}) {
    const Tensor& w0 = before.initializers.at(w);
    const Tensor& w1 = t.initializers.at(w);
    const Tensor& m = t.initializers.at(std::string(w) + "@adam_m");
    for (int64_t i = 0; i < w0.numel(); ++i) {
      // t = 1: m = (1 - b1) g, and the update is lr * g / (|g| + eps) after decoupled decay.
      const double g = m.data<float>()[i] / (1 - spec.beta1);
      const double want = w0.data<float>()[i] * (1 - spec.lr * spec.weight_decay) -
                          spec.lr * g / (std::abs(g) + spec.eps);
      EXPECT_NEAR(w1.data<float>()[i], want, 1e-7) << w << "[" << i << "]";
      EXPECT_NEAR(t.initializers.at(std::string(w) + "@adam_v").data<float>()[i],
                  (1 - spec.beta2) * g * g, 1e-6 * std::max(1.0, g * g));
    }
  }
}

// One update node per tensor, or buckets of them (one multi-tensor node each): the same
// arithmetic in the same order, so two steps give bit-identical state.
TEST(TrainingGraph, BucketedUpdatesEqualOneNodePerTensor) {
  for (OptimizerKind opt : {OptimizerKind::sgd, OptimizerKind::adamw})
    for (double momentum : {0.0, 0.9}) {
      if (opt == OptimizerKind::adamw && momentum != 0) continue;
      TrainingSpec spec;
      spec.optimizer = opt;
      spec.momentum = momentum;
      spec.weight_decay = 0.1;
      spec.optimizer_bucket_bytes = 0;
      Graph single = build_training_graph(mlp(), spec);
      spec.optimizer_bucket_bytes = 4 * 5 * 3 + 4 * 5;  // W1 and b1 share a bucket, then W2 and b2
      Graph bucketed = build_training_graph(mlp(), spec);
      const char* op = opt == OptimizerKind::sgd ? "dc.SgdUpdate" : "dc.AdamWUpdate";
      std::vector<size_t> sizes;
      for (const Node& n : bucketed.nodes)
        if (n.op == op) sizes.push_back(optimizer_update_layout(n).tensors);
      EXPECT_EQ(sizes, (std::vector<size_t>{2, 2})) << op;
      int singles = 0;
      for (const Node& n : single.nodes) singles += n.op == op;
      EXPECT_EQ(singles, 4);
      for (int step = 0; step < 2; ++step) {
        ref::run_training_step(single, batch());
        ref::run_training_step(bucketed, batch());
      }
      for (const auto& [name, t] : single.initializers) {
        const Tensor& b = bucketed.initializers.at(name);
        ASSERT_EQ(t.nbytes(), b.nbytes()) << name;
        EXPECT_EQ(std::memcmp(t.raw(), b.raw(), t.nbytes()), 0) << name << " differs after two steps (" << op << ")";
      }
    }
}

TEST(TrainingGraph, BatchNormUsesBatchStatisticsAndUpdatesRunningOnes) {
  Graph g;
  add_input(g, "x", {4, 2, 3, 3});
  add_initializer(g, "w", random_tensor({2, 2, 1, 1}, 5));
  add_initializer(g, "s", random_tensor({2}, 6, 0.5f, 1.5f));
  add_initializer(g, "b", random_tensor({2}, 7));
  add_initializer(g, "mean", Tensor::from_vector<float>({2}, {0.5f, -0.5f}));
  add_initializer(g, "var", Tensor::from_vector<float>({2}, {2.f, 3.f}));
  add_node(g, "Conv", {"x", "w"}, {"c"});
  add_node(g, "BatchNormalization", {"c", "s", "b", "mean", "var"}, {"y"},
           attrs({{"momentum", 0.9f}, {"epsilon", 1e-5f}}));
  add_node(g, "GlobalAveragePool", {"y"}, {"p"});
  add_initializer(g, "shape", Tensor::from_vector<int64_t>({2}, {4, 2}));
  add_node(g, "Reshape", {"p", "shape"}, {"logits"});
  g.outputs = {"logits"};
  g = with_types(g);
  TrainingSpec spec;
  spec.freeze = {"nothing"};
  EXPECT_NE(user_error_of([&] { build_training_graph(g, spec); }).find("--freeze 'nothing'"),
            std::string::npos);
  spec.freeze = {};
  Graph t = build_training_graph(g, spec);
  // f32 steps normalise by elementwise ops after the gradient (lower_batch_norm.h).
  EXPECT_EQ(op_count(t, "dc.BatchNormTrain"), 0);
  EXPECT_EQ(op_count(t, "dc.BatchNormStats"), 0);
  EXPECT_EQ(op_count(t, "BatchNormalization"), 0);
  const ref::TensorMap in{{"x", random_tensor({4, 2, 3, 3}, 8)},
                          {"labels", Tensor::from_vector<int64_t>({4}, {0, 1, 1, 0})}};
  ref::RunOptions keep;
  keep.keep_intermediates = true;
  const auto vals = ref::run_graph(t, in, keep);
  const Tensor& c = vals.at("c");
  for (int64_t ch = 0; ch < 2; ++ch) {
    double s = 0, sq = 0;
    const int64_t n = 4 * 9;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 9; ++j) s += c.data<float>()[(i * 2 + ch) * 9 + j];
    const double mu = s / n;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 9; ++j) sq += std::pow(c.data<float>()[(i * 2 + ch) * 9 + j] - mu, 2);
    const double rm = g.initializers.at("mean").data<float>()[ch] * 0.9 + 0.1 * mu;
    const double rv = g.initializers.at("var").data<float>()[ch] * 0.9 + 0.1 * sq / (n - 1);
    EXPECT_NEAR(vals.at("mean@next").data<float>()[ch], rm, 1e-5);
    EXPECT_NEAR(vals.at("var@next").data<float>()[ch], rv, 1e-5);
  }
  std::set<std::string> states;
  for (const auto& u : training_state_updates(t)) states.insert(u.state);
  EXPECT_TRUE(states.count("mean") && states.count("var") && states.count("w"));
  EXPECT_FALSE(states.count("shape"));
}

// lower_batch_norm_apply: dc.BatchNormTrain against its lowering, the per-channel statistics
// and the chain ((X - mean) * invstd) * scale + B as elementwise ops, on the reference. The
// statistics are f32 ops against one rounding of channel_stats' double: the running ones two
// products and a sum (each rounded, the constants 1 - momentum and the unbiasing folded in
// f32, the reference's own rounding) within 6 ulp of their terms, invstd within 4 ulp; the saved
// mean's reader reads the batch mean. Y is four f32 operations against one rounding of the
// double result: within 5 ulp of (X - mean) invstd scale (the product's three roundings,
// the f32 inverse std, the subtraction) plus 2 ulp of |Y| (the Add, the reference's own
// rounding).
TEST(TrainingGraph, LoweredBatchNormEqualsTheNodeItReplaces) {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {3, 4, 5, 2});
  add_initializer(g, "scale", random_tensor({4}, 21, 0.5f, 2.f));
  add_initializer(g, "bias", random_tensor({4}, 22));
  add_initializer(g, "rm", random_tensor({4}, 23));
  add_initializer(g, "rv", random_tensor({4}, 24, 0.5f, 2.f));
  add_input(g, "bm", {4});
  add_input(g, "bv", {4});
  add_node(g, "dc.BatchNormTrain", {"x", "scale", "bias", "rm", "rv", "bm", "bv"},
           {"y", "rm@next", "rv@next", "saved_mean", "saved_invstd"}, attrs({{"epsilon", 1e-3f}, {"momentum", 0.8f}}));
  add_node(g, "Add", {"saved_mean", "saved_invstd"}, {"per_channel"});
  g.outputs = {"y", "rm@next", "rv@next", "saved_invstd", "per_channel"};
  ref::TensorMap in{{"x", random_tensor({3, 4, 5, 2}, 25, -2.f, 3.f)},
                    {"bm", random_tensor({4}, 26)},
                    {"bv", random_tensor({4}, 27, 0.1f, 3.f)}};
  g = with_types(g);
  Graph lowered = g;
  lower_batch_norm_apply(lowered);
  EXPECT_EQ(op_count(lowered, "dc.BatchNormTrain"), 0);
  EXPECT_EQ(op_count(lowered, "dc.BatchNormStats"), 0);
  EXPECT_FALSE(lowered.tensors.count("saved_mean"));
  const auto want = ref::run_graph(g, in), got = ref::run_graph(lowered, in);
  const double ulp = std::ldexp(1.0, -24);
  const auto value = [](const ref::TensorMap& m, const std::string& t, int64_t c) {
    return static_cast<double>(m.at(t).data<float>()[c]);
  };
  for (int64_t c = 0; c < 4; ++c) {
    SCOPED_TRACE("channel " + std::to_string(c));
    const double unbiased = value(in, "bv", c) * 30 / 29;  // count: 3 x 5 x 2 values a channel
    const double running_mean = g.initializers.at("rm").data<float>()[c], running_var = g.initializers.at("rv").data<float>()[c];
    const double mean_terms = std::abs(0.8 * running_mean) + std::abs(0.2 * value(in, "bm", c));
    const double var_terms = std::abs(0.8 * running_var) + std::abs(0.2 * unbiased);
    const double inv = value(want, "saved_invstd", c);
    EXPECT_NEAR(value(got, "rm@next", c), value(want, "rm@next", c), 6 * ulp * mean_terms);
    EXPECT_NEAR(value(got, "rv@next", c), value(want, "rv@next", c), 6 * ulp * var_terms);
    EXPECT_NEAR(value(got, "saved_invstd", c), inv, 4 * ulp * inv);
    EXPECT_NEAR(value(got, "per_channel", c), value(want, "per_channel", c),
                4 * ulp * inv + ulp * std::abs(value(want, "per_channel", c)));
  }
  const Tensor &y = got.at("y"), &y_ref = want.at("y"), &x = in.at("x");
  ASSERT_EQ(y.shape(), y_ref.shape());
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t c = (i / 10) % 4;
    const double inv = 1.0 / std::sqrt(in.at("bv").data<float>()[c] + 1e-3);
    const double product = std::abs((x.data<float>()[i] - in.at("bm").data<float>()[c]) * inv *
                                    g.initializers.at("scale").data<float>()[c]);
    const double bound = 5 * ulp * product + 2 * ulp * std::abs(y_ref.data<float>()[i]) + 1e-30;
    ASSERT_LE(std::abs(y.data<float>()[i] - y_ref.data<float>()[i]), bound) << "element " << i;
  }
}

TEST(TrainingGraph, FrozenWeightsKeepTheirValue) {
  TrainingSpec spec;
  spec.freeze = {"W1", "b1"};
  Graph t = build_training_graph(mlp(), spec);
  for (const auto& u : training_state_updates(t)) {
    EXPECT_NE(u.state, "W1");
    EXPECT_NE(u.state, "b1");
  }
  const Tensor w1 = t.initializers.at("W1");
  ref::run_training_step(t, batch());
  EXPECT_TRUE(t.initializers.at("W1").bitwise_equal(w1));
}

TEST(TrainingGraph, MseAndNoneLosses) {
  TrainingSpec spec;
  spec.loss = LossKind::mse;
  spec.labels = "target";
  Graph t = build_training_graph(mlp(), spec);
  EXPECT_EQ(t.inputs.back(), "target");
  EXPECT_EQ(t.info("target").dtype, DType::f32);
  const Tensor target = random_tensor({4, 3}, 31);
  const ref::TensorMap in{{"x", random_tensor({4, 3}, 9)}, {"target", target}};
  const auto out = ref::run_graph(t, in);
  const Tensor& y = out.at("logits");
  double mse = 0;
  for (int64_t i = 0; i < 12; ++i) mse += std::pow(y.data<float>()[i] - target.data<float>()[i], 2);
  EXPECT_NEAR(ref::loss_value(t, out), mse / 12, 1e-5);

  Graph g = mlp();  // a model whose first output is its loss
  add_node(g, "ReduceSum", {"logits"}, {"total"}, attrs({{"keepdims", int64_t{0}}}));
  g.tensors["total"] = TensorInfo{DType::f32, {}};
  g.outputs = {"total", "logits"};
  spec.loss = LossKind::none;
  t = build_training_graph(g, spec);
  EXPECT_EQ(t.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(t.outputs[0], "total");
}

TEST(TrainingGraph, DropoutIsActiveAndSeededByTheStep) {
  Graph g = mlp();
  g.nodes.insert(g.nodes.begin() + 2, make_node("Dropout", {"r"}, {"d"}));
  g.nodes.back().inputs[0] = "d";
  add_initializer(g, "ratio", Tensor::scalar(0.5f));
  g.nodes[2].inputs.push_back("ratio");
  g.tensors["d"] = g.info("r");
  Graph t = build_training_graph(g, {});
  const Node* d = find_node(t, "dc.Dropout");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->inputs.at(1), "train.step");
  EXPECT_FLOAT_EQ(d->attrs.get_float("ratio"), 0.5f);
  ref::RunOptions keep;
  keep.keep_intermediates = true;
  const Tensor mask0 = ref::run_graph(t, batch(), keep).at(d->outputs[1]);
  EXPECT_TRUE(ref::run_graph(t, batch(), keep).at(d->outputs[1]).bitwise_equal(mask0));
  ref::run_training_step(t, batch());
  const Tensor mask1 = ref::run_graph(t, batch(), keep).at(d->outputs[1]);
  EXPECT_FALSE(mask1.bitwise_equal(mask0)) << "the next step draws a new mask";
  for (int64_t i = 0; i < mask0.numel(); ++i) {
    const float m = mask0.data<float>()[i];
    EXPECT_TRUE(m == 0.f || m == 2.f) << m;
  }
}

TEST(TrainingGraph, PhiloxMatchesThePublishedVectors) {
  // Random123's known-answer tests for philox4x32-10.
  EXPECT_EQ(ref::philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(ref::philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                            {0xffffffffu, 0xffffffffu}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(ref::philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                            {0xa4093822u, 0x299f31d0u}),
            (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
  int kept = 0;
  for (uint64_t i = 0; i < 20000; ++i) kept += ref::philox_uniform(7, 3, i) >= 0.3f;
  EXPECT_NEAR(kept / 20000.0, 0.7, 4 * std::sqrt(0.21 / 20000));
}

// Conv -> BN, a MatMul against Transpose(W), a Dropout and a constant shape computation.
Graph foldable() {
  Graph g;
  g.opset = 17;
  add_input(g, "x", {2, 3, 4, 4});
  add_initializer(g, "w", random_tensor({4, 3, 1, 1}, 1));
  add_initializer(g, "s", random_tensor({4}, 2, 0.5f, 1.5f));
  add_initializer(g, "b", random_tensor({4}, 3));
  add_initializer(g, "mean", random_tensor({4}, 4));
  add_initializer(g, "var", random_tensor({4}, 5, 0.5f, 1.5f));
  add_initializer(g, "fcw", random_tensor({5, 4}, 6));
  add_initializer(g, "ratio", Tensor::scalar(0.25f));
  add_initializer(g, "two", Tensor::from_vector<int64_t>({1}, {2}));
  add_initializer(g, "minus1", Tensor::from_vector<int64_t>({1}, {-1}));
  add_node(g, "Conv", {"x", "w"}, {"c"});
  add_node(g, "BatchNormalization", {"c", "s", "b", "mean", "var"}, {"n"});
  add_node(g, "GlobalAveragePool", {"n"}, {"p"});
  add_node(g, "Concat", {"two", "minus1"}, {"shape"}, attrs({{"axis", int64_t{0}}}));
  add_node(g, "Reshape", {"p", "shape"}, {"f"});
  add_node(g, "Dropout", {"f", "ratio"}, {"d"});
  add_node(g, "Transpose", {"fcw"}, {"fcwt"}, attrs({{"perm", std::vector<int64_t>{1, 0}}}));
  add_node(g, "MatMul", {"d", "fcwt"}, {"logits"});
  g.outputs = {"logits"};
  return with_types(g);
}

TEST(TrainingGraph, SimplificationKeepsWhatTrainingNeeds) {
  const Graph inference = simplify(foldable());
  EXPECT_EQ(op_count(inference, "BatchNormalization"), 0) << "inference folds BN";
  EXPECT_EQ(op_count(inference, "Transpose"), 0) << "inference folds the weight's transpose";
  EXPECT_EQ(op_count(inference, "Dropout"), 0);
  const Graph t = simplify_for_training(foldable());
  expect_well_formed(t);
  EXPECT_EQ(op_count(t, "BatchNormalization"), 1);
  EXPECT_EQ(op_count(t, "Transpose"), 1);
  EXPECT_EQ(op_count(t, "Dropout"), 1);
  EXPECT_EQ(op_count(t, "Concat"), 0) << "shape computations still fold";
  EXPECT_EQ(t.inputs, std::vector<std::string>{"x"});
  for (const char* w : {"w", "s", "b", "mean", "var", "fcw"}) {
    ASSERT_TRUE(t.is_constant(w)) << w;
    EXPECT_TRUE(t.initializers.at(w).bitwise_equal(foldable().initializers.at(w))) << w;
  }
  std::set<std::string> trained;
  for (const auto& u : training_state_updates(build_training_graph(t, {}))) trained.insert(u.state);
  EXPECT_TRUE(trained.count("fcw") && trained.count("w") && trained.count("s"));
}

TEST(TrainingGraph, ErrorsNameTheProblem) {
  Graph g = mlp();
  g.nodes.insert(g.nodes.begin() + 2, make_node("Sin", {"r"}, {"s"}));
  g.nodes.back().inputs[0] = "s";
  g.tensors["s"] = g.info("r");
  EXPECT_NE(user_error_of([&] { build_training_graph(g, {}); })
                .find("node 'Sin:s' (Sin) is on the path from a trained weight to the loss"),
            std::string::npos);
  TrainingSpec frozen;  // Sin before every trained weight: off the path, no rule needed
  frozen.freeze = {"W1", "b1"};
  EXPECT_NO_THROW(build_training_graph(g, frozen));

  Graph flat = mlp();
  add_node(flat, "ReduceSum", {"logits"}, {"total"}, attrs({{"keepdims", int64_t{0}}}));
  flat.tensors["total"] = TensorInfo{DType::f32, {}};
  flat.outputs = {"total"};
  EXPECT_NE(user_error_of([&] { build_training_graph(flat, {}); }).find("class axis"),
            std::string::npos);

  const Graph t = build_training_graph(mlp(), {});
  ref::TensorMap bad = batch();
  bad["labels"] = Tensor::from_vector<int32_t>({4}, {0, 1, 2, 0});
  EXPECT_NE(user_error_of([&] { ref::run_graph(t, bad); }).find("labels"), std::string::npos);
  bad["labels"] = Tensor::from_vector<int64_t>({2, 2}, {0, 1, 2, 0});
  EXPECT_NE(user_error_of([&] { ref::run_graph(t, bad); }).find("labels"), std::string::npos);
  // A label past the classes stops the loss's pick (GatherElements); a negative one, which
  // GatherElements would wrap, the gradient's check (dc-run refuses both before a step).
  bad["labels"] = Tensor::from_vector<int64_t>({4}, {0, 1, 3, 0});
  EXPECT_NE(user_error_of([&] { ref::run_graph(t, bad); }).find("index 3 out of range [-3, 3)"),
            std::string::npos);
  bad["labels"] = Tensor::from_vector<int64_t>({4}, {0, -1, 2, 0});
  EXPECT_NE(user_error_of([&] { ref::run_graph(t, bad); }).find("label -1 at position 1 is outside [0, 3)"),
            std::string::npos);
  TrainingSpec lr;
  lr.lr = 0;
  EXPECT_THROW(build_training_graph(mlp(), lr), UserError);
}

}  // namespace
}  // namespace dc::testing
