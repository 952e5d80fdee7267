// ONNX import on the committed examples: static shapes everywhere, weights as typed
// buffers, runtime inputs separate from initializers, --shape overrides and constant binding.
#include <gtest/gtest.h>

#include <filesystem>

#include "ir/error.h"
#include "onnx/import.h"
#include "onnx/test_data.h"
#include "ref/executor.h"
#include "testing.h"

namespace dc {
namespace {

const std::string kCnn = std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx";
const std::string kNodeTests = std::string(DC_SOURCE_DIR) + "/../shared/onnx-node-tests";

TEST(Import, TinyCnnHasStaticShapesForEveryTensor) {
  Graph g = import_onnx_file(kCnn);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_FALSE(g.is_constant(g.inputs[0]));
  EXPECT_EQ(g.info(g.inputs[0]).shape, (Shape{1, 3, 32, 32}));
  EXPECT_GT(g.initializers.size(), 5u);
  for (const auto& n : g.nodes) {
    EXPECT_FALSE(n.name.empty());
    for (const auto& o : n.outputs) {
      ASSERT_TRUE(g.tensors.count(o)) << "no type for " << o;
      EXPECT_NE(g.info(o).dtype, DType::undefined);
    }
  }
  for (const auto& [name, t] : g.initializers) {
    EXPECT_EQ(g.info(name).shape, t.shape()) << name;
    EXPECT_EQ(g.info(name).dtype, t.dtype()) << name;
  }
}

TEST(Import, ShapeOverrideMustNameAnInputAndKeepRank) {
  ImportOptions bad_name;
  bad_name.input_shapes["nope"] = {1, 3, 32, 32};
  EXPECT_THROW(import_onnx_file(kCnn, bad_name), UserError);
  const std::string input = load_onnx(kCnn).inputs().at(0).name;
  ImportOptions bad_rank;
  bad_rank.input_shapes[input] = {3, 32, 32};
  EXPECT_THROW(import_onnx_file(kCnn, bad_rank), UserError);
}

TEST(Import, ShapeInputsAreFoundAndBindable) {
  const std::string dir = kNodeTests + "/test_reshape_reordered_all_dims";
  if (!std::filesystem::exists(dir)) GTEST_FAIL() << dir << " missing (../shared beside the checkout)";
  OnnxModel m = load_onnx(dir + "/model.onnx");
  EXPECT_EQ(m.shape_inputs(), (std::vector<std::string>{"shape"}));
  const TestData data = read_test_data(dir + "/test_data_set_0");
  ImportOptions opts;
  opts.bind_constants["shape"] = data.inputs.at(1).value;
  Graph g = import_onnx(std::move(m), opts);
  EXPECT_EQ(g.inputs, (std::vector<std::string>{"data"}));
  EXPECT_TRUE(g.is_constant("shape"));
  EXPECT_EQ(g.info(g.outputs[0]).shape, data.outputs.at(0).value.shape());
}

TEST(Import, TestDataRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() / "dc_test_data_roundtrip";
  std::filesystem::create_directories(dir);
  auto t = testing::random_tensor({2, 3}, 7);
  write_tensor_file((dir / "input_0.pb").string(), "x", t);
  write_tensor_file((dir / "output_0.pb").string(), "y", t);
  const TestData d = read_test_data(dir.string());
  ASSERT_EQ(d.inputs.size(), 1u);
  EXPECT_EQ(d.inputs[0].name, "x");
  EXPECT_TRUE(d.inputs[0].value.bitwise_equal(t));
  write_tensor_file((dir / "input_2.pb").string(), "gap", t);  // input_1 missing
  EXPECT_THROW(read_test_data(dir.string()), UserError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dc
