// The MatMul gradient of Linear layers as torch exports them, y = x W^T with W^T a Transpose
// of the weight (grad_linalg.cpp): checked against central differences (gradient_testing.h),
// and the shape of the backward graph: dW written by one 2-D GEMM over every row of x (no
// batched product summed by a ReduceSum), no Transpose of a Transpose (GradBuilder::transpose
// cancels them), and no backward node whose output nothing reads.
#include <algorithm>

#include "gradient_testing.h"

namespace dc::testing {
namespace {

Attributes swap_perm() { return attrs({{"perm", std::vector<int64_t>{1, 0}}}); }

// Layer 1: h = x W1^T (W1^T read by that MatMul alone); layer 2: y = h W2^T + x2 W2^T (W2^T
// read twice: its gradient is the sum, transposed back).
Graph linear_layers() {
  Graph g;
  add_initializer(g, "x", random_tensor({2, 3, 4}, 1));
  add_initializer(g, "w1", random_tensor({5, 4}, 2));
  add_initializer(g, "w2", random_tensor({6, 5}, 3));
  add_initializer(g, "x2", random_tensor({2, 3, 5}, 4));
  add_node(g, "Transpose", {"w1"}, {"w1t"}, swap_perm());
  add_node(g, "MatMul", {"x", "w1t"}, {"h"});
  add_node(g, "Transpose", {"w2"}, {"w2t"}, swap_perm());
  add_node(g, "MatMul", {"h", "w2t"}, {"p"});
  add_node(g, "MatMul", {"x2", "w2t"}, {"q"});
  add_node(g, "Add", {"p", "q"}, {"y"});
  return g;
}

TEST(GradientRulesF32, LinearLayersOfBatchedActivations) {
  check_gradients(linear_layers(), "y", {"x", "w1", "w2", "x2"});
}

TEST(GradientRulesF32, LinearWeightGradientIsOneGemmWrittenInPlace) {
  Graph g = linear_layers();
  g.outputs = {"y"};
  g = with_types(g);
  add_initializer(g, "dy", random_tensor({2, 3, 6}, 5));
  const size_t forward = g.nodes.size();
  const auto grads = add_vector_jacobian_product(g, {{"y", "dy"}}, {"x", "w1", "w2"});
  expect_well_formed(g);
  const auto producer_op = [&](const std::string& t) {
    const auto p = g.producer(t);
    return p ? g.nodes[*p].op : std::string("(none)");
  };
  // W1 (read once through W1^T): dW1 = dH^T x, the GEMM's own output, [5, 4].
  EXPECT_EQ(producer_op(grads.at("w1")), "MatMul");
  EXPECT_EQ(g.info(grads.at("w1")).shape, (Shape{5, 4}));
  const auto readers = g.consumers();
  for (size_t k = forward; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    SCOPED_TRACE(n.name);
    EXPECT_NE(n.op, "ReduceSum");  // no batched weight gradient to sum
    if (n.op == "Transpose") {
      EXPECT_NE(producer_op(n.input(0)), "Transpose");
    }
    const std::string& out = n.outputs.at(0);
    const bool is_gradient = std::any_of(grads.begin(), grads.end(), [&](const auto& kv) { return kv.second == out; });
    EXPECT_TRUE(is_gradient || readers.count(out)) << "unread backward node";
  }
}

}  // namespace
}  // namespace dc::testing
