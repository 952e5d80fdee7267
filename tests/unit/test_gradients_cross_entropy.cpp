// The cross-entropy's gradient (grad_training_ops.cpp) on the CPU reference: for a fitted
// batch, p - 1 of the label's class must keep its digits (exp(log p) - 1 in f32 would lose
// them: about 1e-3 relative at p = 1 - 4e-5), and an unlikely class's p must too. The loss
// lowered to template ops after the gradient (lower_cross_entropy.cpp): the same loss, the
// same gradient, no dc.SoftmaxCrossEntropy left.
#include <cmath>
#include <random>

#include "gradient_testing.h"
#include "ir/index_bounds.h"
#include "passes/training/lower_cross_entropy.h"

namespace dc::testing {
namespace {

TEST(GradientRulesCrossEntropy, FittedBatchKeepsPMinusOne) {
  // Two rows of 3 classes, the label's logit 10 or 12 above the others: p - 1 = -(2e-4 ..
  // 1e-5), the other classes' p about 1e-5.
  const std::vector<float> logits{10.f, 0.f, 0.5f, -1.f, 11.f, -0.5f};
  const std::vector<int64_t> labels{0, 1};
  Graph g;
  add_initializer(g, "logits", Tensor::from_vector<float>({2, 3}, logits));
  add_initializer(g, "labels", Tensor::from_vector<int64_t>({2}, labels));
  add_node(g, "dc.SoftmaxCrossEntropy", {"logits", "labels"}, {"loss", "logp"});
  g.outputs = {"loss"};
  g = with_types(g);
  const auto grads = add_gradients(g, "loss", {"logits"});
  ASSERT_TRUE(grads.count("logits"));
  g.outputs.push_back(grads.at("logits"));
  const Tensor d = ref::run_graph(g, {}).at(grads.at("logits"));
  for (int64_t r = 0; r < 2; ++r) {
    double z = 0;
    for (int64_t k = 0; k < 3; ++k) z += std::exp(static_cast<double>(logits[r * 3 + k]));
    for (int64_t k = 0; k < 3; ++k) {
      const double p = std::exp(static_cast<double>(logits[r * 3 + k])) / z;
      // p - 1 without cancellation: minus the other classes' probabilities.
      double want = p;
      if (k == labels[r]) {
        want = 0;
        for (int64_t j = 0; j < 3; ++j)
          if (j != k) want -= std::exp(static_cast<double>(logits[r * 3 + j])) / z;
      }
      want /= 2;  // the mean over 2 rows
      EXPECT_NEAR(d.data<float>()[r * 3 + k], want, 1e-5 * std::abs(want)) << r << ", " << k;
    }
  }
}

// -mean over rows of log_softmax(logits)[label], in double.
double cross_entropy(const std::vector<float>& logits, const std::vector<int64_t>& labels, int64_t classes) {
  double total = 0;
  const auto rows = static_cast<int64_t>(labels.size());
  for (int64_t r = 0; r < rows; ++r) {
    double z = 0;
    for (int64_t k = 0; k < classes; ++k) z += std::exp(static_cast<double>(logits[r * classes + k]));
    total -= logits[r * classes + labels[r]] - std::log(z);
  }
  return total / static_cast<double>(rows);
}

TEST(GradientRulesCrossEntropy, LoweredLossEqualsTheFusedOp) {
  // Logits [2, 3, 5] (rows over two axes), labels [2, 3]; and the fitted batch above.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  std::vector<float> random_logits(30);
  for (float& v : random_logits) v = dist(rng);
  struct Case {
    Shape shape;
    std::vector<float> logits;
    std::vector<int64_t> labels;
  };
  for (const Case& c : {Case{{2, 3, 5}, random_logits, {4, 0, 2, 1, 3, 4}},
                        Case{{2, 3}, {10.f, 0.f, 0.5f, -1.f, 11.f, -0.5f}, {0, 1}}}) {
    SCOPED_TRACE(shape_str(c.shape));
    Graph g;
    add_initializer(g, "logits", Tensor::from_vector<float>(c.shape, c.logits));
    add_initializer(g, "labels", Tensor::from_vector<int64_t>(Shape(c.shape.begin(), c.shape.end() - 1), c.labels));
    add_node(g, "dc.SoftmaxCrossEntropy", {"logits", "labels"}, {"loss", "logp"});
    g.outputs = {"loss"};
    g = with_types(g);
    const auto grads = add_gradients(g, "loss", {"logits"});
    g.outputs = {"loss", "logp", grads.at("logits")};
    Graph lowered = g;
    lower_cross_entropy(lowered);
    std::set<std::string> ops;
    for (const Node& n : lowered.nodes) ops.insert(n.op);
    EXPECT_FALSE(ops.count("dc.SoftmaxCrossEntropy"));
    for (const char* op : {"LogSoftmax", "GatherElements", "ReduceMean", "dc.SoftmaxCrossEntropyGrad"})
      EXPECT_TRUE(ops.count(op)) << op;
    EXPECT_EQ(lowered.info("loss").shape, Shape{});
    const auto fused = ref::run_graph(g, {});
    const auto ops_only = ref::run_graph(lowered, {});
    const double want = cross_entropy(c.logits, c.labels, c.shape.back());
    EXPECT_NEAR(ops_only.at("loss").data<float>()[0], want, 1e-6 * std::abs(want) + 1e-7);
    EXPECT_NEAR(ops_only.at("loss").data<float>()[0], fused.at("loss").data<float>()[0], 1e-6 * std::abs(want) + 1e-7);
    for (const std::string& t : {std::string("logp"), grads.at("logits")}) {
      const Tensor &a = ops_only.at(t), &b = fused.at(t);
      ASSERT_EQ(a.shape(), b.shape()) << t;
      for (int64_t i = 0; i < a.numel(); ++i)
        EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], 2e-6 * std::abs(b.data<float>()[i]) + 1e-7) << t << " " << i;
    }
  }
}

TEST(GradientRulesCrossEntropy, LabelsPickedThroughAReshapeKeepTheirBound) {
  // The lowered loss reads the labels as a [rows, 1] column (a Reshape): a worker checking a
  // workload of it must still draw them in [0, classes).
  Graph g;
  add_input(g, "logits", {4, 7});
  add_input(g, "labels", {4}, DType::i64);
  add_node(g, "dc.SoftmaxCrossEntropy", {"logits", "labels"}, {"loss", "logp"});
  g.tensors["loss"] = {DType::f32, {}};
  g.tensors["logp"] = {DType::f32, {4, 7}};
  g.outputs = {"loss"};
  lower_cross_entropy(g);
  EXPECT_EQ(input_index_bounds(g), (std::vector<int64_t>{0, 7}));
}

}  // namespace
}  // namespace dc::testing
