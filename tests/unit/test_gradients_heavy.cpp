// Gradient rules of the f32-only ops (Conv, Gemm, MatMul, pools, LayerNorm, Gelu, Gather, and the
// training ops dc.BatchNormTrain, dc.SoftmaxCrossEntropy, dc.Dropout) against central finite
// differences on the CPU reference, in f32 with the loss summed in f64 (gradient_testing.h;
// tolerance in docs/precision.md, "Gradient checks").
#include "gradient_testing.h"

namespace dc::testing {
namespace {

Tensor f32(Shape s, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  return random_tensor(s, seed, lo, hi);
}

TEST(GradientRulesF32, ConvStridedPaddedGroupedWithBias) {
  Graph g;
  add_initializer(g, "x", f32({2, 4, 7, 6}, 1));
  add_initializer(g, "w", f32({6, 2, 3, 3}, 2));
  add_initializer(g, "b", f32({6}, 3));
  add_node(g, "Conv", {"x", "w", "b"}, {"y"},
           attrs({{"strides", std::vector<int64_t>{2, 1}}, {"pads", std::vector<int64_t>{1, 0, 1, 2}},
                  {"dilations", std::vector<int64_t>{1, 2}}, {"group", int64_t{2}}}));
  check_gradients(g, "y", {"x", "w", "b"});
}

TEST(GradientRulesF32, ConvUngroupedStridedDilatedDroppedRows) {
  // Group 1 (the weight gradient is the swapped Conv): 8 rows, stride 2, pads 1 drop the
  // last row; dilation 2 along the width with asymmetric pads.
  Graph g;
  add_initializer(g, "x", f32({2, 3, 8, 9}, 13));
  add_initializer(g, "w", f32({4, 3, 3, 2}, 14));
  add_initializer(g, "b", f32({4}, 15));
  add_node(g, "Conv", {"x", "w", "b"}, {"y"},
           attrs({{"strides", std::vector<int64_t>{2, 1}}, {"pads", std::vector<int64_t>{1, 2, 1, 0}},
                  {"dilations", std::vector<int64_t>{1, 2}}}));
  check_gradients(g, "y", {"x", "w", "b"});
}

TEST(GradientRulesF32, PointwiseConvStride2) {
  // 1x1 stride 2 over an even extent: the swapped Conv's extra output row is sliced off.
  Graph g;
  add_initializer(g, "x", f32({2, 4, 6, 6}, 16));
  add_initializer(g, "w", f32({5, 4, 1, 1}, 17));
  add_node(g, "Conv", {"x", "w"}, {"y"}, attrs({{"strides", std::vector<int64_t>{2, 2}}}));
  check_gradients(g, "y", {"x", "w"});
}

TEST(GradientRulesF32, DepthwiseConvSamePadding) {
  Graph g;
  add_initializer(g, "x", f32({1, 3, 5, 5}, 4));
  add_initializer(g, "w", f32({3, 1, 3, 3}, 5));
  add_node(g, "Conv", {"x", "w"}, {"y"},
           attrs({{"group", int64_t{3}}, {"auto_pad", std::string("SAME_UPPER")}}));
  check_gradients(g, "y", {"x", "w"});
}

TEST(GradientRulesF32, GemmEveryTransposeWithBroadcastBias) {
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "transA " << ta << " transB " << tb);
      Graph g;
      add_initializer(g, "a", f32(ta ? Shape{4, 3} : Shape{3, 4}, 6));
      add_initializer(g, "b", f32(tb ? Shape{5, 4} : Shape{4, 5}, 7));
      add_initializer(g, "c", f32({5}, 8));
      add_node(g, "Gemm", {"a", "b", "c"}, {"y"},
               attrs({{"transA", ta}, {"transB", tb}, {"alpha", 0.7f}, {"beta", 1.3f}}));
      check_gradients(g, "y", {"a", "b", "c"});
    }
}

TEST(GradientRulesF32, MatMulBatchedBroadcastAndVector) {
  Graph g;
  add_initializer(g, "a", f32({2, 1, 3, 4}, 9));
  add_initializer(g, "b", f32({3, 4, 5}, 10));
  add_node(g, "MatMul", {"a", "b"}, {"ab"});  // [2, 3, 3, 5]
  add_initializer(g, "v", f32({5}, 11));
  add_node(g, "MatMul", {"ab", "v"}, {"y"});  // [2, 3, 3]
  check_gradients(g, "y", {"a", "b", "v"});
}

TEST(GradientRulesF32, WeightReadTwiceGetsTheSum) {
  Graph g;
  add_initializer(g, "x1", f32({3, 4}, 12));
  add_initializer(g, "x2", f32({3, 4}, 13));
  add_initializer(g, "w", f32({4, 2}, 14));
  add_node(g, "MatMul", {"x1", "w"}, {"p"});
  add_node(g, "MatMul", {"x2", "w"}, {"q"});
  add_node(g, "Mul", {"p", "q"}, {"y"});
  check_gradients(g, "y", {"w"});
}

TEST(GradientRulesF32, Pools) {
  {
    Graph g;  // distinct values: the maximum of each window is unique
    add_initializer(g, "x", f32({2, 3, 6, 5}, 15, -4.f, 4.f));
    add_node(g, "MaxPool", {"x"}, {"y"},
             attrs({{"kernel_shape", std::vector<int64_t>{3, 2}},
                    {"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 0, 1, 1}}}));
    check_gradients(g, "y", {"x"}, {1e-4, 1e-2, 3});
  }
  for (int64_t include_pad : {0, 1}) {
    Graph g;
    add_initializer(g, "x", f32({2, 3, 5, 5}, 16));
    add_node(g, "AveragePool", {"x"}, {"y"},
             attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"count_include_pad", include_pad}}));
    check_gradients(g, "y", {"x"});
  }
  Graph g;
  add_initializer(g, "x", f32({2, 3, 4, 5}, 17));
  add_node(g, "GlobalAveragePool", {"x"}, {"y"});
  check_gradients(g, "y", {"x"});
}

TEST(GradientRulesF32, LayerNormalization) {
  Graph g;
  add_initializer(g, "x", f32({3, 2, 8}, 18, -2.f, 2.f));
  add_initializer(g, "s", f32({8}, 19));
  add_initializer(g, "b", f32({8}, 20));
  add_node(g, "LayerNormalization", {"x", "s", "b"}, {"y"}, attrs({{"axis", int64_t{-1}}}));
  check_gradients(g, "y", {"x", "s", "b"});
}

TEST(GradientRulesF32, SoftmaxAndLogSoftmax) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    Graph g;
    g.opset = 13;
    add_initializer(g, "x", f32({3, 5, 4}, 21, -2.f, 2.f));
    add_node(g, op, {"x"}, {"y"}, attrs({{"axis", int64_t{1}}}));
    check_gradients(g, "y", {"x"});
  }
}

TEST(GradientRulesF32, GeluBothForms) {
  for (const char* form : {"none", "tanh"}) {
    SCOPED_TRACE(form);
    Graph g;
    add_initializer(g, "x", f32({4, 6}, 22, -3.f, 3.f));
    add_node(g, "Gelu", {"x"}, {"y"}, attrs({{"approximate", std::string(form)}}));
    check_gradients(g, "y", {"x"});
  }
}

TEST(GradientRulesF32, BatchNormTrainOnBatchStatistics) {
  Graph g;
  add_initializer(g, "x", f32({4, 3, 2, 2}, 23, -2.f, 2.f));
  add_initializer(g, "s", f32({3}, 24, 0.5f, 1.5f));
  add_initializer(g, "b", f32({3}, 25));
  add_initializer(g, "mean", f32({3}, 26));
  add_initializer(g, "var", f32({3}, 27, 0.5f, 1.5f));
  // The batch statistics as use_training_forward computes them (ReduceMeans before the node).
  add_initializer(g, "axes", Tensor::from_vector<int64_t>({3}, {0, 2, 3}));
  add_initializer(g, "cshape", Tensor::from_vector<int64_t>({4}, {1, 3, 1, 1}));
  add_node(g, "ReduceMean", {"x", "axes"}, {"bm"}, attrs({{"keepdims", int64_t{0}}}));
  add_node(g, "Reshape", {"bm", "cshape"}, {"bmc"});
  add_node(g, "Sub", {"x", "bmc"}, {"xc"});
  add_node(g, "Mul", {"xc", "xc"}, {"sq"});
  add_node(g, "ReduceMean", {"sq", "axes"}, {"bv"}, attrs({{"keepdims", int64_t{0}}}));
  add_node(g, "dc.BatchNormTrain", {"x", "s", "b", "mean", "var", "bm", "bv"}, {"y", "m1", "v1", "sm", "si"},
           attrs({{"epsilon", 1e-5f}, {"momentum", 0.9f}}));
  check_gradients(g, "y", {"x", "s", "b"});
}

TEST(GradientRulesF32, SoftmaxCrossEntropyOverTheLastAxis) {
  Graph g;
  add_initializer(g, "logits", f32({2, 3, 5}, 28, -2.f, 2.f));
  add_initializer(g, "labels", Tensor::from_vector<int64_t>({2, 3}, {0, 4, 2, 2, 1, 3}));
  add_node(g, "dc.SoftmaxCrossEntropy", {"logits", "labels"}, {"loss", "logp"});
  check_gradients(g, "loss", {"logits"});
}

TEST(GradientRulesF32, GatherAsEmbeddingSumsDuplicates) {
  Graph g;
  add_initializer(g, "table", f32({5, 3}, 30));
  add_initializer(g, "ids", Tensor::from_vector<int64_t>({2, 3}, {0, 4, 0, 2, -1, 0}));
  add_node(g, "Gather", {"table", "ids"}, {"y"}, attrs({{"axis", int64_t{0}}}));
  check_gradients(g, "y", {"table"});
  Graph h;  // along axis 1, one scalar index (BERT's first-token pooling)
  add_initializer(h, "x", f32({2, 4, 3}, 31));
  add_initializer(h, "i", Tensor::scalar<int64_t>(1));
  add_node(h, "Gather", {"x", "i"}, {"y"}, attrs({{"axis", int64_t{1}}}));
  check_gradients(h, "y", {"x"});
}

TEST(GradientRulesF32, DropoutMaskIsFixedByTheStep) {
  Graph g;
  add_initializer(g, "x", f32({64}, 29));
  add_initializer(g, "step", Tensor::scalar<int64_t>(3));
  add_node(g, "dc.Dropout", {"x", "step"}, {"y", "mask"}, attrs({{"ratio", 0.25f}, {"seed", int64_t{1}}}));
  check_gradients(g, "y", {"x"});
}

}  // namespace
}  // namespace dc::testing
