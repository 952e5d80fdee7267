// Generated kernels on an OpenCL device (ctest label "opencl"; PoCL's CPU device, pocl-cpu,
// on every development and CI machine): each template family's workloads from the example
// models and from graphs with edge shapes (sizes that are no tile multiple, batch > 1,
// broadcasting epilogues), the reference kernel and fp32 variants of pocl-cpu's parameter
// space made OpenCL by the dialect layer, compiled by clang to SPIR, built and run by PoCL
// on seeded random inputs (outputs poisoned by the runner) and compared with the CPU
// reference executor and the reference kernel. Also: the kernels compile for the OpenCL GPU
// entries of the table. docs/opencl.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "candidates.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "onnx/import.h"
#include "opencl_compile.h"
#include "opencl_dialect.h"
#include "opencl_runner.h"
#include "param_space.h"
#include "prelude.h"
#include "passes/simplify.h"
#include "passes/training/add_gradients.h"
#include "op_case_harness.h"
#include "pocl_testing.h"
#include "random_inputs.h"
#include "variant_tolerance.h"
#include "ref/executor.h"
#include "testing.h"

namespace dc {
namespace {

std::vector<char> compile(const GeneratedKernel& k) {
  const OpenClCompileResult r = compile_opencl(opencl_source(k), cl().clang, pocl_cache());
  EXPECT_TRUE(r.ok) << k.template_name << " " << k.variant_key << ":\n" << r.error.substr(0, 3000);
  return r.binary;
}

struct Case {
  const char* name;
  const char* model;    // examples/<model>/model.onnx, or "" for a graph built here
  ClusterKind kind;
  const char* pattern;  // "" = the first candidate of the kind
};

const Case kCases[] = {
    {"conv_add_relu", "tiny_cnn", ClusterKind::conv, "conv+add+relu"},
    {"depthwise_conv", "tiny_cnn", ClusterKind::depthwise, "conv"},
    {"relu_maxpool", "tiny_cnn", ClusterKind::reduction, "relu+maxpool"},
    {"gemm", "tiny_cnn", ClusterKind::gemm, "gemm"},
    {"matmul_add_gelu", "tiny_transformer", ClusterKind::gemm, "matmul+add+gelu"},
    {"layernorm", "tiny_transformer", ClusterKind::reduction, "layernorm"},
    {"softmax", "tiny_transformer", ClusterKind::reduction, "softmax"},
    {"attention", "tiny_transformer", ClusterKind::attention, ""},
    // The head split of the packed Q/K/V projection (index arithmetic of Slice, Reshape and
    // Transpose) and the FFN's bias + GELU (a broadcast operand and a transcendental); the
    // bias Add before the head split is the attention's operand cone since issue 26.
    {"elementwise", "tiny_transformer", ClusterKind::elementwise, "slice+reshape+transpose"},
    {"elementwise_add_gelu", "tiny_transformer", ClusterKind::elementwise, "add+gelu"},
    {"edge_batched_matmul_bias_relu", "", ClusterKind::gemm, ""},
    {"edge_conv_bias_relu", "", ClusterKind::conv, ""},
    {"edge_residual_layernorm", "", ClusterKind::reduction, ""},
    // int64 indices: OpenCL's `long long` is 128 bits, so an index buffer read through it
    // was read 16 bytes apart (the child crashed on BERT's embedding).
    {"edge_gather_int64_relu", "", ClusterKind::elementwise, ""},
    // Convolution gradients as the training pass lowers them (docs/training.md): the data
    // gradient's ConvTranspose and the weight gradient (conv_implicit_gemm's weight-gradient
    // mode, dc.ConvGradWeight) of a stride-2 3x3 conv whose forward drops an input row; the
    // weight gradient of a dilation-2 conv with uneven pads, no size a tile multiple.
    {"edge_conv_grad_data", "", ClusterKind::conv, ""},
    {"edge_conv_grad_weight", "", ClusterKind::conv, ""},
    {"edge_conv_grad_weight_dilated", "", ClusterKind::conv, ""},
    // The weight and bias gradients of a grouped conv (2 groups of 4 -> 5 channels), the
    // groups as the mode's batch: dY's filters and X's channels of each group read in place,
    // the bias gradient a column of ones past each group's taps, stored after the filters of
    // the groups before.
    {"edge_conv_grad_weight_grouped", "", ClusterKind::conv, ""},
    // A batch-broadcast MatMul of two operands computed by Transposes swapping their last
    // two dims, read in place by gemm_tiled (A stored [.., K, M], B [.., N, K]).
    {"edge_matmul_swapped_operands", "", ClusterKind::gemm, ""},
    // A Gemm (transB = 1, alpha, beta, C) whose A and B 2-D Transposes compute: read in
    // place with transA and transB flipped.
    {"edge_gemm_swapped_operands", "", ClusterKind::gemm, ""},
    // The fused multi-tensor optimizer update (SGD with momentum and weight decay) over a
    // bucket of three tensors whose extents leave float4 tails of 3, 3 and 0.
    {"edge_sgd_momentum_bucket", "", ClusterKind::opaque, ""},
    // fp16's overflow check over four gradients (extents 15, 7, 268, 1999; 700 lanes, the
    // last tensor wrapping around them): every flag written, 0 for the finite random inputs.
    {"edge_nonfinite_check", "", ClusterKind::opaque, ""},
    // The AMP step's weight Casts as one dc.MultiCast over four weights (extents 15, 7, 268,
    // 1999: float4 tails of 3, 3, 0 and 3), to f16 and to bf16: every copy written, exactly.
    {"edge_multi_cast_f16", "", ClusterKind::opaque, ""},
    {"edge_multi_cast_bf16", "", ClusterKind::opaque, ""},
    // A training step's forward BatchNorm-apply + ReLU computed by the next Conv's im2col
    // gather (pads 1): padded taps must read 0, not relu(BN(0)) (>= 1 here: bias in [2, 3)).
    {"edge_bn_relu_conv", "", ClusterKind::conv, ""},
    // A Linear layer's weight gradient dY^T x (dY read through its Transpose) with the bias
    // gradient, ReduceSum(dY) over the rows, as its second output: a column of ones in B.
    {"edge_linear_bias_grad", "", ClusterKind::gemm, ""},
    // BatchNorm's backward sums over axes 0, 2, 3 as one row_reduce kernel with two
    // accumulators, dY computed in it and written (docs/codegen.md "Sibling sums").
    {"edge_batch_norm_backward_sums", "", ClusterKind::reduction, ""},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Tensor filled(const Shape& s, uint32_t seed) { return testing::random_tensor(s, seed); }

// The gradient of x (output 0) or w (output 1) of a 3x3 Conv, stride 2, pads 1, of 2 images,
// 5 -> 7 channels on 8x7 (the 8th row is past the last window), from graph inputs x, w, dy;
// `dilated`: 3 images, 6 -> 5 channels on 9x11, dilation 2, pads (2, 1, 1, 0): out 8x8.
Graph conv_gradient_graph(int output, bool dilated = false) {
  Graph g;
  g.opset = 17;
  g.tensors["x"] = TensorInfo{DType::f32, dilated ? Shape{3, 6, 9, 11} : Shape{2, 5, 8, 7}};
  g.tensors["w"] = TensorInfo{DType::f32, dilated ? Shape{5, 6, 3, 3} : Shape{7, 5, 3, 3}};
  g.tensors["y"] = TensorInfo{DType::f32, dilated ? Shape{3, 5, 8, 8} : Shape{2, 7, 4, 4}};
  g.tensors["dy"] = g.tensors["y"];
  g.inputs = {"x", "w", "dy"};
  Node conv = testing::make_node("Conv", {"x", "w"}, {"y"});
  conv.attrs.set("strides", std::vector<int64_t>{dilated ? 1 : 2, dilated ? 1 : 2});
  conv.attrs.set("pads", dilated ? std::vector<int64_t>{2, 1, 1, 0} : std::vector<int64_t>{1, 1, 1, 1});
  if (dilated) conv.attrs.set("dilations", std::vector<int64_t>{2, 2});
  g.nodes = {conv};
  const std::string wrt = output == 0 ? "x" : "w";
  const auto grads = add_vector_jacobian_product(g, {{"y", "dy"}}, {wrt});
  g.nodes.erase(g.nodes.begin());
  g.tensors.erase("y");
  g.outputs = {grads.at(wrt)};
  return g;
}

// The weight and bias gradients of a 3x3 Conv of 2 groups (4 -> 5 channels each) with a
// bias, stride 2, pads (1, 0, 0, 1), of 3 images on 9x7 (the 9th row is past the last
// window): out 4x3.
Graph grouped_weight_gradient_graph() {
  Graph g;
  g.opset = 17;
  g.tensors["x"] = TensorInfo{DType::f32, Shape{3, 8, 9, 7}};
  g.tensors["w"] = TensorInfo{DType::f32, Shape{10, 4, 3, 3}};
  g.tensors["b"] = TensorInfo{DType::f32, Shape{10}};
  g.tensors["y"] = TensorInfo{DType::f32, Shape{3, 10, 4, 3}};
  g.tensors["dy"] = g.tensors["y"];
  g.inputs = {"x", "w", "b", "dy"};
  Node conv = testing::make_node("Conv", {"x", "w", "b"}, {"y"});
  conv.attrs.set("strides", std::vector<int64_t>{2, 2});
  conv.attrs.set("pads", std::vector<int64_t>{1, 0, 0, 1});
  conv.attrs.set("group", int64_t{2});
  g.nodes = {conv};
  const auto grads = add_vector_jacobian_product(g, {{"y", "dy"}}, {"w", "b"});
  g.nodes.erase(g.nodes.begin());
  g.tensors.erase("y");
  g.outputs = {grads.at("w"), grads.at("b")};
  return g;
}

// dW = dY^T x (dY [37, 29] read through its Transpose, x [37, 45]) and db = ReduceSum(dY)
// over the rows, the two outputs of one cluster.
Graph linear_bias_grad_graph() {
  Graph g;
  g.opset = 17;
  for (const auto& [name, shape] : {std::pair<const char*, Shape>{"dy", {37, 29}}, {"x", {37, 45}},
                                    {"dyt", {29, 37}}, {"y", {29, 45}}, {"db", {29}}})
    g.tensors[name] = TensorInfo{DType::f32, shape};
  g.initializers["axes"] = Tensor::from_vector<int64_t>({1}, {0});
  g.tensors["axes"] = TensorInfo{DType::i64, {1}};
  g.inputs = {"dy", "x"};
  Node sum = testing::make_node("ReduceSum", {"dy", "axes"}, {"db"});
  sum.attrs.set("keepdims", int64_t{0});
  g.nodes = {testing::make_node("Transpose", {"dy"}, {"dyt"}), testing::make_node("MatMul", {"dyt", "x"}, {"y"}), sum};
  g.outputs = {"y", "db"};
  return g;
}

// dY = g s, then BatchNorm's dB = ReduceSum(dY) and dscale = ReduceSum(dY (x - mean) invstd)
// over axes 0, 2, 3 of 3 images of 5 channels on 7x9.
Graph batch_norm_backward_sums_graph() {
  Graph g;
  g.opset = 17;
  const Shape x{3, 5, 7, 9}, channel{1, 5, 1, 1};
  for (const char* t : {"g", "s", "dy", "x", "xc", "xh", "dyxh"}) g.tensors[t] = TensorInfo{DType::f32, x};
  for (const char* t : {"mean", "invstd", "db", "dscale"}) g.tensors[t] = TensorInfo{DType::f32, channel};
  g.initializers["axes"] = Tensor::from_vector<int64_t>({3}, {0, 2, 3});
  g.tensors["axes"] = TensorInfo{DType::i64, {3}};
  g.inputs = {"g", "s", "x", "mean", "invstd"};
  g.nodes = {testing::make_node("Mul", {"g", "s"}, {"dy"}), testing::make_node("ReduceSum", {"dy", "axes"}, {"db"}),
             testing::make_node("Sub", {"x", "mean"}, {"xc"}), testing::make_node("Mul", {"xc", "invstd"}, {"xh"}),
             testing::make_node("Mul", {"dy", "xh"}, {"dyxh"}), testing::make_node("ReduceSum", {"dyxh", "axes"}, {"dscale"})};
  g.outputs = {"db", "dscale", "dy"};
  return g;
}

// Graphs with edge shapes: batch 3 of 37x53 by 53x29 (no tile multiple) with a bias that
// broadcasts over rows and a ReLU; a 3x3 conv of 2 images, 13 -> 19
// channels on 11x9 with a per-channel bias; a residual Add before LayerNorm over 75.
// A dc.SgdUpdate (momentum 0.9, weight decay 0.01) over three tensors, outputs w_next<t>, m_next<t>.
Graph sgd_momentum_bucket_graph() {
  Graph g;
  Node update = testing::make_node("dc.SgdUpdate", {}, {});
  update.attrs.set("lr", 0.05f);
  update.attrs.set("momentum", 0.9f);
  update.attrs.set("weight_decay", 0.01f);
  const std::vector<Shape> shapes = {{3, 5}, {7}, {2, 2, 67}};
  for (size_t t = 0; t < shapes.size(); ++t) {
    for (const char* i : {"w", "g", "m"}) {
      g.inputs.push_back(fmt::format("{}{}", i, t));
      g.tensors[g.inputs.back()] = TensorInfo{DType::f32, shapes[t]};
      update.inputs.push_back(g.inputs.back());
    }
    for (const char* o : {"w_next", "m_next"}) {
      g.outputs.push_back(fmt::format("{}{}", o, t));
      g.tensors[g.outputs.back()] = TensorInfo{DType::f32, shapes[t]};
      update.outputs.push_back(g.outputs.back());
    }
  }
  g.nodes = {update};
  return g;
}

// A dc.NonFiniteCheck of 700 lanes over four gradients, the last wrapping around them.
Graph nonfinite_check_graph() {
  Graph g;
  Node check = testing::make_node("dc.NonFiniteCheck", {}, {"y"});
  check.attrs.set("lanes", int64_t{700});
  const std::vector<Shape> shapes = {{3, 5}, {7}, {2, 2, 67}, {1999}};
  for (size_t t = 0; t < shapes.size(); ++t) {
    g.inputs.push_back(fmt::format("g{}", t));
    g.tensors[g.inputs.back()] = TensorInfo{DType::f32, shapes[t]};
    check.inputs.push_back(g.inputs.back());
  }
  g.tensors["y"] = TensorInfo{DType::f32, {700}};
  g.outputs = {"y"};
  g.nodes = {check};
  return g;
}

// A dc.MultiCast of four f32 weights to `to`, outputs c0..c3.
Graph multi_cast_graph(DType to) {
  Graph g;
  Attributes a;
  a.set("to", static_cast<int64_t>(to));
  Node cast = testing::make_node("dc.MultiCast", {}, {}, a);
  const std::vector<Shape> shapes = {{3, 5}, {7}, {2, 2, 67}, {1999}};
  for (size_t t = 0; t < shapes.size(); ++t) {
    g.inputs.push_back(fmt::format("w{}", t));
    g.tensors[g.inputs.back()] = TensorInfo{DType::f32, shapes[t]};
    cast.inputs.push_back(g.inputs.back());
    g.outputs.push_back(fmt::format("c{}", t));
    g.tensors[g.outputs.back()] = TensorInfo{to, shapes[t]};
    cast.outputs.push_back(g.outputs.back());
  }
  g.nodes = {cast};
  return g;
}

Graph edge_graph(const std::string& name) {
  Graph g;
  auto tensor = [&](const std::string& n, Shape s) { g.tensors[n] = TensorInfo{DType::f32, std::move(s)}; };
  if (name == "edge_gemm_swapped_operands") {
    tensor("at", {32, 36});  // A [36, 32] stored transposed
    tensor("bt", {32, 20});  // B [20, 32] (transB) stored transposed
    tensor("a", {36, 32});
    tensor("b", {20, 32});
    tensor("c", {20});
    tensor("y", {36, 20});
    g.inputs = {"at", "bt", "c"};
    Node gemm = testing::make_node("Gemm", {"a", "b", "c"}, {"y"});
    gemm.attrs.set("transB", int64_t{1});
    gemm.attrs.set("alpha", 0.5f);
    gemm.attrs.set("beta", 2.f);
    g.nodes = {testing::make_node("Transpose", {"at"}, {"a"}), testing::make_node("Transpose", {"bt"}, {"b"}), gemm};
  } else if (name == "edge_matmul_swapped_operands") {
    tensor("at", {2, 1, 32, 36});  // A [2, 1, 36, 32] stored transposed
    tensor("bt", {3, 20, 32});     // B [3, 32, 20] stored transposed
    tensor("a", {2, 1, 36, 32});
    tensor("b", {3, 32, 20});
    tensor("y", {2, 3, 36, 20});
    g.inputs = {"at", "bt"};
    Node ta = testing::make_node("Transpose", {"at"}, {"a"});
    ta.attrs.set("perm", std::vector<int64_t>{0, 1, 3, 2});
    Node tb = testing::make_node("Transpose", {"bt"}, {"b"});
    tb.attrs.set("perm", std::vector<int64_t>{0, 2, 1});
    g.nodes = {ta, tb, testing::make_node("MatMul", {"a", "b"}, {"y"})};
  } else if (name == "edge_batched_matmul_bias_relu") {
    tensor("a", {3, 37, 53});
    tensor("w", {53, 29});
    tensor("b", {29});
    tensor("mm", {3, 37, 29});
    tensor("add", {3, 37, 29});
    tensor("y", {3, 37, 29});
    g.initializers["w"] = filled({53, 29}, 11);
    g.initializers["b"] = filled({29}, 12);
    g.inputs = {"a"};
    g.nodes = {testing::make_node("MatMul", {"a", "w"}, {"mm"}), testing::make_node("Add", {"mm", "b"}, {"add"}),
               testing::make_node("Relu", {"add"}, {"y"})};
  } else if (name == "edge_conv_bias_relu") {
    tensor("x", {2, 13, 11, 9});
    tensor("w", {19, 13, 3, 3});
    tensor("b", {19});
    tensor("c", {2, 19, 11, 9});
    tensor("y", {2, 19, 11, 9});
    g.initializers["w"] = filled({19, 13, 3, 3}, 21);
    g.initializers["b"] = filled({19}, 22);
    g.inputs = {"x"};
    Node conv = testing::make_node("Conv", {"x", "w", "b"}, {"c"});
    conv.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    conv.attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
    g.nodes = {conv, testing::make_node("Relu", {"c"}, {"y"})};
  } else if (name == "edge_bn_relu_conv") {
    for (const char* t : {"x", "xc", "xh", "xs", "bn", "r"}) tensor(t, {2, 5, 9, 7});
    for (const char* t : {"mean", "invstd", "scale", "bias"}) tensor(t, {1, 5, 1, 1});
    tensor("w", {6, 5, 3, 3});
    tensor("y", {2, 6, 9, 7});
    g.initializers["w"] = filled({6, 5, 3, 3}, 51);
    Tensor bias = filled({1, 5, 1, 1}, 52);
    for (int64_t i = 0; i < bias.numel(); ++i) bias.mutable_data<float>()[i] = 2.5f + 0.5f * bias.data<float>()[i];
    g.initializers["bias"] = bias;
    g.inputs = {"x", "mean", "invstd", "scale"};
    Node conv = testing::make_node("Conv", {"r", "w"}, {"y"});
    conv.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    conv.attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
    g.nodes = {testing::make_node("Sub", {"x", "mean"}, {"xc"}), testing::make_node("Mul", {"xc", "invstd"}, {"xh"}),
               testing::make_node("Mul", {"xh", "scale"}, {"xs"}), testing::make_node("Add", {"xs", "bias"}, {"bn"}),
               testing::make_node("Relu", {"bn"}, {"r"}), conv};
  } else if (name == "edge_gather_int64_relu") {
    tensor("table", {97, 33});
    g.tensors["ids"] = TensorInfo{DType::i64, {3, 5}};
    tensor("rows", {3, 5, 33});
    tensor("y", {3, 5, 33});
    g.initializers["table"] = filled({97, 33}, 41);
    g.inputs = {"ids"};
    g.nodes = {testing::make_node("Gather", {"table", "ids"}, {"rows"}), testing::make_node("Relu", {"rows"}, {"y"})};
  } else {
    tensor("x", {4, 6, 75});
    tensor("r", {4, 6, 75});
    tensor("s", {4, 6, 75});
    tensor("gamma", {75});
    tensor("beta", {75});
    tensor("y", {4, 6, 75});
    g.initializers["gamma"] = filled({75}, 31);
    g.initializers["beta"] = filled({75}, 32);
    g.inputs = {"x", "r"};
    Node ln = testing::make_node("LayerNormalization", {"s", "gamma", "beta"}, {"y"});
    ln.attrs.set("axis", int64_t{-1});
    ln.attrs.set("epsilon", 1e-5f);
    g.nodes = {testing::make_node("Add", {"x", "r"}, {"s"}), ln};
  }
  g.outputs = {"y"};
  return g;
}

// An edge graph by name: those with a builder of their own, else edge_graph's.
Graph named_edge_graph(const std::string& name) {
  const std::map<std::string, std::function<Graph()>> built = {
      {"edge_conv_grad_data", [] { return conv_gradient_graph(0); }},
      {"edge_conv_grad_weight", [] { return conv_gradient_graph(1); }},
      {"edge_conv_grad_weight_dilated", [] { return conv_gradient_graph(1, true); }},
      {"edge_conv_grad_weight_grouped", grouped_weight_gradient_graph},
      {"edge_linear_bias_grad", linear_bias_grad_graph},
      {"edge_batch_norm_backward_sums", batch_norm_backward_sums_graph},
      {"edge_sgd_momentum_bucket", sgd_momentum_bucket_graph},
      {"edge_nonfinite_check", nonfinite_check_graph},
      {"edge_multi_cast_f16", [] { return multi_cast_graph(DType::f16); }},
      {"edge_multi_cast_bf16", [] { return multi_cast_graph(DType::bf16); }}};
  if (auto b = built.find(name); b != built.end()) return b->second();
  return edge_graph(name);
}

Workload find_workload(const Case& c) {
  const Graph g = *c.model ? simplify(import_onnx_file(testing::source_dir() + "/examples/" + c.model + "/model.onnx"))
                           : named_edge_graph(c.name);
  const auto candidates = generate_candidates(g);
  const WorkloadSet set = dedupe_workloads(g, candidates);
  // A model case: the first candidate of the kind and pattern; an edge graph: the largest
  // candidate of the kind (its whole fused cluster).
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].kind != c.kind || (*c.pattern != 0 && candidates[i].pattern != c.pattern)) continue;
    if (best < 0) best = static_cast<int>(i);
    else if (*c.model == 0 && candidates[i].nodes.size() > candidates[static_cast<size_t>(best)].nodes.size())
      best = static_cast<int>(i);
  }
  if (best < 0) {
    ADD_FAILURE() << "no " << cluster_kind_name(c.kind) << " candidate '" << c.pattern << "'";
    return {};
  }
  return set.workloads[set.candidate_workload[static_cast<size_t>(best)]];
}

std::vector<Variant> some_variants(const Workload& w, const GpuSpec& spec, size_t max) {
  const auto all = enumerate_variants(w, spec, SpaceOptions{{"fp32"}});
  std::vector<Variant> out;
  for (size_t i = 0; i < max && i < all.size(); ++i) out.push_back(all[i * all.size() / std::min(max, all.size())]);
  return out;
}

// The reference kernel or a variant on PoCL against the CPU reference executor (the op-case
// harness's run and compare).
void expect_matches_cpu(const Workload& w, const GeneratedKernel& k, const std::vector<char>& spir,
                        const std::vector<Tensor>& in, const ref::TensorMap& want, const Tolerance& tol) {
  EXPECT_EQ(testing::run_and_compare_outputs(pocl_case_device().run, w, k, spir, in, want, false, tol), "");
}

class OnPocl : public ::testing::TestWithParam<Case> {};

TEST_P(OnPocl, ReferenceAndVariantsMatchTheCpu) {
  DC_REQUIRE_POCL();
  const Case& c = GetParam();
  const Workload w = find_workload(c);
  ASSERT_FALSE(w.graph.nodes.empty());
  SCOPED_TRACE(w.canonical);
  // edge_conv_grad_weight*: one dc.ConvGradWeight reading X and dY as stored;
  // edge_matmul_swapped_operands, edge_gemm_swapped_operands: A's and B's Transposes, read in place.
  if (std::string(c.name).starts_with("edge_conv_grad_weight")) {
    const bool bias = std::string(c.name) == "edge_conv_grad_weight_grouped";  // db beside dW
    ASSERT_EQ(w.graph.nodes.size(), bias ? 2u : 1u);
    EXPECT_EQ(std::count_if(w.graph.nodes.begin(), w.graph.nodes.end(),
                            [](const Node& n) { return n.op == "dc.ConvGradWeight"; }), 1);
    EXPECT_EQ(w.graph.outputs.size(), bias ? 2u : 1u);
  }
  if (std::string(c.name) == "edge_linear_bias_grad") {
    EXPECT_EQ(w.graph.outputs.size(), 2u) << "dW and db";
  }
  if (std::string(c.name) == "edge_batch_norm_backward_sums") {
    EXPECT_EQ(w.graph.nodes.size(), 6u) << "both sums, dY's Mul and x_hat's chain";
    EXPECT_EQ(w.graph.outputs.size(), 3u) << "db, dscale and dY";
  }
  if (std::string(c.name) == "edge_bn_relu_conv") {
    EXPECT_EQ(w.graph.nodes.size(), 6u) << "the Conv with its X cone";
  }
  if (std::string(c.name) == "edge_matmul_swapped_operands" || std::string(c.name) == "edge_gemm_swapped_operands") {
    EXPECT_EQ(std::count_if(w.graph.nodes.begin(), w.graph.nodes.end(), [](const Node& n) { return n.op == "Transpose"; }), 2);
  }
  const std::vector<Tensor> in = random_workload_inputs(w, 2024);
  ref::TensorMap in_map;
  for (size_t i = 0; i < in.size(); ++i) in_map[w.graph.inputs[i]] = in[i];
  const ref::TensorMap want = ref::run_graph(w.graph, in_map);
  const Tolerance tol = variant_tolerance("fp32", w);

  const GeneratedKernel reference = generate_reference(w);
  const std::vector<char> reference_spir = compile(reference);
  ASSERT_FALSE(reference_spir.empty());
  {
    SCOPED_TRACE("reference kernel");
    expect_matches_cpu(w, reference, reference_spir, in, want, tol);
  }
  const auto variants = some_variants(w, cl().spec, 4);
  ASSERT_FALSE(variants.empty()) << "no fp32 variant fits pocl-cpu";
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.key());
    const GeneratedKernel k = generate_kernel(w, v);
    const std::vector<char> spir = compile(k);
    if (spir.empty()) continue;
    expect_matches_cpu(w, k, spir, in, want, tol);
    const ReferenceCheck check = check_on_opencl(*cl().device, w, k, spir, reference, reference_spir, tol,
                                                 random_workload_inputs(w, 7));
    EXPECT_TRUE(check.ok()) << job_status_name(check.status) << ": " << check.error;
    std::cout << c.name << "  " << v.key() << "  rel. L2 vs reference " << check.max_rel_error << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, OnPocl, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Timing: at least min_samples samples, every one positive.
TEST(OpenClTiming, SamplesArePositive) {
  DC_REQUIRE_POCL();
  const Workload w = find_workload(kCases[0]);
  const GeneratedKernel reference = generate_reference(w);
  const std::vector<char> spir = compile(reference);
  ASSERT_FALSE(spir.empty());
  TimingOptions o;
  o.min_samples = 5;
  o.min_total_ms = 5;
  std::vector<Tensor> bufs;
  ASSERT_EQ(bind_inputs(w, reference, random_workload_inputs(w, 1), &bufs), "");
  const TimingResult t = time_on_opencl(*cl().device, reference, spir, bufs, o);
  ASSERT_TRUE(t.ok()) << t.error;
  ASSERT_GE(t.samples_us.size(), 5u);
  for (double s : t.samples_us) EXPECT_GT(s, 0.0);
}

// Each work-group has its own local memory. C++ for OpenCL names a kernel's __local variable
// as a C++ static (_ZZ12dc_wg_localsE4tile); PoCL takes only OpenCL C's `<kernel>.<name>` for a
// work-group's own locals and shared other names between all work-groups, so that work-groups
// on different threads overwrote each other's tiles (issue 30). compile_opencl renames them:
// the bitcode holds the OpenCL C name, and 4096 work-groups that each fill a tile with their
// own values and read it back 512 times find nothing of another group's in it.
TEST(OpenClLocalMemory, EachWorkGroupHasItsOwn) {
  DC_REQUIRE_POCL();
  GeneratedKernel k;
  k.template_name = "wg_locals";
  k.source = cuda_prelude() + R"(
extern "C" __global__ void dc_wg_locals(float* out) {
  __shared__ float tile[64];
  const unsigned t = threadIdx.x;
  tile[t] = (float)(blockIdx.x * 64u + t);
  __syncthreads();
  int foreign = 0;
  for (unsigned i = 0; i < 512u; ++i) {
    const unsigned j = (t + i) & 63u;
    foreign += tile[j] != (float)(blockIdx.x * 64u + j) ? 1 : 0;
  }
  out[blockIdx.x * 64u + t] = (float)foreign;
}
)";
  constexpr int64_t kGroups = 4096;
  k.buffers = {KernelBuffer{"out", BufferRole::output, DType::f32, Shape{kGroups * 64}, false}};
  Launch l;
  l.kernel = "dc_wg_locals";
  l.grid = {kGroups, 1, 1};
  l.block = {64, 1, 1};
  l.args = {0};
  k.launches = {l};
  const std::vector<char> spir = compile(k);
  ASSERT_FALSE(spir.empty());
  const std::string bitcode(spir.begin(), spir.end());
  EXPECT_NE(bitcode.find("dc_wg_locals._ZZ12dc_wg_localsE4tile"), std::string::npos)
      << "the kernel's __local tile does not carry OpenCL C's <kernel>.<name>";
  std::vector<Tensor> bufs(1);
  const GpuRunResult r = run_on_opencl(*cl().device, k, spir, bufs);
  ASSERT_TRUE(r.ok()) << job_status_name(r.status) << ": " << r.error;
  const float* out = bufs[0].data<float>();
  int64_t groups_with_foreign = 0;
  for (int64_t g = 0; g < kGroups; ++g)
    groups_with_foreign += std::any_of(out + g * 64, out + g * 64 + 64, [](float v) { return v != 0.f; });
  EXPECT_EQ(groups_with_foreign, 0) << "work-groups read another group's local memory";
}

// The kernels of every family compile for the OpenCL GPU entries (clang's OpenCL front end,
// target spir64): the first fp32 variants each entry's parameter space offers.
TEST(OpenClGpuEntries, KernelsCompileForEveryOpenClGpu) {
  const std::string clang = opencl_clang_for("");
  const GpuCatalog catalog = GpuCatalog::builtin();
  for (const GpuSpec& spec : catalog.all()) {
    if (!spec.is_opencl() || spec.name == "pocl-cpu") continue;
    for (const Case& c : kCases) {
      const Workload w = find_workload(c);
      for (const Variant& v : some_variants(w, spec, 2)) {
        const OpenClCompileResult r = compile_opencl(opencl_source(generate_kernel(w, v)), clang, pocl_cache());
        EXPECT_TRUE(r.ok) << spec.name << " " << c.name << " " << v.key() << ":\n" << r.error.substr(0, 2000);
      }
    }
  }
}

}  // namespace
}  // namespace dc
