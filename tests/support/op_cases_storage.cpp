// The op cases of f16/bf16 storage in the non-GEMM templates (elementwise, opaque_generic,
// row_reduce, pool_window, depthwise_direct) and the reference kernel: tensors stored in
// f16/bf16, mixed with f32 where the precision policy keeps it (f32 in / f16 out, f16 in /
// f32 out). Pure elementwise chains of IEEE operations equal the reference bitwise (same
// roundings at the same places); everything else meets variant_tolerance (fp32 math path,
// the coarsest stored dtype, the workload's reduction length: docs/precision.md), and each
// case states that reduction length.
#include <gtest/gtest.h>

#include <cmath>

#include "generate.h"
#include "op_cases.h"
#include "pass_testing.h"
#include "ref/storage_dtypes.h"
#include "testing.h"

namespace dc::testing {

namespace {

using Ints = std::vector<int64_t>;

const std::vector<DType> kReduced = {DType::f16, DType::bf16};

// The reference kernel and up to `max` variants of each template of the workload's space.
CasePart space(std::string label, Workload w, ref::TensorMap in, int64_t reduction_length, bool exact,
               std::set<std::string> templates = {}, size_t max = 3) {
  CasePart p;
  p.label = std::move(label);
  p.w = std::move(w);
  p.inputs = std::move(in);
  VariantPick every;
  every.max = max;
  every.per_template = true;
  p.picks = {every};
  p.exact = exact;
  p.reduction_length = reduction_length;
  p.templates = std::move(templates);
  return p;
}

OpCase reduced(std::string name, std::function<std::vector<CasePart>(DType)> build) {
  return {std::move(name), kReduced, std::move(build), {}};
}

std::vector<CasePart> one(CasePart p) {
  std::vector<CasePart> v;
  v.push_back(std::move(p));
  return v;
}

// ---- elementwise chains: bitwise equal to the reference ---------------------------------

void add_exact_cases(std::vector<OpCase>* t) {
  t->push_back(reduced("elementwise_chain_transpose_2x8x6x10", [](DType s) {
    // x (s) * scale (s, per channel) + bias (f32) -> Relu -> Max with y (s) -> / 3 -> Sub, a
    // Transpose: every intermediate rounded to s, as the reference stores it.
    Graph g;
    add_input(g, "x", {2, 8, 6, 10});
    add_input(g, "y", {2, 8, 6, 10});
    add_initializer(g, "scale", random_tensor({8, 1, 1}, 5, 0.5f, 3.f));
    add_initializer(g, "bias", random_tensor({8, 1, 1}, 6));
    add_initializer(g, "three", Tensor::scalar<float>(3.f));
    add_node(g, "Mul", {"x", "scale"}, {"a"});
    add_node(g, "Add", {"a", "bias"}, {"b"});
    add_node(g, "Relu", {"b"}, {"c"});
    add_node(g, "Max", {"c", "y"}, {"d"});
    add_node(g, "Div", {"d", "three"}, {"e"});
    add_node(g, "Sub", {"e", "x"}, {"f"});
    add_node(g, "Neg", {"f"}, {"o1"});
    add_node(g, "Transpose", {"e"}, {"tr"}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
    add_node(g, "Abs", {"tr"}, {"o2"});
    g.outputs = {"o1", "o2"};
    const Graph typed = retyped(g, {{"x", s}, {"y", s}, {"scale", s}, {"a", s}, {"b", s}, {"c", s},
                                    {"d", s}, {"e", s}, {"f", s}, {"tr", s}, {"o1", s}, {"o2", s}});
    ref::TensorMap in;
    Workload w = whole(typed, ClusterKind::elementwise, 10, &in, -4.f, 4.f);
    EXPECT_NE(w.canonical.find(std::string(dtype_name(s))), std::string::npos);
    return one(space("", std::move(w), std::move(in), 1, true, {"elementwise"}));
  }));
  t->push_back(reduced("mixed_storage_edges_sigmoid_where_3x5x16", [](DType s) {
    // f32 model input -> s intermediate (the first kernel reads f32, rounds once) and an s
    // tensor -> f32 model output (the last kernel widens exactly); Sigmoid and Where between.
    Graph g;
    add_input(g, "x", {3, 5, 16});
    add_input(g, "h", {3, 5, 16});
    add_input(g, "m", {1, 5, 16});
    add_node(g, "Add", {"x", "h"}, {"s"});          // f32 + s -> s
    add_node(g, "Sigmoid", {"s"}, {"g"});           // s -> s
    add_node(g, "Mul", {"g", "x"}, {"p"});          // s * f32 -> f32 (model output)
    add_initializer(g, "zero", Tensor::scalar<float>(0.f));
    add_node(g, "Greater", {"m", "zero"}, {"mask"});
    add_node(g, "Where", {"mask", "s", "h"}, {"q"});  // s, s -> s
    add_node(g, "Cast", {"q"}, {"qf"}, attrs({{"to", int64_t{1}}}));  // s -> f32
    g.outputs = {"p", "qf", "g"};
    const Graph typed = retyped(g, {{"h", s}, {"m", s}, {"s", s}, {"g", s}, {"p", DType::f32},
                                    {"q", s}, {"qf", DType::f32}});
    EXPECT_EQ(typed.info("x").dtype, DType::f32);
    EXPECT_EQ(typed.info("p").dtype, DType::f32);
    ref::TensorMap in;
    Workload w = whole(typed, ClusterKind::elementwise, 20, &in, -3.f, 3.f);
    return one(space("", std::move(w), std::move(in), 1, true));
  }));
  t->push_back(reduced("overflow_nan_inf_mul_sub_4x33", [](DType s) {
    // x * 1e6 overflows f16 (to inf, then inf - inf = NaN) but not bf16; NaN and inf inputs
    // propagate (inf * 1e6 - inf * 1e3 is NaN too).
    Graph g;
    add_input(g, "x", {4, 33});
    add_initializer(g, "k", Tensor::scalar<float>(1000.f));
    add_node(g, "Mul", {"x", "k"}, {"a"});
    add_node(g, "Mul", {"a", "k"}, {"b"});
    add_node(g, "Sub", {"b", "a"}, {"o"});
    g.outputs = {"o"};
    const Graph typed = retyped(g, {{"x", s}, {"k", DType::f32}, {"a", s}, {"b", s}, {"o", s}});
    ref::TensorMap in;
    Workload w = whole(typed, ClusterKind::elementwise, 30, &in, -100.f, 100.f);
    std::vector<float> xs = random_tensor({4, 33}, 31, -100.f, 100.f).to_float_vector();
    xs[0] = std::nanf("");
    xs[1] = INFINITY;
    xs[2] = -INFINITY;
    in[w.graph.inputs[0]] = ref::convert_float(Tensor::from_vector<float>({4, 33}, xs), s);
    size_t bad = 0;
    for (float v : ref::run_graph(w.graph, in).at(w.graph.outputs[0]).to_float_vector()) bad += !std::isfinite(v);
    if (s == DType::f16) {
      EXPECT_GT(bad, 120u);  // |x| * 1e6 > 65504 almost everywhere
    } else {
      EXPECT_EQ(bad, 3u);  // only the NaN and inf inputs
    }
    return one(space("", std::move(w), std::move(in), 1, true));
  }));
  t->push_back(reduced("packed_pair_loads_and_stores_6x64", [](DType s) {
    // vec 2 and 4: s inputs loaded as 32-bit pairs, the f32 input as float2/float4, the s
    // output stored as packed pairs; the f32 output as float2/float4. Hand-built variants.
    Graph g;
    add_input(g, "x", {6, 64});
    add_input(g, "y", {6, 64});
    add_input(g, "z", {64});
    add_node(g, "Mul", {"x", "y"}, {"m"});
    add_node(g, "Add", {"m", "z"}, {"o"});
    add_node(g, "Sub", {"m", "x"}, {"d"});
    g.outputs = {"o", "d"};
    CasePart p;
    p.w = whole(retyped(g, {{"x", s}, {"y", s}, {"m", s}, {"o", s}, {"d", DType::f32}}), ClusterKind::elementwise,
                95, &p.inputs, -3.f, 3.f);
    p.reference_kernel = false;
    p.exact = true;
    const std::string unpack = s == DType::f16 ? "dc_unpack_f16x2(" : "dc_unpack_bf16x2(";
    const std::string pack = s == DType::f16 ? "dc_pack_f16x2(" : "dc_pack_bf16x2(";
    for (int64_t vec : {1, 2, 4}) {
      Variant v;
      v.template_name = "elementwise";
      v.params = {{"threads", 64}, {"vec", vec}, {"elems_per_thread", 2}};
      GeneratedKernel k = generate_kernel(p.w, v);
      EXPECT_EQ(k.source.find(unpack + "vin") != std::string::npos, vec > 1) << k.source;
      EXPECT_EQ(k.source.find("= " + pack) != std::string::npos, vec > 1) << k.source;
      if (vec == 4) {
        EXPECT_NE(k.source.find("float4"), std::string::npos) << k.source;
      }
      p.kernels.push_back(std::move(k));
    }
    return one(std::move(p));
  }));
}

// An AMP step's BatchNorm normalisation: f32 between reduced X and Y, bitwise equal too.
void add_batch_norm_apply_case(std::vector<OpCase>* t) {
  t->push_back(reduced("batch_norm_apply_f32_chain_add_relu_2x6x5x7", [](DType s) {
    // BatchNorm's normalisation in an AMP step (lower_batch_norm.h, training_fp32_tensors):
    // X (s) widened, the per-channel mean, inverse std, scale and B f32, the chain's
    // intermediates f32 (never rounded), Y rounded once to s; then the residual Add and ReLU.
    Graph g;
    add_input(g, "x", {2, 6, 5, 7});
    add_input(g, "r", {2, 6, 5, 7});
    add_initializer(g, "mean", random_tensor({6, 1, 1}, 51));
    add_initializer(g, "invstd", random_tensor({6, 1, 1}, 52, 0.5f, 3.f));
    add_initializer(g, "scale", random_tensor({6, 1, 1}, 53, 0.5f, 2.f));
    add_initializer(g, "bias", random_tensor({6, 1, 1}, 54));
    add_node(g, "Sub", {"x", "mean"}, {"centred"});
    add_node(g, "Mul", {"centred", "invstd"}, {"normed"});
    add_node(g, "Mul", {"normed", "scale"}, {"scaled"});
    add_node(g, "Add", {"scaled", "bias"}, {"y"});
    add_node(g, "Add", {"y", "r"}, {"sum"});
    add_node(g, "Relu", {"sum"}, {"o"});
    g.outputs = {"o"};
    const DType f32 = DType::f32;
    const Graph typed = retyped(g, {{"x", s}, {"r", s}, {"centred", f32}, {"normed", f32}, {"scaled", f32},
                                    {"y", s}, {"sum", s}, {"o", s}});
    ref::TensorMap in;
    Workload w = whole(typed, ClusterKind::elementwise, 55, &in, -3.f, 3.f);
    return one(space("", std::move(w), std::move(in), 1, true, {"elementwise"}));
  }));
}

// ---- reductions, pools, depthwise, resize: at the error model's tolerance ------------------

void add_reduction_cases(std::vector<OpCase>* t) {
  t->push_back(reduced("scale_softmax_2x4x7x96", [](DType s) {
    Graph g;
    add_input(g, "s", {2, 4, 7, 96});
    add_initializer(g, "scale", Tensor::scalar<float>(0.125f));
    add_node(g, "Mul", {"s", "scale"}, {"x"});
    add_node(g, "Softmax", {"x"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
    g.outputs = {"p"};
    ref::TensorMap in;
    Workload w = whole(retyped(g, {{"s", s}, {"x", s}, {"p", s}}), ClusterKind::reduction, 40, &in, -8.f, 8.f);
    return one(space("", std::move(w), std::move(in), 96, false, {"row_reduce"}));
  }));
  t->push_back(reduced("add_layernorm_relu_f32_sum_6x128", [](DType s) {
    // An f32 residual sum entering LayerNorm (the policy keeps it f32), s output.
    Graph g;
    add_input(g, "x", {6, 128});
    add_input(g, "r", {6, 128});
    add_initializer(g, "gamma", random_tensor({128}, 41, 0.5f, 1.5f));
    add_initializer(g, "beta", random_tensor({128}, 42));
    add_node(g, "Add", {"x", "r"}, {"sum"});
    add_node(g, "LayerNormalization", {"sum", "gamma", "beta"}, {"y"}, attrs({{"axis", int64_t{-1}}}));
    add_node(g, "Relu", {"y"}, {"o"});
    g.outputs = {"o"};
    ref::TensorMap in;
    const Graph typed = retyped(g, {{"x", s}, {"r", s}, {"gamma", s}, {"beta", s}, {"sum", DType::f32}, {"y", s}, {"o", s}});
    Workload w = whole(typed, ClusterKind::reduction, 43, &in, -2.f, 2.f);
    return one(space("", std::move(w), std::move(in), 128, false, {"row_reduce"}));
  }));
  t->push_back(reduced("reducemean_last_axis_f32_out_3x50x20", [](DType s) {
    Graph g;
    add_input(g, "x", {3, 50, 20});
    add_node(g, "ReduceMean", {"x"}, {"m"}, attrs({{"axes", Ints{-1}}, {"keepdims", int64_t{1}}}));
    g.outputs = {"m"};
    ref::TensorMap in;
    Workload w = whole(retyped(g, {{"x", s}, {"m", DType::f32}}), ClusterKind::reduction, 44, &in);
    return one(space("", std::move(w), std::move(in), 20, false));
  }));
  t->push_back(reduced("reducemax_middle_axis_3x50x20", [](DType s) {
    Graph h;
    add_input(h, "x", {3, 50, 20});
    add_node(h, "ReduceMax", {"x"}, {"m"}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}));
    h.outputs = {"m"};
    ref::TensorMap in;
    Workload w = whole(retyped(h, {{"x", s}, {"m", s}}), ClusterKind::reduction, 45, &in);
    return one(space("", std::move(w), std::move(in), 50, false));
  }));
  t->push_back(reduced("globalaveragepool_sigmoid_f32_out_2x16x7x7", [](DType s) {
    Graph g;
    add_input(g, "x", {2, 16, 7, 7});
    add_node(g, "GlobalAveragePool", {"x"}, {"gap"});
    add_node(g, "Sigmoid", {"gap"}, {"o"});
    g.outputs = {"o"};
    ref::TensorMap in;
    Workload w = whole(retyped(g, {{"x", s}, {"gap", s}, {"o", DType::f32}}), ClusterKind::reduction, 46, &in);
    return one(space("", std::move(w), std::move(in), 49, false));
  }));
  t->push_back(reduced("relu_maxpool_3x3_s2_2x5x13x12", [](DType s) {
    Graph g;
    add_input(g, "x", {2, 5, 13, 12});
    add_node(g, "Relu", {"x"}, {"r"});
    add_node(g, "MaxPool", {"r"}, {"mp"}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
    g.outputs = {"mp"};
    ref::TensorMap in;
    Workload w = whole(retyped(g, {{"x", s}, {"r", s}, {"mp", s}}), ClusterKind::reduction, 50, &in);
    return one(space("", std::move(w), std::move(in), 9, false, {"pool_window"}));
  }));
  t->push_back(reduced("averagepool_include_pad_add_f32_out_2x5x13x12", [](DType s) {
    Graph h;
    add_input(h, "x", {2, 5, 13, 12});
    add_node(h, "AveragePool", {"x"}, {"ap"}, attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}},
                                                     {"count_include_pad", int64_t{1}}}));
    add_node(h, "Add", {"ap", "x"}, {"o"});
    h.outputs = {"o"};
    ref::TensorMap in;
    Workload w = whole(retyped(h, {{"x", s}, {"ap", s}, {"o", DType::f32}}), ClusterKind::reduction, 51, &in);
    return one(space("", std::move(w), std::move(in), 9, false));
  }));
}

Graph depthwise_clip() {
  Graph g;
  add_input(g, "x", {2, 6, 11, 13});
  add_initializer(g, "w", random_tensor({6, 1, 3, 3}, 60));
  add_initializer(g, "b", random_tensor({6}, 61));
  add_node(g, "Conv", {"x", "w", "b"}, {"y"}, attrs({{"group", int64_t{6}}, {"pads", Ints{1, 1, 1, 1}}, {"kernel_shape", Ints{3, 3}}}));
  add_node(g, "Clip", {"y"}, {"o"}, attrs({{"min", 0.f}, {"max", 6.f}}));
  g.outputs = {"o"};
  return g;
}

void add_window_cases(std::vector<OpCase>* t) {
  t->push_back(reduced("depthwise_conv3x3_clip_2x6x11x13", [](DType s) {
    ref::TensorMap in;
    Workload w = whole(retyped(depthwise_clip(), {{"x", s}, {"w", s}, {"b", s}, {"y", s}, {"o", s}}), ClusterKind::depthwise, 62, &in);
    return one(space("", std::move(w), std::move(in), 9, false, {"depthwise_direct"}));
  }));
  t->push_back(reduced("depthwise_conv3x3_clip_f32_io_2x6x11x13", [](DType s) {
    // An f32 input read by an f16/bf16 kernel, f32 output.
    ref::TensorMap in;
    Workload w = whole(retyped(depthwise_clip(), {{"w", s}, {"b", s}, {"y", s}, {"o", DType::f32}}), ClusterKind::depthwise, 63, &in);
    return one(space("", std::move(w), std::move(in), 9, false, {}, 2));
  }));
  // Resize of f16/bf16 data fused with a residual Add, as FPN's top-down path: taps summed in
  // fp32 from the stored values, rounded once to the output.
  for (const char* mode : {"nearest", "linear", "cubic"})
    t->push_back(reduced(std::string("resize_") + mode + "_x2_add_1x5x6x7", [mode](DType s) {
      Graph g;
      add_input(g, "x", {1, 5, 6, 7});
      add_input(g, "skip", {1, 5, 12, 14});
      add_initializer(g, "scales", Tensor::from_vector<float>({4}, {1.f, 1.f, 2.f, 2.f}));
      add_node(g, "Resize", {"x", "", "scales"}, {"r"}, attrs({{"mode", std::string(mode)}}));
      add_node(g, "Add", {"r", "skip"}, {"o"});
      g.outputs = {"o"};
      ref::TensorMap in;
      Workload w = whole(retyped(g, {{"x", s}, {"skip", s}, {"r", s}, {"o", s}}), ClusterKind::elementwise, 70, &in);
      return one(space("", std::move(w), std::move(in), 1, false, {"elementwise"}));
    }));
  t->push_back(reduced("reference_conv_matmul_gemm_softmax", [](DType s) {
    // Conv, MatMul and Gemm from s operands (fp32 accumulation), s or f32 outputs: only the
    // reference kernel (the worker's oracle); the GEMM templates have their own tests.
    Graph g;
    add_input(g, "x", {1, 3, 9, 9});
    add_initializer(g, "w", random_tensor({4, 3, 3, 3}, 70));
    add_node(g, "Conv", {"x", "w"}, {"c"}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
    add_input(g, "a", {5, 40});
    add_input(g, "m", {40, 6});
    add_node(g, "MatMul", {"a", "m"}, {"mm"});
    add_node(g, "Gemm", {"a", "m"}, {"gm"}, attrs({{"alpha", 0.5f}}));
    add_node(g, "Softmax", {"gm"}, {"sm"}, attrs({{"axis", int64_t{-1}}}));
    g.outputs = {"c", "mm", "sm"};
    const Graph typed = retyped(g, {{"x", s}, {"w", s}, {"c", s}, {"a", s}, {"m", s}, {"mm", DType::f32}, {"gm", s}, {"sm", s}});
    CasePart p;
    p.w = whole(typed, ClusterKind::opaque, 71, &p.inputs);
    p.reduction_length = 40;
    return one(std::move(p));
  }));
}

}  // namespace

void add_storage_cases(std::vector<OpCase>* table) {
  add_exact_cases(table);
  add_batch_norm_apply_case(table);
  add_reduction_cases(table);
  add_window_cases(table);
}

}  // namespace dc::testing
