// remove_identity: Identity and inference Dropout disappear; graph output names survive.
#include "pass_testing.h"
#include "passes/remove_identity.h"

namespace dc {
namespace {

using namespace dc::testing;

TEST(PassRemoveIdentity, InnerIdentityIsBypassed) {
  Graph g;
  add_input(g, "x", {2, 3});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Identity", {"r"}, {"i"});
  add_node(g, "Neg", {"i"}, {"y"});
  g.outputs = {"y"};
  g = with_types(g);

  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Identity"), 0);
  ASSERT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(after.nodes[1].inputs, std::vector<std::string>{"r"});
  EXPECT_FALSE(after.tensors.count("i"));
  expect_same_outputs(g, after);
}

TEST(PassRemoveIdentity, GraphOutputNameMovesToProducer) {
  // r feeds the Identity (whose output is the graph output y) and a Neg.
  Graph g;
  add_input(g, "x", {4});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Identity", {"r"}, {"y"});
  add_node(g, "Neg", {"r"}, {"z"});
  g.outputs = {"y", "z"};
  g = with_types(g);

  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Identity"), 0);
  ASSERT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(after.nodes[0].op, "Relu");
  EXPECT_EQ(after.nodes[0].outputs, std::vector<std::string>{"y"});
  EXPECT_EQ(after.nodes[1].inputs, std::vector<std::string>{"y"});
  EXPECT_FALSE(after.tensors.count("r"));
  EXPECT_EQ(after.outputs, (std::vector<std::string>{"y", "z"}));

  // Hand-computed: y = relu(x), z = -relu(x).
  const Tensor x = Tensor::from_vector<float>({4}, {-1.f, 2.f, -3.f, 4.f});
  const auto out = ref::run_graph(after, {{"x", x}});
  expect_tensor_near(out.at("y"), Tensor::from_vector<float>({4}, {0.f, 2.f, 0.f, 4.f}));
  expect_tensor_near(out.at("z"), Tensor::from_vector<float>({4}, {0.f, -2.f, 0.f, -4.f}));
}

TEST(PassRemoveIdentity, ChainEndingInGraphOutput) {
  Graph g;
  add_input(g, "x", {3});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Identity", {"r"}, {"i1"});
  add_node(g, "Identity", {"i1"}, {"i2"});
  add_node(g, "Identity", {"i2"}, {"y"});
  g.outputs = {"y"};
  g = with_types(g);

  Graph after = remove_identity(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  EXPECT_EQ(after.nodes[0].outputs, std::vector<std::string>{"y"});
  EXPECT_EQ(after.tensors.size(), 2u);  // x and y
  expect_same_outputs(g, after);
}

TEST(PassRemoveIdentity, KeptWhenInputIsGraphInput) {
  Graph g;
  add_input(g, "x", {3});
  add_node(g, "Identity", {"x"}, {"y"});
  g.outputs = {"y"};
  g.tensors["y"] = g.tensors["x"];
  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Identity"), 1);
  EXPECT_EQ(after.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(after.outputs, std::vector<std::string>{"y"});
}

TEST(PassRemoveIdentity, KeptWhenInputIsInitializer) {
  Graph g;
  add_input(g, "x", {2});
  add_initializer(g, "w", Tensor::from_vector<float>({2}, {1.f, 2.f}));
  add_node(g, "Identity", {"w"}, {"y"});
  add_node(g, "Add", {"x", "w"}, {"z"});
  g.outputs = {"y", "z"};
  g.tensors["y"] = g.tensors["z"] = TensorInfo{DType::f32, {2}};
  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Identity"), 1);
  EXPECT_TRUE(after.initializers.count("w"));
}

TEST(PassRemoveIdentity, KeptWhenInputIsAlsoAGraphOutput) {
  Graph g;
  add_input(g, "x", {3});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Identity", {"r"}, {"y"});
  g.outputs = {"r", "y"};
  g = with_types(g);
  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Identity"), 1);
  expect_same_outputs(g, after);
}

TEST(PassRemoveIdentity, TwoOutputsOfOneTensorKeepOneIdentity) {
  Graph g;
  add_input(g, "x", {3});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Identity", {"r"}, {"y1"});
  add_node(g, "Identity", {"r"}, {"y2"});
  g.outputs = {"y1", "y2"};
  g = with_types(g);
  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Identity"), 1);
  ASSERT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(after.nodes[0].outputs, std::vector<std::string>{"y1"});
  EXPECT_EQ(after.nodes[1].inputs, std::vector<std::string>{"y1"});
  EXPECT_EQ(after.nodes[1].outputs, std::vector<std::string>{"y2"});
  expect_same_outputs(g, after);
}

// Dropout graphs are typed by hand: their kernel may be random, and only the removal
// matters here. The result is checked against relu computed by hand.
Graph dropout_graph(std::vector<std::string> dropout_inputs, std::vector<std::string> outputs,
                    std::vector<std::string> graph_outputs) {
  Graph g;
  add_input(g, "x", {4});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Dropout", std::move(dropout_inputs), std::move(outputs));
  add_node(g, "Neg", {"d"}, {"y"});
  g.outputs = std::move(graph_outputs);
  for (const char* t : {"r", "d", "y"}) g.tensors[t] = TensorInfo{DType::f32, {4}};
  g.tensors["mask"] = TensorInfo{DType::boolean, {4}};
  return g;
}

TEST(PassRemoveIdentity, InferenceDropoutRemoved) {
  // Opset 7 form (ratio attribute, no training_mode) with an unused mask.
  Graph g = dropout_graph({"r"}, {"d", "mask"}, {"y"});
  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Dropout"), 0);
  EXPECT_FALSE(after.tensors.count("mask"));
  EXPECT_FALSE(after.tensors.count("d"));
  const auto out =
      ref::run_graph(after, {{"x", Tensor::from_vector<float>({4}, {1.f, -2.f, 3.f, -4.f})}});
  expect_tensor_near(out.at("y"), Tensor::from_vector<float>({4}, {-1.f, 0.f, -3.f, 0.f}));
}

TEST(PassRemoveIdentity, DropoutWithConstantFalseTrainingModeRemoved) {
  Graph g = dropout_graph({"r", "ratio", "train"}, {"d"}, {"y"});
  add_initializer(g, "ratio", Tensor::scalar<float>(0.5f));
  add_initializer(g, "train", Tensor::scalar<bool>(false));
  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Dropout"), 0);
  EXPECT_EQ(after.nodes[1].inputs, std::vector<std::string>{"r"});
}

TEST(PassRemoveIdentity, DropoutKeptInTrainingMode) {
  Graph g = dropout_graph({"r", "ratio", "train"}, {"d"}, {"y"});
  add_initializer(g, "ratio", Tensor::scalar<float>(0.5f));
  add_initializer(g, "train", Tensor::scalar<bool>(true));
  EXPECT_EQ(op_count(remove_identity(g), "Dropout"), 1);
}

TEST(PassRemoveIdentity, DropoutKeptWhenTrainingModeIsARuntimeInput) {
  Graph g = dropout_graph({"r", "", "train"}, {"d"}, {"y"});
  add_input(g, "train", {}, DType::boolean);
  EXPECT_EQ(op_count(remove_identity(g), "Dropout"), 1);
}

TEST(PassRemoveIdentity, DropoutKeptWhenMaskIsUsed) {
  Graph g = dropout_graph({"r"}, {"d", "mask"}, {"y", "mask"});
  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Dropout"), 1);
  EXPECT_TRUE(after.tensors.count("mask"));
}

TEST(PassRemoveIdentity, DropoutProducingGraphOutputRenamesProducer) {
  Graph g = dropout_graph({"r"}, {"d"}, {"d"});
  g.nodes.pop_back();  // no Neg: d is the graph output
  g.tensors.erase("y");
  Graph after = remove_identity(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  EXPECT_EQ(after.nodes[0].op, "Relu");
  EXPECT_EQ(after.nodes[0].outputs, std::vector<std::string>{"d"});
}

TEST(PassRemoveIdentity, NoOpReshapeIntoGraphOutputGoes) {
  // GPT-2 as torch 2.x exports it: last_hidden_state = Reshape(LayerNorm(h), [-1, 16, 64])
  // of a [1, 16, 64] tensor. The producer takes the output's name; nothing is copied.
  Graph g;
  add_input(g, "x", {1, 4, 8});
  add_initializer(g, "target", Tensor::from_vector<int64_t>({3}, {-1, 4, 8}));
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Reshape", {"r", "target"}, {"y"});
  g.outputs = {"y"};
  g = with_types(g);
  Graph after = remove_identity(g);
  expect_well_formed(after);
  ASSERT_EQ(after.nodes.size(), 1u);
  EXPECT_EQ(after.nodes[0].op, "Relu");
  EXPECT_EQ(after.nodes[0].outputs, std::vector<std::string>{"y"});
  expect_same_outputs(g, after);
}

TEST(PassRemoveIdentity, ReshapesThatChangeTheShapeStay) {
  // [1, 4, 8] -> [4, 8] and a Squeeze that drops the 1: real views, kept.
  Graph g;
  add_input(g, "x", {1, 4, 8});
  add_initializer(g, "target", Tensor::from_vector<int64_t>({2}, {4, 8}));
  add_initializer(g, "axes", Tensor::from_vector<int64_t>({1}, {0}));
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Reshape", {"r", "target"}, {"y"});
  add_node(g, "Squeeze", {"r", "axes"}, {"z"});
  g.outputs = {"y", "z"};
  g = with_types(g);
  Graph after = remove_identity(g);
  EXPECT_EQ(op_count(after, "Reshape"), 1);
  EXPECT_EQ(op_count(after, "Squeeze"), 1);
}

TEST(PassRemoveIdentity, InnerNoOpFlattenIsBypassed) {
  Graph g;
  add_input(g, "x", {6, 8});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Flatten", {"r"}, {"f"}, attrs({{"axis", int64_t{1}}}));
  add_node(g, "Neg", {"f"}, {"y"});
  g.outputs = {"y"};
  g = with_types(g);
  Graph after = remove_identity(g);
  expect_well_formed(after);
  EXPECT_EQ(op_count(after, "Flatten"), 0);
  ASSERT_EQ(after.nodes.size(), 2u);
  EXPECT_EQ(after.nodes[1].inputs, std::vector<std::string>{"r"});
  expect_same_outputs(g, after);
}

}  // namespace
}  // namespace dc
