// fold_batch_norm: inference BatchNormalization after Conv/Gemm becomes new weights.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "pass_testing.h"
#include "passes/fold_batch_norm.h"

namespace dc {
namespace {

using namespace dc::testing;

constexpr float kEps = 1e-3f;

// BN statistics over `c` channels named <prefix>_scale/_B/_mean/_var; var is positive.
void add_bn_stats(Graph& g, const std::string& prefix, int64_t c, uint32_t seed) {
  add_initializer(g, prefix + "_scale", random_tensor({c}, seed, 0.5f, 2.f));
  add_initializer(g, prefix + "_B", random_tensor({c}, seed + 1));
  add_initializer(g, prefix + "_mean", random_tensor({c}, seed + 2));
  add_initializer(g, prefix + "_var", random_tensor({c}, seed + 3, 0.1f, 2.f));
}

Node& add_bn(Graph& g, const std::string& prefix, const std::string& x, const std::string& y) {
  return add_node(g, "BatchNormalization",
                  {x, prefix + "_scale", prefix + "_B", prefix + "_mean", prefix + "_var"}, {y},
                  attrs({{"epsilon", kEps}}));
}

// x[1,3,5,5] -> Conv(W[4,3,3,3], b[4], pads 1) -> BN -> y
Graph conv_bn(bool with_bias) {
  Graph g;
  add_input(g, "x", {1, 3, 5, 5});
  add_initializer(g, "W", random_tensor({4, 3, 3, 3}, 1));
  std::vector<std::string> conv_in = {"x", "W"};
  if (with_bias) {
    add_initializer(g, "b", random_tensor({4}, 2));
    conv_in.push_back("b");
  }
  add_node(g, "Conv", conv_in, {"c"},
           attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                  {"kernel_shape", std::vector<int64_t>{3, 3}}}));
  add_bn_stats(g, "bn", 4, 10);
  add_bn(g, "bn", "c", "y");
  g.outputs = {"y"};
  return with_types(g);
}

float at(const Graph& g, const std::string& t, int64_t i) {
  return g.initializers.at(t).data<float>()[i];
}

TEST(PassFoldBatchNorm, ConvWithBias) {
  const Graph g = conv_bn(true);
  const Tensor w_before = g.initializers.at("W").clone();
  Graph after = fold_batch_norm(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 0);
  ASSERT_EQ(after.nodes.size(), 1u);
  const Node& conv = after.nodes[0];
  EXPECT_EQ(conv.outputs, std::vector<std::string>{"y"});
  EXPECT_FALSE(after.tensors.count("c"));
  ASSERT_EQ(conv.inputs.size(), 3u);
  EXPECT_EQ(conv.inputs[1], conv.name + "_bn_folded_W");
  EXPECT_EQ(conv.inputs[2], conv.name + "_bn_folded_B");
  // The original weight is untouched (another node could share it).
  EXPECT_TRUE(after.initializers.at("W").bitwise_equal(w_before));

  // Hand formula for channel 2, element 5 of its filter, and its bias.
  const double f = at(g, "bn_scale", 2) / std::sqrt(double(at(g, "bn_var", 2)) + kEps);
  EXPECT_NEAR(at(after, conv.inputs[1], 2 * 27 + 5), at(g, "W", 2 * 27 + 5) * f, 1e-6);
  EXPECT_NEAR(at(after, conv.inputs[2], 2),
              (at(g, "b", 2) - at(g, "bn_mean", 2)) * f + at(g, "bn_B", 2), 1e-6);
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFoldBatchNorm, ConvWithoutBias) {
  const Graph g = conv_bn(false);
  Graph after = fold_batch_norm(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 0);
  ASSERT_EQ(after.nodes[0].inputs.size(), 3u);
  const double f = at(g, "bn_scale", 0) / std::sqrt(double(at(g, "bn_var", 0)) + kEps);
  EXPECT_NEAR(at(after, after.nodes[0].inputs[2], 0),
              -at(g, "bn_mean", 0) * f + at(g, "bn_B", 0), 1e-6);
  expect_same_outputs(g, after, 1e-4f);
}

// x[5,6] -> Gemm(B, C; alpha, beta, transB) -> BN over the 4 output columns.
Graph gemm_bn(bool trans_b, std::optional<Shape> c_shape) {
  Graph g;
  add_input(g, "x", {5, 6});
  add_initializer(g, "B", random_tensor(trans_b ? Shape{4, 6} : Shape{6, 4}, 1));
  std::vector<std::string> in = {"x", "B"};
  Attributes a = attrs({{"alpha", 0.5f}, {"beta", 2.f}, {"transB", int64_t{trans_b ? 1 : 0}}});
  if (c_shape) {
    add_initializer(g, "C", random_tensor(*c_shape, 2));
    in.push_back("C");
  }
  add_node(g, "Gemm", in, {"m"}, a);
  add_bn_stats(g, "bn", 4, 20);
  add_bn(g, "bn", "m", "y");
  g.outputs = {"y"};
  return with_types(g);
}

TEST(PassFoldBatchNorm, GemmTransBWithVectorBias) {
  const Graph g = gemm_bn(true, Shape{4});
  Graph after = fold_batch_norm(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 0);
  const Node& gemm = after.nodes[0];
  EXPECT_FLOAT_EQ(gemm.attrs.get_float("beta"), 1.f);
  EXPECT_FLOAT_EQ(gemm.attrs.get_float("alpha"), 0.5f);
  // transB: row n of B scales with channel n.
  const double f1 = at(g, "bn_scale", 1) / std::sqrt(double(at(g, "bn_var", 1)) + kEps);
  EXPECT_NEAR(at(after, gemm.inputs[1], 1 * 6 + 3), at(g, "B", 1 * 6 + 3) * f1, 1e-6);
  EXPECT_NEAR(at(after, gemm.inputs[2], 1),
              2.0 * at(g, "C", 1) * f1 - at(g, "bn_mean", 1) * f1 + at(g, "bn_B", 1), 1e-5);
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFoldBatchNorm, GemmWithoutTransBOrBias) {
  const Graph g = gemm_bn(false, std::nullopt);
  Graph after = fold_batch_norm(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 0);
  // No transB: column n of B scales with channel n.
  const double f3 = at(g, "bn_scale", 3) / std::sqrt(double(at(g, "bn_var", 3)) + kEps);
  EXPECT_NEAR(at(after, after.nodes[0].inputs[1], 2 * 4 + 3), at(g, "B", 2 * 4 + 3) * f3, 1e-6);
  EXPECT_EQ(after.tensors.at(after.nodes[0].inputs[2]).shape, Shape{4});
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFoldBatchNorm, GemmWithRowBroadcastBias) {
  // C of shape [5,1] varies by row: the folded bias must become a full [5,4] matrix.
  const Graph g = gemm_bn(false, Shape{5, 1});
  Graph after = fold_batch_norm(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 0);
  EXPECT_EQ(after.tensors.at(after.nodes[0].inputs[2]).shape, (Shape{5, 4}));
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFoldBatchNorm, SharedWeightGetsNewCopies) {
  // Two convs share W; only the first is followed by BN. The second must still see W.
  Graph g;
  add_input(g, "x", {1, 3, 4, 4});
  add_initializer(g, "W", random_tensor({2, 3, 1, 1}, 1));
  add_node(g, "Conv", {"x", "W"}, {"c1"});
  add_node(g, "Conv", {"x", "W"}, {"c2"});
  add_bn_stats(g, "bn", 2, 30);
  add_bn(g, "bn", "c1", "y1");
  g.outputs = {"y1", "c2"};
  g = with_types(g);
  const Tensor w_before = g.initializers.at("W").clone();

  Graph after = fold_batch_norm(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 0);
  EXPECT_TRUE(after.initializers.at("W").bitwise_equal(w_before));
  EXPECT_NE(after.nodes[0].inputs[1], "W");
  EXPECT_EQ(after.nodes[1].inputs[1], "W");
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFoldBatchNorm, NewNamesDoNotCollide) {
  Graph g = conv_bn(true);
  const std::string taken = g.nodes[0].name + "_bn_folded_W";
  add_initializer(g, taken, Tensor::scalar<float>(0.f));
  Graph after = fold_batch_norm(g);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 0);
  EXPECT_NE(after.nodes[0].inputs[1], taken);
  EXPECT_EQ(after.initializers.at(taken).numel(), 1);
  expect_same_outputs(g, after, 1e-4f);
}

TEST(PassFoldBatchNorm, RefusedWhenConvOutputHasAnotherConsumer) {
  Graph g = conv_bn(true);
  add_node(g, "Relu", {"c"}, {"r"});
  g.outputs.push_back("r");
  g = with_types(g);
  Graph after = fold_batch_norm(g);
  EXPECT_EQ(op_count(after, "BatchNormalization"), 1);
  EXPECT_EQ(after.initializers.size(), g.initializers.size());
}

TEST(PassFoldBatchNorm, RefusedWhenConvOutputIsAGraphOutput) {
  Graph g = conv_bn(true);
  g.outputs.push_back("c");
  EXPECT_EQ(op_count(fold_batch_norm(g), "BatchNormalization"), 1);
}

TEST(PassFoldBatchNorm, RefusedWhenStatisticIsNotConstant) {
  Graph g = conv_bn(true);
  g.initializers.erase("bn_scale");
  g.inputs.push_back("bn_scale");
  EXPECT_EQ(op_count(fold_batch_norm(g), "BatchNormalization"), 1);
}

TEST(PassFoldBatchNorm, RefusedWhenConvWeightIsNotConstant) {
  Graph g = conv_bn(true);
  g.initializers.erase("W");
  g.inputs.push_back("W");
  EXPECT_EQ(op_count(fold_batch_norm(g), "BatchNormalization"), 1);
}

TEST(PassFoldBatchNorm, RefusedInTrainingMode) {
  Graph g = conv_bn(true);
  g.nodes[1].attrs.set("training_mode", int64_t{1});
  EXPECT_EQ(op_count(fold_batch_norm(g), "BatchNormalization"), 1);
}

TEST(PassFoldBatchNorm, RefusedAfterOtherProducers) {
  Graph g = conv_bn(true);
  g.nodes[0].op = "ConvTranspose";  // weight layout [C, M/group, ...]: not handled
  EXPECT_EQ(op_count(fold_batch_norm(g), "BatchNormalization"), 1);
}

// A weight on disk (file-backed, not resident) is folded lazily: the folded weight stays
// non-resident until its bytes are needed, and they equal the in-memory fold bit for bit.
TEST(PassFoldBatchNorm, WeightsOnDiskAreFoldedLazilyWithTheSameBits) {
  const std::string file = ::testing::TempDir() + "dc_fold_bn_weight_" + std::to_string(::getpid()) + ".bin";
  struct Case {
    Graph g;
    std::string weight;
  };
  for (Case c : {Case{conv_bn(true), "W"}, Case{gemm_bn(true, Shape{4}), "B"}, Case{gemm_bn(false, std::nullopt), "B"}}) {
    const Graph eager = fold_batch_norm(c.g);
    const Tensor w = c.g.initializers.at(c.weight);
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(w.raw()), static_cast<std::streamsize>(w.nbytes()));
    }
    Graph on_disk = c.g;
    on_disk.initializers[c.weight] = Tensor::from_file(DType::f32, w.shape(), file, 0);
    const Graph lazy = fold_batch_norm(on_disk);
    ASSERT_EQ(lazy.nodes.size(), 1u);
    ASSERT_EQ(eager.nodes.size(), 1u);
    const Tensor& folded = lazy.initializers.at(lazy.nodes[0].input(1));
    EXPECT_FALSE(folded.resident()) << lazy.nodes[0].op;
    std::vector<char> part(std::min<size_t>(folded.nbytes(), 37));
    folded.copy_bytes(folded.nbytes() - part.size(), part.size(), part.data());
    const Tensor& want = eager.initializers.at(eager.nodes[0].input(1));
    EXPECT_EQ(std::memcmp(part.data(), want.raw() + want.nbytes() - part.size(), part.size()), 0);
    EXPECT_FALSE(folded.resident());
    EXPECT_TRUE(folded.bitwise_equal(want)) << lazy.nodes[0].op;
    EXPECT_FALSE(on_disk.initializers.at(c.weight).resident()) << "the source is read in chunks, never mapped";
  }
  std::remove(file.c_str());
}

}  // namespace
}  // namespace dc
