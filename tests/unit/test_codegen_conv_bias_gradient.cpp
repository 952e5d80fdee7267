// A convolution's bias gradient computed by its weight gradient's GEMM (docs/training.md
// "Convolution gradients"): ReduceSum(dY) over the batch and spatial axes and
// dc.ConvGradWeight(X, dY) read the same dY, so the candidate generator offers them as one
// conv-kind cluster (ir/gemm_operand_sum.h) and conv_implicit_gemm's weight-gradient mode
// computes db as one more column of the im2col operand whose elements are all 1. Filter
// counts and C x taps no tile multiple, batch > 1, split-K where offered, every precision
// path, on the host emulator against the CPU reference (fresh random inputs, NaN-poisoned
// outputs, variant_tolerance); NVRTC compiles one variant a path for sm_80.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "candidates.h"
#include "emulator.h"
#include "estimator_testing.h"
#include "generate.h"
#include "ir/workload.h"
#include "nvrtc.h"
#include "param_space.h"
#include "passes/training/add_gradients.h"
#include "random_inputs.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "testing.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

struct BiasCase {
  const char* name;
  Shape x, w;
  std::vector<int64_t> strides, pads;
};

// Odd filter counts and C x taps; a long K (split-K offered); 64 filters (4-warp tf32 blocks).
const BiasCase kCases[] = {
    {"odd_strided", {3, 5, 11, 9}, {7, 5, 3, 3}, {2, 2}, {1, 1, 1, 1}},
    {"long_k", {4, 6, 16, 16}, {9, 6, 3, 3}, {1, 1}, {1, 1, 1, 1}},
    {"wide", {2, 8, 7, 6}, {64, 8, 3, 3}, {1, 1}, {1, 0, 1, 0}},
};

// The workload of dW and db of Conv(x, w, b) with graph input dy: one conv-kind cluster,
// the dc.ConvGradWeight and the ReduceSum.
Workload bias_gradient_workload(const BiasCase& c) {
  Graph g;
  g.opset = 17;
  g.inputs = {"x", "w", "b"};
  g.tensors["x"] = {DType::f32, c.x};
  g.tensors["w"] = {DType::f32, c.w};
  g.tensors["b"] = {DType::f32, {c.w[0]}};
  Node conv = testing::make_node("Conv", {"x", "w", "b"}, {"y"});
  conv.name = "conv";
  conv.attrs.set("strides", c.strides);
  conv.attrs.set("pads", c.pads);
  g.nodes.push_back(conv);
  Shape y{c.x[0], c.w[0]};
  for (size_t d = 0; d < 2; ++d) {
    const int64_t in = c.x[2 + d] + c.pads[d] + c.pads[2 + d];
    y.push_back((in - c.w[2 + d]) / c.strides[d] + 1);
  }
  g.tensors["y"] = {DType::f32, y};
  g.tensors["dy"] = g.tensors["y"];
  g.inputs.push_back("dy");
  const auto grads = add_vector_jacobian_product(g, {{"y", "dy"}}, {"w", "b"});
  g.nodes.erase(g.nodes.begin());
  g.tensors.erase("y");
  g.outputs = {grads.at("w"), grads.at("b")};
  const auto candidates = generate_candidates(g);
  const WorkloadSet set = dedupe_workloads(g, candidates);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Workload& w = set.workloads[set.candidate_workload[i]];
    if (w.kind == ClusterKind::conv && w.graph.outputs.size() == 2) return w;
  }
  ADD_FAILURE() << "no workload of dc.ConvGradWeight with the bias's ReduceSum";
  return {};
}

uint32_t fresh_seed() {
  static uint32_t seed = static_cast<uint32_t>(std::random_device{}());
  return seed++;
}

void check_variant(const Workload& w, const Variant& v, bool nvrtc) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(fmt::format("{} (seed {})", v.key(), seed));
  GeneratedKernel k;
  ASSERT_NO_THROW(k = generate_kernel(w, v));
  const std::vector<Tensor> in = random_workload_inputs(w, seed);
  ref::TensorMap inputs;
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) inputs[w.graph.inputs[i]] = in[i];
  std::vector<Tensor> buffers(k.buffers.size());
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const KernelBuffer& b = k.buffers[i];
    if (b.role == BufferRole::input) {
      buffers[i] = inputs.at(b.name);
      continue;
    }
    Tensor t(b.dtype, b.shape);  // poisoned: an element not written fails the comparison
    std::fill_n(t.mutable_data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
    buffers[i] = t;
  }
  if (nvrtc) {
    const CompileResult cr = compile_cuda(k.source, "sm_80");
    EXPECT_TRUE(cr.ok) << cr.error << "\n" << cr.log;
  }
  const EmulatorResult r = emulate(k, buffers);
  ASSERT_TRUE(r.ok) << r.error;
  const auto expected = ref::run_graph(w.graph, inputs);
  const Tolerance tol = variant_tolerance(v.precision, w);
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    if (k.buffers[i].role != BufferRole::output) continue;
    const ref::Comparison c = ref::compare_tensors(buffers[i], expected.at(k.buffers[i].name), tol.rtol, tol.atol);
    EXPECT_TRUE(c.pass) << k.buffers[i].name << ": rel L2 " << c.rel_l2_error << ", max abs " << c.max_abs_error
                        << " " << c.problem;
  }
}

TEST(CodegenConvBiasGradient, WeightGradientModeWritesTheBiasGradient) {
  const GpuSpec gpu = testing::spec_a100();
  int checked = 0, split = 0;
  for (const BiasCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const Workload w = bias_gradient_workload(c);
    ASSERT_EQ(w.graph.nodes.size(), 2u) << w.canonical;
    for (const char* path : {"fp32", "tf32", "fp16", "bf16"}) {
      SCOPED_TRACE(path);
      const auto space = enumerate_variants(w, gpu, SpaceOptions{{path}});
      if (std::string(path) == "fp32") {
        ASSERT_FALSE(space.empty());
      }
      std::vector<const Variant*> picked;
      if (!space.empty()) picked.push_back(&space.front());
      for (const auto& v : space)
        if (v.param_or("split_k", 1) > 1) {
          picked.push_back(&v);
          break;
        }
      bool nvrtc = true;
      for (const Variant* v : picked) {
        check_variant(w, *v, nvrtc);
        nvrtc = false;
        ++checked;
        split += v->param_or("split_k", 1) > 1;
      }
    }
  }
  EXPECT_GE(checked, 8);
  EXPECT_GE(split, 2);  // long_k's split-K: the bias column's partial sums in the scratch
}

}  // namespace
}  // namespace dc
