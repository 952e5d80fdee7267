// The training step's fused attention (fuse_training_attention, grad_attention.cpp,
// ref/ops_attention.cpp): dc.Attention's rule (one dc.AttentionGrad, FlashAttention-2's
// backward from the saved log-sum-exp) against central finite differences in f64; the
// rewrite against the op-by-op graph (same outputs, same gradients); where it applies and
// where the op-by-op rules stay (docs/training.md, "Attention backward").
#include "gradient_testing.h"
#include "training_testing.h"
#include "passes/training/fuse_training_attention.h"

namespace dc::testing {
namespace {

// dc.Attention over [batch.., sq, d] x [batch.., d, sk] x [batch.., sk, dv], f64, with an
// optional mask of shape `mask` (broadcast to the scores).
Graph fused(const Shape& batch, int64_t sq, int64_t sk, int64_t d, int64_t dv, const Shape& mask, float scale) {
  auto shape = [&](int64_t a, int64_t b) {
    Shape s = batch;
    s.push_back(a);
    s.push_back(b);
    return s;
  };
  Graph g;
  add_initializer(g, "q", f64_tensor(shape(sq, d), 1, -1.5, 1.5));
  add_initializer(g, "kt", f64_tensor(shape(d, sk), 2, -1.5, 1.5));
  add_initializer(g, "v", f64_tensor(shape(sk, dv), 3));
  std::vector<std::string> in{"q", "kt", "v"};
  if (!mask.empty()) {
    add_initializer(g, "mask", f64_tensor(mask, 4, -3, 0));
    in.push_back("mask");
  }
  add_node(g, "dc.Attention", in, {"o", "lse"}, attrs({{"scale", scale}}));
  return g;
}

TEST(GradientRulesAttention, FiniteDifferencesF64) {
  // Sequences of 5 queries and 7 keys (no tile multiple), two batch dims (batch, heads).
  check_gradients(fused({2, 3}, 5, 7, 4, 3, {}, 0.5f), "o", {"q", "kt", "v"}, fd_f64());
}

TEST(GradientRulesAttention, FiniteDifferencesF64WithBroadcastMask) {
  // A BERT-style key mask [batch, 1, 1, sk] and a full [sq, sk] one.
  check_gradients(fused({2, 3}, 5, 7, 4, 3, {2, 1, 1, 7}, 0.35f), "o", {"q", "kt", "v"}, fd_f64());
  check_gradients(fused({2}, 6, 6, 8, 8, {6, 6}, 1.f), "o", {"q", "kt", "v"}, fd_f64());
}

TEST(GradientRulesAttention, LseIsTheRowLogSumExp) {
  Graph g = fused({1}, 3, 4, 2, 2, {}, 1.f);
  g.outputs = {"o", "lse"};
  g = with_types(g);
  const auto out = ref::run_graph(g, {});
  const Tensor &q = g.initializers.at("q"), &kt = g.initializers.at("kt");
  for (int64_t i = 0; i < 3; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 4; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 2; ++k) s += q.data<double>()[i * 2 + k] * kt.data<double>()[k * 4 + j];
      sum += std::exp(s);
    }
    EXPECT_NEAR(out.at("lse").data<double>()[i], std::log(sum), 1e-12) << "row " << i;
  }
}

// The exporters' form: MatMul(Q, Kt) -> Div(sqrt d) -> Add(mask) -> Softmax -> MatMul(P, V),
// f32, Q a function of a trained weight w (Q = x w).
Graph onnx_attention(bool with_mask, bool mask_trained) {
  Graph g;
  add_initializer(g, "x", random_tensor({2, 2, 5, 4}, 11));
  add_initializer(g, "w", random_tensor({4, 4}, 12));
  add_initializer(g, "kt", random_tensor({2, 2, 4, 7}, 13, -2.f, 2.f));
  add_initializer(g, "v", random_tensor({2, 2, 7, 3}, 14));
  add_initializer(g, "mask", random_tensor({2, 1, 1, 7}, 15, -4.f, 0.f));
  add_initializer(g, "two", Tensor::scalar<float>(2.f));
  add_node(g, "MatMul", {"x", "w"}, {"q"});
  add_node(g, "MatMul", {"q", "kt"}, {"s"});
  add_node(g, "Div", {"s", "two"}, {"scaled"});
  std::string p_in = "scaled";
  if (with_mask) {
    add_node(g, "Mul", {"mask", mask_trained ? "w00" : "one"}, {"m"});
    add_initializer(g, mask_trained ? "w00" : "one", Tensor::scalar<float>(1.f));
    add_node(g, "Add", {"m", "scaled"}, {"masked"});  // the mask first: either operand order
    p_in = "masked";
  }
  add_node(g, "Softmax", {p_in}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(g, "MatMul", {"p", "v"}, {"o"});
  g.outputs = {"o"};
  return with_types(g);
}

TEST(FuseTrainingAttention, SameOutputAndGradientsAsOpByOp) {
  for (bool with_mask : {false, true}) {
    SCOPED_TRACE(with_mask ? "mask" : "no mask");
    const Graph g = onnx_attention(with_mask, false);
    Graph f = g;
    ASSERT_EQ(fuse_training_attention(f, {"w", "kt", "v"}), 1);
    EXPECT_EQ(op_count(f, "Softmax"), 0);
    ASSERT_EQ(op_count(f, "dc.Attention"), 1);
    const Node& a = *find_node(f, "dc.Attention");
    EXPECT_FLOAT_EQ(a.attrs.get_float("scale"), 0.5f);
    EXPECT_EQ(a.inputs.size(), with_mask ? 4u : 3u);
    expect_well_formed(f);
    // The same dL/dw, dL/dkt, dL/dv for L = sum(o * R): op by op and fused.
    std::map<std::string, Tensor> want, got;
    for (bool fuse : {false, true}) {
      Graph gg = fuse ? f : g;
      add_initializer(gg, "R", random_tensor(gg.info("o").shape, 99));
      const auto grads = add_vector_jacobian_product(gg, {{"o", "R"}}, {"w", "kt", "v"});
      EXPECT_EQ(op_count(gg, "dc.AttentionGrad"), fuse ? 1 : 0);
      gg.outputs = {"o"};
      for (const auto& [t, gt] : grads) gg.outputs.push_back(gt);
      const auto out = ref::run_graph(gg, {});
      auto& dst = fuse ? got : want;
      dst["o"] = out.at("o");
      for (const auto& [t, gt] : grads) dst[t] = out.at(gt);
    }
    ASSERT_EQ(got.size(), 4u);
    for (const auto& [t, w] : want) {
      SCOPED_TRACE(t);
      expect_tensor_near(got.at(t), w, 1e-5f, 1e-5f);
    }
  }
}

TEST(FuseTrainingAttention, OpByOpWhereThePatternDoesNotFit) {
  // A mask that needs a gradient (a trained bias): the op-by-op rules differentiate it.
  Graph g = onnx_attention(true, true);
  EXPECT_EQ(fuse_training_attention(g, {"w", "w00"}), 0);
  // The probabilities read elsewhere (an output): they are kept, op by op.
  g = onnx_attention(true, false);
  g.outputs.push_back("p");
  EXPECT_EQ(fuse_training_attention(g, {"w"}), 0);
  // Nothing trained before it: no gradient needed, nothing to save.
  g = onnx_attention(true, false);
  EXPECT_EQ(fuse_training_attention(g, {}), 0);
}

TEST(FuseTrainingAttention, TrainingStepHasOneBackwardPerAttention) {
  const Graph t = training_step("tiny_transformer", OptimizerKind::adamw);
  const int64_t fwd = op_count(t, "dc.Attention");
  EXPECT_GT(fwd, 0);
  EXPECT_EQ(op_count(t, "dc.AttentionGrad"), fwd);
  EXPECT_EQ(op_count(t, "Softmax"), 0) << "the attention's Softmax and its backward op by op";
  for (const auto& n : t.nodes)
    if (n.op == "dc.Attention") {
      ASSERT_EQ(n.outputs.size(), 2u);
      EXPECT_EQ(t.info(n.outputs[1]).dtype, DType::f32);
    }
}

}  // namespace
}  // namespace dc::testing
