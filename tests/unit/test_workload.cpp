// Workloads: cutting a cluster out of a graph, its canonical text and signature.
#include <string>

#include "ir/workload.h"
#include "pass_testing.h"
#include "ref/executor.h"

namespace dc {
namespace {

using testing::add_initializer;
using testing::add_input;
using testing::add_node;
using testing::attrs;

// x -> Conv(w, b) -> c ; a = Add(c, r) (or Add(r, c)) ; y = act(a)
struct BlockOptions {
  std::string prefix = "";  // prepended to every tensor and node name
  uint32_t seed = 1;        // weight values
  int64_t size = 8;         // input height and width
  int64_t stride = 1;
  int64_t pad = 1;
  bool residual_first = false;
  bool residual_is_weight = false;
  std::string act = "Relu";
  float alpha = 0.1f;  // LeakyRelu
};

Graph conv_block(const BlockOptions& o) {
  const std::string p = o.prefix;
  const int64_t out = (o.size + 2 * o.pad - 3) / o.stride + 1;
  Graph g;
  add_input(g, p + "x", {1, 3, o.size, o.size});
  add_initializer(g, p + "w", testing::random_tensor({4, 3, 3, 3}, o.seed));
  add_initializer(g, p + "b", testing::random_tensor({4}, o.seed + 1));
  if (o.residual_is_weight)
    add_initializer(g, p + "r", testing::random_tensor({1, 4, out, out}, o.seed + 2));
  else
    add_input(g, p + "r", {1, 4, out, out});
  add_node(g, "Conv", {p + "x", p + "w", p + "b"}, {p + "c"},
           attrs({{"dilations", std::vector<int64_t>{1, 1}},
                  {"group", int64_t{1}},
                  {"kernel_shape", std::vector<int64_t>{3, 3}},
                  {"pads", std::vector<int64_t>{o.pad, o.pad, o.pad, o.pad}},
                  {"strides", std::vector<int64_t>{o.stride, o.stride}}}));
  if (o.residual_first)
    add_node(g, "Add", {p + "r", p + "c"}, {p + "a"});
  else
    add_node(g, "Add", {p + "c", p + "r"}, {p + "a"});
  Attributes act;
  if (o.act == "LeakyRelu") act.set("alpha", o.alpha);
  add_node(g, o.act, {p + "a"}, {p + "y"}, act);
  for (auto& n : g.nodes) n.name = p + n.name;
  g.outputs = {p + "y"};
  return testing::with_types(g);
}

Workload block_workload(const BlockOptions& o, ClusterKind kind = ClusterKind::conv) {
  return make_workload(conv_block(o), {0, 1, 2}, kind);
}

TEST(Workload, Fnv1aKnownVectors) {
  // Published FNV-1a 64 test vectors.
  EXPECT_EQ(fnv1a_hex(""), "cbf29ce484222325");
  EXPECT_EQ(fnv1a_hex("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(fnv1a_hex("foobar"), "85944171f73967e8");
}

TEST(Workload, CanonicalTextIsExact) {
  const Workload w = block_workload({});
  const std::string expected =
      "kind conv\n"
      "in t0 act f32[1,3,8,8]\n"
      "in t1 weight f32[4,3,3,3]\n"
      "in t2 weight f32[4]\n"
      "in t3 act f32[1,4,8,8]\n"
      "n0 Conv(dilations=[1,1],group=1,kernel_shape=[3,3],pads=[1,1,1,1],strides=[1,1]) "
      "t0,t1,t2 -> t4 : f32[1,4,8,8]\n"
      "n1 Add() t4,t3 -> t5 : f32[1,4,8,8]\n"
      "n2 Relu() t5 -> t6 : f32[1,4,8,8]\n"
      "out t6\n";
  EXPECT_EQ(w.canonical, expected);
  EXPECT_EQ(w.signature, fnv1a_hex(expected));
  EXPECT_EQ(w.signature.size(), 16u);
  EXPECT_EQ(w.kind, ClusterKind::conv);
  // The workload graph: weights are inputs without values, canonical names throughout.
  EXPECT_EQ(w.graph.inputs, (std::vector<std::string>{"t0", "t1", "t2", "t3"}));
  EXPECT_EQ(w.weights, (std::vector<std::string>{"t1", "t2"}));
  EXPECT_TRUE(w.graph.initializers.empty());
  EXPECT_EQ(w.graph.outputs, (std::vector<std::string>{"t6"}));
  ASSERT_EQ(w.graph.nodes.size(), 3u);
  EXPECT_EQ(w.graph.nodes[1].name, "n1");
  EXPECT_EQ(w.graph.nodes[1].inputs, (std::vector<std::string>{"t4", "t3"}));
  EXPECT_EQ(w.graph.info("t4").shape, (Shape{1, 4, 8, 8}));
  EXPECT_EQ(w.source_inputs, (std::vector<std::string>{"x", "w", "b", "r"}));
  EXPECT_EQ(w.source_outputs, (std::vector<std::string>{"y"}));
}

TEST(Workload, FlopsAndBytes) {
  const Workload w = block_workload({});
  // Conv: 256 outputs x (2 x 27 multiply-adds) + 256 bias adds = 14080; Add 256; Relu 256.
  EXPECT_EQ(w.flops, 14080 + 256 + 256);
  // Read x (192), w (108), b (4), r (256) floats; write y (256) floats.
  EXPECT_EQ(w.bytes, (192 + 108 + 4 + 256 + 256) * 4);
}

TEST(Workload, RenamingAndWeightValuesKeepTheSignature) {
  const Workload base = block_workload({});
  BlockOptions renamed;
  renamed.prefix = "layer7/";
  BlockOptions reweighted;
  reweighted.seed = 99;
  EXPECT_EQ(block_workload(renamed).signature, base.signature);
  EXPECT_EQ(block_workload(renamed).canonical, base.canonical);
  EXPECT_EQ(block_workload(reweighted).signature, base.signature);
}

TEST(Workload, StructuralChangesChangeTheSignature) {
  const std::string base = block_workload({}).signature;
  BlockOptions o;
  o.size = 10;
  EXPECT_NE(block_workload(o).signature, base) << "input shape";
  o = {};
  o.stride = 2;
  EXPECT_NE(block_workload(o).signature, base) << "stride";
  o = {};
  o.pad = 0;
  EXPECT_NE(block_workload(o).signature, base) << "pads";
  o = {};
  o.residual_first = true;
  EXPECT_NE(block_workload(o).signature, base) << "which Add input is the residual";
  o = {};
  o.residual_is_weight = true;
  EXPECT_NE(block_workload(o).signature, base) << "residual as a weight, not an activation";
  o = {};
  o.act = "Sigmoid";
  EXPECT_NE(block_workload(o).signature, base) << "op kind";
  EXPECT_NE(block_workload({}, ClusterKind::depthwise).signature, base) << "cluster kind";

  o = {};
  o.act = "LeakyRelu";
  const std::string leaky = block_workload(o).signature;
  o.alpha = 0.2f;
  EXPECT_NE(block_workload(o).signature, leaky) << "attribute value";

  // dtype: the same graph typed f16 throughout.
  Graph g = conv_block({});
  for (auto& [name, info] : g.tensors) info.dtype = DType::f16;
  for (auto& [name, t] : g.initializers) t = Tensor(DType::f16, t.shape());
  const Workload half = make_workload(g, {0, 1, 2}, ClusterKind::conv);
  EXPECT_NE(half.signature, base) << "dtype";
  EXPECT_NE(half.canonical.find("in t1 weight f16[4,3,3,3]"), std::string::npos);
}

TEST(Workload, CanonicalTextHasNoOriginalNames) {
  BlockOptions o;
  o.prefix = "zq_";
  const Graph g = conv_block(o);
  const Workload w = make_workload(g, {0, 1, 2}, ClusterKind::conv);
  EXPECT_EQ(w.canonical.find("zq_"), std::string::npos) << w.canonical;
  for (const auto& n : w.graph.nodes) {
    EXPECT_EQ(n.name.find("zq_"), std::string::npos);
    for (const auto& t : n.inputs) EXPECT_EQ(t.find("zq_"), std::string::npos);
  }
  for (const auto& [name, info] : w.graph.tensors) EXPECT_EQ(name.find("zq_"), std::string::npos);
}

// x -> Mul(x, s) -> Add(., bias[4]) -> Reshape(., shape) -> y
Graph scale_shift_graph(float s, uint32_t bias_seed) {
  Graph g;
  add_input(g, "x", {1, 4});
  add_initializer(g, "s", Tensor::scalar<float>(s));
  add_initializer(g, "bias", testing::random_tensor({4}, bias_seed));
  add_initializer(g, "shape", Tensor::from_vector<int64_t>({2}, {2, 2}));
  add_node(g, "Mul", {"x", "s"}, {"m"});
  add_node(g, "Add", {"m", "bias"}, {"a"});
  add_node(g, "Reshape", {"a", "shape"}, {"y"});
  g.outputs = {"y"};
  return testing::with_types(g);
}

TEST(Workload, TinyStructuralConstantsKeepTheirValues) {
  const Workload w = make_workload(scale_shift_graph(0.5f, 1), {0, 1, 2}, ClusterKind::elementwise);
  EXPECT_NE(w.canonical.find("in t1 const f32[] = [0.5]\n"), std::string::npos) << w.canonical;
  EXPECT_NE(w.canonical.find("in t2 weight f32[4]\n"), std::string::npos) << w.canonical;
  EXPECT_NE(w.canonical.find("in t3 const i64[2] = [2,2]\n"), std::string::npos) << w.canonical;
  // Constants stay initializers with their values; the bias is an input.
  EXPECT_EQ(w.graph.initializers.size(), 2u);
  EXPECT_EQ(w.graph.initializers.at("t1").to_float_vector(), std::vector<float>{0.5f});
  EXPECT_EQ(w.graph.inputs, (std::vector<std::string>{"t0", "t2"}));
  EXPECT_EQ(w.weights, (std::vector<std::string>{"t2"}));
  // The constant's value is structure, the bias's values are not.
  EXPECT_NE(make_workload(scale_shift_graph(0.25f, 1), {0, 1, 2}, ClusterKind::elementwise).signature,
            w.signature);
  EXPECT_EQ(make_workload(scale_shift_graph(0.5f, 7), {0, 1, 2}, ClusterKind::elementwise).signature,
            w.signature);
  // Compulsory traffic leaves out the constants folded into the kernel: x, bias, y.
  EXPECT_EQ(w.bytes, (4 + 4 + 4) * 4);
}

TEST(Workload, StructuralConstantRule) {
  EXPECT_TRUE(is_structural_constant(Tensor::scalar<float>(1e-5f)));
  EXPECT_TRUE(is_structural_constant(Tensor(DType::f32, {1, 1, 1})));
  EXPECT_TRUE(is_structural_constant(Tensor(DType::i64, {16})));
  EXPECT_FALSE(is_structural_constant(Tensor(DType::i64, {17})));
  EXPECT_FALSE(is_structural_constant(Tensor(DType::f32, {2})));  // a tiny weight
}

TEST(Workload, OutputsAreTensorsReadOutsideOrGraphOutputs) {
  // Cluster {Conv, Add}: the Add's result is read by the Relu outside.
  const Graph g = conv_block({});
  const Workload w = make_workload(g, {0, 1}, ClusterKind::conv);
  EXPECT_EQ(w.graph.outputs, (std::vector<std::string>{"t5"}));
  EXPECT_EQ(w.source_outputs, (std::vector<std::string>{"a"}));
  // The conv result also a graph output: both leave the cluster, in production order.
  Graph g2 = g;
  g2.outputs.push_back("c");
  const Workload w2 = make_workload(g2, {0, 1}, ClusterKind::conv);
  EXPECT_EQ(w2.graph.outputs, (std::vector<std::string>{"t4", "t5"}));
  EXPECT_NE(w2.signature, w.signature);
  EXPECT_NE(w2.canonical.find("out t4,t5\n"), std::string::npos);
}

TEST(Workload, OrderOfIndependentBranchesDoesNotMatter) {
  // r1 = Relu(a), r2 = Sigmoid(b), y = Add(r1, r2), with the branches listed either way.
  auto build = [](bool relu_first) {
    Graph g;
    add_input(g, "a", {2, 3});
    add_input(g, "b", {2, 3});
    if (relu_first) {
      add_node(g, "Relu", {"a"}, {"r1"});
      add_node(g, "Sigmoid", {"b"}, {"r2"});
    } else {
      add_node(g, "Sigmoid", {"b"}, {"r2"});
      add_node(g, "Relu", {"a"}, {"r1"});
    }
    add_node(g, "Add", {"r1", "r2"}, {"y"});
    g.outputs = {"y"};
    return testing::with_types(g);
  };
  const Workload w1 = make_workload(build(true), {0, 1, 2}, ClusterKind::elementwise);
  const Workload w2 = make_workload(build(false), {0, 1, 2}, ClusterKind::elementwise);
  EXPECT_EQ(w1.canonical, w2.canonical);
  // Ready nodes go in order of their structural text: Relu before Sigmoid.
  EXPECT_EQ(w2.graph.nodes[0].op, "Relu");
  EXPECT_EQ(w2.source_inputs, (std::vector<std::string>{"a", "b"}));
}

TEST(Workload, WorkloadGraphComputesWhatTheClusterComputes) {
  const Graph g = conv_block({});
  ref::RunOptions keep;
  keep.keep_intermediates = true;
  const ref::TensorMap inputs = testing::random_inputs(g, 5);
  const ref::TensorMap all = ref::run_graph(g, inputs, keep);
  const Workload w = make_workload(g, {0, 1}, ClusterKind::conv);
  ref::TensorMap w_inputs;
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) {
    const std::string& src = w.source_inputs[i];
    w_inputs[w.graph.inputs[i]] = g.is_constant(src) ? g.initializers.at(src) : inputs.at(src);
  }
  const ref::TensorMap out = ref::run_graph(w.graph, w_inputs);
  ASSERT_EQ(out.size(), 1u);
  testing::expect_tensor_near(out.at("t5"), all.at("a"), 0.f, 0.f);
}

TEST(Workload, KindNames) {
  EXPECT_STREQ(cluster_kind_name(ClusterKind::gemm), "gemm");
  EXPECT_STREQ(cluster_kind_name(ClusterKind::depthwise), "depthwise");
  EXPECT_STREQ(cluster_kind_name(ClusterKind::attention), "attention");
  EXPECT_STREQ(cluster_kind_name(ClusterKind::opaque), "opaque");
}

// A table only gathered from costs what the picks read, not the whole table: an embedding
// lookup (one row per index), and GatherElements (a 32-byte sector per picked element). A
// table also read whole by another node of the cluster costs all of it.
TEST(Workload, GatheredTablesCostOnlyWhatThePicksRead) {
  // Types set by hand: random inputs would give the indices values out of range.
  Graph g;
  add_initializer(g, "table", testing::random_tensor({1000, 64}, 3));
  add_input(g, "ids", {2, 8}, DType::i64);
  add_node(g, "Gather", {"table", "ids"}, {"rows"}, attrs({{"axis", int64_t{0}}}));
  add_node(g, "Relu", {"rows"}, {"y"});
  g.tensors["rows"] = g.tensors["y"] = TensorInfo{DType::f32, {2, 8, 64}};
  g.outputs = {"y"};
  const Workload lookup = make_workload(g, {0, 1}, ClusterKind::elementwise);
  EXPECT_EQ(lookup.bytes, 16 * 64 * 4 + 16 * 8 + 16 * 64 * 4);  // rows picked, ids, y

  Graph e;
  add_input(e, "logp", {32, 1000});
  add_input(e, "labels", {32, 1}, DType::i64);
  add_node(e, "GatherElements", {"logp", "labels"}, {"picked"}, attrs({{"axis", int64_t{1}}}));
  e.tensors["picked"] = TensorInfo{DType::f32, {32, 1}};
  e.outputs = {"picked"};
  EXPECT_EQ(make_workload(e, {0}, ClusterKind::elementwise).bytes, 32 * 32 + 32 * 8 + 32 * 4);

  Graph both = g;
  both.nodes.pop_back();
  add_node(both, "ReduceSum", {"table"}, {"total"}, attrs({{"keepdims", int64_t{0}}}));
  both.tensors["total"] = TensorInfo{DType::f32, {}};
  both.outputs = {"rows", "total"};
  EXPECT_EQ(make_workload(both, {0, 1}, ClusterKind::elementwise).bytes,
            1000 * 64 * 4 + 16 * 8 + 16 * 64 * 4 + 4);
}

}  // namespace
}  // namespace dc
