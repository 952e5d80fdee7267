// dc-bench-estimator: estimator throughput on one core. Enumerates the full variant space of
// a few GEMM-family workloads on built-in GPU types and times estimate() over it (the
// WorkloadShape overload, as score_variants uses it), and the whole score_variants call.
// Prints estimates per second; docs/estimator.md records the figures.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "estimator.h"
#include "gpu/gpu_catalog.h"
#include "param_space.h"
#include "prune.h"
#include "ir/clock.h"

namespace {

using Clock = std::chrono::steady_clock;
using dc::seconds_since;

dc::Workload matmul_workload(int64_t m, int64_t k, int64_t n) {
  dc::Workload w;
  w.kind = dc::ClusterKind::gemm;
  dc::Node node;
  node.name = "n0";
  node.op = "MatMul";
  node.inputs = {"t0", "t1"};
  node.outputs = {"t2"};
  w.graph.nodes.push_back(node);
  w.graph.tensors["t0"] = {dc::DType::f32, {m, k}};
  w.graph.tensors["t1"] = {dc::DType::f32, {k, n}};
  w.graph.tensors["t2"] = {dc::DType::f32, {m, n}};
  w.graph.inputs = {"t0", "t1"};
  w.graph.outputs = {"t2"};
  w.flops = 2 * m * n * k;
  w.bytes = 4 * (m * k + k * n + m * n);
  return w;
}

dc::Workload conv_workload(int64_t n, int64_t c, int64_t hw, int64_t oc, int64_t kernel) {
  dc::Workload w;
  w.kind = dc::ClusterKind::conv;
  dc::Node node;
  node.name = "n0";
  node.op = "Conv";
  node.inputs = {"t0", "t1"};
  node.outputs = {"t2"};
  node.attrs.set("pads", std::vector<int64_t>{kernel / 2, kernel / 2, kernel / 2, kernel / 2});
  w.graph.nodes.push_back(node);
  w.graph.tensors["t0"] = {dc::DType::f32, {n, c, hw, hw}};
  w.graph.tensors["t1"] = {dc::DType::f32, {oc, c, kernel, kernel}};
  w.graph.tensors["t2"] = {dc::DType::f32, {n, oc, hw, hw}};
  w.graph.inputs = {"t0", "t1"};
  w.graph.outputs = {"t2"};
  w.flops = 2 * n * oc * hw * hw * c * kernel * kernel;
  w.bytes = 4 * (n * c * hw * hw + oc * c * kernel * kernel + n * oc * hw * hw);
  return w;
}

void bench(const char* label, const dc::Workload& w, const dc::GpuSpec& gpu) {
  const dc::WorkloadShape shape = dc::analyze_workload(w);
  auto t0 = Clock::now();
  const auto variants = dc::enumerate_variants(shape, gpu);
  const double enum_s = seconds_since(t0);

  // Repeat over the whole space until at least half a second has passed.
  double sink = 0;
  int64_t count = 0;
  t0 = Clock::now();
  do {
    for (const auto& v : variants) sink += dc::estimate(shape, v, gpu).seconds;
    count += static_cast<int64_t>(variants.size());
  } while (seconds_since(t0) < 0.5);
  const double est_rate = static_cast<double>(count) / seconds_since(t0);

  int64_t scored = 0;
  t0 = Clock::now();
  do {
    scored += static_cast<int64_t>(dc::score_variants(w, gpu).size());
  } while (seconds_since(t0) < 0.5);
  const double score_rate = static_cast<double>(scored) / seconds_since(t0);

  std::printf(
      "%-28s %-5s %6zu variants  enumerate %7.2f ms  estimate %10.0f /s  "
      "enumerate+estimate %9.0f /s  (checksum %.3g)\n",
      label, gpu.name.c_str(), variants.size(), enum_s * 1e3, est_rate, score_rate, sink);
}

}  // namespace

int main() {
  const auto catalog = dc::GpuCatalog::builtin();
  const std::vector<std::pair<const char*, dc::Workload>> workloads = {
      {"matmul 1024x768x3072", matmul_workload(1024, 768, 3072)},
      {"matmul 4096x4096x4096", matmul_workload(4096, 4096, 4096)},
      {"conv 1x64x56x56 3x3 -> 64", conv_workload(1, 64, 56, 64, 3)},
  };
  for (const char* gpu : {"a100", "h100", "t4"})
    for (const auto& [label, w] : workloads) bench(label, w, catalog.require(gpu));
  return 0;
}
