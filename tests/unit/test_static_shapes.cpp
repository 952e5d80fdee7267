// Import finds static shapes without running the model: on a transformer whose shapes ONNX
// leaves open, only the small shape subgraph reaches the reference kernels, and every shape
// equals what the reference executor computes when it does run the model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "ir/error.h"
#include "onnx/import.h"
#include "onnx/test_data.h"
#include "ref/executor.h"
#include "ref/run_observer.h"
#include "testing.h"

namespace dc {
namespace {

const std::string kOpenShapes = std::string(DC_SOURCE_DIR) + "/tests/data/open_shapes/model.onnx";
const std::string kTransformer = std::string(DC_SOURCE_DIR) + "/examples/tiny_transformer/model.onnx";
const std::string kCnn = std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx";
const std::string kNodeTests = std::string(DC_SOURCE_DIR) + "/../shared/onnx-node-tests";
const std::string kUnsupported = std::string(DC_SOURCE_DIR) + "/tests/cli/node_tests_unsupported.txt";

// What the reference kernels were asked to run while the observer was installed.
struct Runs {
  std::vector<std::string> ops;
  int64_t largest_input = 0;
};
Runs g_runs;

void record(const Node& n, const ref::Inputs& in) {
  g_runs.ops.push_back(n.op);
  for (const Tensor& t : in)
    if (t.defined()) g_runs.largest_input = std::max(g_runs.largest_input, t.numel());
}

Graph import_observed(const std::string& path) {
  g_runs = {};
  ref::set_run_node_observer(&record);
  try {
    Graph g = import_onnx_file(path);
    ref::set_run_node_observer(nullptr);
    return g;
  } catch (...) {
    ref::set_run_node_observer(nullptr);
    throw;
  }
}

// Runs the whole graph on seeded random inputs (ints in range for Gather) and checks every
// tensor's shape and dtype against import's.
void expect_shapes_match_executor(const Graph& g, ref::TensorMap inputs = {}) {
  uint32_t seed = 5;
  for (const auto& name : g.inputs) {
    if (inputs.count(name)) continue;
    const TensorInfo& info = g.info(name);
    inputs[name] = info.dtype == DType::f32 ? testing::random_tensor(info.shape, seed++)
                                            : Tensor(info.dtype, info.shape);
  }
  ref::RunOptions opts;
  opts.keep_intermediates = true;
  const auto values = ref::run_graph(g, inputs, opts);
  int checked = 0;
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      ASSERT_TRUE(values.count(o)) << o;
      ASSERT_TRUE(g.tensors.count(o)) << "no static shape for " << o;
      EXPECT_EQ(g.info(o).shape, values.at(o).shape()) << o << " (" << n.op << ")";
      EXPECT_EQ(g.info(o).dtype, values.at(o).dtype()) << o << " (" << n.op << ")";
      ++checked;
    }
  EXPECT_EQ(checked, static_cast<int>([&] {
              size_t k = 0;
              for (const auto& n : g.nodes) k += n.outputs.size();
              return k;
            }()));
}

TEST(StaticShapes, OpenTransformerShapesNeverRunHeavyOps) {
  const Graph g = import_observed(kOpenShapes);
  // ONNX leaves 20 of its tensors open (scripts/make_open_shapes_model.py checks that), so
  // the shape subgraph must have been evaluated...
  EXPECT_GE(g_runs.ops.size(), 5u);
  // ...and nothing else: no MatMul, Softmax or elementwise op on activations.
  const std::set<std::string> shape_ops = {"Gather", "Cast", "Div", "Unsqueeze", "Concat",
                                           "Range", "Slice", "Sqrt"};
  for (const auto& op : g_runs.ops) EXPECT_TRUE(shape_ops.count(op)) << op << " ran during import";
  EXPECT_LE(g_runs.largest_input, 8) << "a tensor larger than a shape vector was read";
  EXPECT_EQ(g.info("q_heads").shape, (Shape{1, 8, 2, 8}));
  EXPECT_EQ(g.info("scores").shape, (Shape{1, 2, 8, 8}));
  EXPECT_EQ(g.info("ctx_merged").shape, (Shape{1, 8, 16}));
  EXPECT_EQ(g.info("pos_ids").shape, (Shape{8}));
  EXPECT_EQ(g.info("y").shape, (Shape{1, 8, 16}));
  expect_shapes_match_executor(g);
}

// TopK's K decides its output's shape: a run-time K is refused with a clear error, not
// guessed from a placeholder input.
TEST(StaticShapes, RunTimeTopKIsRefused) {
  try {
    import_observed(std::string(DC_SOURCE_DIR) + "/tests/data/topk_runtime_k/model.onnx");
    ADD_FAILURE() << "imported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("TopK node 'topk': K must be a constant"), std::string::npos) << e.what();
  }
}

TEST(StaticShapes, AgreeWithTheExecutorOnTheExamples) {
  for (const auto& path : {kTransformer, kCnn}) {
    SCOPED_TRACE(path);
    const Graph g = import_observed(path);
    EXPECT_TRUE(g_runs.ops.empty()) << "ONNX infers every shape here; nothing should run";
    expect_shapes_match_executor(g);
  }
}

// Every ONNX node test dc supports: import's shapes equal the executor's on the case's own
// inputs (the cases listed as unsupported are refused at import, see run_node_tests.py).
TEST(StaticShapes, AgreeWithTheExecutorOnTheNodeTests) {
  ASSERT_TRUE(std::filesystem::exists(kNodeTests)) << kNodeTests << " missing (../shared beside the checkout)";
  std::set<std::string> unsupported;
  std::ifstream list(kUnsupported);
  for (std::string line; std::getline(list, line);)
    if (!line.empty() && line[0] != '#') unsupported.insert(line.substr(0, line.find_first_of(" \t")));
  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kNodeTests)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("test_", 0) != 0 || unsupported.count(name)) continue;
    SCOPED_TRACE(name);
    OnnxModel m = load_onnx((entry.path() / "model.onnx").string());
    const TestData data = read_test_data((entry.path() / "test_data_set_0").string());
    const auto model_inputs = m.inputs();
    ASSERT_EQ(model_inputs.size(), data.inputs.size());
    ImportOptions opts;
    ref::TensorMap values;
    const auto shape_inputs = m.shape_inputs();
    for (size_t i = 0; i < model_inputs.size(); ++i) {
      const std::string& in = model_inputs[i].name;
      if (std::find(shape_inputs.begin(), shape_inputs.end(), in) != shape_inputs.end())
        opts.bind_constants[in] = data.inputs[i].value;
      else
        values[in] = data.inputs[i].value;
    }
    const Graph g = import_onnx(std::move(m), opts);
    expect_shapes_match_executor(g, values);
    ++cases;
  }
  EXPECT_GT(cases, 100);
}

}  // namespace
}  // namespace dc
