// Hand-built GPU specs and workloads for the parameter-space and estimator tests. The
// specs carry the published figures (common/gpu/gpus.yaml names the sources) but are written
// out here so that these tests do not depend on the catalog; the workloads are small graphs
// with their FLOPs and compulsory bytes computed by hand, as make_workload would.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu/gpu_spec.h"
#include "ir/graph.h"
#include "ir/workload.h"
#include "variant.h"

namespace dc::testing {

inline GpuSpec spec_a100() {
  GpuSpec g;
  g.name = "a100";
  g.arch = "ampere";
  g.cc_major = 8;
  g.cc_minor = 0;
  g.sm_count = 108;
  g.boost_clock_mhz = 1410;
  g.fp32_lanes_per_sm = 64;  // 19.5 TFLOPS
  g.tc_fp16_flops_per_sm_clk = 2048;
  g.tc_bf16_flops_per_sm_clk = 2048;
  g.tc_tf32_flops_per_sm_clk = 1024;
  g.dram_bandwidth_gbs = 1555;
  g.l2_bytes = 40LL << 20;
  g.smem_per_sm_bytes = 164 * 1024;
  g.smem_per_block_bytes = 163 * 1024;
  g.regs_per_sm = 65536;
  g.regs_per_thread = 255;
  g.max_threads_per_sm = 2048;
  g.max_threads_per_block = 1024;
  g.max_blocks_per_sm = 32;
  return g;
}

inline GpuSpec spec_h100() {
  GpuSpec g = spec_a100();
  g.name = "h100";
  g.arch = "hopper";
  g.cc_major = 9;
  g.sm_count = 132;
  g.boost_clock_mhz = 1980;
  g.fp32_lanes_per_sm = 128;  // 67 TFLOPS
  g.tc_fp16_flops_per_sm_clk = 3786;
  g.tc_bf16_flops_per_sm_clk = 3786;
  g.tc_tf32_flops_per_sm_clk = 1893;
  g.dram_bandwidth_gbs = 3350;
  g.l2_bytes = 50LL << 20;
  g.smem_per_sm_bytes = 228 * 1024;
  g.smem_per_block_bytes = 227 * 1024;
  return g;
}

inline GpuSpec spec_t4() {
  GpuSpec g = spec_a100();
  g.name = "t4";
  g.arch = "turing";
  g.cc_major = 7;
  g.cc_minor = 5;
  g.sm_count = 40;
  g.boost_clock_mhz = 1590;
  g.fp32_lanes_per_sm = 64;
  g.tc_fp16_flops_per_sm_clk = 1024;
  g.tc_bf16_flops_per_sm_clk = 0;
  g.tc_tf32_flops_per_sm_clk = 0;
  g.dram_bandwidth_gbs = 320;
  g.l2_bytes = 4LL << 20;
  g.smem_per_sm_bytes = 64 * 1024;
  g.smem_per_block_bytes = 64 * 1024;
  g.max_threads_per_sm = 1024;
  g.max_blocks_per_sm = 16;
  g.smem_alloc_unit = 256;  // before sm_80: 256-byte units, nothing reserved per block
  g.smem_reserved_per_block = 0;
  return g;
}

// PoCL's CPU device on a 2-core AVX2 host (gpus.yaml's pocl-cpu): compute units are cores,
// one work-group each at a time, a warp instruction is 4 AVX2 instructions, 4 issued a
// clock, 2 FMA pipes of 8 lanes, FMA latency 4 (Zen 3).
inline GpuSpec spec_cpu() {
  GpuSpec g = spec_a100();
  g.name = "cpu";
  g.api = "opencl";
  g.arch = "cpu";
  g.cc_major = g.cc_minor = 0;
  g.sm_count = 2;
  g.boost_clock_mhz = 2445;
  g.fp32_lanes_per_sm = 16;
  g.tc_fp16_flops_per_sm_clk = g.tc_bf16_flops_per_sm_clk = g.tc_tf32_flops_per_sm_clk = 0;
  g.dram_bandwidth_gbs = 12;
  g.l2_bytes = 32LL << 20;
  g.smem_per_sm_bytes = g.smem_per_block_bytes = 512 * 1024;
  g.regs_per_sm = g.regs_per_block = 1 << 20;
  g.regs_per_thread = 1024;
  g.max_threads_per_sm = 4096;
  g.max_blocks_per_sm = 1;
  g.reg_alloc_unit = g.sm_sub_partitions = g.smem_alloc_unit = 1;
  g.smem_reserved_per_block = 0;
  g.launch_overhead_us = 20;
  g.issue_per_clk = 1.0;
  g.lsu_per_clk = 0.5;
  g.simd_lanes = 8;
  g.fma_latency_cycles = 4;
  g.l1_bytes = 32768;
  return g;
}

// A workload from nodes and the f32 shapes of every tensor they touch; graph inputs are
// the tensors no node produces, outputs the tensors no node consumes.
inline Workload make_test_workload(ClusterKind kind, std::vector<Node> nodes,
                                   const std::vector<std::pair<std::string, Shape>>& shapes,
                                   int64_t flops, int64_t bytes) {
  Workload w;
  w.kind = kind;
  for (const auto& [name, shape] : shapes) w.graph.tensors[name] = {DType::f32, shape};
  for (const auto& [name, shape] : shapes) {
    bool produced = false, consumed = false;
    for (const auto& n : nodes) {
      for (const auto& o : n.outputs) produced = produced || o == name;
      for (const auto& i : n.inputs) consumed = consumed || i == name;
    }
    if (!produced) w.graph.inputs.push_back(name);
    if (produced && !consumed) w.graph.outputs.push_back(name);
  }
  w.graph.nodes = std::move(nodes);
  w.flops = flops;
  w.bytes = bytes;
  return w;
}

inline Node test_node(std::string op, std::vector<std::string> in, std::vector<std::string> out,
                      Attributes attrs = {}) {
  Node n;
  n.name = "n_" + out.at(0);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

// C[m,n] = A[m,k] B[k,n]: 2mnk FLOPs, 4(mk + kn + mn) bytes.
inline Workload matmul_2d(int64_t m, int64_t k, int64_t n) {
  return make_test_workload(ClusterKind::gemm, {test_node("MatMul", {"a", "b"}, {"c"})},
                            {{"a", {m, k}}, {"b", {k, n}}, {"c", {m, n}}}, 2 * m * n * k,
                            4 * (m * k + k * n + m * n));
}

// NCHW convolution without bias; `pad` on every side.
inline Workload conv2d(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kernel,
                       int64_t stride, int64_t pad, int64_t group = 1,
                       ClusterKind kind = ClusterKind::conv) {
  const int64_t oh = (h + 2 * pad - kernel) / stride + 1;
  const int64_t ow = (w + 2 * pad - kernel) / stride + 1;
  Attributes a;
  a.set("strides", std::vector<int64_t>{stride, stride});
  a.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  a.set("kernel_shape", std::vector<int64_t>{kernel, kernel});
  a.set("group", group);
  const int64_t cpg = c / group;
  return make_test_workload(
      kind, {test_node("Conv", {"x", "w"}, {"y"}, a)},
      {{"x", {n, c, h, w}}, {"w", {oc, cpg, kernel, kernel}}, {"y", {n, oc, oh, ow}}},
      2 * n * oc * oh * ow * cpg * kernel * kernel,
      4 * (n * c * h * w + oc * cpg * kernel * kernel + n * oc * oh * ow));
}

// y = a + b over `elements` floats: 1 FLOP and 12 bytes per element.
inline Workload add_1d(int64_t elements) {
  return make_test_workload(ClusterKind::elementwise, {test_node("Add", {"a", "b"}, {"y"})},
                            {{"a", {elements}}, {"b", {elements}}, {"y", {elements}}}, elements,
                            12 * elements);
}

// Softmax over the last axis of [rows, len]: 5 FLOPs per element, read and write once.
inline Workload softmax_2d(int64_t rows, int64_t len) {
  Attributes a;
  a.set("axis", int64_t{-1});
  return make_test_workload(ClusterKind::reduction, {test_node("Softmax", {"x"}, {"y"}, a)},
                            {{"x", {rows, len}}, {"y", {rows, len}}}, 5 * rows * len,
                            8 * rows * len);
}

// LayerNorm over the last axis of [rows, len] with scale and bias of [len].
inline Workload layernorm_2d(int64_t rows, int64_t len) {
  Attributes a;
  a.set("axis", int64_t{-1});
  return make_test_workload(ClusterKind::reduction,
                            {test_node("LayerNormalization", {"x", "s", "b"}, {"y"}, a)},
                            {{"x", {rows, len}}, {"s", {len}}, {"b", {len}}, {"y", {rows, len}}},
                            8 * rows * len, 4 * (2 * rows * len + 2 * len));
}

// GlobalAveragePool of [n, c, h, w]: 1 FLOP per input element.
inline Workload global_avg_pool(int64_t n, int64_t c, int64_t h, int64_t w) {
  return make_test_workload(ClusterKind::reduction, {test_node("GlobalAveragePool", {"x"}, {"y"})},
                            {{"x", {n, c, h, w}}, {"y", {n, c, 1, 1}}}, n * c * h * w,
                            4 * (n * c * h * w + n * c));
}

// Attention over [b, h, s, d]: S = Q Kt, S/8, softmax, S V. Kt is given transposed.
inline Workload attention(int64_t b, int64_t h, int64_t s, int64_t d) {
  const int64_t scores = b * h * s * s;
  return make_test_workload(
      ClusterKind::attention,
      {test_node("MatMul", {"q", "kt"}, {"s0"}), test_node("Div", {"s0", "scale"}, {"s1"}),
       test_node("Softmax", {"s1"}, {"p"}), test_node("MatMul", {"p", "v"}, {"o"})},
      {{"q", {b, h, s, d}},
       {"kt", {b, h, d, s}},
       {"scale", {}},
       {"s0", {b, h, s, s}},
       {"s1", {b, h, s, s}},
       {"p", {b, h, s, s}},
       {"v", {b, h, s, d}},
       {"o", {b, h, s, d}}},
      2 * scores * d * 2 + scores + 5 * scores, 4 * (4 * b * h * s * d + 1));
}

// The variant of the space whose parameters include all of `want`.
inline Variant find_variant(const Workload& w, const GpuSpec& g, const std::string& precision,
                            const std::map<std::string, int64_t>& want) {
  for (const auto& v : enumerate_variants(w, g)) {
    if (v.precision != precision) continue;
    bool match = true;
    for (const auto& [k, val] : want) match = match && v.param_or(k, -1) == val;
    if (match) return v;
  }
  ADD_FAILURE() << "no such variant";
  return {};
}

}  // namespace dc::testing
