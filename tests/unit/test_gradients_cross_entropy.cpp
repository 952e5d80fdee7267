// The cross-entropy's gradient (grad_training_ops.cpp) on the CPU reference: for a fitted
// batch, p - 1 of the label's class must keep its digits (exp(log p) - 1 in f32 would lose
// them: about 1e-3 relative at p = 1 - 4e-5), and an unlikely class's p must too.
#include <cmath>

#include "gradient_testing.h"

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

}  // namespace
}  // namespace dc::testing
