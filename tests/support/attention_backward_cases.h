// Workloads of one dc.AttentionGrad (the training step's FlashAttention-2 backward) with edge
// shapes, and consistent inputs for them: O and LSE from dc.Attention's CPU reference on the
// same seeded Q, Kt, V and mask, so P = exp(S - LSE) are real probabilities. Shared by the
// emulator test (tests/unit/test_codegen_attention_backward.cpp) and the PoCL one
// (tests/opencl/test_opencl_attention_backward.cpp); the loop over the template's precision
// paths (expect_attention_backward_paths_match) by the emulator test and the GPU one
// (tests/gpu/test_gpu_attention_backward.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../unit/attention_testing.h"
#include "generate.h"
#include "ir/workload.h"
#include "op_case_harness.h"
#include "param_space.h"
#include "ref/executor.h"
#include "testing.h"
#include "variant_tolerance.h"

namespace dc::testing {

struct AttentionBackwardCase {
  const char* name;
  Shape batch;  // leading dims (batch, heads)
  int64_t sq, sk, d, dv;
  Shape mask;   // empty: none
  float scale;
};

// Sequences that are no tile multiple, batch and heads > 1, cross lengths, with and without
// masks (a BERT key mask broadcast over heads and queries; a causal one with a row masked
// entirely by -inf, whose gradient is 0).
inline std::vector<AttentionBackwardCase> attention_backward_cases() {
  return {{"keymask_b2h3_s37", {2, 3}, 37, 37, 16, 16, {2, 1, 1, 37}, 0.25f},
          {"nomask_b3_q20_k45_d8_dv12", {3}, 20, 45, 8, 12, {}, 0.35355339f},
          {"causal_b2h2_s64_d32", {2, 2}, 64, 64, 32, 32, {64, 64}, 0.17677669f}};
}

inline Shape with_tail(Shape s, int64_t a, int64_t b) {
  s.push_back(a);
  s.push_back(b);
  return s;
}

// One `op` node of the case reading `inputs` (then the mask, if any) and writing `outputs`,
// every tensor stored as `storage` (a mixed-precision step's: f16, bf16) but LSE, f32.
inline Workload attention_case_workload(const AttentionBackwardCase& c, const char* op,
                                        const std::vector<std::string>& inputs,
                                        const std::vector<std::string>& outputs, DType storage) {
  Shape lse = c.batch;
  lse.push_back(c.sq);
  const std::map<std::string, Shape> shapes = {
      {"q", with_tail(c.batch, c.sq, c.d)},   {"kt", with_tail(c.batch, c.d, c.sk)},
      {"v", with_tail(c.batch, c.sk, c.dv)},  {"o", with_tail(c.batch, c.sq, c.dv)},
      {"do", with_tail(c.batch, c.sq, c.dv)}, {"lse", lse},
      {"dq", with_tail(c.batch, c.sq, c.d)},  {"dkt", with_tail(c.batch, c.d, c.sk)},
      {"dv", with_tail(c.batch, c.sk, c.dv)}, {"mask", c.mask}};
  Graph g;
  g.opset = 17;
  Node n;
  n.name = op;
  n.op = op;
  n.inputs = inputs;
  if (!c.mask.empty()) n.inputs.push_back("mask");
  n.outputs = outputs;
  n.attrs.set("scale", c.scale);
  for (const auto& names : {n.inputs, n.outputs})
    for (const auto& t : names) g.tensors[t] = TensorInfo{t == "lse" ? DType::f32 : storage, shapes.at(t)};
  g.inputs = n.inputs;
  g.outputs = n.outputs;
  g.nodes.push_back(n);
  return make_workload(g, {0}, ClusterKind::opaque);
}

inline Workload attention_backward_workload(const AttentionBackwardCase& c, DType storage = DType::f32) {
  return attention_case_workload(c, "dc.AttentionGrad", {"q", "kt", "v", "o", "do", "lse"}, {"dq", "dkt", "dv"},
                                 storage);
}

// The case's forward: one dc.Attention(Q, Kt, V[, mask]) -> (O, LSE), as a training step's
// fused forward (codegen/training_attention.cpp) sees it.
inline Workload attention_forward_workload(const AttentionBackwardCase& c) {
  return attention_case_workload(c, "dc.Attention", {"q", "kt", "v"}, {"o", "lse"}, DType::f32);
}

// The workload's inputs in graph order: seeded Q, Kt, V, dO and mask, O and LSE their forward.
inline std::vector<Tensor> attention_backward_inputs(const Workload& w, const AttentionBackwardCase& c, uint32_t seed) {
  const Node& n = w.graph.nodes.at(0);
  std::map<std::string, Tensor> t;
  t[n.inputs[0]] = random_tensor(w.graph.info(n.inputs[0]).shape, seed, -2.f, 2.f);
  t[n.inputs[1]] = random_tensor(w.graph.info(n.inputs[1]).shape, seed + 1, -2.f, 2.f);
  t[n.inputs[2]] = random_tensor(w.graph.info(n.inputs[2]).shape, seed + 2);
  t[n.inputs[4]] = random_tensor(w.graph.info(n.inputs[4]).shape, seed + 3);
  Node fwd;
  fwd.op = "dc.Attention";
  fwd.name = "forward";
  fwd.inputs = {n.inputs[0], n.inputs[1], n.inputs[2]};
  fwd.outputs = {n.inputs[3], n.inputs[5]};
  fwd.attrs = n.attrs;
  if (n.has_input(6)) {
    Tensor m = random_tensor(c.mask, seed + 4, -1.f, 0.f);
    float* p = m.mutable_data<float>();
    if (c.mask.size() == 2) {  // causal: -1e4 above the diagonal, row 0 masked entirely by -inf
      for (int64_t i = 0; i < c.mask[0]; ++i)
        for (int64_t j = 0; j < c.mask[1]; ++j)
          if (j > i || i == 0) p[i * c.mask[1] + j] = i == 0 ? -std::numeric_limits<float>::infinity() : -1e4f;
    } else {  // key mask: the last 5 keys of batch 1 masked
      for (int64_t j = c.mask.back() - 5; j < c.mask.back(); ++j) p[c.mask.back() + j] = -1e4f;
    }
    t[n.inputs[6]] = m;
    fwd.inputs.push_back(n.inputs[6]);
  }
  Graph fg;
  for (const auto& in : fwd.inputs) {
    fg.inputs.push_back(in);
    fg.tensors[in] = w.graph.info(in);
  }
  fg.tensors[fwd.outputs[0]] = w.graph.info(n.inputs[3]);
  fg.tensors[fwd.outputs[1]] = w.graph.info(n.inputs[5]);
  fg.outputs = fwd.outputs;
  fg.nodes.push_back(fwd);
  ref::TensorMap fin;
  for (const auto& in : fwd.inputs) fin[in] = t.at(in);
  const auto out = ref::run_graph(fg, fin);
  t[n.inputs[3]] = out.at(n.inputs[3]);
  t[n.inputs[5]] = out.at(n.inputs[5]);
  std::vector<Tensor> in;
  for (const auto& name : w.graph.inputs) in.push_back(t.at(name));
  return in;
}

// The case with its operands stored as `storage`: the workload, the f32 case's seeded inputs
// rounded to their storage, and the CPU reference's outputs on those stored values.
struct AttentionBackwardRun {
  Workload w;
  std::vector<Tensor> in;
  ref::TensorMap want;
};

inline AttentionBackwardRun attention_backward_run(const AttentionBackwardCase& c, DType storage, uint32_t seed) {
  AttentionBackwardRun r{attention_backward_workload(c, storage), {}, {}};
  r.in = attention_backward_inputs(attention_backward_workload(c), c, seed);
  ref::TensorMap in_map;
  for (size_t i = 0; i < r.in.size(); ++i) {
    r.in[i] = attn::to_storage(r.in[i], r.w.graph.info(r.w.graph.inputs[i]).dtype);
    in_map[r.w.graph.inputs[i]] = r.in[i];
  }
  r.want = ref::run_graph(r.w.graph, in_map);
  return r;
}

// Each path (Variant::precision, operands' storage) on `device`, every case: the variants of
// the path's precision in the device's space, every tiling of the first case and every fourth
// of the others, generated, compiled for the device, run on the case's seeded inputs (outputs
// poisoned) and compared with the CPU reference within variant_tolerance (docs/precision.md).
// `check_kernel`, if set, asserts on each generated kernel. Returns how many kernels were
// compared: a variant of another precision or one that did not compile is not counted, so
// callers assert the count.
inline int expect_attention_backward_paths_match(
    const CaseDevice& device, const std::vector<std::pair<const char*, DType>>& paths, uint32_t seed,
    const std::function<void(const Variant&, const GeneratedKernel&)>& check_kernel = {}) {
  int compared = 0;
  for (const auto& [precision, storage] : paths) {
    for (const auto& c : attention_backward_cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + precision + " on " + std::string(dtype_name(storage)) + ", " +
                   device.name);
      const AttentionBackwardRun r = attention_backward_run(c, storage, seed);
      const auto space = enumerate_variants(r.w, device.spec, SpaceOptions{{precision}});
      EXPECT_FALSE(space.empty());
      const size_t step = std::string(c.name) == attention_backward_cases()[0].name ? 1 : 4;
      for (size_t i = 0; i < space.size(); i += step) {
        const Variant& v = space[i];
        EXPECT_EQ(v.precision, precision) << v.key();
        if (v.precision != precision) continue;
        const GeneratedKernel k = generate_kernel(r.w, v);
        if (check_kernel) check_kernel(v, k);
        std::string error;
        const std::vector<char> binary = device.compile(k, &error);
        EXPECT_EQ(error, "") << v.key();
        if (!error.empty()) continue;
        EXPECT_EQ(run_and_compare_outputs(device.run, r.w, k, binary, r.in, r.want, false, variant_tolerance(precision, r.w)),
                  "")
            << v.key();
        ++compared;
      }
    }
  }
  return compared;
}

}  // namespace dc::testing
