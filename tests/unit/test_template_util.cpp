// The pieces the CUDA-core templates share (codegen/template_util.h): launch geometry, the
// stores of a chunk, window tap positions and the check that a workload has one main node.
#include <climits>
#include <functional>
#include <string>

#include "ir/error.h"
#include "pass_testing.h"
#include "template_util.h"

namespace dc {
namespace {

using testing::add_input;
using testing::add_node;

// x -> Relu -> Softmax -> Relu -> y as one cluster.
Workload relu_softmax_relu() {
  Graph g;
  add_input(g, "x", {2, 8});
  add_node(g, "Relu", {"x"}, {"a"});
  add_node(g, "Softmax", {"a"}, {"b"});
  add_node(g, "Relu", {"b"}, {"y"});
  g.outputs = {"y"};
  return make_workload(testing::with_types(g), {0, 1, 2}, ClusterKind::reduction);
}

// The InternalError's message of `pick` as the main node, or "" when it found one.
std::string main_node_error(const std::function<bool(const Node&)>& pick) {
  try {
    single_main_node(relu_softmax_relu(), "row_reduce", "softmax", pick);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

TEST(TemplateUtil, GridBlocksRoundUpAndStayInGridX) {
  EXPECT_EQ(grid_blocks(257, 256), 2);
  EXPECT_EQ(grid_blocks(256, 256), 1);
  EXPECT_EQ(grid_blocks(0, 256), 1);  // an empty launch is still one block
  EXPECT_EQ(grid_blocks(int64_t{1} << 40, 32), INT_MAX);
}

TEST(TemplateUtil, ChunkStoresAreOneVectorStoreForFloats) {
  EXPECT_EQ(store_chunk("out0", DType::f32, {"a", "b", "c", "d"}),
            "  *reinterpret_cast<float4*>(out0 + i) = make_float4(a, b, c, d);\n");
  EXPECT_EQ(store_chunk("out1", DType::f32, {"a", "b"}),
            "  *reinterpret_cast<float2*>(out1 + i) = make_float2(a, b);\n");
  // Other dtypes, and a single lane, store element by element.
  EXPECT_EQ(store_chunk("out0", DType::i64, {"a", "b"}), "  out0[i + 0] = a;\n  out0[i + 1] = b;\n");
  EXPECT_EQ(store_chunk("out0", DType::f32, {"a"}), "  out0[i + 0] = a;\n");
}

TEST(TemplateUtil, TapPositionsLeaveOutZeroTerms) {
  EXPECT_EQ(tap_position("c2", 1, 0, "k0", 1), "(dc_i64)(c2) + k0");
  EXPECT_EQ(tap_position("c2", 2, 1, "k0", 3), "(dc_i64)(c2) * 2 - 1 + k0 * 3");
}

TEST(TemplateUtil, SingleMainNodeFindsTheOneAndRefusesTheRest) {
  const Workload w = relu_softmax_relu();
  const Node& found = single_main_node(w, "row_reduce", "softmax",
                                       [](const Node& n) { return n.op == "Softmax"; });
  EXPECT_EQ(found.op, "Softmax");
  EXPECT_EQ(&found, &w.graph.nodes[1]);
  EXPECT_EQ(main_node_error([](const Node& n) { return n.op == "Softmax"; }), "");
  EXPECT_NE(main_node_error([](const Node&) { return true; })
                .find("row_reduce: more than one softmax in workload"),
            std::string::npos);
  // Softmax is not injective: it cannot be an epilogue of another main node.
  EXPECT_NE(main_node_error([](const Node& n) { return n.op == "Exp"; })
                .find("row_reduce: op Softmax is neither a softmax nor injective"),
            std::string::npos);
}

TEST(TemplateUtil, CheckVariantRefusesAnotherTemplateOrPrecision) {
  Variant v;
  v.template_name = "pool_window";
  v.precision = "fp16";
  EXPECT_NO_THROW(check_variant(v, "pool_window"));
  EXPECT_THROW(check_variant(v, "pool_window", true), InternalError);
  EXPECT_THROW(check_variant(v, "row_reduce"), InternalError);
}

}  // namespace
}  // namespace dc
