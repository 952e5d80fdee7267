// The CUDA-core templates of codegen/ that are not the GEMM family: the naive reference
// kernel (every workload of the tiny models, every op kind), "elementwise" and
// "opaque_generic", "row_reduce" and "pool_window", over representative variants of their
// parameter spaces and edge shapes. Every kernel compiles with NVRTC for sm_80 and runs on
// the host emulator (outputs poisoned to NaN before the launches, so an unwritten element
// fails) with fresh seeded random inputs, compared with the CPU reference executor at a
// relative L2 error of at most 1e-5.
#include <algorithm>
#include <atomic>
#include <functional>
#include <set>
#include <thread>

#include "candidates.h"
#include "emulator.h"
#include "emulator/compile.h"
#include "generate.h"
#include "gpu_catalog.h"
#include "nvrtc.h"
#include "onnx/import.h"
#include "param_space.h"
#include "pass_testing.h"
#include "passes/simplify.h"
#include "ref/compare.h"
#include "ref/executor.h"

namespace dc {
namespace {

using testing::add_initializer;
using testing::add_input;
using testing::add_node;
using testing::attrs;

const GpuSpec& a100() {
  static const GpuSpec spec = GpuCatalog::builtin().require("a100");
  return spec;
}

// Random values for a tensor of any dtype dc kernels take: f32 uniform in [lo, hi), integers
// in [0, int_hi), bools 0/1; never all zeros.
Tensor random_value(const TensorInfo& info, uint32_t seed, float lo, float hi, int64_t int_hi) {
  if (info.dtype == DType::f32) return testing::random_tensor(info.shape, seed, lo, hi);
  std::mt19937 rng(seed);
  Tensor t(info.dtype, info.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = static_cast<int64_t>(rng() % static_cast<uint32_t>(int_hi));
    switch (info.dtype) {
      case DType::i64: t.mutable_data<int64_t>()[i] = v; break;
      case DType::i32: t.mutable_data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::boolean: t.mutable_data<bool>()[i] = (v & 1) != 0; break;
      default: ADD_FAILURE() << "no random values for " << dtype_name(info.dtype);
    }
  }
  return t;
}

struct InputOptions {
  float lo = -1.f, hi = 1.f;
  int64_t int_hi = 2;
  ref::TensorMap fixed;  // by workload input name
};

ref::TensorMap random_inputs(const Graph& g, uint32_t seed, const InputOptions& o = {}) {
  ref::TensorMap in;
  for (const auto& name : g.inputs)
    in[name] = o.fixed.count(name) ? o.fixed.at(name) : random_value(g.info(name), seed++, o.lo, o.hi, o.int_hi);
  return in;
}

// Every test of this file queues its kernels with expect_correct; when the test ends, every
// kernel is compiled with NVRTC (sm_80) and with the emulator's host compiler on worker
// threads (most of the file's time is compiling; both compilers may run concurrently), then
// run on the emulator one after another and compared with the CPU reference executor.
class KernelTest : public ::testing::Test {
 protected:
  void TearDown() override { run_queued(); }

  // Queues `k` of workload `w` to run on `in`.
  void expect_correct(const Workload& w, GeneratedKernel k, const ref::TensorMap& in) {
    std::string label = k.template_name + " " + k.variant_key + "\n" + w.canonical;
    for (const auto& t : context_) label = t + "\n" + label;
    jobs_.push_back({std::move(label), w, std::move(k), in});
  }

  // Labels the kernels queued while it lives (a SCOPED_TRACE for the deferred checks).
  struct Context {
    Context(KernelTest* t, std::string what) : test(t) { t->context_.push_back(std::move(what)); }
    ~Context() { test->context_.pop_back(); }
    KernelTest* test;
  };

 private:
  struct Job {
    std::string label;
    Workload w;
    GeneratedKernel k;
    ref::TensorMap in;
  };

  void run_queued() {
    std::vector<std::string> nvrtc_errors(jobs_.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t)
      workers.emplace_back([&] {
        for (size_t i; (i = next++) < jobs_.size();) {
          const CompileResult r = compile_cuda(jobs_[i].k.source, "sm_80");
          if (!r.ok) nvrtc_errors[i] = r.error;
          emu::compile_library(emulator_source(jobs_[i].k), EmulatorOptions{});  // warms the cache
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
        const ref::Comparison c =
            ref::compare_tensors(bufs[j.w.graph.inputs.size() + o], want.at(name), 1e-5, 0.0);
        EXPECT_TRUE(c.pass) << "output " << name << ": rel L2 " << c.rel_l2_error << ", max abs "
                            << c.max_abs_error << " " << c.problem << "\n" << j.k.source;
      }
    }
    jobs_.clear();
  }

  std::vector<Job> jobs_;
  std::vector<std::string> context_;

 protected:
  // The reference kernel (once per workload) and up to `max` variants of `w` satisfying
  // `pred` (at least one) are correct on the same inputs; returns the variants' kernels.
  std::vector<GeneratedKernel> expect_variants_correct(const Workload& w, const ref::TensorMap& in,
                                                       const std::function<bool(const Variant&)>& pred,
                                                       size_t max = 3);

  std::set<std::string> referenced_;  // workload signatures whose reference kernel ran
};

// ---- building workloads by hand -------------------------------------------------------

// A graph whose tensors are typed by running it once on `values` (its inputs), cut as one
// workload of `kind` holding all its nodes; `in` receives the workload's input values.
Workload workload_of(Graph g, const ref::TensorMap& values, ClusterKind kind, ref::TensorMap* in) {
  ref::RunOptions opts;
  opts.keep_intermediates = true;
  for (const auto& [name, t] : ref::run_graph(g, values, opts))
    g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  std::vector<size_t> all(g.nodes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  Workload w = make_workload(g, all, kind);
  in->clear();
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) {
    const std::string& src = w.source_inputs[i];
    (*in)[w.graph.inputs[i]] = values.count(src) ? values.at(src) : g.initializers.at(src);
  }
  return w;
}

// Random f32 values for every graph input and every non-structural initializer slot.
ref::TensorMap random_graph_inputs(const Graph& g, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  ref::TensorMap v;
  for (const auto& name : g.inputs) v[name] = testing::random_tensor(g.info(name).shape, seed++, lo, hi);
  return v;
}

// The variants of `w` on the A100 that satisfy `pred`, at most `max` of them, spread over
// the enumeration order.
std::vector<Variant> pick(const Workload& w, const std::function<bool(const Variant&)>& pred, size_t max) {
  std::vector<Variant> all;
  for (const auto& v : enumerate_variants(w, a100(), SpaceOptions{{"fp32"}}))
    if (pred(v)) all.push_back(v);
  std::vector<Variant> out;
  for (size_t i = 0; i < max && i < all.size(); ++i)
    out.push_back(all[i * all.size() / std::min(max, all.size())]);
  return out;
}

Graph load(const std::string& example) {
  return simplify(import_onnx_file(std::string(DC_SOURCE_DIR) + "/examples/" + example + "/model.onnx"));
}

// One fixture per suite (gtest names fixtures after their suite).
class CodegenReference : public KernelTest {};
class CodegenElementwise : public KernelTest {};
class CodegenOpaque : public KernelTest {};
class CodegenRowReduce : public KernelTest {};
class CodegenPool : public KernelTest {};
class CodegenTemplates : public KernelTest {};

// ---- the reference kernel ----------------------------------------------------------------

TEST_F(CodegenReference, EveryWorkloadOfTheTinyModels) {
  size_t count = 0;
  std::set<std::string> ops;
  for (const char* model : {"tiny_cnn", "tiny_transformer"}) {
    const Graph g = load(model);
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    for (const auto& w : set.workloads) {
      const Context ctx(this, std::string(model) + " workload " + w.signature + "\n" + w.canonical);
      const GeneratedKernel k = generate_reference(w);
      EXPECT_EQ(k.launches.size(), w.graph.nodes.size());
      for (const auto& n : w.graph.nodes) ops.insert(n.op);
      expect_correct(w, k, random_inputs(w.graph, 100 + static_cast<uint32_t>(count)));
      ++count;
    }
  }
  EXPECT_GE(count, 21u + 60u);  // docs/candidates.md: 21 and 60 workloads
  for (const char* op : {"Conv", "MatMul", "Gemm", "Softmax", "LayerNormalization", "MaxPool",
                         "AveragePool", "GlobalAveragePool", "Transpose", "Reshape"})
    EXPECT_TRUE(ops.count(op)) << op;
}

// ---- checks over variants ---------------------------------------------------------------

std::vector<GeneratedKernel> KernelTest::expect_variants_correct(
    const Workload& w, const ref::TensorMap& in, const std::function<bool(const Variant&)>& pred,
    size_t max) {
  if (referenced_.insert(w.signature).second) expect_correct(w, generate_reference(w), in);
  const auto vs = pick(w, pred, max);
  EXPECT_FALSE(vs.empty()) << "no variant of " << w.signature << " satisfies the test's filter";
  std::vector<GeneratedKernel> out;
  for (const auto& v : vs) {
    out.push_back(generate_kernel(w, v));
    expect_correct(w, out.back(), in);
  }
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

bool any(const Variant&) { return true; }

Attributes ints(const std::string& name, std::vector<int64_t> v) { return attrs({{name, v}}); }

Tensor i64s(Shape s, std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(std::move(s), v); }

TEST_F(CodegenReference, HeavyOpsAndEdgeAttributes) {
  auto one = [&](Graph g, const std::string& what) {
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 70), ClusterKind::opaque, &in);
    const Context ctx(this, what);
    const GeneratedKernel k = generate_reference(w);
    EXPECT_EQ(k.template_name, "reference");
    expect_correct(w, k, in);
  };
  {  // grouped Conv: stride, asymmetric pads, dilation, bias; then a 1-D SAME_LOWER Conv
    Graph g;
    add_input(g, "x", {2, 4, 9, 8});
    add_initializer(g, "w", testing::random_tensor({6, 2, 3, 2}, 71));
    add_initializer(g, "b", testing::random_tensor({6}, 72));
    add_node(g, "Conv", {"x", "w", "b"}, {"y"},
             attrs({{"group", int64_t{2}}, {"strides", std::vector<int64_t>{2, 1}},
                    {"pads", std::vector<int64_t>{1, 0, 2, 1}}, {"dilations", std::vector<int64_t>{1, 2}}}));
    g.outputs = {"y"};
    one(g, "grouped conv");
    Graph h;
    add_input(h, "x", {1, 3, 10});
    add_initializer(h, "w", testing::random_tensor({4, 3, 3}, 73));
    add_node(h, "Conv", {"x", "w"}, {"y"}, attrs({{"strides", std::vector<int64_t>{2}}, {"auto_pad", std::string("SAME_LOWER")}}));
    h.outputs = {"y"};
    one(h, "conv1d");
  }
  {  // MatMul: broadcast batch dims, 1-D operands on either side
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
    one(g, "matmul");
  }
  {  // Gemm: transposes, alpha, beta, C broadcast as [N], [M, 1] and a scalar
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
    one(g, "gemm");
  }
}

TEST_F(CodegenReference, ReduceEdgeCases) {
  // Integer sums and maxima; ReduceMean over every axis (no axes); noop_with_empty_axes.
  Graph g;
  add_input(g, "k", {3, 4, 5}, DType::i64);
  add_input(g, "x", {3, 4, 5});
  add_node(g, "ReduceSum", {"k"}, {"s"}, attrs({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}));
  add_node(g, "ReduceMax", {"k"}, {"m"}, attrs({{"axes", std::vector<int64_t>{0, 2}}}));
  add_node(g, "ReduceMean", {"x"}, {"all"}, attrs({{"keepdims", int64_t{0}}}));
  g.outputs = {"s", "m", "all"};
  ref::TensorMap values = random_graph_inputs(g, 80);
  values["k"] = random_value({DType::i64, {3, 4, 5}}, 81, 0, 0, 1000);
  ref::TensorMap in;
  const Workload w = workload_of(g, values, ClusterKind::opaque, &in);
  expect_correct(w, generate_reference(w), in);
  for (int64_t noop : {0, 1}) {
    Graph h;
    add_input(h, "x", {3, 4, 8});
    add_node(h, "ReduceMean", {"x"}, {"y"}, attrs({{"noop_with_empty_axes", noop}}));
    h.outputs = {"y"};
    ref::TensorMap hin;
    const Workload hw = workload_of(h, random_graph_inputs(h, 82), ClusterKind::reduction, &hin);
    const Context ctx(this, "noop_with_empty_axes " + std::to_string(noop));
    expect_variants_correct(hw, hin, any, 2);
  }
}

TEST(CodegenRefusals, GeneratorGapsAreInternalErrors) {
  // Ops without naive code are listed; templates refuse workloads of another shape.
  Workload w;
  w.signature = "gap";
  add_input(w.graph, "x", {4});
  w.graph.tensors["y"] = {DType::f32, {4}};
  w.graph.tensors["z"] = {DType::f32, {4}};
  add_node(w.graph, "Foo", {"x"}, {"y"});
  add_node(w.graph, "Bar", {"y"}, {"z"});
  w.graph.outputs = {"z"};
  try {
    generate_reference(w);
    ADD_FAILURE() << "no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("Foo, Bar"), std::string::npos) << e.what();
  }
  Variant ew;
  ew.template_name = "elementwise";
  ew.params = {{"threads", 128}, {"elems_per_thread", 1}, {"vec", 1}};
  EXPECT_THROW(generate_kernel(w, ew), InternalError);
  Variant rr;
  rr.template_name = "row_reduce";
  rr.params = {{"threads_per_row", 32}, {"rows_per_block", 1}, {"vec", 1}, {"cache", 0}};
  EXPECT_THROW(generate_kernel(w, rr), InternalError);  // no reduction in it
  Variant pw;
  pw.template_name = "pool_window";
  pw.params = ew.params;
  EXPECT_THROW(generate_kernel(w, pw), InternalError);  // no window pool in it
}

// ---- elementwise ---------------------------------------------------------------------------

TEST_F(CodegenElementwise, BroadcastChainVectorised) {
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
  ref::TensorMap in;
  const Workload w = workload_of(g, random_graph_inputs(g, 1), ClusterKind::elementwise, &in);
  ASSERT_EQ(analyze_workload(w).vec_align, 4);
  for (const auto& k : expect_variants_correct(w, in, [](const Variant& v) { return v.param("vec") == 4; }, 3))
    EXPECT_EQ(count(k.source, "const float4 vin"), 2u) << "x and b as float4, c element-wise";
  for (const auto& k : expect_variants_correct(w, in, [](const Variant& v) { return v.param("vec") == 2 && v.param("elems_per_thread") == 8; }, 1))
    EXPECT_EQ(count(k.source, "make_float2("), 2u) << "both outputs stored as float2";
  expect_variants_correct(w, in, [](const Variant& v) { return v.param("vec") == 1 && v.param("threads") == 512; }, 1);
}

TEST_F(CodegenElementwise, PositiveMathAndIntegerOutputs) {
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
  ref::TensorMap in;
  const Workload w = workload_of(g, random_graph_inputs(g, 2, 0.1f, 3.f), ClusterKind::elementwise, &in);
  expect_variants_correct(w, in, [](const Variant& v) { return v.param("vec") == 4 && v.param("elems_per_thread") == 2; }, 2);
  expect_variants_correct(w, in, [](const Variant& v) { return v.param("vec") == 1; }, 1);
}

TEST_F(CodegenElementwise, IndexMaps) {
  // Transpose -> Reshape -> Concat -> Slice (step 2) -> Relu, and Expand/Tile/Split/Gather
  // with constant and run-time indices, Where with a broadcast condition: odd shapes,
  // outputs of three shapes in one kernel.
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
  ref::TensorMap in;
  const Workload w = workload_of(g, values, ClusterKind::elementwise, &in);
  expect_variants_correct(w, in, any, 3);

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
  const Workload w2 = workload_of(h, random_graph_inputs(h, 4), ClusterKind::elementwise, &in);
  expect_variants_correct(w2, in, any, 2);
}

TEST_F(CodegenElementwise, PadAndResize) {
  // Pad in every mode (negative pads crop), then Resize in every mode and coordinate
  // transformation, each fused with an activation; and Pad -> Resize -> Add in one kernel.
  auto one = [&](const std::function<void(Graph&)>& build, const std::string& what, uint32_t seed) {
    Graph g;
    add_input(g, "x", {2, 3, 5, 6});
    build(g);
    g.outputs = {g.nodes.back().outputs[0]};
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, seed), ClusterKind::elementwise, &in);
    const Context ctx(this, what);
    expect_variants_correct(w, in, any, 2);
  };
  for (const char* mode : {"constant", "reflect", "edge", "wrap"})
    one([&](Graph& g) {
          add_initializer(g, "p", i64s({8}, {0, 1, 2, -1, 0, 0, 3, 4}));
          add_initializer(g, "v", Tensor::scalar<float>(0.5f));
          add_node(g, "Pad", {"x", "p", "v"}, {"y"}, attrs({{"mode", std::string(mode)}}));
          add_node(g, "Tanh", {"y"}, {"t"});
        },
        std::string("Pad ") + mode, 31);
  struct Case {
    const char* mode;
    const char* coord;
    const char* nearest;
    std::vector<float> scales;
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {
      {"nearest", "half_pixel", "round_prefer_floor", {1, 1, 2, 1.5f}, {}},
      {"nearest", "asymmetric", "ceil", {}, {2, 3, 7, 4}},
      {"nearest", "align_corners", "round_prefer_ceil", {}, {2, 3, 9, 11}},
      {"nearest", "tf_half_pixel_for_nn", "floor", {1, 1, 0.6f, 0.5f}, {}},
      {"linear", "pytorch_half_pixel", "", {}, {2, 3, 1, 13}},
      {"linear", "align_corners", "", {1, 1, 1.8f, 2}, {}},
      {"cubic", "half_pixel", "", {1, 1, 2, 0.7f}, {}},
      {"cubic", "asymmetric", "", {}, {2, 3, 8, 9}},
      {"linear", "tf_crop_and_resize", "", {}, {2, 3, 6, 7}},
  };
  uint32_t seed = 40;
  for (const auto& c : cases)
    one([&](Graph& g) {
          Attributes a = attrs({{"mode", std::string(c.mode)},
                                {"coordinate_transformation_mode", std::string(c.coord)}});
          if (*c.nearest) a.set("nearest_mode", std::string(c.nearest));
          if (std::string(c.mode) == "cubic") a.set("exclude_outside", int64_t{seed % 2});
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
        },
        std::string("Resize ") + c.mode + " " + c.coord, seed++);
  one([&](Graph& g) {
        add_input(g, "b", {2, 3, 10, 16});
        add_initializer(g, "p", i64s({8}, {0, 0, 0, 1, 0, 0, 0, 1}));
        add_initializer(g, "s", Tensor::from_vector<float>({4}, {1, 1, 2, 2}));
        add_node(g, "Pad", {"x", "p"}, {"y"}, attrs({{"mode", std::string("reflect")}}));
        add_node(g, "Resize", {"y", "", "s"}, {"u"}, attrs({{"mode", std::string("linear")}}));
        add_node(g, "Add", {"u", "b"}, {"a"});
      },
      "Pad -> Resize -> Add", 60);
}

TEST_F(CodegenElementwise, EdgeShapes) {
  // One element; an odd-sized tensor; activations with attributes.
  for (const Shape& s : {Shape{1}, Shape{3, 5, 7}, Shape{}}) {
    Graph g;
    add_input(g, "x", s);
    add_node(g, "LeakyRelu", {"x"}, {"a"}, attrs({{"alpha", 0.2f}}));
    add_node(g, "HardSigmoid", {"a"}, {"b"}, attrs({{"alpha", 0.3f}, {"beta", 0.4f}}));
    add_node(g, "Clip", {"b"}, {"c"}, attrs({{"min", 0.45f}, {"max", 0.55f}}));
    add_node(g, "Gelu", {"x"}, {"d"}, attrs({{"approximate", std::string("tanh")}}));
    add_node(g, "Add", {"c", "d"}, {"y"});
    g.outputs = {"y"};
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 5, -3.f, 3.f), ClusterKind::elementwise, &in);
    expect_variants_correct(w, in, any, 1);
  }
}

TEST_F(CodegenOpaque, GenericKernel) {
  // An unfolded BatchNormalization is opaque: the generic kernel with the variant's block.
  Graph g;
  add_input(g, "x", {2, 5, 3, 7});
  for (const char* p : {"scale", "bias", "mean"}) add_initializer(g, p, testing::random_tensor({5}, 9));
  add_initializer(g, "var", testing::random_tensor({5}, 10, 0.5f, 2.f));
  add_node(g, "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}, attrs({{"epsilon", 1e-3f}}));
  g.outputs = {"y"};
  ref::TensorMap in;
  Workload w = workload_of(g, random_graph_inputs(g, 6), ClusterKind::opaque, &in);
  in[w.graph.inputs[4]] = testing::random_tensor({5}, 11, 0.5f, 2.f);  // variances > 0
  expect_variants_correct(w, in, any, 1);
  const auto vs = pick(w, any, 1);
  ASSERT_EQ(vs.size(), 1u);
  const GeneratedKernel k = generate_kernel(w, vs[0]);
  EXPECT_EQ(k.template_name, "opaque_generic");
  EXPECT_EQ(k.launches.at(0).block[0], vs[0].param("threads"));
}

// ---- row reductions ------------------------------------------------------------------------

bool warp_row(const Variant& v) { return v.param("threads_per_row") == 32; }
bool block_row(const Variant& v) { return v.param("threads_per_row") > 32; }

TEST_F(CodegenRowReduce, ScaleMaskSoftmax) {
  // Div by a constant, Add a broadcast mask, Softmax over the last axis, Mul epilogue.
  for (int64_t len : {64, 37}) {
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
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 20, -4.f, 4.f), ClusterKind::reduction, &in);
    const Context ctx(this, "row length " + std::to_string(len));
    if (len == 64) {
      for (int64_t cache : {0, 1, 2})
        for (const auto& k : expect_variants_correct(w, in, [&](const Variant& v) { return warp_row(v) && v.param("vec") == 4 && v.param("cache") == cache; }, 1)) {
          EXPECT_EQ(count(k.source, "dcr_x[") > 0, cache == 1);
          EXPECT_EQ(k.launches[0].dynamic_smem_bytes > 0, cache == 2);
          EXPECT_EQ(count(k.source, "__syncthreads()"), 0u) << "warp per row: shuffles only";
        }
      for (const auto& k : expect_variants_correct(w, in, [](const Variant& v) { return block_row(v) && v.param("vec") == 1 && v.param("cache") == 1; }, 1))
        EXPECT_EQ(count(k.source, "__syncthreads()"), 2u) << "max and sum across the row's warps";
      expect_variants_correct(w, in, [](const Variant& v) { return v.param("threads_per_row") == 64 && v.param("vec") == 1 && v.param("rows_per_block") == 8; }, 1);
    } else {
      expect_variants_correct(w, in, warp_row, 2);
      expect_variants_correct(w, in, block_row, 2);
    }
  }
}

TEST_F(CodegenRowReduce, SoftmaxAxesAndEdgeRows) {
  // LogSoftmax over a middle axis (rows not contiguous), legacy Softmax over the flattened
  // trailing dims, one long row, many tiny rows.
  struct Case { Shape shape; std::string op; int64_t axis; bool legacy; };
  for (const Case& c : {Case{{2, 6, 5}, "LogSoftmax", 1, false}, Case{{2, 3, 4}, "Softmax", 1, true},
                        Case{{1, 300}, "Softmax", -1, false}, Case{{37, 3}, "LogSoftmax", 1, false}}) {
    Graph g;
    add_input(g, "x", c.shape);
    Attributes a = attrs({{"axis", c.axis}});
    if (c.legacy) a.set("dc_legacy_flatten", int64_t{1});
    add_node(g, c.op, {"x"}, {"y"}, a);
    g.outputs = {"y"};
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 21, -3.f, 3.f), ClusterKind::reduction, &in);
    const Context ctx(this, shape_str(c.shape) + " " + c.op);
    expect_variants_correct(w, in, warp_row, 2);
    if (c.shape[0] == 37)  // rows not a multiple of the block's rows
      expect_variants_correct(w, in, [](const Variant& v) { return v.param("rows_per_block") == 8; }, 1);
    if (c.shape[1] == 300) expect_variants_correct(w, in, [](const Variant& v) { return v.param("threads_per_row") == 256; }, 2);
  }
}

TEST_F(CodegenRowReduce, AddLayerNorm) {
  // Residual Add prologue, LayerNorm over the last axis (row 96: float4 rows) with a GELU
  // epilogue; then over the last two axes (row 3 x 12) with all three outputs.
  {
    Graph g;
    add_input(g, "x", {3, 5, 96});
    add_input(g, "r", {3, 5, 96});
    add_input(g, "scale", {96});
    add_input(g, "bias", {96});
    add_node(g, "Add", {"x", "r"}, {"a"});
    add_node(g, "LayerNormalization", {"a", "scale", "bias"}, {"n"}, attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5f}}));
    add_node(g, "Gelu", {"n"}, {"y"});
    g.outputs = {"y"};
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 30, -2.f, 2.f), ClusterKind::reduction, &in);
    for (int64_t cache : {0, 1, 2})
      expect_variants_correct(w, in, [&](const Variant& v) { return warp_row(v) && v.param("vec") == 4 && v.param("cache") == cache; }, 1);
    expect_variants_correct(w, in, [](const Variant& v) { return block_row(v) && v.param("cache") == 2; }, 2);
  }
  {
    Graph g;
    add_input(g, "x", {2, 4, 3, 12});
    add_input(g, "scale", {3, 12});
    add_input(g, "bias", {12});
    add_node(g, "LayerNormalization", {"x", "scale", "bias"}, {"n", "mean", "inv"},
             attrs({{"axis", int64_t{-2}}, {"epsilon", 1e-3f}}));
    g.outputs = {"n", "mean", "inv"};
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 31, 0.f, 3.f), ClusterKind::reduction, &in);
    expect_variants_correct(w, in, [](const Variant& v) { return v.param("vec") == 4; }, 2);
    expect_variants_correct(w, in, [](const Variant& v) { return v.param("vec") == 1 && block_row(v); }, 1);
  }
}

TEST_F(CodegenRowReduce, ReduceFamily) {
  struct Case { std::string op; Shape shape; std::vector<int64_t> axes; int64_t keep; bool positive; bool axes_input; };
  const std::vector<Case> cases = {
      {"ReduceMean", {4, 6, 40}, {-1}, 1, false, false},
      {"ReduceSum", {3, 5, 4}, {1}, 0, false, true},   // a middle axis: strided rows
      {"ReduceMax", {2, 3, 4, 5}, {2, 3}, 1, false, false},
      {"ReduceMin", {2, 3, 4, 5}, {0, 2}, 0, false, false},
      {"ReduceL2", {6, 33}, {1}, 1, false, false},
      {"ReduceL1", {6, 33}, {1}, 0, false, false},
      {"ReduceSumSquare", {5, 8}, {-1}, 1, false, false},
      {"ReduceLogSum", {5, 8}, {-1}, 1, true, false},
      {"ReduceLogSumExp", {7, 130}, {1}, 1, false, false},
      {"ReduceProd", {4, 10}, {1}, 1, true, false},
  };
  for (const Case& c : cases) {
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
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 40, c.positive ? 0.5f : -2.f, c.positive ? 1.5f : 2.f),
                                   ClusterKind::reduction, &in);
    const Context ctx(this, c.op);
    expect_variants_correct(w, in, warp_row, 1);
    expect_variants_correct(w, in, [](const Variant& v) { return block_row(v) || v.param("rows_per_block") > 1; }, 1);
  }
}

TEST_F(CodegenRowReduce, GlobalPools) {
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    Graph g;
    add_input(g, "x", {2, 6, 7, 7});
    add_node(g, "Relu", {"x"}, {"a"});
    add_node(g, op, {"a"}, {"y"});
    g.outputs = {"y"};
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 50), ClusterKind::reduction, &in);
    const Context ctx(this, op);
    expect_variants_correct(w, in, warp_row, 1);
    expect_variants_correct(w, in, block_row, 1);
  }
}

// ---- pooling windows -------------------------------------------------------------------------

TEST_F(CodegenPool, WindowsWithPrologueAndEpilogue) {
  struct Case { std::string op; Shape shape; Attributes a; };
  const std::vector<Case> cases = {
      {"MaxPool", {2, 3, 11, 13}, attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                                          {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}})},
      {"MaxPool", {1, 2, 9, 10}, attrs({{"kernel_shape", std::vector<int64_t>{2, 3}}, {"dilations", std::vector<int64_t>{2, 2}},
                                         {"pads", std::vector<int64_t>{0, 1, 2, 0}}})},
      {"AveragePool", {2, 3, 10, 9}, attrs({{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                                             {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}})},
      {"AveragePool", {2, 3, 10, 9}, attrs({{"kernel_shape", std::vector<int64_t>{3, 2}}, {"strides", std::vector<int64_t>{2, 1}},
                                             {"pads", std::vector<int64_t>{1, 0, 1, 1}}, {"count_include_pad", int64_t{1}}})},
      {"AveragePool", {2, 4, 17}, attrs({{"kernel_shape", std::vector<int64_t>{4}}, {"strides", std::vector<int64_t>{3}},
                                          {"auto_pad", std::string("SAME_UPPER")}})},
      {"MaxPool", {1, 2, 5, 6, 7}, attrs({{"kernel_shape", std::vector<int64_t>{2, 2, 3}}, {"strides", std::vector<int64_t>{1, 2, 2}}})},
  };
  for (const Case& c : cases) {
    Graph g;
    add_input(g, "x", c.shape);
    add_input(g, "b", {c.shape[1]} );
    add_node(g, "Relu", {"x"}, {"a"});
    add_node(g, c.op, {"a"}, {"p"}, c.a);
    // Per-channel epilogue: b reshaped to C x 1 x ... by broadcasting needs trailing 1s.
    Shape bs = {c.shape[1]};
    bs.resize(c.shape.size() - 1, 1);
    add_initializer(g, "bshape", i64s({static_cast<int64_t>(bs.size())}, bs));
    add_node(g, "Reshape", {"b", "bshape"}, {"br"});
    add_node(g, "Add", {"p", "br"}, {"y"});
    g.outputs = {"y"};
    ref::TensorMap in;
    const Workload w = workload_of(g, random_graph_inputs(g, 60, -2.f, 2.f), ClusterKind::reduction, &in);
    const Context ctx(this, c.op + " " + shape_str(c.shape));
    ASSERT_EQ(analyze_workload(w).family, Family::pool_window);
    expect_variants_correct(w, in, any, 2);
  }
}

// ---- the tiny models' workloads of these templates -------------------------------------------

TEST_F(CodegenTemplates, TinyModelWorkloads) {
  std::map<std::string, int> kernels;
  for (const char* model : {"tiny_cnn", "tiny_transformer"}) {
    const Graph g = load(model);
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    uint32_t seed = 300;
    for (const auto& w : set.workloads) {
      const Family f = analyze_workload(w).family;
      if (f != Family::elementwise && f != Family::reduction && f != Family::pool_window && f != Family::opaque)
        continue;
      // Elementwise singletons are many and alike: one variant each, the others two.
      const auto vs = pick(w, any, f == Family::elementwise ? 1 : 2);
      const auto in = random_inputs(w.graph, seed++);
      const Context ctx(this, std::string(model) + "\n" + w.canonical);
      for (const auto& v : vs) {
        expect_correct(w, generate_kernel(w, v), in);
        ++kernels[v.template_name];
      }
    }
  }
  EXPECT_GT(kernels["elementwise"], 0);
  EXPECT_GT(kernels["row_reduce"], 0);
  EXPECT_GT(kernels["pool_window"], 0);
}

}  // namespace
}  // namespace dc
