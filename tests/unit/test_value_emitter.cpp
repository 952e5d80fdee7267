// ValueEmitter: the emitted text of index maps, broadcasting, constants and shared
// subexpressions (hand-computed offsets), which inputs templates may load as vectors, what
// it refuses; and the numbers of every op it emits, per dtype, through a minimal kernel of
// its own (one grid-stride loop per output) on the host emulator against the CPU
// reference executor.
#include <algorithm>
#include <cmath>
#include <limits>

#include "emulator.h"
#include "nvrtc.h"
#include "pass_testing.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "template_util.h"
#include "value_emitter.h"

namespace dc {
namespace {

using testing::add_initializer;
using testing::add_input;
using testing::add_node;
using testing::attrs;

Tensor i64s(Shape s, std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(std::move(s), v); }

// Types every tensor of `g` by running it on `in`.
Graph typed(Graph g, const ref::TensorMap& in) {
  ref::RunOptions opts;
  opts.keep_intermediates = true;
  for (const auto& [name, t] : ref::run_graph(g, in, opts)) g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  return g;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// ---- emitted text ---------------------------------------------------------------------------

TEST(ValueEmitterText, TransposeIsAnIndexMap) {
  Graph g;
  add_input(g, "x", {2, 3, 4, 5});
  g.tensors["y"] = {DType::f32, {2, 4, 5, 3}};
  add_node(g, "Transpose", {"x"}, {"y"}, attrs({{"perm", std::vector<int64_t>{0, 2, 3, 1}}}));
  g.outputs = {"y"};
  ValueEmitter em(g);
  std::string code;
  const std::string v = em.value("y", {"a", "b", "c", "d"}, code);
  // y[a,b,c,d] = x[a,d,b,c]; x's strides are 60, 20, 5, 1.
  EXPECT_NE(code.find("in0[(dc_i64)(a) * 60 + (dc_i64)(d) * 20 + (dc_i64)(b) * 5 + (dc_i64)(c)]"),
            std::string::npos) << code;
  EXPECT_EQ(em.param_name("y"), "out0");
  EXPECT_EQ(em.offset("y", {"a", "b", "c", "d"}),
            "(dc_i64)(a) * 60 + (dc_i64)(b) * 15 + (dc_i64)(c) * 3 + (dc_i64)(d)");
}

TEST(ValueEmitterText, BroadcastingAndSharedSubexpressions) {
  Graph g;
  add_input(g, "x", {3, 4});
  add_input(g, "b", {4});
  add_input(g, "c", {3, 1});
  for (const char* t : {"r", "s", "y"}) g.tensors[t] = {DType::f32, {3, 4}};
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "Add", {"r", "b"}, {"s"});
  add_node(g, "Mul", {"s", "r"}, {"m"});
  g.tensors["m"] = {DType::f32, {3, 4}};
  add_node(g, "Sub", {"m", "c"}, {"y"});
  g.outputs = {"y"};
  ValueEmitter em(g);
  std::string code;
  em.value("y", {"i", "j"}, code);
  EXPECT_NE(code.find("in1[(dc_i64)(j)]"), std::string::npos) << code;     // b: [4]
  EXPECT_NE(code.find("in2[(dc_i64)(i)]"), std::string::npos) << code;     // c: [3, 1]
  EXPECT_NE(code.find("in0[(dc_i64)(i) * 4 + (dc_i64)(j)]"), std::string::npos) << code;
  EXPECT_EQ(count(code, "? 0.0f :"), 1u) << "Relu read twice, computed once:\n" << code;
  EXPECT_EQ(count(code, "in0["), 1u) << code;
  // A second element at other coordinates computes its own values.
  em.value("y", {"i", "(j + 1)"}, code);
  EXPECT_EQ(count(code, "? 0.0f :"), 2u) << code;
  EXPECT_EQ(count(code, "in1["), 2u) << code;
  EXPECT_EQ(count(code, "in2["), 1u) << "c broadcasts along j: one load for both elements\n" << code;
  // Bound tensors are not recomputed: an epilogue reading an accumulator.
  std::string epi;
  em.reset_locals();
  em.bind("s", "acc");
  em.value("y", {"i", "j"}, epi);
  EXPECT_EQ(count(epi, "in1["), 0u) << epi;
  EXPECT_NE(epi.find("acc *"), std::string::npos) << epi;
  em.unbind("s");
  std::string again;
  em.reset_locals();
  em.value("y", {"i", "j"}, again);
  EXPECT_EQ(count(again, "in1["), 1u) << again;
}

TEST(ValueEmitterText, SliceGatherAndConstants) {
  Graph g;
  add_input(g, "x", {10});
  add_input(g, "e", {6, 5});
  add_initializer(g, "starts", i64s({1}, {-2}));
  add_initializer(g, "ends", i64s({1}, {-11}));
  add_initializer(g, "steps", i64s({1}, {-3}));
  add_initializer(g, "idx", i64s({4}, {3, -1, 0, 5}));
  add_node(g, "Slice", {"x", "starts", "ends", "", "steps"}, {"s"});
  add_node(g, "Gather", {"e", "idx"}, {"ga"}, attrs({{"axis", int64_t{0}}}));
  g.outputs = {"s", "ga"};
  ref::TensorMap in = {{"x", testing::random_tensor({10}, 1)}, {"e", testing::random_tensor({6, 5}, 2)}};
  g = typed(g, in);
  EXPECT_EQ(g.info("s").shape, Shape{3});  // elements 8, 5, 2
  ValueEmitter em(g);
  std::string code;
  em.value("s", {"i"}, code);
  EXPECT_NE(code.find("in0[(dc_i64)((8 + (i) * -3))]"), std::string::npos) << code;
  code.clear();
  em.value("ga", {"i", "j"}, code);
  EXPECT_NE(code.find("{3LL, -1LL, 0LL, 5LL}"), std::string::npos) << code;
  EXPECT_NE(code.find("+ 6 :"), std::string::npos) << "negative indices wrap by the axis extent:\n" << code;
}

TEST(ValueEmitterText, Literals) {
  EXPECT_EQ(float_literal(1.0), "1.0f");
  EXPECT_EQ(float_literal(0.1), "0.1f");
  EXPECT_EQ(float_literal(1e-5), "1e-05f");
  EXPECT_EQ(float_literal(-2.5), "-2.5f");
  EXPECT_EQ(float_literal(INFINITY), "__int_as_float(0x7f800000)");
  EXPECT_EQ(float_literal(-INFINITY), "__int_as_float(0xff800000)");
  EXPECT_EQ(float_literal(NAN), "__int_as_float(0x7fc00000)");
}

TEST(ValueEmitterText, SupportsAndRefusals) {
  for (const char* op : {"Add", "Relu", "Where", "Transpose", "Tile", "Gather", "Max", "Xor", "Cast"})
    EXPECT_TRUE(ValueEmitter::supports(testing::make_node(op, {"x"}, {"y"}))) << op;
  for (const char* op : {"Conv", "Softmax", "MatMul", "ReduceMean", "MaxPool", "Shape"})
    EXPECT_FALSE(ValueEmitter::supports(testing::make_node(op, {"x"}, {"y"}))) << op;

  Graph g;
  add_input(g, "x", {4});
  add_input(g, "st", {1}, DType::i64);  // starts computed at run time: not an index map
  add_initializer(g, "en", i64s({1}, {4}));
  g.tensors["y"] = {DType::f32, {3}};
  g.tensors["z"] = {DType::f32, {4}};
  add_node(g, "Slice", {"x", "st", "en"}, {"y"});
  add_node(g, "Softmax", {"x"}, {"z"});
  g.outputs = {"y", "z"};
  ValueEmitter em(g);
  std::string code;
  EXPECT_THROW(em.value("y", {"i"}, code), InternalError);
  EXPECT_THROW(em.value("z", {"i"}, code), InternalError);
  EXPECT_THROW(em.param_name("nothing"), InternalError);
  EXPECT_THROW(em.value("x", {}, code), InternalError);  // fewer coordinates than the rank
}

TEST(ValueEmitterText, VectorLoadableInputs) {
  Graph g;
  add_input(g, "x", {2, 8});
  add_input(g, "b", {8});
  add_input(g, "c", {2, 1});
  add_input(g, "t", {8, 2});
  add_input(g, "u", {2, 8});
  add_input(g, "k", {2, 8}, DType::i64);
  add_initializer(g, "w", testing::random_tensor({8}, 3));
  add_node(g, "Add", {"x", "b"}, {"a"});
  add_node(g, "Mul", {"a", "c"}, {"m"});
  add_node(g, "Transpose", {"t"}, {"tt"});
  add_node(g, "Add", {"m", "tt"}, {"s"});
  add_node(g, "Transpose", {"u"}, {"ut"});
  add_node(g, "Transpose", {"ut"}, {"uu"});
  add_node(g, "Add", {"s", "uu"}, {"s2"});
  add_node(g, "Add", {"s2", "u"}, {"s3"});  // u read directly and through a remap
  add_node(g, "Cast", {"k"}, {"kf"}, attrs({{"to", int64_t{1}}}));
  add_node(g, "Add", {"s3", "kf"}, {"s4"});
  add_node(g, "Mul", {"s4", "w"}, {"y"});
  g.outputs = {"y"};
  ref::TensorMap in;
  for (const char* n : {"x", "b", "c", "t", "u"}) in[n] = testing::random_tensor(g.info(n).shape, 4);
  in["k"] = i64s({2, 8}, std::vector<int64_t>(16, 1));
  g = typed(g, in);
  // x and b: read at the element's position, last extent 8. c broadcasts along the inner
  // dim, t only through a Transpose, u also through one, k is not f32, w is a constant.
  EXPECT_EQ(vector_loadable_inputs(g, {"y"}, 8), (std::set<std::string>{"x", "b"}));
  EXPECT_TRUE(vector_loadable_inputs(g, {"y"}, 1).empty());
  EXPECT_TRUE(is_pointwise_op("Expand"));
  EXPECT_FALSE(is_pointwise_op("Reshape"));
}

// ---- numbers through a minimal kernel ---------------------------------------------------------

// One grid-stride loop per output: out<j>[i] = the emitter's value at i's coordinates.
GeneratedKernel emitter_kernel(const Workload& w) {
  ValueEmitter em(w.graph);
  std::string body;
  for (size_t j = 0; j < w.graph.outputs.size(); ++j) {
    const Shape& s = w.graph.info(w.graph.outputs[j]).shape;
    std::string code;
    const auto c = emit_unravel(s, "i", "c", code);
    em.reset_locals();
    const std::string v = em.value(w.graph.outputs[j], c, code);
    body += "  for (dc_i64 i = (dc_i64)blockIdx.x * blockDim.x + threadIdx.x; i < " +
            std::to_string(shape_numel(s)) + "; i += (dc_i64)gridDim.x * blockDim.x) {\n" + code +
            "  out" + std::to_string(j) + "[i] = " + v + ";\n  }\n";
  }
  GeneratedKernel k;
  k.template_name = "emitter_test";
  k.buffers = workload_buffers(w);
  k.source = source_header(w, "emitter_test", "-") + "extern \"C\" __global__ void emit_test(" +
             kernel_params(w) + ") {\n" + body + "}\nDC_EXPORT_KERNEL(emit_test)\n";
  k.launches.push_back({"emit_test", {4, 1, 1}, {64, 1, 1}, 0, all_workload_args(w)});
  return k;
}

// Runs the graph (typed on `in`) through emitter_kernel on the emulator, compiles it with
// NVRTC, and compares every output with the CPU reference; returns the emulated outputs.
std::vector<Tensor> expect_matches_reference(Graph g, const ref::TensorMap& in) {
  Workload w;
  w.kind = ClusterKind::elementwise;
  w.graph = typed(std::move(g), in);
  w.signature = "emitter-test";
  const GeneratedKernel k = emitter_kernel(w);
  const CompileResult cr = compile_cuda(k.source, "sm_80");
  EXPECT_TRUE(cr.ok) << cr.error << "\n" << k.source;
  std::vector<Tensor> bufs(k.buffers.size());
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) bufs[i] = in.at(w.graph.inputs[i]);
  const EmulatorResult r = emulate(k, bufs);
  EXPECT_TRUE(r.ok) << r.error << "\n" << k.source;
  const auto want = ref::run_graph(w.graph, in);
  std::vector<Tensor> outs;
  for (size_t j = 0; j < w.graph.outputs.size(); ++j) {
    const Tensor& got = bufs[w.graph.inputs.size() + j];
    const ref::Comparison c = ref::compare_tensors(got, want.at(w.graph.outputs[j]), 1e-5, 0.0);
    EXPECT_TRUE(c.pass) << "output " << w.graph.outputs[j] << ": rel L2 " << c.rel_l2_error << " "
                        << c.problem << "\n" << k.source;
    outs.push_back(got);
  }
  return outs;
}

TEST(ValueEmitterNumbers, FloatMath) {
  Graph g;
  add_input(g, "x", {5, 7});
  add_input(g, "p", {5, 7});  // positive
  add_input(g, "lo", {});
  add_input(g, "e", {7}, DType::i64);
  const std::vector<std::pair<std::string, Attributes>> unary = {
      {"Relu", {}}, {"Sigmoid", {}}, {"Tanh", {}}, {"Exp", {}}, {"Neg", {}}, {"Abs", {}},
      {"Erf", {}}, {"Gelu", {}}, {"HardSwish", {}}, {"Identity", {}},
      {"LeakyRelu", attrs({{"alpha", 0.3f}})},
      {"HardSigmoid", attrs({{"alpha", 0.25f}, {"beta", 0.6f}})},
      {"Gelu", attrs({{"approximate", std::string("tanh")}})},
      {"Clip", attrs({{"min", -0.2f}, {"max", 0.3f}})}, {"Clip", attrs({{"max", 0.1f}})}};
  for (size_t i = 0; i < unary.size(); ++i) {
    const std::string o = "u" + std::to_string(i);
    add_node(g, unary[i].first, {"x"}, {o}, unary[i].second);
    g.outputs.push_back(o);
  }
  for (const char* op : {"Sqrt", "Log", "Reciprocal"}) {
    add_node(g, op, {"p"}, {std::string("p_") + op});
    g.outputs.push_back(std::string("p_") + op);
  }
  add_node(g, "Clip", {"x", "lo"}, {"clip_in"});  // bound as a run-time scalar input
  add_node(g, "Pow", {"p", "x"}, {"pow"});
  add_node(g, "Pow", {"x", "e"}, {"pow_int"});    // integer exponents
  add_node(g, "Max", {"x", "p", "lo"}, {"max3"});
  add_node(g, "Min", {"x", "p"}, {"min2"});
  add_node(g, "Div", {"x", "p"}, {"div"});
  g.outputs.insert(g.outputs.end(), {"clip_in", "pow", "pow_int", "max3", "min2", "div"});
  const ref::TensorMap in = {{"x", testing::random_tensor({5, 7}, 11, -2.f, 2.f)},
                             {"p", testing::random_tensor({5, 7}, 12, 0.2f, 3.f)},
                             {"lo", Tensor::scalar<float>(-0.4f)},
                             {"e", i64s({7}, {0, 1, 2, 3, -1, -2, 4})}};
  expect_matches_reference(g, in);
}

TEST(ValueEmitterNumbers, IntegersBoolsAndCasts) {
  Graph g;
  add_input(g, "a", {3, 4}, DType::i64);
  add_input(g, "b", {4}, DType::i64);  // non-zero divisors
  add_input(g, "f", {3, 4});
  add_input(g, "c", {3, 1}, DType::boolean);
  add_input(g, "d", {4}, DType::boolean);
  add_initializer(g, "lo", Tensor::scalar<int64_t>(-3));
  add_initializer(g, "hi", Tensor::scalar<int64_t>(4));
  const std::vector<std::pair<std::string, std::vector<std::string>>> ops = {
      {"Relu", {"a"}}, {"Abs", {"a"}}, {"Neg", {"a"}}, {"Add", {"a", "b"}}, {"Sub", {"a", "b"}},
      {"Mul", {"a", "b"}}, {"Div", {"a", "b"}}, {"Max", {"a", "b"}}, {"Min", {"a", "b"}},
      {"Clip", {"a", "lo", "hi"}}, {"Equal", {"a", "b"}}, {"Greater", {"a", "b"}},
      {"Less", {"a", "b"}}, {"GreaterOrEqual", {"a", "b"}}, {"LessOrEqual", {"a", "b"}},
      {"And", {"c", "d"}}, {"Or", {"c", "d"}}, {"Xor", {"c", "d"}}, {"Not", {"c"}},
      {"Where", {"c", "a", "b"}}, {"Where", {"d", "f", "f"}},
      // f holds a NaN: Relu passes it through, Max propagates it, as the executor does.
      {"Relu", {"f"}}, {"Max", {"f", "f"}}};
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string o = "o" + std::to_string(i);
    add_node(g, ops[i].first, ops[i].second, {o});
    g.outputs.push_back(o);
  }
  for (const auto& [to, name] : std::vector<std::pair<int64_t, std::string>>{{7, "f2i"}, {9, "f2b"}, {1, "i2f"}, {11, "f2d"}}) {
    add_node(g, "Cast", {to == 1 ? "a" : "f"}, {name}, attrs({{"to", to}}));
    g.outputs.push_back(name);
  }
  add_node(g, "Cast", {"c"}, {"b2f"}, attrs({{"to", int64_t{1}}}));
  add_node(g, "Exp", {"f2d"}, {"dexp"});  // double math
  add_node(g, "Sigmoid", {"f2d"}, {"dsig"});
  g.outputs.insert(g.outputs.end(), {"b2f", "dexp", "dsig"});
  const ref::TensorMap in = {
      {"a", i64s({3, 4}, {-7, -2, 0, 1, 5, 9, -4, 3, 2, -8, 6, -1})},
      {"b", i64s({4}, {3, -2, 5, 2})},
      {"f", Tensor::from_vector<float>({3, 4}, {-2.7f, 2.7f, NAN, 0.5f, -0.5f, 0.f, 3.99f, -3.99f, 1.f, -1.f, 7.5f, 100.25f})},
      {"c", Tensor::from_vector<bool>({3, 1}, {true, false, true})},
      {"d", Tensor::from_vector<bool>({4}, {false, true, true, false})}};
  const auto outs = expect_matches_reference(g, in);
  ASSERT_EQ(outs.size(), g.outputs.size());
  // Hand-computed: float to int64 truncates toward zero and maps NaN to 0.
  const size_t f2i = ops.size();
  EXPECT_EQ(outs[f2i].to_int64_vector(), (std::vector<int64_t>{-2, 2, 0, 0, 0, 0, 3, -3, 1, -1, 7, 100}));
  // Integer division truncates toward zero: -7 / 3 = -2, -2 / -2 = 1, 9 / -2 = -4.
  const auto div = outs[6].to_int64_vector();
  EXPECT_EQ(div[0], -2);
  EXPECT_EQ(div[1], 1);
  EXPECT_EQ(div[5], -4);
}

TEST(ValueEmitterNumbers, IndexMaps) {
  Graph g;
  add_input(g, "x", {2, 3, 4});
  add_input(g, "y", {2, 1, 4});
  add_input(g, "z", {2, 2, 4});
  add_input(g, "e", {5, 3});
  add_input(g, "ix", {2, 2}, DType::i64);
  add_initializer(g, "ax0", i64s({1}, {0}));
  add_initializer(g, "ax3", i64s({1}, {3}));
  add_initializer(g, "split", i64s({3}, {1, 2, 3}));
  add_initializer(g, "reps", i64s({3}, {1, 2, 3}));
  add_initializer(g, "eshape", i64s({3}, {2, 3, 4}));
  add_node(g, "Unsqueeze", {"x", "ax3"}, {"un"});                   // [2,3,4,1]
  add_node(g, "Squeeze", {"un", "ax3"}, {"sq"});                     // [2,3,4]
  add_node(g, "Flatten", {"sq"}, {"fl"}, attrs({{"axis", int64_t{2}}}));  // [6,4]
  add_node(g, "Concat", {"x", "y", "z"}, {"cat"}, attrs({{"axis", int64_t{-2}}}));  // [2,6,4]
  add_node(g, "Split", {"cat", "split"}, {"s0", "s1", "s2"}, attrs({{"axis", int64_t{1}}}));
  add_node(g, "Split", {"x"}, {"t0", "t1"}, attrs({{"axis", int64_t{2}}}));  // equal halves
  add_node(g, "Tile", {"y", "reps"}, {"tile"});                     // [2,2,12]
  add_node(g, "Expand", {"y", "eshape"}, {"ex"});                   // [2,3,4]
  add_node(g, "Gather", {"e", "ix"}, {"g1"}, attrs({{"axis", int64_t{1}}}));  // [5,2,2]
  add_node(g, "Transpose", {"x"}, {"tr"});                          // reversed: [4,3,2]
  add_node(g, "Unsqueeze", {"x", "ax0"}, {"u0"});                   // [1,2,3,4]
  g.outputs = {"fl", "s0", "s1", "s2", "t1", "tile", "ex", "g1", "tr", "u0"};
  ref::TensorMap in;
  for (const char* n : {"x", "y", "z", "e"}) in[n] = testing::random_tensor(g.info(n).shape, 20);
  in["ix"] = i64s({2, 2}, {0, -1, 2, 1});
  expect_matches_reference(g, in);
}

TEST(ValueEmitterNumbers, ActivationsAndMath) {
  Graph g;
  add_input(g, "x", {6, 7});
  add_input(g, "slope", {7});
  add_input(g, "a", {6, 7}, DType::i64);
  add_input(g, "b", {7}, DType::i64);  // non-zero divisors of both signs
  add_input(g, "m", {6, 7});           // non-zero float divisors
  add_input(g, "s", {6, 7});           // NaNs, infinities and ties of Round
  const std::vector<std::pair<std::string, Attributes>> unary = {
      {"Elu", {}}, {"Elu", attrs({{"alpha", 0.7f}})}, {"Selu", {}},
      {"Selu", attrs({{"alpha", 1.5f}, {"gamma", 2.f}})}, {"Celu", {}},
      {"Celu", attrs({{"alpha", 0.4f}})}, {"Softplus", {}}, {"Softsign", {}}, {"Mish", {}},
      {"ThresholdedRelu", {}}, {"ThresholdedRelu", attrs({{"alpha", 0.25f}})}, {"Floor", {}},
      {"Ceil", {}}, {"Round", {}}, {"Sign", {}}, {"Sin", {}}, {"Cos", {}}, {"Abs", {}}};
  for (size_t i = 0; i < unary.size(); ++i) {
    const std::string o = "u" + std::to_string(i);
    add_node(g, unary[i].first, {"x"}, {o}, unary[i].second);
    g.outputs.push_back(o);
  }
  add_node(g, "PRelu", {"x", "slope"}, {"prelu"});
  add_node(g, "Mod", {"x", "m"}, {"fmod"}, attrs({{"fmod", int64_t{1}}}));
  add_node(g, "Mod", {"a", "b"}, {"mod_py"});
  add_node(g, "Mod", {"a", "b"}, {"mod_c"}, attrs({{"fmod", int64_t{1}}}));
  add_node(g, "Sign", {"a"}, {"sign_int"});
  add_node(g, "Round", {"s"}, {"round_ties"});
  add_node(g, "IsNaN", {"s"}, {"isnan"});
  add_node(g, "IsInf", {"s"}, {"isinf"});
  add_node(g, "IsInf", {"s"}, {"isposinf"}, attrs({{"detect_negative", int64_t{0}}}));
  add_node(g, "IsInf", {"s"}, {"isneginf"}, attrs({{"detect_positive", int64_t{0}}}));
  g.outputs.insert(g.outputs.end(), {"prelu", "fmod", "mod_py", "mod_c", "sign_int",
                                     "round_ties", "isnan", "isinf", "isposinf", "isneginf"});
  std::vector<float> special = testing::random_tensor({6, 7}, 23, -3.f, 3.f).to_float_vector();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edge = {NAN, inf, -inf, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 0.f, -0.f};
  std::copy(edge.begin(), edge.end(), special.begin());
  std::vector<int64_t> av;
  const Tensor ar = testing::random_tensor({6, 7}, 24, -50.f, 50.f);
  for (float v : ar.to_float_vector()) av.push_back(static_cast<int64_t>(v));
  const ref::TensorMap in = {{"x", testing::random_tensor({6, 7}, 21, -4.f, 4.f)},
                             {"slope", testing::random_tensor({7}, 22, 0.05f, 0.9f)},
                             {"a", i64s({6, 7}, av)},
                             {"b", i64s({7}, {3, -2, 5, 7, -9, 4, -1})},
                             {"m", testing::random_tensor({6, 7}, 25, 0.5f, 2.f)},
                             {"s", Tensor::from_vector<float>({6, 7}, special)}};
  const auto outs = expect_matches_reference(g, in);
  ASSERT_EQ(outs.size(), g.outputs.size());
  const size_t k = unary.size();
  // Hand-computed: Python's % takes the divisor's sign, C's the dividend's.
  const auto a = in.at("a").to_int64_vector(), py = outs[k + 2].to_int64_vector(),
             c = outs[k + 3].to_int64_vector();
  const std::vector<int64_t> bv = {3, -2, 5, 7, -9, 4, -1};
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t d = bv[i % 7];
    EXPECT_EQ(c[i], d == -1 ? 0 : a[i] % d) << i;
    EXPECT_EQ(py[i], ((a[i] % d) + d) % d) << i;
  }
  // Round halves to even; IsNaN / IsInf on the edge values.
  const auto r = outs[k + 5].to_float_vector();
  EXPECT_EQ(r[3], 0.f);
  EXPECT_EQ(r[4], 2.f);
  EXPECT_EQ(r[5], 2.f);
  EXPECT_EQ(r[7], -2.f);
  const auto isnan = outs[k + 6].to_int64_vector(), isinf = outs[k + 7].to_int64_vector(),
             pos = outs[k + 8].to_int64_vector(), neg = outs[k + 9].to_int64_vector();
  EXPECT_EQ(std::vector<int64_t>(isnan.begin(), isnan.begin() + 4), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(std::vector<int64_t>(isinf.begin(), isinf.begin() + 4), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(std::vector<int64_t>(pos.begin(), pos.begin() + 4), (std::vector<int64_t>{0, 1, 0, 0}));
  EXPECT_EQ(std::vector<int64_t>(neg.begin(), neg.begin() + 4), (std::vector<int64_t>{0, 0, 1, 0}));
}

TEST(ValueEmitterNumbers, DepthSpaceTriluGatherElements) {
  Graph g;
  add_input(g, "x", {2, 8, 3, 5});
  add_input(g, "k", {}, DType::i64);
  add_input(g, "b", {4, 6}, DType::boolean);
  add_node(g, "DepthToSpace", {"x"}, {"dcr"}, attrs({{"blocksize", int64_t{2}}}));
  add_node(g, "DepthToSpace", {"x"}, {"crd"}, attrs({{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}}));
  add_node(g, "SpaceToDepth", {"dcr"}, {"back"}, attrs({{"blocksize", int64_t{2}}}));
  add_node(g, "Relu", {"crd"}, {"crd_relu"});  // an index map feeding math
  add_node(g, "Trilu", {"x"}, {"upper"});
  add_node(g, "Trilu", {"x", "k"}, {"lower_k"}, attrs({{"upper", int64_t{0}}}));
  add_node(g, "Trilu", {"b", "k"}, {"upper_bool"});
  add_input(g, "gi", {2, 8, 2, 5}, DType::i64);  // run-time indices along axis 2, some negative
  add_node(g, "GatherElements", {"x", "gi"}, {"gathered"}, attrs({{"axis", int64_t{2}}}));
  add_node(g, "Exp", {"gathered"}, {"gathered_exp"});
  g.outputs = {"dcr", "crd_relu", "back", "upper", "lower_k", "upper_bool", "gathered_exp"};
  std::vector<bool> bv;
  for (int i = 0; i < 24; ++i) bv.push_back(i % 3 != 0);
  std::vector<int64_t> gv;
  for (int i = 0; i < 160; ++i) gv.push_back((i * 7) % 6 - 3);  // -3 .. 2 of extent 3
  const ref::TensorMap in = {{"x", testing::random_tensor({2, 8, 3, 5}, 31, -2.f, 2.f)},
                             {"k", Tensor::scalar<int64_t>(-1)},
                             {"b", Tensor::from_vector<bool>({4, 6}, bv)},
                             {"gi", i64s({2, 8, 2, 5}, gv)}};
  const auto outs = expect_matches_reference(g, in);
  ASSERT_EQ(outs.size(), 7u);
  // SpaceToDepth undoes DepthToSpace (DCR), element for element.
  EXPECT_EQ(outs[2].to_float_vector(), in.at("x").to_float_vector());
  // Trilu lower with k = -1: row 0 of each matrix is all zero.
  const auto lk = outs[4].to_float_vector();
  for (int c = 0; c < 5; ++c) EXPECT_EQ(lk[static_cast<size_t>(c)], 0.f) << c;
}

TEST(ValueEmitterNumbers, ArgMaxArgMinCumSum) {
  Graph g;
  add_input(g, "x", {3, 6, 4});
  add_input(g, "t", {5, 4}, DType::i64);  // integer values with ties
  add_node(g, "Exp", {"x"}, {"ex"});  // the row is computed inside the loop
  add_node(g, "ArgMax", {"ex"}, {"amax1"}, attrs({{"axis", int64_t{1}}}));
  add_node(g, "ArgMin", {"x"}, {"amin_last"}, attrs({{"axis", int64_t{-1}}, {"keepdims", int64_t{0}}}));
  add_node(g, "ArgMax", {"t"}, {"tmax_first"});
  add_node(g, "ArgMax", {"t"}, {"tmax_last"}, attrs({{"select_last_index", int64_t{1}}}));
  add_node(g, "ArgMin", {"t"}, {"tmin_last"}, attrs({{"select_last_index", int64_t{1}}, {"keepdims", int64_t{0}}}));
  add_initializer(g, "axis1", Tensor::scalar<int64_t>(1));
  add_node(g, "CumSum", {"ex", "axis1"}, {"cum"});
  add_node(g, "CumSum", {"x", "axis1"}, {"cum_rev_ex"}, attrs({{"reverse", int64_t{1}}, {"exclusive", int64_t{1}}}));
  add_node(g, "CumSum", {"t", "axis1"}, {"cum_int"}, attrs({{"exclusive", int64_t{1}}}));
  g.outputs = {"amax1", "amin_last", "tmax_first", "tmax_last", "tmin_last", "cum", "cum_rev_ex", "cum_int"};
  const ref::TensorMap in = {{"x", testing::random_tensor({3, 6, 4}, 41, -2.f, 2.f)},
                             {"t", i64s({5, 4}, {3, 1, 2, 2, 3, 1, 0, 2, 1, 1, 2, 0, 0, 0, 1, 2, 3, 1, 2, 2})}};
  const auto outs = expect_matches_reference(g, in);
  ASSERT_EQ(outs.size(), 8u);
  // Column 0 of t is 3, 3, 1, 0, 3: the first maximum is row 0, the last row 4.
  EXPECT_EQ(outs[2].to_int64_vector()[0], 0);
  EXPECT_EQ(outs[3].to_int64_vector()[0], 4);
}

TEST(ValueEmitterNumbers, GatherNDScatterOneHot) {
  Graph g;
  add_input(g, "x", {3, 4, 5});
  add_input(g, "gi", {3, 2, 1}, DType::i64);  // batch_dims 1: one index into dim 1 per row
  add_input(g, "si", {4, 2}, DType::i64);     // ScatterND tuples into [3, 4]: duplicates
  add_input(g, "su", {4, 5});
  add_input(g, "ei", {3, 2, 5}, DType::i64);  // ScatterElements along axis 1: duplicates
  add_input(g, "eu", {3, 2, 5});
  add_input(g, "oi", {2, 3}, DType::i64);
  add_initializer(g, "depth", Tensor::scalar<int64_t>(4));
  add_initializer(g, "onoff", Tensor::from_vector<float>({2}, {-0.5f, 3.f}));
  add_node(g, "Exp", {"x"}, {"ex"});  // data computed inside the kernel
  add_node(g, "GatherND", {"ex", "gi"}, {"gnd"}, attrs({{"batch_dims", int64_t{1}}}));
  add_node(g, "GatherND", {"x", "si"}, {"gnd0"});
  g.outputs = {"gnd", "gnd0"};
  for (const char* r : {"none", "add", "mul", "max", "min"}) {
    add_node(g, "ScatterND", {"ex", "si", "su"}, {std::string("snd_") + r}, attrs({{"reduction", std::string(r)}}));
    add_node(g, "ScatterElements", {"x", "ei", "eu"}, {std::string("sel_") + r},
             attrs({{"reduction", std::string(r)}, {"axis", int64_t{1}}}));
    g.outputs.push_back(std::string("snd_") + r);
    g.outputs.push_back(std::string("sel_") + r);
  }
  add_node(g, "OneHot", {"oi", "depth", "onoff"}, {"oh"}, attrs({{"axis", int64_t{1}}}));
  g.outputs.push_back("oh");
  std::vector<int64_t> ei;
  for (int i = 0; i < 30; ++i) ei.push_back((i * 7 + 3) % 8 - 4);  // in [-4, 4): negatives, repeats
  const ref::TensorMap in = {
      {"x", testing::random_tensor({3, 4, 5}, 51, -2.f, 2.f)},
      {"gi", i64s({3, 2, 1}, {0, -1, 2, 2, 3, -4})},
      {"si", i64s({4, 2}, {1, 2, -2, -2, 0, 3, 1, 2})},
      {"su", testing::random_tensor({4, 5}, 52, -2.f, 2.f)},
      {"ei", i64s({3, 2, 5}, ei)},
      {"eu", testing::random_tensor({3, 2, 5}, 53, -2.f, 2.f)},
      {"oi", i64s({2, 3}, {0, 3, -1, 7, -4, 2})}};
  const auto outs = expect_matches_reference(g, in);
  ASSERT_EQ(outs.size(), 13u);
  // si's tuple (1, 2) comes twice: reduction none keeps the last update (row 3 of su).
  const auto snd = outs[2].to_float_vector(), su = in.at("su").to_float_vector();
  for (int c = 0; c < 5; ++c) EXPECT_EQ(snd[static_cast<size_t>((1 * 4 + 2) * 5 + c)], su[static_cast<size_t>(15 + c)]);
  // OneHot: index 7 is out of range, every element of its column is the off value.
  const auto oh = outs[12].to_float_vector();  // [2, 4, 3]
  for (int j = 0; j < 4; ++j) EXPECT_EQ(oh[static_cast<size_t>(12 + j * 3)], -0.5f);
}

TEST(ValueEmitterNumbers, TopK) {
  Graph g;
  add_input(g, "x", {3, 7, 4});
  add_input(g, "t", {2, 6}, DType::i64);  // integers with ties
  add_initializer(g, "k3", Tensor::from_vector<int64_t>({1}, {3}));
  add_initializer(g, "k6", Tensor::from_vector<int64_t>({1}, {6}));
  add_node(g, "Neg", {"x"}, {"nx"});
  add_node(g, "TopK", {"nx", "k3"}, {"v1", "i1"}, attrs({{"axis", int64_t{1}}}));
  add_node(g, "TopK", {"x", "k3"}, {"v2", "i2"}, attrs({{"largest", int64_t{0}}}));
  add_node(g, "TopK", {"t", "k6"}, {"v3", "i3"});
  add_node(g, "TopK", {"t", "k3"}, {"v4", "i4"}, attrs({{"largest", int64_t{0}}, {"sorted", int64_t{0}}}));
  g.outputs = {"v1", "i1", "v2", "i2", "v3", "i3", "v4", "i4"};
  Tensor x = testing::random_tensor({3, 7, 4}, 61, -2.f, 2.f);
  x.mutable_data<float>()[5] = std::nanf("");  // NaN sorts as the largest value
  const ref::TensorMap in = {{"x", x}, {"t", i64s({2, 6}, {3, 1, 3, 0, 1, 3, 2, 2, 2, 5, -1, 2})}};
  const auto outs = expect_matches_reference(g, in);
  ASSERT_EQ(outs.size(), 8u);
  EXPECT_EQ(outs[5].to_int64_vector(), (std::vector<int64_t>{0, 2, 5, 1, 4, 3, 3, 0, 1, 2, 5, 4}));
  EXPECT_EQ(outs[7].to_int64_vector(), (std::vector<int64_t>{3, 1, 4, 4, 0, 1}));
}

}  // namespace
}  // namespace dc
