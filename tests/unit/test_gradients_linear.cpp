// The MatMul gradient of Linear layers as torch exports them, y = x W^T with W^T a Transpose
// of the weight (grad_linalg.cpp): checked against central differences (gradient_testing.h),
// and the shape of the backward graph: dW written by one 2-D GEMM over every row of x (no
// batched product summed by a ReduceSum), no Transpose of a Transpose (GradBuilder::transpose
// cancels them), and no backward node whose output nothing reads. Also Gemm layers whose
// operands 2-D Transposes compute: their gradient GEMMs read the Transposes' sources.
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

// Gemm layers reading operands that 2-D Transposes compute (transA, transB in {0, 1}): layer
// 1, h = Gemm(xs^T, W1s^T, c1), each Transpose read by it alone; layer 2, y = Gemm(h, W2^T) +
// Gemm(x2, W2^T), W2^T read twice.
Graph transposed_gemm_layers(int64_t ta, int64_t tb) {
  Graph g;
  const int64_t m = 3, k = 4, n = 5, o = 6;
  add_initializer(g, "xs", random_tensor(ta ? Shape{m, k} : Shape{k, m}, 11));  // Transpose: op(A) [m, k]
  add_initializer(g, "w1s", random_tensor(tb ? Shape{k, n} : Shape{n, k}, 12));
  add_initializer(g, "c1", random_tensor({n}, 13));
  add_initializer(g, "w2", random_tensor(tb ? Shape{n, o} : Shape{o, n}, 14));
  add_initializer(g, "x2", random_tensor({m, n}, 15));
  add_node(g, "Transpose", {"xs"}, {"xt"}, swap_perm());
  add_node(g, "Transpose", {"w1s"}, {"w1t"}, swap_perm());
  add_node(g, "Gemm", {"xt", "w1t", "c1"}, {"h"}, attrs({{"transA", ta}, {"transB", tb}, {"alpha", 0.7f}}));
  add_node(g, "Transpose", {"w2"}, {"w2t"}, swap_perm());
  add_node(g, "Gemm", {"h", "w2t"}, {"p"}, attrs({{"transB", tb}}));
  add_node(g, "Gemm", {"x2", "w2t"}, {"q"}, attrs({{"transB", tb}}));
  add_node(g, "Add", {"p", "q"}, {"y"});
  return g;
}

TEST(GradientRulesF32, GemmOfTransposedOperands) {
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "transA " << ta << " transB " << tb);
      check_gradients(transposed_gemm_layers(ta, tb), "y", {"xs", "w1s", "c1", "w2", "x2"});
    }
}

TEST(GradientRulesF32, GemmGradientsReadTheTransposesSources) {
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "transA " << ta << " transB " << tb);
      Graph g = transposed_gemm_layers(ta, tb);
      g.outputs = {"y"};
      g = with_types(g);
      add_initializer(g, "dy", random_tensor({3, 6}, 16));
      const size_t forward = g.nodes.size();
      const auto grads = add_vector_jacobian_product(g, {{"y", "dy"}}, {"xs", "w1s", "w2", "x2"});
      expect_well_formed(g);
      const auto producer_op = [&](const std::string& t) {
        const auto p = g.producer(t);
        return p ? g.nodes[*p].op : std::string("(none)");
      };
      // Read once through a Transpose: dxs and dW1s are their GEMMs' own outputs, stored as
      // the sources ([k, m] or [m, k]; [n, k] or [k, n]).
      EXPECT_EQ(producer_op(grads.at("xs")), "Gemm");
      EXPECT_EQ(producer_op(grads.at("w1s")), "Gemm");
      EXPECT_EQ(g.info(grads.at("xs")).shape, g.info("xs").shape);
      EXPECT_EQ(g.info(grads.at("w1s")).shape, g.info("w1s").shape);
      const auto readers = g.consumers();
      int transposes = 0;
      for (size_t i = forward; i < g.nodes.size(); ++i) {
        const Node& n = g.nodes[i];
        SCOPED_TRACE(n.name);
        // No gradient GEMM reads a forward Transpose's output: those stay read by the
        // forward Gemms alone, which read them in place.
        for (const auto& in : n.inputs) EXPECT_TRUE(in != "xt" && in != "w1t" && in != "w2t") << in;
        transposes += n.op == "Transpose";
        const std::string& out = n.outputs.at(0);
        const bool is_gradient = std::any_of(grads.begin(), grads.end(), [&](const auto& kv) { return kv.second == out; });
        EXPECT_TRUE(is_gradient || readers.count(out)) << "unread backward node";
      }
      // W2^T, read twice: its summed gradient transposed back, the one Transpose left.
      EXPECT_EQ(transposes, 1);
      EXPECT_EQ(producer_op(grads.at("w2")), "Transpose");
    }
}

}  // namespace
}  // namespace dc::testing
