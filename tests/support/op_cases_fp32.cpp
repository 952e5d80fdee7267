// The op cases of f32 storage: the CUDA-core templates that are not the GEMM family
// ("elementwise", "opaque_generic", "row_reduce", "pool_window") over representative
// variants of their parameter spaces and edge shapes, the naive reference kernel on heavy ops
// with edge attributes, and every workload of the tiny example models (also in f16).
#include <gtest/gtest.h>

#include <cctype>
#include <set>

#include "candidates.h"
#include "generate.h"
#include "onnx/import.h"
#include "op_cases.h"
#include "param_space.h"
#include "pass_testing.h"
#include "passes/simplify.h"
#include "ref/storage_dtypes.h"
#include "testing.h"
#include "variant_tolerance.h"

namespace dc::testing {

namespace {

using Ints = std::vector<int64_t>;
using Accept = std::function<bool(const Variant&)>;
using SourceCheck = std::function<std::string(const Variant&, const GeneratedKernel&)>;

VariantPick pick(Accept accept, size_t max, SourceCheck check = {}) {
  VariantPick p;
  p.accept = std::move(accept);
  p.max = max;
  p.source_check = std::move(check);
  return p;
}

CasePart part(std::string label, Workload w, ref::TensorMap in, std::vector<VariantPick> picks) {
  CasePart p;
  p.label = std::move(label);
  p.w = std::move(w);
  p.inputs = std::move(in);
  p.picks = std::move(picks);
  return p;
}

// A case of f32 storage with one part.
OpCase one(std::string name, std::function<CasePart()> build) {
  return {std::move(name), {DType::f32}, [build](DType) { return std::vector<CasePart>{build()}; }, {}};
}

OpCase many(std::string name, std::function<std::vector<CasePart>()> build) {
  return {std::move(name), {DType::f32}, [build](DType) { return build(); }, {}};
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// "" if `what` occurs `n` times in the kernel's source, else why not.
std::string occurs(const GeneratedKernel& k, const std::string& what, size_t n, const std::string& why) {
  const size_t got = count(k.source, what);
  return got == n ? "" : "'" + what + "' " + std::to_string(got) + " times, not " + std::to_string(n) + ": " + why;
}

bool warp_row(const Variant& v) { return v.param("threads_per_row") == 32; }
bool block_row(const Variant& v) { return v.param("threads_per_row") > 32; }

Attributes ints(const std::string& name, Ints v) { return attrs({{name, v}}); }
Tensor i64s(Shape s, Ints v) { return Tensor::from_vector<int64_t>(std::move(s), v); }

Graph load(const std::string& example) {
  return simplify(import_onnx_file(source_dir() + "/examples/" + example + "/model.onnx"));
}

// ---- the reference kernel on heavy ops with edge attributes ------------------------------

CasePart reference_only(Graph g, const std::string& label = "") {
  ref::TensorMap in;
  Workload w = workload_of(g, random_graph_inputs(g, 70), ClusterKind::opaque, &in);
  return part(label, std::move(w), std::move(in), {});
}

void add_heavy_reference_cases(std::vector<OpCase>* t) {
  t->push_back(one("conv_grouped_strided_dilated_2x4x9x8", [] {
    Graph g;
    add_input(g, "x", {2, 4, 9, 8});
    add_initializer(g, "w", random_tensor({6, 2, 3, 2}, 71));
    add_initializer(g, "b", random_tensor({6}, 72));
    add_node(g, "Conv", {"x", "w", "b"}, {"y"},
             attrs({{"group", int64_t{2}}, {"strides", Ints{2, 1}}, {"pads", Ints{1, 0, 2, 1}}, {"dilations", Ints{1, 2}}}));
    g.outputs = {"y"};
    return reference_only(g);
  }));
  t->push_back(one("conv1d_same_lower_1x3x10", [] {
    Graph h;
    add_input(h, "x", {1, 3, 10});
    add_initializer(h, "w", random_tensor({4, 3, 3}, 73));
    add_node(h, "Conv", {"x", "w"}, {"y"}, attrs({{"strides", Ints{2}}, {"auto_pad", std::string("SAME_LOWER")}}));
    h.outputs = {"y"};
    return reference_only(h);
  }));
  t->push_back(one("convtranspose_grouped_padded_2x4x4x3", [] {
    Graph g;
    add_input(g, "x", {2, 4, 4, 3});
    add_initializer(g, "w", random_tensor({4, 3, 3, 2}, 74));
    add_initializer(g, "b", random_tensor({6}, 75));
    add_node(g, "ConvTranspose", {"x", "w", "b"}, {"y"},
             attrs({{"group", int64_t{2}}, {"strides", Ints{2, 3}}, {"pads", Ints{1, 0, 0, 1}},
                    {"output_padding", Ints{1, 2}}, {"dilations", Ints{1, 2}}}));
    g.outputs = {"y"};
    return reference_only(g);
  }));
  t->push_back(one("convtranspose3d_1x2x3x2x3", [] {
    Graph h;
    add_input(h, "x", {1, 2, 3, 2, 3});
    add_initializer(h, "w", random_tensor({2, 3, 2, 3, 2}, 76));
    add_node(h, "ConvTranspose", {"x", "w"}, {"y"}, attrs({{"strides", Ints{2, 1, 2}}}));
    h.outputs = {"y"};
    return reference_only(h);
  }));
  t->push_back(one("matmul_broadcast_and_1d_operands", [] {
    Graph g;
    add_input(g, "a", {2, 1, 3, 5});
    add_input(g, "b", {4, 5, 6});
    add_input(g, "v", {5});
    add_input(g, "m", {3, 5, 2});
    add_input(g, "p", {3, 5});
    add_node(g, "MatMul", {"a", "b"}, {"y0"});
    add_node(g, "MatMul", {"v", "m"}, {"y1"});
    add_node(g, "MatMul", {"p", "v"}, {"y2"});
    g.outputs = {"y0", "y1", "y2"};
    return reference_only(g);
  }));
  t->push_back(one("gemm_transposed_broadcast_c_7x3x5", [] {
    Graph g;
    add_input(g, "a", {7, 3});
    add_input(g, "b", {5, 7});
    add_input(g, "c0", {5});
    add_input(g, "c1", {3, 1});
    add_input(g, "c2", {});
    const auto ga = attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.f}});
    add_node(g, "Gemm", {"a", "b", "c0"}, {"y0"}, ga);
    add_node(g, "Gemm", {"a", "b", "c1"}, {"y1"}, ga);
    add_node(g, "Gemm", {"a", "b", "c2"}, {"y2"}, ga);
    add_node(g, "Gemm", {"a", "b"}, {"y3"}, ga);
    g.outputs = {"y0", "y1", "y2", "y3"};
    return reference_only(g);
  }));
  t->push_back(one("reduce_int64_and_every_axis_3x4x5", [] {
    // Integer sums and maxima; ReduceMean over every axis (no axes).
    Graph g;
    add_input(g, "k", {3, 4, 5}, DType::i64);
    add_input(g, "x", {3, 4, 5});
    add_node(g, "ReduceSum", {"k"}, {"s"}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}));
    add_node(g, "ReduceMax", {"k"}, {"m"}, attrs({{"axes", Ints{0, 2}}}));
    add_node(g, "ReduceMean", {"x"}, {"all"}, attrs({{"keepdims", int64_t{0}}}));
    g.outputs = {"s", "m", "all"};
    ref::TensorMap values = random_graph_inputs(g, 80);
    values["k"] = random_value({DType::i64, {3, 4, 5}}, 81, 0, 0, 1000);
    ref::TensorMap in;
    Workload w = workload_of(g, values, ClusterKind::opaque, &in);
    return part("", std::move(w), std::move(in), {});
  }));
  t->push_back(many("reducemean_empty_axes_3x4x8", [] {
    std::vector<CasePart> parts;
    for (int64_t noop : {0, 1}) {
      Graph h;
      add_input(h, "x", {3, 4, 8});
      add_node(h, "ReduceMean", {"x"}, {"y"}, attrs({{"noop_with_empty_axes", noop}}));
      h.outputs = {"y"};
      ref::TensorMap in;
      Workload w = workload_of(h, random_graph_inputs(h, 82), ClusterKind::reduction, &in);
      parts.push_back(part("noop_with_empty_axes " + std::to_string(noop), std::move(w), std::move(in), {pick({}, 2)}));
    }
    return parts;
  }));
}

// ---- elementwise and opaque ------------------------------------------------------------

CasePart elementwise(Graph g, const ref::TensorMap& values, std::vector<VariantPick> picks, std::string label = "") {
  ref::TensorMap in;
  Workload w = workload_of(std::move(g), values, ClusterKind::elementwise, &in);
  return part(std::move(label), std::move(w), std::move(in), std::move(picks));
}

void add_elementwise_cases(std::vector<OpCase>* t) {
  t->push_back(one("broadcast_chain_vectorised_2x3x8x24", [] {
    // Two outputs of one shape, an inner-dim bias (float4 loads), a per-channel scale that
    // broadcasts over the inner dims (scalar loads) and a scalar constant.
    Graph g;
    add_input(g, "x", {2, 3, 8, 24});
    add_input(g, "b", {24});
    add_input(g, "c", {3, 1, 1});
    add_initializer(g, "half", Tensor::scalar<float>(0.5f));
    add_node(g, "Add", {"x", "b"}, {"a"});
    add_node(g, "Mul", {"a", "c"}, {"m"});
    add_node(g, "Sub", {"m", "half"}, {"s"});
    add_node(g, "Relu", {"s"}, {"r"});
    add_node(g, "Tanh", {"a"}, {"t"});
    g.outputs = {"r", "t"};
    CasePart p = elementwise(g, random_graph_inputs(g, 1), {
        pick([](const Variant& v) { return v.param("vec") == 4; }, 3,
             [](const Variant&, const GeneratedKernel& k) { return occurs(k, "const float4 vin", 2, "x and b as float4, c element-wise"); }),
        pick([](const Variant& v) { return v.param("vec") == 2 && v.param("elems_per_thread") == 8; }, 1,
             [](const Variant&, const GeneratedKernel& k) { return occurs(k, "make_float2(", 2, "both outputs stored as float2"); }),
        pick([](const Variant& v) { return v.param("vec") == 1 && v.param("threads") == 512; }, 1)});
    EXPECT_EQ(analyze_workload(p.w).vec_align, 4);
    return p;
  }));
  t->push_back(one("vectors_across_rows_2x4x7x7", [] {
    // Rows of 7 (ResNet's last stage): a float4 chunk crosses rows and channel planes. The
    // residual is loaded as float4 (the output's own size); the per-channel scale and the
    // inner-dim bias are read per lane, each lane at its own unravelled position.
    Graph g;
    add_input(g, "x", {2, 4, 7, 7});
    add_input(g, "r", {2, 4, 7, 7});
    add_input(g, "c", {4, 1, 1});
    add_input(g, "b", {7});
    add_node(g, "Add", {"x", "r"}, {"a"});
    add_node(g, "Mul", {"a", "c"}, {"m"});
    add_node(g, "Add", {"m", "b"}, {"s"});
    add_node(g, "Relu", {"s"}, {"y"});
    g.outputs = {"y"};
    CasePart p = elementwise(g, random_graph_inputs(g, 6), {
        pick([](const Variant& v) { return v.param("vec") == 4; }, 2,
             [](const Variant&, const GeneratedKernel& k) { return occurs(k, "const float4 vin", 2, "x and r as float4, c and b per lane"); }),
        pick([](const Variant& v) { return v.param("vec") == 2; }, 1),
        pick([](const Variant& v) { return v.param("vec") == 1; }, 1)});
    EXPECT_EQ(analyze_workload(p.w).vec_align, 4);
    return p;
  }));
  t->push_back(one("positive_math_and_integer_outputs_4x9x16", [] {
    // Sqrt/Log/Pow/Div on positive inputs; comparisons, Where and a Cast to int64 output.
    Graph g;
    add_input(g, "x", {4, 9, 16});
    add_input(g, "y", {9, 16});
    add_initializer(g, "two", Tensor::scalar<float>(2.f));
    add_initializer(g, "e", Tensor::scalar<float>(0.75f));
    add_node(g, "Sqrt", {"x"}, {"q"});
    add_node(g, "Log", {"y"}, {"l"});
    add_node(g, "Div", {"q", "y"}, {"d"});
    add_node(g, "Pow", {"d", "two"}, {"p2"});
    add_node(g, "Pow", {"x", "e"}, {"pe"});
    add_node(g, "Greater", {"p2", "pe"}, {"gt"});
    add_node(g, "Where", {"gt", "l", "pe"}, {"wh"});
    add_node(g, "Max", {"wh", "q", "l"}, {"mx"});
    add_node(g, "Reciprocal", {"mx"}, {"rc"});
    add_node(g, "Cast", {"d"}, {"ci"}, attrs({{"to", int64_t{7}}}));
    g.outputs = {"rc", "ci"};
    return elementwise(g, random_graph_inputs(g, 2, 0.1f, 3.f),
                       {pick([](const Variant& v) { return v.param("vec") == 4 && v.param("elems_per_thread") == 2; }, 2),
                        pick([](const Variant& v) { return v.param("vec") == 1; }, 1)});
  }));
  t->push_back(one("index_maps_transpose_concat_slice_gather_2x3x4x5", [] {
    // Transpose -> Reshape -> Concat -> Slice (step 2) -> Relu, and Gather with constant and
    // run-time indices, Where with a broadcast condition: outputs of three shapes.
    Graph g;
    add_input(g, "x", {2, 3, 4, 5});
    add_input(g, "y", {2, 7, 3});
    add_input(g, "e", {10, 6});
    add_input(g, "idx", {2, 3}, DType::i64);
    add_input(g, "cond", {4, 1}, DType::boolean);
    add_input(g, "z", {6});
    add_initializer(g, "shape", i64s({3}, {2, 20, 3}));
    add_initializer(g, "starts", i64s({1}, {1}));
    add_initializer(g, "ends", i64s({1}, {26}));
    add_initializer(g, "axes", i64s({1}, {1}));
    add_initializer(g, "steps", i64s({1}, {2}));
    add_initializer(g, "cidx", i64s({4}, {3, -1, 0, 7}));
    add_node(g, "Transpose", {"x"}, {"tr"}, ints("perm", {0, 2, 3, 1}));
    add_node(g, "Reshape", {"tr", "shape"}, {"rs"});
    add_node(g, "Concat", {"rs", "y"}, {"cc"}, attrs({{"axis", int64_t{1}}}));
    add_node(g, "Slice", {"cc", "starts", "ends", "axes", "steps"}, {"sl"});
    add_node(g, "Relu", {"sl"}, {"o1"});
    add_node(g, "Gather", {"e", "cidx"}, {"ga"});
    add_node(g, "Where", {"cond", "ga", "z"}, {"o2"});
    add_node(g, "Gather", {"e", "idx"}, {"gr"}, attrs({{"axis", int64_t{0}}}));
    add_node(g, "Neg", {"gr"}, {"o3"});
    g.outputs = {"o1", "o2", "o3"};
    ref::TensorMap values = random_graph_inputs(g, 3);
    values["idx"] = i64s({2, 3}, {0, 9, -2, 4, 4, 1});
    values["cond"] = Tensor::from_vector<bool>({4, 1}, {true, false, false, true});
    return elementwise(g, values, {pick({}, 3)});
  }));
  t->push_back(one("split_expand_tile_4x10", [] {
    Graph h;
    add_input(h, "x", {4, 10});
    add_input(h, "v", {1, 7});
    add_input(h, "t", {2, 3});
    add_initializer(h, "split", i64s({2}, {3, 7}));
    add_initializer(h, "reps", i64s({2}, {2, 1}));
    add_initializer(h, "eshape", i64s({2}, {4, 7}));
    add_node(h, "Split", {"x", "split"}, {"a", "b"}, attrs({{"axis", int64_t{1}}}));
    add_node(h, "Expand", {"v", "eshape"}, {"ve"});
    add_node(h, "Mul", {"b", "ve"}, {"o1"});
    add_node(h, "Tile", {"t", "reps"}, {"tt"});
    add_node(h, "Sub", {"a", "tt"}, {"o2"});
    h.outputs = {"o1", "o2"};
    return elementwise(h, random_graph_inputs(h, 4), {pick({}, 2)});
  }));
  t->push_back(many("leakyrelu_hardsigmoid_clip_gelu_edge_shapes", [] {
    // One element; an odd-sized tensor; a scalar; activations with attributes.
    std::vector<CasePart> parts;
    for (const Shape& s : {Shape{1}, Shape{3, 5, 7}, Shape{}}) {
      Graph g;
      add_input(g, "x", s);
      add_node(g, "LeakyRelu", {"x"}, {"a"}, attrs({{"alpha", 0.2f}}));
      add_node(g, "HardSigmoid", {"a"}, {"b"}, attrs({{"alpha", 0.3f}, {"beta", 0.4f}}));
      add_node(g, "Clip", {"b"}, {"c"}, attrs({{"min", 0.45f}, {"max", 0.55f}}));
      add_node(g, "Gelu", {"x"}, {"d"}, attrs({{"approximate", std::string("tanh")}}));
      add_node(g, "Add", {"c", "d"}, {"y"});
      g.outputs = {"y"};
      parts.push_back(elementwise(g, random_graph_inputs(g, 5, -3.f, 3.f), {pick({}, 1)}, "shape " + shape_str(s)));
    }
    return parts;
  }));
}

void add_opaque_cases(std::vector<OpCase>* t) {
  t->push_back(one("batchnorm_opaque_generic_2x5x3x7", [] {
    // An unfolded BatchNormalization is opaque: the generic kernel with the variant's block.
    Graph g;
    add_input(g, "x", {2, 5, 3, 7});
    for (const char* p : {"scale", "bias", "mean"}) add_initializer(g, p, random_tensor({5}, 9));
    add_initializer(g, "var", random_tensor({5}, 10, 0.5f, 2.f));
    add_node(g, "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}, attrs({{"epsilon", 1e-3f}}));
    g.outputs = {"y"};
    ref::TensorMap in;
    Workload w = workload_of(g, random_graph_inputs(g, 6), ClusterKind::opaque, &in);
    in[w.graph.inputs[4]] = random_tensor({5}, 11, 0.5f, 2.f);  // variances > 0
    return part("", std::move(w), std::move(in), {pick({}, 1, [](const Variant& v, const GeneratedKernel& k) {
                  if (k.template_name != "opaque_generic") return "template " + k.template_name + ", not opaque_generic";
                  return k.launches.at(0).block[0] == v.param("threads") ? std::string() : std::string("block is not the variant's threads");
                })});
  }));
}

// Pad in every mode (negative pads crop), Resize in every mode and coordinate transformation,
// each fused with an activation; and Pad -> Resize -> Add in one kernel.
CasePart pad_resize_part(const std::function<void(Graph&)>& build, const std::string& what, uint32_t seed) {
  Graph g;
  add_input(g, "x", {2, 3, 5, 6});
  build(g);
  g.outputs = {g.nodes.back().outputs[0]};
  return elementwise(g, random_graph_inputs(g, seed), {pick({}, 2)}, what);
}

struct ResizeCase {
  const char* mode;
  const char* coord;
  const char* nearest;
  std::vector<float> scales;
  Ints sizes;
  int64_t exclude_outside = 0;  // cubic only
};

void add_resize(Graph& g, const ResizeCase& c) {
  Attributes a = attrs({{"mode", std::string(c.mode)}, {"coordinate_transformation_mode", std::string(c.coord)}});
  if (*c.nearest) a.set("nearest_mode", std::string(c.nearest));
  if (std::string(c.mode) == "cubic") a.set("exclude_outside", c.exclude_outside);
  add_initializer(g, "roi", Tensor::from_vector<float>({8}, {0, 0, 0.2f, -0.1f, 1, 1, 0.9f, 1.2f}));
  a.set("extrapolation_value", 2.5f);
  std::vector<std::string> ins = {"x", "roi"};
  if (!c.scales.empty()) {
    add_initializer(g, "s", Tensor::from_vector<float>({4}, c.scales));
    ins.push_back("s");
  } else {
    add_initializer(g, "z", i64s({4}, c.sizes));
    ins.insert(ins.end(), {"", "z"});
  }
  add_node(g, "Resize", ins, {"y"}, a);
  add_node(g, "Relu", {"y"}, {"r"});
}

void add_pad_resize_cases(std::vector<OpCase>* t) {
  t->push_back(many("pad_every_mode_tanh_2x3x5x6", [] {
    std::vector<CasePart> parts;
    for (const char* mode : {"constant", "reflect", "edge", "wrap"})
      parts.push_back(pad_resize_part([&](Graph& g) {
            add_initializer(g, "p", i64s({8}, {0, 1, 2, -1, 0, 0, 3, 4}));
            add_initializer(g, "v", Tensor::scalar<float>(0.5f));
            add_node(g, "Pad", {"x", "p", "v"}, {"y"}, attrs({{"mode", std::string(mode)}}));
            add_node(g, "Tanh", {"y"}, {"t"});
          }, std::string("Pad ") + mode, 31));
    return parts;
  }));
  t->push_back(many("resize_every_mode_relu_2x3x5x6", [] {
    const std::vector<ResizeCase> cases = {
        {"nearest", "half_pixel", "round_prefer_floor", {1, 1, 2, 1.5f}, {}},
        {"nearest", "asymmetric", "ceil", {}, {2, 3, 7, 4}},
        {"nearest", "align_corners", "round_prefer_ceil", {}, {2, 3, 9, 11}},
        {"nearest", "tf_half_pixel_for_nn", "floor", {1, 1, 0.6f, 0.5f}, {}},
        {"linear", "pytorch_half_pixel", "", {}, {2, 3, 1, 13}},
        {"linear", "align_corners", "", {1, 1, 1.8f, 2}, {}},
        {"cubic", "half_pixel", "", {1, 1, 2, 0.7f}, {}, 1},
        {"cubic", "asymmetric", "", {}, {2, 3, 8, 9}, 0},
        {"linear", "tf_crop_and_resize", "", {}, {2, 3, 6, 7}},
    };
    std::vector<CasePart> parts;
    uint32_t seed = 40;
    for (const auto& c : cases) {
      parts.push_back(pad_resize_part([&](Graph& g) { add_resize(g, c); },
                                      std::string("Resize ") + c.mode + " " + c.coord, seed));
      ++seed;
    }
    return parts;
  }));
  t->push_back(one("pad_resize_add_2x3x5x6", [] {
    return pad_resize_part([](Graph& g) {
          add_input(g, "b", {2, 3, 10, 16});
          add_initializer(g, "p", i64s({8}, {0, 0, 0, 1, 0, 0, 0, 1}));
          add_initializer(g, "s", Tensor::from_vector<float>({4}, {1, 1, 2, 2}));
          add_node(g, "Pad", {"x", "p"}, {"y"}, attrs({{"mode", std::string("reflect")}}));
          add_node(g, "Resize", {"y", "", "s"}, {"u"}, attrs({{"mode", std::string("linear")}}));
          add_node(g, "Add", {"u", "b"}, {"a"});
        }, "", 60);
  }));
}

// ---- row reductions ----------------------------------------------------------------------

CasePart reduction(Graph g, const ref::TensorMap& values, std::vector<VariantPick> picks, std::string label = "") {
  ref::TensorMap in;
  Workload w = workload_of(std::move(g), values, ClusterKind::reduction, &in);
  return part(std::move(label), std::move(w), std::move(in), std::move(picks));
}

// Div by a constant, Add a broadcast mask, Softmax over the last axis, Mul epilogue.
Graph scale_mask_softmax(int64_t len) {
  Graph g;
  add_input(g, "s", {2, 2, 8, len});
  add_input(g, "mask", {2, 1, 1, len});
  add_input(g, "w", {len});
  add_initializer(g, "d", Tensor::scalar<float>(8.f));
  add_node(g, "Div", {"s", "d"}, {"a"});
  add_node(g, "Add", {"a", "mask"}, {"b"});
  add_node(g, "Softmax", {"b"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(g, "Mul", {"p", "w"}, {"y"});
  g.outputs = {"y"};
  return g;
}

void add_softmax_cases(std::vector<OpCase>* t) {
  t->push_back(one("scale_mask_softmax_2x2x8x64", [] {
    const Graph g = scale_mask_softmax(64);
    std::vector<VariantPick> picks;
    for (int64_t cache : {0, 1, 2})
      picks.push_back(pick([cache](const Variant& v) { return warp_row(v) && v.param("vec") == 4 && v.param("cache") == cache; }, 1,
                           [cache](const Variant&, const GeneratedKernel& k) -> std::string {
                             if ((count(k.source, "dcr_x[") > 0) != (cache == 1)) return "the row is cached in registers iff cache 1";
                             if ((k.launches[0].dynamic_smem_bytes > 0) != (cache == 2)) return "shared memory iff cache 2";
                             return occurs(k, "__syncthreads()", 0, "warp per row: shuffles only");
                           }));
    picks.push_back(pick([](const Variant& v) { return block_row(v) && v.param("vec") == 1 && v.param("cache") == 1; }, 1,
                         [](const Variant&, const GeneratedKernel& k) { return occurs(k, "__syncthreads()", 2, "max and sum across the row's warps"); }));
    picks.push_back(pick([](const Variant& v) { return v.param("threads_per_row") == 64 && v.param("vec") == 1 && v.param("rows_per_block") == 8; }, 1));
    return reduction(g, random_graph_inputs(g, 20, -4.f, 4.f), std::move(picks));
  }));
  t->push_back(one("scale_mask_softmax_2x2x8x37", [] {
    const Graph g = scale_mask_softmax(37);
    return reduction(g, random_graph_inputs(g, 20, -4.f, 4.f), {pick(warp_row, 2), pick(block_row, 2)});
  }));
  // LogSoftmax over a middle axis (rows not contiguous), legacy Softmax over the flattened
  // trailing dims, one long row, many tiny rows.
  struct Axis { const char* name; Shape shape; std::string op; int64_t axis; bool legacy; };
  for (const Axis& c : {Axis{"logsoftmax_middle_axis_2x6x5", {2, 6, 5}, "LogSoftmax", 1, false},
                        Axis{"softmax_legacy_flatten_2x3x4", {2, 3, 4}, "Softmax", 1, true},
                        Axis{"softmax_one_long_row_1x300", {1, 300}, "Softmax", -1, false},
                        Axis{"logsoftmax_tiny_rows_37x3", {37, 3}, "LogSoftmax", 1, false}})
    t->push_back(one(c.name, [c] {
      Graph g;
      add_input(g, "x", c.shape);
      Attributes a = attrs({{"axis", c.axis}});
      if (c.legacy) a.set("dc_legacy_flatten", int64_t{1});
      add_node(g, c.op, {"x"}, {"y"}, a);
      g.outputs = {"y"};
      std::vector<VariantPick> picks = {pick(warp_row, 2)};
      if (c.shape[0] == 37)  // rows not a multiple of the block's rows
        picks.push_back(pick([](const Variant& v) { return v.param("rows_per_block") == 8; }, 1));
      if (c.shape[1] == 300) picks.push_back(pick([](const Variant& v) { return v.param("threads_per_row") == 256; }, 2));
      return reduction(g, random_graph_inputs(g, 21, -3.f, 3.f), std::move(picks));
    }));
}

void add_layernorm_cases(std::vector<OpCase>* t) {
  t->push_back(one("add_layernorm_gelu_3x5x96", [] {
    // Residual Add prologue, LayerNorm over the last axis (row 96: float4 rows), GELU epilogue.
    Graph g;
    add_input(g, "x", {3, 5, 96});
    add_input(g, "r", {3, 5, 96});
    add_input(g, "scale", {96});
    add_input(g, "bias", {96});
    add_node(g, "Add", {"x", "r"}, {"a"});
    add_node(g, "LayerNormalization", {"a", "scale", "bias"}, {"n"}, attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5f}}));
    add_node(g, "Gelu", {"n"}, {"y"});
    g.outputs = {"y"};
    std::vector<VariantPick> picks;
    for (int64_t cache : {0, 1, 2})
      picks.push_back(pick([cache](const Variant& v) { return warp_row(v) && v.param("vec") == 4 && v.param("cache") == cache; }, 1));
    picks.push_back(pick([](const Variant& v) { return block_row(v) && v.param("cache") == 2; }, 2));
    return reduction(g, random_graph_inputs(g, 30, -2.f, 2.f), std::move(picks));
  }));
  t->push_back(one("layernorm_last_two_axes_three_outputs_2x4x3x12", [] {
    Graph g;
    add_input(g, "x", {2, 4, 3, 12});
    add_input(g, "scale", {3, 12});
    add_input(g, "bias", {12});
    add_node(g, "LayerNormalization", {"x", "scale", "bias"}, {"n", "mean", "inv"},
             attrs({{"axis", int64_t{-2}}, {"epsilon", 1e-3f}}));
    g.outputs = {"n", "mean", "inv"};
    return reduction(g, random_graph_inputs(g, 31, 0.f, 3.f),
                     {pick([](const Variant& v) { return v.param("vec") == 4; }, 2),
                      pick([](const Variant& v) { return v.param("vec") == 1 && block_row(v); }, 1)});
  }));
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string dims(const Shape& s) {
  std::string out;
  for (int64_t d : s) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

void add_reduce_cases(std::vector<OpCase>* t) {
  struct Reduce { std::string op; Shape shape; Ints axes; int64_t keep; bool positive; bool axes_input; };
  const std::vector<Reduce> cases = {
      {"ReduceMean", {4, 6, 40}, {-1}, 1, false, false},
      {"ReduceSum", {3, 5, 4}, {1}, 0, false, true},  // a middle axis: strided rows
      {"ReduceMax", {2, 3, 4, 5}, {2, 3}, 1, false, false},
      {"ReduceMin", {2, 3, 4, 5}, {0, 2}, 0, false, false},
      {"ReduceL2", {6, 33}, {1}, 1, false, false},
      {"ReduceL1", {6, 33}, {1}, 0, false, false},
      {"ReduceSumSquare", {5, 8}, {-1}, 1, false, false},
      {"ReduceLogSum", {5, 8}, {-1}, 1, true, false},
      {"ReduceLogSumExp", {7, 130}, {1}, 1, false, false},
      {"ReduceProd", {4, 10}, {1}, 1, true, false},
  };
  for (const Reduce& c : cases)
    t->push_back(one(lower(c.op) + "_mul_" + dims(c.shape), [c] {
      Graph g;
      add_input(g, "x", c.shape);
      Attributes a = attrs({{"keepdims", c.keep}});
      std::vector<std::string> ins = {"x"};
      if (c.axes_input) {
        add_initializer(g, "axes", i64s({static_cast<int64_t>(c.axes.size())}, c.axes));
        ins.push_back("axes");
      } else {
        a.set("axes", c.axes);
      }
      add_node(g, c.op, ins, {"r"}, a);
      add_input(g, "k", {1});
      add_node(g, "Mul", {"r", "k"}, {"y"});  // epilogue with a broadcast operand
      g.outputs = {"y"};
      return reduction(g, random_graph_inputs(g, 40, c.positive ? 0.5f : -2.f, c.positive ? 1.5f : 2.f),
                       {pick(warp_row, 1), pick([](const Variant& v) { return block_row(v) || v.param("rows_per_block") > 1; }, 1)});
    }));
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"})
    t->push_back(one("relu_" + lower(op) + "_2x6x7x7", [op] {
      Graph g;
      add_input(g, "x", {2, 6, 7, 7});
      add_node(g, "Relu", {"x"}, {"a"});
      add_node(g, op, {"a"}, {"y"});
      g.outputs = {"y"};
      return reduction(g, random_graph_inputs(g, 50), {pick(warp_row, 1), pick(block_row, 1)});
    }));
}

// ---- pooling windows ---------------------------------------------------------------------

void add_pool_cases(std::vector<OpCase>* t) {
  struct Pool { const char* name; std::string op; Shape shape; Attributes a; };
  const std::vector<Pool> cases = {
      {"maxpool_3x3_s2_ceil_2x3x11x13", "MaxPool", {2, 3, 11, 13},
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}})},
      {"maxpool_2x3_dilated_1x2x9x10", "MaxPool", {1, 2, 9, 10},
       attrs({{"kernel_shape", Ints{2, 3}}, {"dilations", Ints{2, 2}}, {"pads", Ints{0, 1, 2, 0}}})},
      {"averagepool_3x3_s2_ceil_2x3x10x9", "AveragePool", {2, 3, 10, 9},
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}})},
      {"averagepool_3x2_include_pad_2x3x10x9", "AveragePool", {2, 3, 10, 9},
       attrs({{"kernel_shape", Ints{3, 2}}, {"strides", Ints{2, 1}}, {"pads", Ints{1, 0, 1, 1}}, {"count_include_pad", int64_t{1}}})},
      {"averagepool1d_same_upper_2x4x17", "AveragePool", {2, 4, 17},
       attrs({{"kernel_shape", Ints{4}}, {"strides", Ints{3}}, {"auto_pad", std::string("SAME_UPPER")}})},
      {"maxpool3d_1x2x5x6x7", "MaxPool", {1, 2, 5, 6, 7}, attrs({{"kernel_shape", Ints{2, 2, 3}}, {"strides", Ints{1, 2, 2}}})},
  };
  for (const Pool& c : cases)
    t->push_back(one(c.name, [c] {
      // Relu prologue; a per-channel epilogue (b reshaped to C x 1 x ...).
      Graph g;
      add_input(g, "x", c.shape);
      add_input(g, "b", {c.shape[1]});
      add_node(g, "Relu", {"x"}, {"a"});
      add_node(g, c.op, {"a"}, {"p"}, c.a);
      Shape bs = {c.shape[1]};
      bs.resize(c.shape.size() - 1, 1);
      add_initializer(g, "bshape", i64s({static_cast<int64_t>(bs.size())}, bs));
      add_node(g, "Reshape", {"b", "bshape"}, {"br"});
      add_node(g, "Add", {"p", "br"}, {"y"});
      g.outputs = {"y"};
      CasePart p = reduction(g, random_graph_inputs(g, 60, -2.f, 2.f), {pick({}, 2)});
      EXPECT_EQ(analyze_workload(p.w).family, Family::pool_window);
      return p;
    }));
}

// ---- every workload of the tiny models ----------------------------------------------------

// Every float tensor of `g` stored in `t` except the model's inputs and outputs and scalar
// constants: a crude stand-in for the precision pass (more reduced tensors than it makes),
// enough to give every op of the models f16 operands, f16 results and mixed edges.
Graph all_reduced(Graph g, DType t) {
  std::set<std::string> keep(g.inputs.begin(), g.inputs.end());
  keep.insert(g.outputs.begin(), g.outputs.end());
  for (auto& [name, info] : g.tensors) {
    if (info.dtype != DType::f32 || keep.count(name)) continue;
    if (auto w = g.initializers.find(name); w != g.initializers.end()) {
      if (w->second.numel() == 1) continue;
      w->second = ref::convert_float(w->second, t);
    }
    info.dtype = t;
  }
  return g;
}

// f16 inputs of a workload: floats random, indices and masks 0 or 1 (valid for any dimension).
ref::TensorMap reduced_model_inputs(const Workload& w, uint32_t seed) {
  ref::TensorMap in;
  for (const auto& name : w.graph.inputs) {
    const TensorInfo& info = w.graph.info(name);
    if (is_float(info.dtype)) {
      in[name] = random_value(info, seed++);
      continue;
    }
    Tensor v(info.dtype, info.shape);
    for (int64_t i = 0; i < v.numel(); ++i) {
      if (info.dtype == DType::i64) v.mutable_data<int64_t>()[i] = i % 2;
      else if (info.dtype == DType::i32) v.mutable_data<int32_t>()[i] = static_cast<int32_t>(i % 2);
      else if (info.dtype == DType::boolean) v.mutable_data<bool>()[i] = i % 2 == 0;
      else ADD_FAILURE() << "input dtype " << dtype_name(info.dtype);
    }
    in[name] = v;
  }
  return in;
}

// f32: the reference kernel of every workload (one launch per node), and one or two variants
// of each workload of the elementwise, row-reduce, pool and opaque templates. f16 (every
// tensor reduced): the reference kernel and the middle variant of every workload that is not
// of the GEMM family or attention (those have their own f16 paths and tests).
std::vector<CasePart> tiny_model_parts(DType storage) {
  std::vector<CasePart> parts;
  std::set<std::string> ops;
  size_t variants = 0, reduced = 0;
  for (const char* model : {"tiny_cnn", "tiny_transformer"}) {
    const Graph g = storage == DType::f32 ? load(model) : all_reduced(load(model), storage);
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    for (const auto& w : set.workloads) {
      const uint32_t seed = (storage == DType::f32 ? 100 : 200) + static_cast<uint32_t>(parts.size());
      CasePart p = part(std::string(model) + " " + w.signature, w,
                        storage == DType::f32 ? random_inputs_of(w.graph, seed) : reduced_model_inputs(w, seed), {});
      const WorkloadShape s = analyze_workload(w);
      for (const auto& n : w.graph.nodes) ops.insert(n.op);
      EXPECT_EQ(generate_reference(w).launches.size(), w.graph.nodes.size()) << w.canonical;
      reduced += w.canonical.find("f16[") != std::string::npos;
      const Family f = s.family;
      if (storage == DType::f32 && (f == Family::elementwise || f == Family::reduction || f == Family::pool_window || f == Family::opaque)) {
        p.picks.push_back(pick({}, f == Family::elementwise ? 1 : 2));  // elementwise singletons are many and alike
        p.picks.back().required = false;
      }
      if (storage != DType::f32 && f != Family::gemm && f != Family::conv && f != Family::attention) {
        p.picks.push_back(pick({}, 1));
        p.picks.back().middle = true;
        ++variants;
        p.reduction_length = reduction_length(w, s);
      }
      parts.push_back(std::move(p));
    }
  }
  EXPECT_GE(parts.size(), 21u + 60u);  // docs/candidates.md: 21 and 60 workloads
  if (storage == DType::f32) {
    for (const char* op : {"Conv", "MatMul", "Gemm", "Softmax", "LayerNormalization", "MaxPool", "AveragePool",
                           "GlobalAveragePool", "Transpose", "Reshape"})
      EXPECT_TRUE(ops.count(op)) << op;
  } else {
    EXPECT_GE(variants, 20u);
    EXPECT_GE(reduced, parts.size() - 3);  // all but the transformer's 3 integer mask Unsqueezes
  }
  return parts;
}

}  // namespace

void add_fp32_cases(std::vector<OpCase>* table) {
  table->push_back({"tiny_cnn_and_tiny_transformer_workloads", {DType::f32, DType::f16}, tiny_model_parts,
                    {"reference", "elementwise", "row_reduce", "pool_window"}});
  add_heavy_reference_cases(table);
  add_elementwise_cases(table);
  add_opaque_cases(table);
  add_pad_resize_cases(table);
  add_softmax_cases(table);
  add_layernorm_cases(table);
  add_reduce_cases(table);
  add_pool_cases(table);
}

}  // namespace dc::testing
