// The CUDA-core templates of codegen/ that are not the GEMM family: the naive reference
// kernel (every workload of the tiny models, every op kind), "elementwise" and
// "opaque_generic", "row_reduce" and "pool_window", over representative variants of their
// parameter spaces and edge shapes. Every kernel compiles with NVRTC for sm_80 and runs on
// the host emulator (outputs poisoned to NaN before the launches, so an unwritten element
// fails) with fresh seeded random inputs, compared with the CPU reference executor at a
// relative L2 error of at most 1e-5.
#include <algorithm>
#include <functional>
#include <set>

#include "candidates.h"
#include "emulator.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
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

// Compiles `k` with NVRTC for sm_80, runs it on the emulator and compares every output with
// the CPU reference executor on the workload graph. Returns the worst relative L2 error.
double expect_correct(const Workload& w, const GeneratedKernel& k, const ref::TensorMap& in) {
  SCOPED_TRACE(k.template_name + " " + k.variant_key);
  const CompileResult cr = compile_cuda(k.source, "sm_80");
  EXPECT_TRUE(cr.ok) << cr.error << "\n" << k.source;
  std::vector<Tensor> bufs(k.buffers.size());
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) bufs[i] = in.at(w.graph.inputs[i]);
  const EmulatorResult r = emulate(k, bufs);
  EXPECT_TRUE(r.ok) << r.error << "\n" << k.source;
  if (!r.ok) return 1e9;
  const auto want = ref::run_graph(w.graph, in);
  double worst = 0;
  for (size_t j = 0; j < w.graph.outputs.size(); ++j) {
    const std::string& name = w.graph.outputs[j];
    const Tensor& got = bufs[w.graph.inputs.size() + j];
    const ref::Comparison c = ref::compare_tensors(got, want.at(name), 1e-5, 0.0);
    EXPECT_TRUE(c.pass) << "output " << name << ": rel L2 " << c.rel_l2_error << ", max abs "
                        << c.max_abs_error << " " << c.problem << "\n" << k.source;
    worst = std::max(worst, c.pass ? c.rel_l2_error : 1e9);
  }
  return worst;
}

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

// ---- the reference kernel ----------------------------------------------------------------

TEST(CodegenReference, EveryWorkloadOfTheTinyModels) {
  size_t count = 0;
  std::set<std::string> ops;
  for (const char* model : {"tiny_cnn", "tiny_transformer"}) {
    const Graph g = load(model);
    const WorkloadSet set = dedupe_workloads(g, generate_candidates(g));
    for (const auto& w : set.workloads) {
      SCOPED_TRACE(std::string(model) + " workload " + w.signature + "\n" + w.canonical);
      const GeneratedKernel k = generate_reference(w);
      EXPECT_EQ(k.launches.size(), w.graph.nodes.size());
      for (const auto& n : w.graph.nodes) ops.insert(n.op);
      expect_correct(w, k, random_inputs(w.graph, 100 + static_cast<uint32_t>(count)));
      ++count;
    }
  }
  EXPECT_EQ(count, 21u + 60u);  // docs/candidates.md
  for (const char* op : {"Conv", "MatMul", "Gemm", "Softmax", "LayerNormalization", "MaxPool",
                         "AveragePool", "GlobalAveragePool", "Transpose", "Reshape"})
    EXPECT_TRUE(ops.count(op)) << op;
}

}  // namespace
}  // namespace dc
