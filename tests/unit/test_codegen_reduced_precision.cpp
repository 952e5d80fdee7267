// f16/bf16 storage in the non-GEMM templates (elementwise, opaque_generic, row_reduce,
// pool_window, depthwise_direct) and the reference kernel: tensors of the graph are stored
// in f16/bf16 (mixed with f32 where the precision policy keeps it: f32 in / f16 out, f16 in
// / f32 out), every kernel compiles with NVRTC for sm_80 and runs on the host emulator
// (outputs poisoned to NaN first) on fresh seeded random inputs, compared with the CPU
// reference executor. Pure elementwise chains of IEEE operations must equal the reference
// bitwise (same roundings at the same places); everything else meets the worker's bound,
// variant_tolerance (kernel_tolerance of common/ir/tolerance.h for the fp32 math path, the
// coarsest stored dtype and the workload's reduction length; docs/precision.md).
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "candidates.h"
#include "emulator.h"
#include "emulator/compile.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "ir/tolerance.h"
#include "nvrtc.h"
#include "onnx/import.h"
#include "param_space.h"
#include "pass_testing.h"
#include "passes/simplify.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "ref/storage_dtypes.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

using testing::add_initializer;
using testing::add_input;
using testing::add_node;
using testing::attrs;
using Ints = std::vector<int64_t>;

const GpuSpec& a100() {
  static const GpuSpec spec = GpuCatalog::builtin().require("a100");
  return spec;
}

// Random values of a tensor's dtype: floats uniform in [lo, hi) rounded to the dtype.
Tensor random_value(const TensorInfo& info, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  return ref::convert_float(testing::random_tensor(info.shape, seed, lo, hi), info.dtype);
}

// `g` (built with f32 tensors) with the storage dtypes of `dtypes` (initializers converted),
// every other node output typed by running it: the reference's rule gives an op whose
// first float input is f16/bf16 that dtype, as the precision pass would.
Graph retyped(Graph g, const std::map<std::string, DType>& dtypes) {
  for (const auto& [name, t] : dtypes) {
    g.tensors[name].dtype = t;
    if (auto w = g.initializers.find(name); w != g.initializers.end())
      w->second = ref::convert_float(w->second, t);
  }
  ref::TensorMap in;
  uint32_t seed = 1;
  for (const auto& name : g.inputs) in[name] = random_value(g.info(name), seed++);
  ref::RunOptions keep;
  keep.keep_intermediates = true;
  for (const auto& [name, t] : ref::run_graph(g, in, keep)) g.tensors[name] = {t.dtype(), t.shape()};
  return g;
}

// The whole graph as one workload of `kind`, and fresh inputs for it (seeded).
Workload whole(const Graph& g, ClusterKind kind, uint32_t seed, ref::TensorMap* in,
               float lo = -1.f, float hi = 1.f) {
  std::vector<size_t> all(g.nodes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  Workload w = make_workload(g, all, kind);
  in->clear();
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) {
    const std::string& src = w.source_inputs[i];
    (*in)[w.graph.inputs[i]] = g.is_constant(src) ? g.initializers.at(src)
                                                  : random_value(g.info(src), seed++, lo, hi);
  }
  return w;
}

// Equal values, NaN where the reference has NaN (the NaN bits may differ).
::testing::AssertionResult same_values(const Tensor& out, const Tensor& want) {
  if (out.dtype() != want.dtype() || out.shape() != want.shape())
    return ::testing::AssertionFailure() << "dtype/shape " << dtype_name(out.dtype()) << shape_str(out.shape())
                                         << " vs " << dtype_name(want.dtype()) << shape_str(want.shape());
  const auto a = out.to_float_vector(), b = want.to_float_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || std::memcmp(&a[i], &b[i], 4) == 0;
    if (!same) return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

// Queued kernels are compiled (NVRTC sm_80 and the emulator's host compiler, on worker
// threads) when the test ends, then run on the emulator and compared with the reference.
class ReducedKernelTest : public ::testing::Test {
 protected:
  void TearDown() override { run_queued(); }

  // `reduction_length`: the longest sum behind an output element (1 for elementwise work);
  // `exact`: the kernel must equal the reference value for value.
  void expect_correct(const Workload& w, GeneratedKernel k, const ref::TensorMap& in,
                      int64_t reduction_length, bool exact) {
    jobs_.push_back({k.template_name + " " + k.variant_key + "\n" + w.canonical, w, std::move(k), in,
                     reduction_length, exact});
  }

  // The reference kernel and up to `max` variants of each template of `w`'s space.
  std::set<std::string> expect_space_correct(const Workload& w, const ref::TensorMap& in,
                                             int64_t reduction_length, bool exact, size_t max = 3) {
    expect_correct(w, generate_reference(w), in, reduction_length, exact);
    std::map<std::string, std::vector<Variant>> by_template;
    for (const auto& v : enumerate_variants(w, a100(), SpaceOptions{{"fp32"}}))
      by_template[v.template_name].push_back(v);
    EXPECT_FALSE(by_template.empty()) << "no variant for " << w.canonical;
    std::set<std::string> names;
    for (const auto& [name, vs] : by_template) {
      names.insert(name);
      for (size_t i = 0; i < max && i < vs.size(); ++i)
        expect_correct(w, generate_kernel(w, vs[i * vs.size() / std::min(max, vs.size())]), in,
                       reduction_length, exact);
    }
    return names;
  }

 private:
  struct Job {
    std::string label;
    Workload w;
    GeneratedKernel k;
    ref::TensorMap in;
    int64_t reduction_length;
    bool exact;
  };

  void run_queued() {
    std::vector<std::string> nvrtc_errors(jobs_.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < 2; ++t)
      workers.emplace_back([&] {
        for (size_t i; (i = next++) < jobs_.size();) {
          const CompileResult r = compile_cuda(jobs_[i].k.source, "sm_80");
          if (!r.ok) nvrtc_errors[i] = r.error;
          emu::compile_library(emulator_source(jobs_[i].k), EmulatorOptions{});
        }
      });
    for (auto& t : workers) t.join();
    for (size_t i = 0; i < jobs_.size(); ++i) {
      const Job& j = jobs_[i];
      SCOPED_TRACE(j.label);
      EXPECT_TRUE(nvrtc_errors[i].empty()) << "NVRTC sm_80: " << nvrtc_errors[i] << "\n" << j.k.source;
      std::vector<Tensor> bufs(j.k.buffers.size());
      for (size_t b = 0; b < j.w.graph.inputs.size(); ++b) bufs[b] = j.in.at(j.w.graph.inputs[b]);
      const EmulatorResult r = emulate(j.k, bufs);  // outputs start poisoned (NaN)
      EXPECT_TRUE(r.ok) << r.error << "\n" << j.k.source;
      if (!r.ok) continue;
      const auto want = ref::run_graph(j.w.graph, j.in);
      for (size_t o = 0; o < j.w.graph.outputs.size(); ++o) {
        const std::string& name = j.w.graph.outputs[o];
        const Tensor& got = bufs[j.w.graph.inputs.size() + o];
        ASSERT_EQ(dtype_name(got.dtype()), dtype_name(want.at(name).dtype()));
        if (j.exact) {
          EXPECT_TRUE(same_values(got, want.at(name))) << "output " << name << "\n" << j.k.source;
          continue;
        }
        // The worker's bound (variant_tolerance), checked against the test's own K.
        const Tolerance tol = variant_tolerance("fp32", j.w);
        EXPECT_EQ(reduction_length(j.w, analyze_workload(j.w)), j.reduction_length);
        const ref::Comparison c = ref::compare_tensors(got, want.at(name), tol.rtol, tol.atol);
        EXPECT_TRUE(c.pass) << "output " << name << " (" << dtype_name(got.dtype()) << "): rel L2 "
                            << c.rel_l2_error << " (rtol " << tol.rtol << "), max abs " << c.max_abs_error
                            << " " << c.problem << "\n" << j.k.source;
      }
    }
    jobs_.clear();
  }

  std::vector<Job> jobs_;
};

class ReducedPrecisionKernels : public ReducedKernelTest,
                                public ::testing::WithParamInterface<DType> {};

INSTANTIATE_TEST_SUITE_P(Storage, ReducedPrecisionKernels, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// ---- elementwise chains: bitwise equal to the reference ---------------------------------

TEST_P(ReducedPrecisionKernels, ElementwiseChainIsExact) {
  const DType t = GetParam();
  // x (t) * scale (t, per channel) + bias (f32) -> Relu -> Max with y (t) -> / 3 -> Sub, a
  // Transpose and a Concat: every intermediate rounded to t, as the reference stores it.
  Graph g;
  add_input(g, "x", {2, 8, 6, 10});
  add_input(g, "y", {2, 8, 6, 10});
  add_initializer(g, "scale", testing::random_tensor({8, 1, 1}, 5, 0.5f, 3.f));
  add_initializer(g, "bias", testing::random_tensor({8, 1, 1}, 6));
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
  const Graph typed = retyped(g, {{"x", t}, {"y", t}, {"scale", t}, {"a", t}, {"b", t}, {"c", t},
                                  {"d", t}, {"e", t}, {"f", t}, {"tr", t}, {"o1", t}, {"o2", t}});
  ref::TensorMap in;
  const Workload w = whole(typed, ClusterKind::elementwise, 10, &in, -4.f, 4.f);
  EXPECT_NE(w.canonical.find(std::string(dtype_name(t))), std::string::npos);
  const auto names = expect_space_correct(w, in, 1, true);
  EXPECT_TRUE(names.count("elementwise"));
}

TEST_P(ReducedPrecisionKernels, MixedStorageEdgesAreExact) {
  const DType t = GetParam();
  // f32 model input -> t intermediate (the first kernel reads f32, rounds once) and a t
  // tensor -> f32 model output (the last kernel widens exactly); Sigmoid and Where between.
  Graph g;
  add_input(g, "x", {3, 5, 16});
  add_input(g, "h", {3, 5, 16});
  add_input(g, "m", {1, 5, 16});
  add_node(g, "Add", {"x", "h"}, {"s"});          // f32 + t -> t
  add_node(g, "Sigmoid", {"s"}, {"g"});           // t -> t
  add_node(g, "Mul", {"g", "x"}, {"p"});          // t * f32 -> f32 (model output)
  add_initializer(g, "zero", Tensor::scalar<float>(0.f));
  add_node(g, "Greater", {"m", "zero"}, {"mask"});
  add_node(g, "Where", {"mask", "s", "h"}, {"q"});  // t, t -> t
  add_node(g, "Cast", {"q"}, {"qf"}, attrs({{"to", int64_t{1}}}));  // t -> f32
  g.outputs = {"p", "qf", "g"};
  const Graph typed = retyped(g, {{"h", t}, {"m", t}, {"s", t}, {"g", t}, {"p", DType::f32},
                                  {"q", t}, {"qf", DType::f32}});
  ASSERT_EQ(typed.info("x").dtype, DType::f32);
  ASSERT_EQ(typed.info("p").dtype, DType::f32);
  ref::TensorMap in;
  const Workload w = whole(typed, ClusterKind::elementwise, 20, &in, -3.f, 3.f);
  expect_space_correct(w, in, 1, true);
}

TEST_P(ReducedPrecisionKernels, OverflowNanAndInfAreExact) {
  const DType t = GetParam();
  // x * 1e6 overflows f16 (to inf, then inf - inf = NaN) but not bf16; NaN and inf inputs
  // propagate (inf * 1e6 - inf * 1e3 is NaN too).
  Graph g;
  add_input(g, "x", {4, 33});
  add_initializer(g, "k", Tensor::scalar<float>(1000.f));
  add_node(g, "Mul", {"x", "k"}, {"a"});
  add_node(g, "Mul", {"a", "k"}, {"b"});
  add_node(g, "Sub", {"b", "a"}, {"o"});
  g.outputs = {"o"};
  const Graph typed = retyped(g, {{"x", t}, {"k", DType::f32}, {"a", t}, {"b", t}, {"o", t}});
  ref::TensorMap in;
  const Workload w = whole(typed, ClusterKind::elementwise, 30, &in, -100.f, 100.f);
  std::vector<float> xs = testing::random_tensor({4, 33}, 31, -100.f, 100.f).to_float_vector();
  xs[0] = std::nanf("");
  xs[1] = INFINITY;
  xs[2] = -INFINITY;
  in[w.graph.inputs[0]] = ref::convert_float(Tensor::from_vector<float>({4, 33}, xs), t);
  const auto want = ref::run_graph(w.graph, in).at(w.graph.outputs[0]).to_float_vector();
  size_t bad = 0;
  for (float v : want) bad += !std::isfinite(v);
  if (t == DType::f16) EXPECT_GT(bad, 120u);  // |x| * 1e6 > 65504 almost everywhere
  else EXPECT_EQ(bad, 3u);                      // only the NaN and inf inputs
  expect_space_correct(w, in, 1, true);
}

TEST_P(ReducedPrecisionKernels, PackedPairLoadsAndStoresAreExact) {
  const DType t = GetParam();
  // vec 2 and 4: t inputs loaded as 32-bit pairs, the f32 input as float2/float4, the t
  // output stored as packed pairs; the f32 output as float2/float4.
  Graph g;
  add_input(g, "x", {6, 64});
  add_input(g, "y", {6, 64});
  add_input(g, "z", {64});
  add_node(g, "Mul", {"x", "y"}, {"m"});
  add_node(g, "Add", {"m", "z"}, {"o"});
  add_node(g, "Sub", {"m", "x"}, {"d"});
  g.outputs = {"o", "d"};
  ref::TensorMap in;
  const Workload w = whole(retyped(g, {{"x", t}, {"y", t}, {"m", t}, {"o", t}, {"d", DType::f32}}),
                           ClusterKind::elementwise, 95, &in, -3.f, 3.f);
  const std::string unpack = t == DType::f16 ? "dc_unpack_f16x2(" : "dc_unpack_bf16x2(";
  const std::string pack = t == DType::f16 ? "dc_pack_f16x2(" : "dc_pack_bf16x2(";
  for (int64_t vec : {1, 2, 4}) {
    Variant v;
    v.template_name = "elementwise";
    v.params = {{"threads", 64}, {"vec", vec}, {"elems_per_thread", 2}};
    GeneratedKernel k = generate_kernel(w, v);
    EXPECT_EQ(k.source.find(unpack + "vin") != std::string::npos, vec > 1) << k.source;
    EXPECT_EQ(k.source.find("= " + pack) != std::string::npos, vec > 1) << k.source;
    if (vec == 4) {
      EXPECT_NE(k.source.find("float4"), std::string::npos) << k.source;
    }
    expect_correct(w, std::move(k), in, 1, true);
  }
}

// ---- reductions, pools, depthwise: at the error model's tolerance -----------------------

TEST_P(ReducedPrecisionKernels, RowReductions) {
  const DType t = GetParam();
  {  // Softmax over the last axis: t scores (scale fused), t probabilities
    Graph g;
    add_input(g, "s", {2, 4, 7, 96});
    add_initializer(g, "scale", Tensor::scalar<float>(0.125f));
    add_node(g, "Mul", {"s", "scale"}, {"x"});
    add_node(g, "Softmax", {"x"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
    g.outputs = {"p"};
    ref::TensorMap in;
    const Workload w = whole(retyped(g, {{"s", t}, {"x", t}, {"p", t}}), ClusterKind::reduction, 40, &in, -8.f, 8.f);
    EXPECT_TRUE(expect_space_correct(w, in, 96, false).count("row_reduce"));
  }
  {  // LayerNorm: f32 residual sum entering it (the policy keeps it f32), t output
    Graph g;
    add_input(g, "x", {6, 128});
    add_input(g, "r", {6, 128});
    add_initializer(g, "gamma", testing::random_tensor({128}, 41, 0.5f, 1.5f));
    add_initializer(g, "beta", testing::random_tensor({128}, 42));
    add_node(g, "Add", {"x", "r"}, {"sum"});
    add_node(g, "LayerNormalization", {"sum", "gamma", "beta"}, {"y"}, attrs({{"axis", int64_t{-1}}}));
    add_node(g, "Relu", {"y"}, {"o"});
    g.outputs = {"o"};
    ref::TensorMap in;
    const Graph typed = retyped(g, {{"x", t}, {"r", t}, {"gamma", t}, {"beta", t}, {"sum", DType::f32},
                                    {"y", t}, {"o", t}});
    const Workload w = whole(typed, ClusterKind::reduction, 43, &in, -2.f, 2.f);
    EXPECT_TRUE(expect_space_correct(w, in, 128, false).count("row_reduce"));
  }
  {  // ReduceMean (t in, f32 out) and ReduceMax over a middle axis (t in, t out)
    Graph g;
    add_input(g, "x", {3, 50, 20});
    add_node(g, "ReduceMean", {"x"}, {"m"}, attrs({{"axes", Ints{-1}}, {"keepdims", int64_t{1}}}));
    g.outputs = {"m"};
    ref::TensorMap in;
    const Workload w = whole(retyped(g, {{"x", t}, {"m", DType::f32}}), ClusterKind::reduction, 44, &in);
    expect_space_correct(w, in, 20, false);
    Graph h;
    add_input(h, "x", {3, 50, 20});
    add_node(h, "ReduceMax", {"x"}, {"m"}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}));
    h.outputs = {"m"};
    const Workload w2 = whole(retyped(h, {{"x", t}, {"m", t}}), ClusterKind::reduction, 45, &in);
    expect_space_correct(w2, in, 50, false);
  }
  {  // GlobalAveragePool of t, Sigmoid epilogue, f32 output
    Graph g;
    add_input(g, "x", {2, 16, 7, 7});
    add_node(g, "GlobalAveragePool", {"x"}, {"gap"});
    add_node(g, "Sigmoid", {"gap"}, {"o"});
    g.outputs = {"o"};
    ref::TensorMap in;
    const Workload w = whole(retyped(g, {{"x", t}, {"gap", t}, {"o", DType::f32}}), ClusterKind::reduction, 46, &in);
    expect_space_correct(w, in, 49, false);
  }
}

TEST_P(ReducedPrecisionKernels, PoolWindows) {
  const DType t = GetParam();
  Graph g;
  add_input(g, "x", {2, 5, 13, 12});
  add_node(g, "Relu", {"x"}, {"r"});
  add_node(g, "MaxPool", {"r"}, {"mp"}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}},
                                              {"pads", Ints{1, 1, 1, 1}}}));
  g.outputs = {"mp"};
  ref::TensorMap in;
  const Workload w = whole(retyped(g, {{"x", t}, {"r", t}, {"mp", t}}), ClusterKind::reduction, 50, &in);
  EXPECT_TRUE(expect_space_correct(w, in, 9, false).count("pool_window"));
  Graph h;
  add_input(h, "x", {2, 5, 13, 12});
  add_node(h, "AveragePool", {"x"}, {"ap"}, attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}},
                                                   {"count_include_pad", int64_t{1}}}));
  add_node(h, "Add", {"ap", "x"}, {"o"});
  h.outputs = {"o"};
  const Workload w2 = whole(retyped(h, {{"x", t}, {"ap", t}, {"o", DType::f32}}), ClusterKind::reduction, 51, &in);
  expect_space_correct(w2, in, 9, false);
}

TEST_P(ReducedPrecisionKernels, DepthwiseConv) {
  const DType t = GetParam();
  Graph g;
  add_input(g, "x", {2, 6, 11, 13});
  add_initializer(g, "w", testing::random_tensor({6, 1, 3, 3}, 60));
  add_initializer(g, "b", testing::random_tensor({6}, 61));
  add_node(g, "Conv", {"x", "w", "b"}, {"y"}, attrs({{"group", int64_t{6}}, {"pads", Ints{1, 1, 1, 1}},
                                                     {"kernel_shape", Ints{3, 3}}}));
  add_node(g, "Clip", {"y"}, {"o"}, attrs({{"min", 0.f}, {"max", 6.f}}));
  g.outputs = {"o"};
  ref::TensorMap in;
  const Workload w = whole(retyped(g, {{"x", t}, {"w", t}, {"b", t}, {"y", t}, {"o", t}}),
                           ClusterKind::depthwise, 62, &in);
  EXPECT_TRUE(expect_space_correct(w, in, 9, false).count("depthwise_direct"));
  // f32 input read by an f16/bf16 kernel, f32 output.
  const Workload w2 = whole(retyped(g, {{"w", t}, {"b", t}, {"y", t}, {"o", DType::f32}}),
                            ClusterKind::depthwise, 63, &in);
  expect_space_correct(w2, in, 9, false, 2);
}

TEST_P(ReducedPrecisionKernels, ResizeOnStorage) {
  // Resize of f16/bf16 data (nearest, linear, cubic) fused with a residual Add, as FPN's
  // top-down path: taps summed in fp32 from the stored values, rounded once to the output.
  const DType t = GetParam();
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    SCOPED_TRACE(mode);
    Graph g;
    add_input(g, "x", {1, 5, 6, 7});
    add_input(g, "skip", {1, 5, 12, 14});
    add_initializer(g, "scales", Tensor::from_vector<float>({4}, {1.f, 1.f, 2.f, 2.f}));
    add_node(g, "Resize", {"x", "", "scales"}, {"r"}, attrs({{"mode", std::string(mode)}}));
    add_node(g, "Add", {"r", "skip"}, {"o"});
    g.outputs = {"o"};
    ref::TensorMap in;
    const Workload w = whole(retyped(g, {{"x", t}, {"skip", t}, {"r", t}, {"o", t}}),
                             ClusterKind::elementwise, 70, &in);
    EXPECT_TRUE(expect_space_correct(w, in, 1, false).count("elementwise"));
  }
}

TEST_P(ReducedPrecisionKernels, ReferenceKernelOfHeavyOps) {
  const DType t = GetParam();
  // Conv, MatMul and Gemm from t operands (fp32 accumulation), t or f32 outputs: only the
  // reference kernel (the worker's oracle) covers them here; the GEMM templates have their
  // own tests.
  Graph g;
  add_input(g, "x", {1, 3, 9, 9});
  add_initializer(g, "w", testing::random_tensor({4, 3, 3, 3}, 70));
  add_node(g, "Conv", {"x", "w"}, {"c"}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  add_input(g, "a", {5, 40});
  add_input(g, "m", {40, 6});
  add_node(g, "MatMul", {"a", "m"}, {"mm"});
  add_node(g, "Gemm", {"a", "m"}, {"gm"}, attrs({{"alpha", 0.5f}}));
  add_node(g, "Softmax", {"gm"}, {"sm"}, attrs({{"axis", int64_t{-1}}}));
  g.outputs = {"c", "mm", "sm"};
  const Graph typed = retyped(g, {{"x", t}, {"w", t}, {"c", t}, {"a", t}, {"m", t}, {"mm", DType::f32},
                                  {"gm", t}, {"sm", t}});
  ref::TensorMap in;
  const Workload w = whole(typed, ClusterKind::opaque, 71, &in);
  expect_correct(w, generate_reference(w), in, 40, false);
}

// ---- every workload of the tiny models, stored in f16 ------------------------------------

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

class ReducedPrecisionModels : public ReducedKernelTest {};

TEST_F(ReducedPrecisionModels, EveryWorkloadOfTheTinyModelsInF16) {
  size_t count = 0, variants = 0, reduced = 0;
  for (const char* model : {"tiny_cnn", "tiny_transformer"}) {
    const Graph g = all_reduced(
        simplify(import_onnx_file(std::string(DC_SOURCE_DIR) + "/examples/" + model + "/model.onnx")),
        DType::f16);
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    for (const auto& w : set.workloads) {
      ref::TensorMap in;
      uint32_t seed = 200 + static_cast<uint32_t>(count);
      for (const auto& name : w.graph.inputs) {
        const TensorInfo& info = w.graph.info(name);
        if (is_float(info.dtype)) {
          in[name] = random_value(info, seed++);
        } else {  // indices and masks: 0 or 1, valid for any dimension
          Tensor v(info.dtype, info.shape);
          for (int64_t i = 0; i < v.numel(); ++i) {
            if (info.dtype == DType::i64) v.mutable_data<int64_t>()[i] = i % 2;
            else if (info.dtype == DType::i32) v.mutable_data<int32_t>()[i] = static_cast<int32_t>(i % 2);
            else if (info.dtype == DType::boolean) v.mutable_data<bool>()[i] = i % 2 == 0;
            else FAIL() << "input dtype " << dtype_name(info.dtype);
          }
          in[name] = v;
        }
      }
      reduced += w.canonical.find("f16[") != std::string::npos;
      const WorkloadShape s = analyze_workload(w);
      const int64_t k = reduction_length(w, s);
      expect_correct(w, generate_reference(w), in, k, false);
      ++count;
      // One variant of each template this storage work covers (the GEMM family and
      // attention templates have their own f16 paths and tests).
      if (s.family == Family::gemm || s.family == Family::conv || s.family == Family::attention) continue;
      const auto vs = enumerate_variants(w, a100(), SpaceOptions{{"fp32"}});
      ASSERT_FALSE(vs.empty()) << w.canonical;
      expect_correct(w, generate_kernel(w, vs[vs.size() / 2]), in, k, false);
      ++variants;
    }
  }
  EXPECT_GE(count, 21u + 60u);  // docs/candidates.md: 21 and 60 workloads
  EXPECT_GE(variants, 20u);
  EXPECT_GE(reduced, count - 3);  // all but the transformer's 3 integer mask Unsqueezes
}

TEST(ReducedPrecisionCodegen, StorageTypesInTheSource) {
  // Parameters are the prelude's storage structs; loads widen, stores round.
  Graph g;
  add_input(g, "x", {64});
  add_node(g, "Relu", {"x"}, {"y"});
  g.outputs = {"y"};
  const Graph typed = retyped(g, {{"x", DType::f16}, {"y", DType::bf16}});
  ref::TensorMap in;
  const Workload w = whole(typed, ClusterKind::elementwise, 80, &in);
  const GeneratedKernel k = generate_reference(w);
  EXPECT_NE(k.source.find("const dc_half* DC_RESTRICT in0"), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("dc_bfloat16* DC_RESTRICT out0"), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("dc_to_f32(in0["), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("dc_round_bf16("), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("dc_from_f32<dc_bfloat16>("), std::string::npos) << k.source;
  // One rounding per computed f16 tensor: none for the Transpose (bits move), one for the
  // Relu (a float value of the compute type until rounded).
  Graph h;
  add_input(h, "x", {8, 4});
  add_node(h, "Transpose", {"x"}, {"t"});
  add_node(h, "Relu", {"t"}, {"r"});
  add_node(h, "Add", {"r", "t"}, {"s"});
  h.outputs = {"s"};
  const Workload hw = whole(retyped(h, {{"x", DType::f16}, {"t", DType::f16}, {"r", DType::f16},
                                        {"s", DType::f16}}), ClusterKind::elementwise, 81, &in);
  Variant v;
  v.template_name = "elementwise";
  v.params = {{"threads", 64}, {"vec", 1}, {"elems_per_thread", 1}};
  const std::string src = generate_kernel(hw, v).source;
  size_t rounds = 0;
  for (size_t p = src.find("dc_round_f16("); p != std::string::npos; p = src.find("dc_round_f16(", p + 1)) ++rounds;
  EXPECT_EQ(rounds, 2u + 1u) << src;  // the prelude's definition + Relu + Add
}

TEST(ReducedPrecisionCodegen, VariantToleranceFollowsTheWorkload) {
  // The worker's and tune's bound: K of the GEMM, the row of a reduction, 1 elementwise;
  // the output dtype of coarsest storage.
  Graph g;
  add_input(g, "a", {8, 300});
  add_input(g, "b", {300, 16});
  add_node(g, "MatMul", {"a", "b"}, {"c"});
  g.outputs = {"c"};
  ref::TensorMap in;
  const Workload mm = whole(retyped(g, {{"a", DType::f16}, {"b", DType::f16}, {"c", DType::f16}}),
                            ClusterKind::gemm, 90, &in);
  EXPECT_EQ(reduction_length(mm, analyze_workload(mm)), 300);
  const Tolerance t = variant_tolerance("fp16", mm);
  EXPECT_EQ(t.rtol, kernel_tolerance("fp16", DType::f16, 300).rtol);
  EXPECT_GT(t.rtol, variant_tolerance("fp32", mm).rtol);

  Graph h;
  add_input(h, "x", {4, 77});
  add_node(h, "Softmax", {"x"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(h, "Relu", {"p"}, {"o"});
  h.outputs = {"o", "p"};
  const Workload sm = whole(retyped(h, {{"p", DType::f32}, {"o", DType::bf16}}), ClusterKind::reduction, 91, &in);
  EXPECT_EQ(reduction_length(sm, analyze_workload(sm)), 77);
  EXPECT_EQ(variant_tolerance("fp32", sm).rtol, kernel_tolerance("fp32", DType::bf16, 77).rtol);
  const Workload op = whole(retyped(h, {}), ClusterKind::opaque, 92, &in);
  EXPECT_EQ(reduction_length(op, analyze_workload(op)), 77);

  Graph e;
  add_input(e, "x", {4, 77});
  add_node(e, "Relu", {"x"}, {"o"});
  e.outputs = {"o"};
  const Workload ew = whole(retyped(e, {}), ClusterKind::elementwise, 93, &in);
  EXPECT_EQ(reduction_length(ew, analyze_workload(ew)), 1);
  EXPECT_EQ(variant_tolerance("fp32", ew).rtol, 1e-5);
}

}  // namespace
}  // namespace dc
