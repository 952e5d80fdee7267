// The candidate generator: op classes, epilogue/prologue chains, attention, reductions with
// neighbours, elementwise chains and their bound, legality, coverage and dedupe.
#include <algorithm>
#include <set>
#include <string>

#include "candidates.h"
#include "onnx/import.h"
#include "pass_testing.h"
#include "passes/simplify.h"

namespace dc {
namespace {

using testing::add_initializer;
using testing::add_input;
using testing::add_node;
using testing::attrs;

Node op(const std::string& type, Attributes a = {}) {
  return testing::make_node(type, {"x"}, {"y"}, std::move(a));
}

std::vector<Candidate> containing(const std::vector<Candidate>& cands, size_t node) {
  std::vector<Candidate> out;
  for (const auto& c : cands)
    if (std::find(c.nodes.begin(), c.nodes.end(), node) != c.nodes.end()) out.push_back(c);
  return out;
}

std::set<std::vector<size_t>> node_sets(const std::vector<Candidate>& cands) {
  std::set<std::vector<size_t>> out;
  for (const auto& c : cands) out.insert(c.nodes);
  return out;
}

const Candidate* find(const std::vector<Candidate>& cands, const std::vector<size_t>& nodes) {
  for (const auto& c : cands)
    if (c.nodes == nodes) return &c;
  return nullptr;
}

// Invariants every generator run must keep.
void expect_well_formed(const Graph& g, const std::vector<Candidate>& cands) {
  EXPECT_EQ(node_sets(cands).size(), cands.size()) << "duplicate candidates";
  for (size_t i = 0; i < g.nodes.size(); ++i)
    EXPECT_NE(find(cands, {i}), nullptr) << "no singleton for node " << i << " " << g.nodes[i].op;
  for (const auto& c : cands) {
    EXPECT_TRUE(std::is_sorted(c.nodes.begin(), c.nodes.end()));
    EXPECT_TRUE(is_legal(g, c.nodes)) << c.pattern;
  }
}

Graph load(const std::string& example) {
  return simplify(import_onnx_file(std::string(DC_SOURCE_DIR) + "/examples/" + example +
                                   "/model.onnx"));
}

size_t node_index(const Graph& g, const std::string& output) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!g.nodes[i].outputs.empty() && g.nodes[i].outputs[0] == output) return i;
  ADD_FAILURE() << "no node produces " << output;
  return 0;
}

TEST(CandidatesOps, Classify) {
  EXPECT_EQ(classify_op(op("Conv")), OpClass::heavy);
  EXPECT_EQ(classify_op(op("MatMul")), OpClass::heavy);
  EXPECT_EQ(classify_op(op("Gemm")), OpClass::heavy);
  EXPECT_EQ(classify_op(op("ConvTranspose")), OpClass::heavy);
  for (const char* r : {"Softmax", "LogSoftmax", "LayerNormalization", "ReduceSum", "ReduceMean",
                        "ReduceLogSumExp", "MaxPool", "AveragePool", "GlobalAveragePool",
                        "GlobalMaxPool"})
    EXPECT_EQ(classify_op(op(r)), OpClass::reduction) << r;
  for (const char* e : {"Add", "Mul", "Relu", "Gelu", "Erf", "Clip", "Where", "Cast", "Transpose",
                        "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Concat", "Slice",
                        "Gather", "Split", "HardSwish", "Pow", "Pad", "Resize", "Upsample", "TopK",
                        "GatherND", "ScatterND", "ScatterElements", "OneHot"})
    EXPECT_EQ(classify_op(op(e)), OpClass::injective) << e;
  for (const char* o : {"Shape", "NonMaxSuppression", "Einsum", "Loop", "BatchNormalization"})
    EXPECT_EQ(classify_op(op(o)), OpClass::opaque) << o;
  EXPECT_STREQ(op_class_name(OpClass::injective), "injective");
}

TEST(CandidatesOps, HeavyKind) {
  EXPECT_EQ(heavy_kind(op("Conv", attrs({{"group", int64_t{1}}}))), ClusterKind::conv);
  EXPECT_EQ(heavy_kind(op("Conv")), ClusterKind::conv);
  EXPECT_EQ(heavy_kind(op("Conv", attrs({{"group", int64_t{16}}}))), ClusterKind::depthwise);
  EXPECT_EQ(heavy_kind(op("MatMul")), ClusterKind::gemm);
  EXPECT_EQ(heavy_kind(op("Gemm")), ClusterKind::gemm);
  EXPECT_EQ(heavy_kind(op("ConvTranspose", attrs({{"group", int64_t{4}}}))), ClusterKind::conv);
}

// x -> Conv -> c ; bias: Add(c, B[1,4,1,1]) -> cb ; Add(cb, r) -> a ; Relu -> y
// `extra`: a Sigmoid also reads this tensor ("" for none); `output`: also a graph output.
Graph conv_chain(const std::string& extra = "", const std::string& output = "") {
  Graph g;
  add_input(g, "x", {1, 3, 6, 6});
  add_input(g, "r", {1, 4, 6, 6});
  add_initializer(g, "w", testing::random_tensor({4, 3, 3, 3}, 1));
  add_initializer(g, "B", testing::random_tensor({1, 4, 1, 1}, 2));
  add_node(g, "Conv", {"x", "w"}, {"c"},
           attrs({{"kernel_shape", std::vector<int64_t>{3, 3}},
                  {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  add_node(g, "Add", {"c", "B"}, {"cb"});
  add_node(g, "Add", {"cb", "r"}, {"a"});
  add_node(g, "Relu", {"a"}, {"y"});
  g.outputs = {"y"};
  if (!extra.empty()) {
    add_node(g, "Sigmoid", {extra}, {"s"});
    g.outputs.push_back("s");
  }
  if (!output.empty()) g.outputs.push_back(output);
  return testing::with_types(g);
}

TEST(Candidates, ConvEpilogueGivesEveryPrefix) {
  const Graph g = conv_chain();
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  const auto with_conv = containing(cands, 0);
  EXPECT_EQ(node_sets(with_conv), (std::set<std::vector<size_t>>{{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}}));
  for (const auto& c : with_conv) EXPECT_EQ(c.kind, ClusterKind::conv);
  ASSERT_NE(find(cands, {0, 1, 2, 3}), nullptr);
  EXPECT_EQ(find(cands, {0, 1, 2, 3})->pattern, "conv+add+add+relu");
  EXPECT_EQ(find(cands, {0})->pattern, "conv");
  // The elementwise chain Add -> Add -> Relu and its sub-chains, as elementwise clusters.
  EXPECT_EQ(find(cands, {1, 2, 3})->kind, ClusterKind::elementwise);
  EXPECT_NE(find(cands, {2, 3}), nullptr);
  EXPECT_NE(find(cands, {1, 2}), nullptr);
  // 4 singletons + 3 conv epilogues + 3 elementwise sub-chains.
  EXPECT_EQ(cands.size(), 10u);
}

TEST(Candidates, SecondConsumerStopsTheChain) {
  const Graph g = conv_chain("cb");  // a Sigmoid also reads the biased conv output
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  EXPECT_EQ(node_sets(containing(cands, 0)), (std::set<std::vector<size_t>>{{0}, {0, 1}}));
  EXPECT_FALSE(is_legal(g, {0, 1, 2}));  // would hide cb, which the Sigmoid reads
  EXPECT_TRUE(is_legal(g, {0, 1}));      // cb leaves the cluster: fine
  EXPECT_TRUE(is_legal(g, {2, 3}));
  EXPECT_EQ(find(cands, {1, 2}), nullptr);
  EXPECT_NE(find(cands, {2, 3}), nullptr);
}

TEST(Candidates, GraphOutputStopsTheChain) {
  const Graph g = conv_chain("", "c");
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  EXPECT_EQ(node_sets(containing(cands, 0)), (std::set<std::vector<size_t>>{{0}}));
  EXPECT_FALSE(is_legal(g, {0, 1}));
}

TEST(Candidates, LegalityRequiresConvexity) {
  // Split(x) -> s0, s1 ; Relu(s0) -> r ; Add(s1, r) -> y. {Split, Add} hides only s1, but
  // the path Split -> Relu -> Add leaves the cluster and comes back.
  Graph g;
  add_input(g, "x", {4, 2});
  add_node(g, "Split", {"x"}, {"s0", "s1"}, attrs({{"axis", int64_t{0}}}));
  add_node(g, "Relu", {"s0"}, {"r"});
  add_node(g, "Add", {"s1", "r"}, {"y"});
  g.outputs = {"y"};
  g = testing::with_types(g);
  EXPECT_FALSE(is_legal(g, {0, 2}));
  EXPECT_TRUE(is_legal(g, {0, 1, 2}));
  EXPECT_TRUE(is_legal(g, {1, 2}));
  EXPECT_FALSE(is_legal(g, {}));
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  EXPECT_EQ(find(cands, {0, 2}), nullptr);
}

TEST(Candidates, MatMulPrologues) {
  // a -> Transpose -> MatMul(., b * 0.5) -> y
  Graph g;
  add_input(g, "a", {3, 2});
  add_input(g, "b", {3, 4});
  add_initializer(g, "half", Tensor::scalar<float>(0.5f));
  add_node(g, "Transpose", {"a"}, {"at"});
  add_node(g, "Mul", {"b", "half"}, {"bs"});
  add_node(g, "MatMul", {"at", "bs"}, {"y"});
  g.outputs = {"y"};
  g = testing::with_types(g);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  EXPECT_EQ(node_sets(containing(cands, 2)),
            (std::set<std::vector<size_t>>{{2}, {0, 2}, {1, 2}, {0, 1, 2}}));
  EXPECT_EQ(find(cands, {0, 1, 2})->pattern, "transpose+mul+matmul");
  EXPECT_EQ(find(cands, {0, 1, 2})->kind, ClusterKind::gemm);
}

TEST(Candidates, ResampledInputIsAConvTransposePrologue) {
  // x -> Resize(2x) -> ConvTranspose -> Relu: the resize reads through the gather.
  Graph g;
  add_input(g, "x", {1, 2, 3, 3});
  add_initializer(g, "s", Tensor::from_vector<float>({4}, {1, 1, 2, 2}));
  add_initializer(g, "w", testing::random_tensor({2, 4, 3, 3}, 3));
  add_node(g, "Resize", {"x", "", "s"}, {"u"}, attrs({{"mode", std::string("nearest")}}));
  add_node(g, "ConvTranspose", {"u", "w"}, {"y"});
  add_node(g, "Relu", {"y"}, {"r"});
  g.outputs = {"r"};
  g = testing::with_types(g);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  EXPECT_EQ(node_sets(containing(cands, 1)),
            (std::set<std::vector<size_t>>{{1}, {1, 2}, {0, 1}, {0, 1, 2}}));
  EXPECT_EQ(find(cands, {0, 1, 2})->pattern, "resize+convtranspose+relu");
  EXPECT_EQ(find(cands, {0, 1, 2})->kind, ClusterKind::conv);
}

// A training step's forward BatchNorm-apply + ReLU before the next Conv: (x - mean) * invstd
// * scale + bias, ReLU (mean and invstd computed by the step, not constants), then a 3x3 Conv
// with padding 1. The Conv's X cone (rule 3) is one more prologue set, with the epilogue
// prefix; a cone whose ReLU output is read outside too is not offered.
Graph batch_norm_relu_conv(bool relu_read_outside) {
  Graph g;
  add_input(g, "x", {2, 4, 6, 6});
  for (const char* p : {"mean", "invstd", "scale", "bias"}) add_input(g, p, {1, 4, 1, 1});
  add_initializer(g, "w", testing::random_tensor({5, 4, 3, 3}, 7));
  add_node(g, "Sub", {"x", "mean"}, {"xc"});
  add_node(g, "Mul", {"xc", "invstd"}, {"xh"});
  add_node(g, "Mul", {"xh", "scale"}, {"xs"});
  add_node(g, "Add", {"xs", "bias"}, {"bn"});
  add_node(g, "Relu", {"bn"}, {"r"});
  add_node(g, "Conv", {"r", "w"}, {"y"}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  add_node(g, "Relu", {"y"}, {"yr"});
  g.outputs = {"yr"};
  if (relu_read_outside) g.outputs.push_back("r");
  return testing::with_types(g);
}

TEST(Candidates, ConvComputesItsInputCone) {
  const Graph g = batch_norm_relu_conv(false);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  const Candidate* cone = find(cands, {0, 1, 2, 3, 4, 5});
  ASSERT_NE(cone, nullptr);
  EXPECT_EQ(cone->pattern, "sub+mul+mul+add+relu+conv");
  EXPECT_EQ(cone->kind, ClusterKind::conv);
  ASSERT_NE(find(cands, {0, 1, 2, 3, 4, 5, 6}), nullptr);
  EXPECT_EQ(find(cands, {0, 1, 2, 3, 4, 5, 6})->kind, ClusterKind::conv);

  const Graph shared = batch_norm_relu_conv(true);
  const auto shared_cands = generate_candidates(shared);
  expect_well_formed(shared, shared_cands);
  for (const auto& c : containing(shared_cands, 5))
    EXPECT_EQ(std::count(c.nodes.begin(), c.nodes.end(), size_t{4}), 0) << c.pattern;
}

// The ReLU gradient after a convolution's data gradient: ConvTranspose(dy, w) -> dx,
// Greater(a, 0) -> m, Where(m, dx, other) -> g (nodes 0, 1, 2). `mask_reader`: a Cast also
// reads m (node 3); `other`: the Where's second value, "zero" (a constant) or "b" (an input).
Graph masked_data_gradient(bool mask_reader, const std::string& other = "zero") {
  Graph g;
  add_input(g, "dy", {1, 4, 5, 5});
  add_input(g, "a", {1, 2, 5, 5});
  add_input(g, "b", {1, 2, 5, 5});
  add_initializer(g, "w", testing::random_tensor({4, 2, 3, 3}, 5));
  add_initializer(g, "zero", Tensor::scalar<float>(0.f));
  add_node(g, "ConvTranspose", {"dy", "w"}, {"dx"}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  add_node(g, "Greater", {"a", "zero"}, {"m"});
  add_node(g, "Where", {"m", "dx", other}, {"g"});
  g.outputs = {"g"};
  if (mask_reader) {
    add_node(g, "Cast", {"m"}, {"mf"}, attrs({{"to", int64_t{1}}}));
    g.outputs.push_back("mf");
  }
  return testing::with_types(g);
}

TEST(Candidates, ReluMaskIsADataGradientEpilogue) {
  // The Where and the compare computing its mask join the ConvTranspose together: never the
  // compare alone (the kernel would write the mask beside dX).
  const Graph g = masked_data_gradient(false);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  EXPECT_EQ(node_sets(containing(cands, 0)), (std::set<std::vector<size_t>>{{0}, {0, 1, 2}}));
  ASSERT_NE(find(cands, {0, 1, 2}), nullptr);
  EXPECT_EQ(find(cands, {0, 1, 2})->pattern, "convtranspose+greater+where");
  EXPECT_EQ(find(cands, {0, 1, 2})->kind, ClusterKind::conv);
}

TEST(Candidates, SharedMaskIsReadNotComputed) {
  // A mask another node reads stays outside: the epilogue reads it as an input.
  const Graph shared = masked_data_gradient(true);
  const auto cands = generate_candidates(shared);
  expect_well_formed(shared, cands);
  EXPECT_EQ(node_sets(containing(cands, 0)), (std::set<std::vector<size_t>>{{0}, {0, 2}}));
  // A Where choosing between dX and another computed tensor is no epilogue.
  const Graph two_values = masked_data_gradient(false, "b");
  EXPECT_EQ(node_sets(containing(generate_candidates(two_values), 0)), (std::set<std::vector<size_t>>{{0}}));
}

// q, k[.., D, S] -> [Transpose k] -> MatMul -> scale -> [Add mask] -> Softmax -> MatMul(v)
Graph attention_graph(bool k_transpose, const std::string& scale_op, bool mask,
                      bool softmax_read_twice = false) {
  Graph g;
  add_input(g, "q", {1, 2, 4, 8});
  add_input(g, "k", k_transpose ? Shape{1, 2, 4, 8} : Shape{1, 2, 8, 4});
  add_input(g, "v", {1, 2, 4, 8});
  add_input(g, "mask", {1, 1, 1, 4});
  add_initializer(g, "scale", Tensor::scalar<float>(scale_op == "Div" ? 2.8284271f : 0.35355f));
  std::string kt = "k";
  if (k_transpose) {
    add_node(g, "Transpose", {"k"}, {"kt"}, attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
    kt = "kt";
  }
  add_node(g, "MatMul", {"q", kt}, {"s"});
  std::string cur = "s";
  if (!scale_op.empty()) {
    add_node(g, scale_op, {cur, "scale"}, {"ss"});
    cur = "ss";
  }
  if (mask) {
    add_node(g, "Add", {cur, "mask"}, {"sm"});
    cur = "sm";
  }
  add_node(g, "Softmax", {cur}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(g, "MatMul", {"p", "v"}, {"o"});
  g.outputs = {"o"};
  if (softmax_read_twice) {
    add_node(g, "Relu", {"p"}, {"pr"});
    g.outputs.push_back("pr");
  }
  return testing::with_types(g);
}

std::vector<Candidate> of_kind(const std::vector<Candidate>& cands, ClusterKind kind) {
  std::vector<Candidate> out;
  for (const auto& c : cands)
    if (c.kind == kind) out.push_back(c);
  return out;
}

TEST(Candidates, AttentionFoundOnce) {
  const Graph g = attention_graph(true, "Div", true);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  const auto att = of_kind(cands, ClusterKind::attention);
  ASSERT_EQ(att.size(), 1u);
  EXPECT_EQ(att[0].nodes, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(att[0].pattern, "transpose+matmul+div+add+softmax+matmul");
}

TEST(Candidates, AttentionVariants) {
  {  // no K transpose, Mul scale, no mask
    const Graph g = attention_graph(false, "Mul", false);
    const auto att = of_kind(generate_candidates(g), ClusterKind::attention);
    ASSERT_EQ(att.size(), 1u);
    EXPECT_EQ(att[0].pattern, "matmul+mul+softmax+matmul");
  }
  {  // neither scale nor mask
    const Graph g = attention_graph(false, "", false);
    const auto att = of_kind(generate_candidates(g), ClusterKind::attention);
    ASSERT_EQ(att.size(), 1u);
    EXPECT_EQ(att[0].pattern, "matmul+softmax+matmul");
  }
  {  // the probabilities are read elsewhere: no attention cluster can hide them
    const Graph g = attention_graph(true, "Div", true, true);
    const auto cands = generate_candidates(g);
    expect_well_formed(g, cands);
    EXPECT_TRUE(of_kind(cands, ClusterKind::attention).empty());
  }
}

TEST(Candidates, AttentionAbsorbsTransposes) {
  // BERT's layout: Q, K, V [B,S,H,D] transposed into heads, the output transposed back. The
  // base cluster takes K's Transpose; further candidates add Q's and V's (strided views)
  // and the output's (stored at permuted coordinates); a Transpose with another reader is
  // left out.
  Graph g;
  for (const char* n : {"q", "k", "v"}) add_input(g, n, {1, 4, 2, 8});
  auto perm = [](std::vector<int64_t> p) { return attrs({{"perm", std::move(p)}}); };
  add_node(g, "Transpose", {"q"}, {"qh"}, perm({0, 2, 1, 3}));    // 0
  add_node(g, "Transpose", {"k"}, {"kt"}, perm({0, 2, 3, 1}));    // 1
  add_node(g, "Transpose", {"v"}, {"vh"}, perm({0, 2, 1, 3}));    // 2
  add_node(g, "MatMul", {"qh", "kt"}, {"s"});                     // 3
  add_node(g, "Softmax", {"s"}, {"p"}, attrs({{"axis", int64_t{-1}}}));  // 4
  add_node(g, "MatMul", {"p", "vh"}, {"o"});                      // 5
  add_node(g, "Transpose", {"o"}, {"y"}, perm({0, 2, 1, 3}));     // 6
  g.outputs = {"y"};
  g = testing::with_types(g);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  std::set<std::vector<size_t>> att;
  for (const auto& c : of_kind(cands, ClusterKind::attention)) att.insert(c.nodes);
  EXPECT_EQ(att, (std::set<std::vector<size_t>>{
                     {1, 3, 4, 5}, {0, 1, 2, 3, 4, 5}, {1, 3, 4, 5, 6}, {0, 1, 2, 3, 4, 5, 6}}));
  EXPECT_EQ(find(cands, {0, 1, 2, 3, 4, 5, 6})->pattern,
            "transpose+transpose+transpose+matmul+softmax+matmul+transpose");

  g.outputs.push_back("qh");  // Q's Transpose is read outside: only V's joins
  const auto again = generate_candidates(g);
  std::set<std::vector<size_t>> att2;
  for (const auto& c : of_kind(again, ClusterKind::attention)) att2.insert(c.nodes);
  EXPECT_EQ(att2, (std::set<std::vector<size_t>>{
                      {1, 3, 4, 5}, {1, 2, 3, 4, 5}, {1, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}}));
}

TEST(Candidates, AttentionThroughCausalWhere) {
  // MatMul -> Div -> Where(causal, s, fill) -> Add(mask) -> Softmax -> MatMul, as Hugging
  // Face decoders export it: one attention cluster (the Where's condition stays outside).
  Graph g;
  add_input(g, "q", {1, 2, 4, 8});
  add_input(g, "kt", {1, 2, 8, 4});
  add_input(g, "v", {1, 2, 4, 8});
  add_input(g, "mask", {1, 1, 1, 4});
  Tensor causal(DType::boolean, {1, 1, 4, 4});
  for (int64_t i = 0; i < 16; ++i) reinterpret_cast<uint8_t*>(causal.raw_mutable())[i] = i % 4 <= i / 4;
  add_initializer(g, "causal", causal);
  add_initializer(g, "scale", Tensor::scalar<float>(2.8284271f));
  add_initializer(g, "fill", Tensor::scalar<float>(-3.4e38f));
  add_node(g, "MatMul", {"q", "kt"}, {"s"});
  add_node(g, "Div", {"s", "scale"}, {"ss"});
  add_node(g, "Where", {"causal", "ss", "fill"}, {"sw"});
  add_node(g, "Add", {"sw", "mask"}, {"sm"});
  add_node(g, "Softmax", {"sm"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(g, "MatMul", {"p", "v"}, {"o"});
  g.outputs = {"o"};
  g = testing::with_types(g);
  const auto att = of_kind(generate_candidates(g), ClusterKind::attention);
  ASSERT_EQ(att.size(), 1u);
  EXPECT_EQ(att[0].pattern, "matmul+div+where+add+softmax+matmul");
}

TEST(Candidates, SoftmaxWithScaleAndMask) {
  const Graph g = attention_graph(false, "Div", true);  // MatMul0 Div1 Add2 Softmax3 MatMul4
  const auto cands = generate_candidates(g);
  ASSERT_NE(find(cands, {2, 3}), nullptr);
  EXPECT_EQ(find(cands, {2, 3})->kind, ClusterKind::reduction);
  ASSERT_NE(find(cands, {1, 2, 3}), nullptr);
  EXPECT_EQ(find(cands, {1, 2, 3})->pattern, "div+add+softmax");
  // The first MatMul's epilogue stops at the mask Add: it broadcasts the mask.
  EXPECT_NE(find(cands, {0, 1}), nullptr);
  EXPECT_EQ(find(cands, {0, 1, 2}), nullptr);
}

TEST(Candidates, AddLayerNorm) {
  // h = MatMul(x, W) ; b = Add(h, bias) ; s = Add(b, x) ; LayerNorm(s)
  Graph g;
  add_input(g, "x", {2, 8});
  add_initializer(g, "W", testing::random_tensor({8, 8}, 1));
  add_initializer(g, "bias", testing::random_tensor({8}, 2));
  add_initializer(g, "gamma", testing::random_tensor({8}, 3));
  add_initializer(g, "beta", testing::random_tensor({8}, 4));
  add_node(g, "MatMul", {"x", "W"}, {"h"});
  add_node(g, "Add", {"h", "bias"}, {"b"});
  add_node(g, "Add", {"b", "x"}, {"s"});
  add_node(g, "LayerNormalization", {"s", "gamma", "beta"}, {"y"}, attrs({{"axis", int64_t{-1}}}));
  g.outputs = {"y"};
  g = testing::with_types(g);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  EXPECT_EQ(node_sets(containing(cands, 3)),
            (std::set<std::vector<size_t>>{{3}, {2, 3}, {1, 2, 3}}));
  EXPECT_EQ(find(cands, {2, 3})->pattern, "add+layernorm");
  EXPECT_EQ(find(cands, {2, 3})->kind, ClusterKind::reduction);
  EXPECT_EQ(find(cands, {0, 1, 2})->pattern, "matmul+add+add");
}

// A DAG of elementwise ops (BatchNorm's dX in a training step has this form): the chain
// through the first linked producer by input slot is [2, 3, 4]; its operand cone adds the
// branch [0, 1] that only it reads, so the whole DAG is one candidate.
TEST(Candidates, ElementwiseChainWithItsOperandCone) {
  Graph g;
  add_input(g, "x", {2, 4});
  add_input(g, "a", {2, 4});
  add_input(g, "d", {2, 4});
  add_input(g, "s", {4});
  add_input(g, "s2", {4});
  add_input(g, "k", {4});
  add_node(g, "Mul", {"x", "a"}, {"xh"});   // 0
  add_node(g, "Mul", {"xh", "s"}, {"xs"});  // 1
  add_node(g, "Mul", {"s2", "k"}, {"sk"});  // 2: per-channel
  add_node(g, "Add", {"sk", "xs"}, {"t"});  // 3: continues 2's chain (first slot)
  add_node(g, "Sub", {"d", "t"}, {"y"});    // 4
  g.outputs = {"y"};
  g = testing::with_types(g);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  EXPECT_NE(find(cands, {0, 1}), nullptr);
  EXPECT_NE(find(cands, {2, 3, 4}), nullptr);
  const Candidate* all = find(cands, {0, 1, 2, 3, 4});
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(all->kind, ClusterKind::elementwise);
  EXPECT_EQ(all->pattern, "mul+mul+mul+add+sub");
  // A branch read outside too (here a graph output) stays out of the cone.
  g.outputs.push_back("xs");
  for (const auto& c : generate_candidates(g)) {
    const bool branch = std::count(c.nodes.begin(), c.nodes.end(), size_t{1}) != 0;
    const bool join = std::count(c.nodes.begin(), c.nodes.end(), size_t{3}) != 0;
    EXPECT_FALSE(branch && join) << c.pattern;
  }
}

// A row reduction whose input others read too computes that input (and its cone) itself and
// writes it: a bias gradient's ReduceSum of a ReLU mask that a data gradient also reads. A
// pool takes no such input (its template writes no second output).
TEST(Candidates, ReductionComputesAnInputOthersRead) {
  for (const char* reduction : {"ReduceSum", "MaxPool"}) {
    SCOPED_TRACE(reduction);
    Graph g;
    add_input(g, "y", {2, 3, 4, 4});
    add_input(g, "dy", {2, 3, 4, 4});
    add_initializer(g, "zero", Tensor::scalar(0.0f));
    add_node(g, "Greater", {"y", "zero"}, {"c"});       // 0
    add_node(g, "Where", {"c", "dy", "zero"}, {"m"});   // 1
    if (std::string(reduction) == "MaxPool")
      add_node(g, "MaxPool", {"m"}, {"r"}, attrs({{"kernel_shape", std::vector<int64_t>{2, 2}}}));  // 2
    else
      add_node(g, "ReduceSum", {"m"}, {"r"});            // 2
    add_node(g, "Relu", {"m"}, {"o"});                  // 3: another reader of m
    g.outputs = {"r", "o"};
    g = testing::with_types(g);
    const auto cands = generate_candidates(g);
    const Candidate* fused = find(cands, {0, 1, 2});
    if (std::string(reduction) == "MaxPool") {
      EXPECT_EQ(fused, nullptr);
      continue;
    }
    ASSERT_NE(fused, nullptr);
    EXPECT_EQ(fused->kind, ClusterKind::reduction);
    EXPECT_EQ(fused->pattern, "greater+where+reducesum");
    EXPECT_FALSE(is_legal(g, {0, 1, 2})) << "m is exposed: legal only because the kernel writes it";
  }
}

std::string tensor_name(size_t i) {
  std::string s = "t";
  s.append(std::to_string(i));
  return s;
}

// A chain of `n` unary injective ops.
Graph unary_chain(size_t n) {
  const char* ops[] = {"Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp"};
  Graph g;
  add_input(g, "t0", {2, 2});
  for (size_t i = 0; i < n; ++i) add_node(g, ops[i % 6], {tensor_name(i)}, {tensor_name(i + 1)});
  g.outputs = {tensor_name(n)};
  return testing::with_types(g);
}

size_t multi_node(const std::vector<Candidate>& cands) {
  return static_cast<size_t>(std::count_if(cands.begin(), cands.end(),
                                           [](const Candidate& c) { return c.nodes.size() > 1; }));
}

TEST(Candidates, ElementwiseSubChainsAreBounded) {
  // Up to 8 ops: every contiguous sub-chain of length >= 2, L(L-1)/2 of them.
  for (size_t n : {2u, 5u, 8u}) {
    const Graph g = unary_chain(n);
    const auto cands = generate_candidates(g);
    expect_well_formed(g, cands);
    EXPECT_EQ(multi_node(cands), n * (n - 1) / 2) << n;
    EXPECT_EQ(cands.size(), n + n * (n - 1) / 2);
  }
  EXPECT_NE(find(generate_candidates(unary_chain(5)), {1, 2, 3}), nullptr);  // a middle window
  // Longer: prefixes of length 2..L (L-1) and proper suffixes of length 2..L-1 (L-2).
  for (size_t n : {9u, 12u}) {
    const Graph g = unary_chain(n);
    const auto cands = generate_candidates(g);
    expect_well_formed(g, cands);
    EXPECT_EQ(multi_node(cands), 2 * n - 3) << n;
    for (const auto& c : cands) {
      if (c.nodes.size() < 2) continue;
      EXPECT_EQ(c.kind, ClusterKind::elementwise);
      EXPECT_TRUE(c.nodes.front() == 0 || c.nodes.back() == n - 1) << c.pattern;
      EXPECT_EQ(c.nodes.back() - c.nodes.front() + 1, c.nodes.size());  // contiguous
    }
  }
}

TEST(Candidates, TinyCnn) {
  const Graph g = load("tiny_cnn");
  // conv relu conv relu conv add relu dwconv relu maxpool conv relu avgpool gap flatten gemm
  ASSERT_EQ(g.nodes.size(), 16u);
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  // 16 singletons; conv+relu x3, conv+add, conv+add+relu, dwconv+relu; relu+maxpool,
  // relu+avgpool; the elementwise chain add+relu; the depthwise conv computing its X,
  // add+relu+dwconv, alone and with its relu (counted by hand, docs/candidates.md).
  EXPECT_EQ(cands.size(), 27u);
  ASSERT_NE(find(cands, {5, 6, 7}), nullptr);
  EXPECT_EQ(find(cands, {5, 6, 7})->kind, ClusterKind::depthwise);
  ASSERT_NE(find(cands, {4, 5, 6}), nullptr);
  EXPECT_EQ(find(cands, {4, 5, 6})->pattern, "conv+add+relu");
  EXPECT_EQ(find(cands, {4, 5, 6})->kind, ClusterKind::conv);
  ASSERT_NE(find(cands, {7, 8}), nullptr);
  EXPECT_EQ(find(cands, {7, 8})->kind, ClusterKind::depthwise);
  EXPECT_EQ(find(cands, {8, 9})->pattern, "relu+maxpool");
  EXPECT_EQ(find(cands, {15})->kind, ClusterKind::gemm);
  EXPECT_EQ(find(cands, {14})->kind, ClusterKind::elementwise);  // Flatten as an index map

  const WorkloadSet ws = dedupe_workloads(g, cands);
  ASSERT_EQ(ws.candidate_workload.size(), cands.size());
  auto workload_of = [&](const std::vector<size_t>& nodes) {
    return ws.candidate_workload[static_cast<size_t>(find(cands, nodes) - cands.data())];
  };
  // The two 16->16 3x3 convolutions of the residual block are one workload; the stem
  // (3->16) is another.
  EXPECT_EQ(workload_of({2}), workload_of({4}));
  EXPECT_NE(workload_of({0}), workload_of({2}));
  EXPECT_NE(workload_of({2, 3}), workload_of({4, 5}));
  std::set<std::string> signatures;
  for (const auto& w : ws.workloads) signatures.insert(w.signature);
  EXPECT_EQ(signatures.size(), ws.workloads.size());
  EXPECT_LT(ws.workloads.size(), cands.size());
  for (size_t i = 0; i < cands.size(); ++i)
    EXPECT_EQ(ws.workloads[ws.candidate_workload[i]].signature,
              make_workload(g, cands[i].nodes, cands[i].kind).signature);
}

TEST(Candidates, TinyTransformer) {
  const Graph g = load("tiny_transformer");
  const auto cands = generate_candidates(g);
  expect_well_formed(g, cands);
  std::map<std::string, int> patterns;
  for (const auto& c : cands) ++patterns[std::string(cluster_kind_name(c.kind)) + " " + c.pattern];
  EXPECT_EQ(patterns["attention transpose+matmul+div+add+softmax+matmul"], 1);
  // With Q's and V's Transposes, with the output's, with all three (BERT's layout).
  EXPECT_EQ(patterns["attention transpose+transpose+transpose+matmul+div+add+softmax+matmul+transpose"], 1);
  // And with the operand cones (the Q/K/V slices of the merged projection, their head
  // views, the bias Add), with and without the output's Transpose.
  EXPECT_EQ(of_kind(cands, ClusterKind::attention).size(), 6u);
  EXPECT_EQ(patterns["reduction add+layernorm"], 2);  // after attention and after the FFN
  EXPECT_EQ(patterns["gemm matmul+add+gelu"], 1);
  EXPECT_EQ(patterns["gemm matmul+add+add"], 2);      // bias and residual
  EXPECT_EQ(patterns["reduction div+add+softmax"], 1);

  // The add+layernorm after attention reads the attention output's residual Add.
  const size_t ln = node_index(g, "/layer/attn_norm/Add_1_output_0");
  const size_t add = node_index(g, "/layer/Add_1_output_0");
  ASSERT_NE(find(cands, {add, ln}), nullptr);
  EXPECT_EQ(find(cands, {add, ln})->pattern, "add+layernorm");

  // Q, K and V projections (+bias) are one MatMul + Add over concatenated weights
  // (fuse_sibling_matmuls); the attention cone reads its three slices.
  int slices = 0;
  for (const auto& n : g.nodes) slices += n.op == "Slice";
  EXPECT_EQ(slices, 3);
  const Candidate* widest = nullptr;
  for (const auto& c : cands)
    if (c.kind == ClusterKind::attention && (!widest || c.nodes.size() > widest->nodes.size())) widest = &c;
  ASSERT_NE(widest, nullptr);
  int in_cone = 0;
  for (size_t i : widest->nodes) in_cone += g.nodes[i].op == "Slice";
  EXPECT_EQ(in_cone, 3) << widest->pattern;
}

}  // namespace
}  // namespace dc
