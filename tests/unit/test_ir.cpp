// Graph IR basics: shapes, broadcasting, tensors, half conversions, attributes, topo_sort.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "ir/error.h"
#include "ir/graph.h"
#include "ir/json_writer.h"
#include "onnx/import.h"
#include "testing.h"

namespace dc {
namespace {

using testing::make_node;

TEST(Shape, NumelStridesAndText) {
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 0}), 0);
  EXPECT_EQ(shape_strides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(shape_str({1, 3, 224, 224}), "1x3x224x224");
  EXPECT_EQ(shape_str({}), "scalar");
}

TEST(Shape, BroadcastRules) {
  EXPECT_EQ(broadcast_shapes({2, 1, 3}, {4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcast_shapes({}, {5}), (Shape{5}));
  EXPECT_EQ(broadcast_shapes({3, 1}, {1, 3}), (Shape{3, 3}));
  EXPECT_THROW(broadcast_shapes({2, 3}, {4}), UserError);
  EXPECT_EQ(broadcast_strides({3, 1}, {2, 3, 4}), (std::vector<int64_t>{0, 1, 0}));
}

TEST(Shape, NormalizeAxis) {
  EXPECT_EQ(normalize_axis(-1, 4, "t"), 3);
  EXPECT_EQ(normalize_axis(0, 1, "t"), 0);
  EXPECT_THROW(normalize_axis(4, 4, "t"), UserError);
  EXPECT_THROW(normalize_axis(-5, 4, "t"), UserError);
}

TEST(Shape, ParseShapeFlag) {
  EXPECT_EQ(parse_shape("1x3x224x224"), (Shape{1, 3, 224, 224}));
  EXPECT_EQ(parse_shape("8,128"), (Shape{8, 128}));
  EXPECT_THROW(parse_shape("1x-3"), UserError);
  EXPECT_THROW(parse_shape("1xx3"), UserError);
  EXPECT_THROW(parse_shape("0x3"), UserError);
  EXPECT_THROW(parse_shape("abc"), UserError);
}

TEST(Tensor, TypedAccessAndInt64Values) {
  auto t = Tensor::from_vector<int32_t>({2, 2}, {1, -2, 3, 4});
  EXPECT_EQ(t.numel(), 4);
  EXPECT_EQ(t.nbytes(), 16u);
  EXPECT_EQ(t.to_int64_vector(), (std::vector<int64_t>{1, -2, 3, 4}));
  EXPECT_THROW(t.data<float>(), InternalError);
  auto r = t.reshaped({4});
  EXPECT_EQ(r.raw(), t.raw());  // shares the buffer
  auto c = t.clone();
  EXPECT_NE(c.raw(), t.raw());
  EXPECT_TRUE(c.bitwise_equal(t));
  EXPECT_THROW(Tensor::from_vector<float>({1}, {1.f}).to_int64_vector(), UserError);
  EXPECT_THROW(Tensor::from_vector<float>({2}, {1.f}), InternalError);  // wrong value count
}

TEST(Tensor, HalfAndBfloat16RoundTrip) {
  for (float v : {0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f})
    EXPECT_EQ(half_to_float(float_to_half(v)), v) << v;
  EXPECT_EQ(float_to_half(1.f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.f), 0xc000);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(1e6f))));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  // Round to nearest even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(float_to_half(1.f + 1.f / 2048), 0x3c00);
  EXPECT_EQ(float_to_half(1.f + 3.f / 2048), 0x3c02);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(float_to_bf16(1.f), 0x3f80);
}

TEST(Attributes, TypedAccessorsAndErrors) {
  Attributes a;
  a.set("axis", int64_t{2});
  a.set("alpha", 0.5f);
  a.set("perm", std::vector<int64_t>{1, 0});
  EXPECT_EQ(a.get_int("axis"), 2);
  EXPECT_EQ(a.get_int("missing", 7), 7);
  EXPECT_FLOAT_EQ(a.get_float("alpha"), 0.5f);
  EXPECT_FLOAT_EQ(a.get_float("axis"), 2.f);  // ints read as floats
  EXPECT_EQ(a.get_ints("perm"), (std::vector<int64_t>{1, 0}));
  EXPECT_THROW(a.get_ints("axis"), UserError);
  EXPECT_THROW(a.get_int("missing"), UserError);
  Attributes b = a;
  EXPECT_TRUE(a == b);
  b.set("axis", int64_t{3});
  EXPECT_FALSE(a == b);
}

Graph chain_graph() {
  Graph g;
  g.inputs = {"x"};
  g.outputs = {"z"};
  g.tensors["x"] = {DType::f32, {2}};
  g.nodes.push_back(make_node("Relu", {"y"}, {"z"}));
  g.nodes.push_back(make_node("Neg", {"x"}, {"y"}));
  return g;
}

TEST(Graph, TopoSortReordersStably) {
  Graph g = topo_sort(chain_graph());
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, "Neg");
  EXPECT_EQ(g.nodes[1].op, "Relu");
  EXPECT_EQ(g.producer("z"), std::optional<size_t>(1));
  EXPECT_EQ(g.consumers()["y"], (std::vector<size_t>{1}));
}

TEST(Graph, TopoSortRefusesCyclesAndUndefinedTensors) {
  Graph g = chain_graph();
  g.nodes[1].inputs = {"z"};  // Neg reads Relu's output, Relu reads Neg's: a cycle
  try {
    topo_sort(g);
    FAIL() << "cycle not detected";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
  Graph h = chain_graph();
  h.nodes[1].inputs = {"nowhere"};
  EXPECT_THROW(topo_sort(h), UserError);
}

TEST(JsonWriter, NestingCommasAndEscapes) {
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_object().field("a", int64_t{1}).field("s", "q\"\n").key("v").value(std::vector<int64_t>{1, 2});
  j.key("o").begin_object().field("b", true).end_object().field("inf", 1.0 / 0.0).end_object();
  EXPECT_EQ(os.str(), R"({"a":1,"s":"q\"\n","v":[1,2],"o":{"b":true},"inf":null})");
}

}  // namespace
}  // namespace dc
