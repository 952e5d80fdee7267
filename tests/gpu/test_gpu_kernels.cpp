// Generated kernels on a real GPU (ctest label "gpu"): workloads of the tiny example models
// (conv+add+relu, depthwise conv, relu+maxpool, matmul+add+gelu, layernorm, softmax,
// attention, elementwise chains), their reference kernel and several fp32 variants compiled
// with NVRTC for the device's architecture, run through the CUDA driver API, and compared
// with the CPU reference executor and with the reference kernel; launch refusals and faults
// classified; timing sanity. Without a CUDA driver or device every test is skipped with the
// reason (GTEST_SKIP), which ctest reports as "Skipped"; with DC_REQUIRE_GPU=1 they fail instead
// (gpu_testing.h). See docs/gpu-runtime.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <numeric>

#include "candidates.h"
#include "device_discovery.h"
#include "generate.h"
#include "gpu_runner.h"
#include "nvrtc.h"
#include "onnx/import.h"
#include "param_space.h"
#include "passes/simplify.h"
#include "random_inputs.h"
#include "variant_tolerance.h"
#include "ref/executor.h"
#include "testing.h"
#include "gpu_testing.h"
#include "gpu_cases.h"
#include "gpu_device_testing.h"
#include "op_case_harness.h"

namespace dc {
namespace {


std::vector<char> compile_for_device(const std::string& source, const std::string& what) {
  const CompileResult r = compile_cuda(source, gpu().info.arch);
  EXPECT_TRUE(r.ok) << what << ": " << r.error;
  return r.cubin;
}

// ---- workloads of the example models: gpu_cases.h ----------------------------------

// Up to `max` fp32 variants spread over the enumeration order.
std::vector<Variant> some_variants(const Workload& w, size_t max) {
  const auto all = enumerate_variants(w, gpu().info.spec, SpaceOptions{{"fp32"}});
  std::vector<Variant> out;
  for (size_t i = 0; i < max && i < all.size(); ++i)
    out.push_back(all[i * all.size() / std::min(max, all.size())]);
  return out;
}

// The reference kernel or a variant on the GPU against the CPU reference executor (the
// op-case harness's run and compare).
void expect_matches_cpu(const Workload& w, const GeneratedKernel& k, const std::vector<char>& cubin,
                        const std::vector<Tensor>& in, const ref::TensorMap& want,
                        const Tolerance& tol = kernel_tolerance("fp32", DType::f32, 1)) {
  EXPECT_EQ(testing::run_and_compare_outputs(cuda_case_device().run, w, k, cubin, in, want, false, tol), "");
}

class OnGpuKernels : public ::testing::TestWithParam<Case> {};

TEST_P(OnGpuKernels, ReferenceAndVariantsMatchTheCpu) {
  DC_REQUIRE_GPU();
  const Case& c = GetParam();
  const Workload w = find_workload(c);
  ASSERT_FALSE(w.graph.nodes.empty());
  SCOPED_TRACE(w.canonical);

  const std::vector<Tensor> in = random_workload_inputs(w, 2024);
  ref::TensorMap in_map;
  for (size_t i = 0; i < in.size(); ++i) in_map[w.graph.inputs[i]] = in[i];
  const ref::TensorMap want = ref::run_graph(w.graph, in_map);

  const GeneratedKernel reference = generate_reference(w);
  const std::vector<char> reference_cubin = compile_for_device(reference.source, "reference");
  ASSERT_FALSE(reference_cubin.empty());
  {
    SCOPED_TRACE("reference kernel");
    expect_matches_cpu(w, reference, reference_cubin, in, want);
  }

  const auto variants = some_variants(w, 4);
  ASSERT_FALSE(variants.empty()) << "no fp32 variant fits " << gpu().info.spec.name;
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.key());
    GeneratedKernel k;
    try {
      k = generate_kernel(w, v);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "generate_kernel: " << e.what();
      continue;
    }
    const std::vector<char> cubin = compile_for_device(k.source, v.key());
    if (cubin.empty()) continue;
    expect_matches_cpu(w, k, cubin, in, want);
    const ReferenceCheck check = check_against_reference(
        device(), w, k, cubin, reference, reference_cubin, kernel_tolerance("fp32", DType::f32, 1), random_workload_inputs(w, 7));
    EXPECT_TRUE(check.ok()) << job_status_name(check.status) << ": " << check.error;
    std::cout << c.name << "  " << v.key() << "  rel. L2 vs reference " << check.max_rel_error
              << "\n";
  }
}

// The tensor-core paths (tf32, fp16, bf16 mma.sync; sm_80+) of the GEMM-family and attention
// workloads: a few variants per path against the CPU executor and the reference kernel, at
// the variant's error-model tolerance (codegen/variant_tolerance.h, docs/precision.md).
TEST_P(OnGpuKernels, TensorCoreVariantsMatchTheCpu) {
  DC_REQUIRE_GPU();
  const Case& c = GetParam();
  if (c.kind != ClusterKind::gemm && c.kind != ClusterKind::conv && c.kind != ClusterKind::attention)
    GTEST_SKIP() << "no tensor-core template for " << cluster_kind_name(c.kind);
  if (gpu().info.spec.cc_major < 8) GTEST_SKIP() << "mma.sync m16n8k16 and tf32 need sm_80";
  const Workload w = find_workload(c);
  ASSERT_FALSE(w.graph.nodes.empty());
  SCOPED_TRACE(w.canonical);
  const std::vector<Tensor> in = random_workload_inputs(w, 2025);
  ref::TensorMap in_map;
  for (size_t i = 0; i < in.size(); ++i) in_map[w.graph.inputs[i]] = in[i];
  const ref::TensorMap want = ref::run_graph(w.graph, in_map);
  const GeneratedKernel reference = generate_reference(w);
  const std::vector<char> reference_cubin = compile_for_device(reference.source, "reference");
  ASSERT_FALSE(reference_cubin.empty());
  int ran = 0;
  for (const std::string path : {"tf32", "fp16", "bf16"}) {
    const auto all = enumerate_variants(w, gpu().info.spec, SpaceOptions{{path}});
    const Tolerance tol = variant_tolerance(path, w);
    for (size_t i = 0; i < 3 && i < all.size(); ++i) {
      const Variant& v = all[i * all.size() / std::min<size_t>(3, all.size())];
      if (v.precision != path) continue;  // a family without a tensor-core template
      SCOPED_TRACE(v.key());
      GeneratedKernel k;
      try {
        k = generate_kernel(w, v);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "generate_kernel: " << e.what();
        continue;
      }
      const std::vector<char> cubin = compile_for_device(k.source, v.key());
      if (cubin.empty()) continue;
      expect_matches_cpu(w, k, cubin, in, want, tol);
      const ReferenceCheck check =
          check_against_reference(device(), w, k, cubin, reference, reference_cubin, tol, random_workload_inputs(w, 7));
      EXPECT_TRUE(check.ok()) << job_status_name(check.status) << ": " << check.error;
      std::cout << c.name << "  " << v.key() << "  rel. L2 vs reference " << check.max_rel_error
                << " (bound " << tol.rtol << ")\n";
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << "no tensor-core variant of " << c.name << " ran";
}

INSTANTIATE_TEST_SUITE_P(TinyModels, OnGpuKernels, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::string(p.param.name);
                         });

// ---- device, failures, timing -------------------------------------------------------------

TEST(OnGpuDevice, DiscoveryMapsTheDevice) {
  DC_REQUIRE_GPU();
  const DiscoveredDevice& d = gpu().info;
  EXPECT_FALSE(d.spec.name.empty());
  EXPECT_FALSE(d.arch.empty());
  EXPECT_GT(d.attributes.sm_count, 0);
  EXPECT_GT(d.report.memory_bandwidth_gbs, 0) << "memory clock and bus width not reported";
  EXPECT_GT(d.attributes.total_memory_bytes, int64_t{1} << 30);
  EXPECT_GT(device().l2_bytes(), 0);
  EXPECT_EQ(device().name(), d.attributes.name);
}

// 256 floats copied, one block: a kernel written by hand, in the generated conventions.
const char* kCopySource = R"(
extern "C" __global__ void dc_copy(const float* __restrict__ in, float* __restrict__ out) {
  extern __shared__ float staged[];
  const int i = threadIdx.x;
  if (i < 256) { staged[i] = in[i]; out[i] = staged[i] * 2.0f; }
}
extern "C" __global__ void dc_fault(float* __restrict__ out) {
  out[(1ull << 40) + threadIdx.x] = 1.0f;  // 4 TiB past the buffer
}
extern "C" __global__ void dc_accumulate(const float* __restrict__ in, float* __restrict__ out) {
  const int i = threadIdx.x;
  if (i < 256) out[i] += in[i];
}
)";

GeneratedKernel copy_kernel(int64_t threads, int64_t smem) {
  GeneratedKernel k;
  k.template_name = "test";
  k.buffers = {KernelBuffer{"in", BufferRole::input, DType::f32, {256}, false},
               KernelBuffer{"out", BufferRole::output, DType::f32, {256}, false}};
  Launch l;
  l.kernel = "dc_copy";
  l.block = {threads, 1, 1};
  l.dynamic_smem_bytes = smem;
  l.args = {0, 1};
  k.launches = {l};
  return k;
}

Tensor ramp() {
  std::vector<float> v(256);
  std::iota(v.begin(), v.end(), 1.0f);
  return Tensor::from_vector<float>({256}, v);
}

TEST(OnGpuFaults, LaunchRefusalsAreLaunchErrorsAndTheDeviceStaysUsable) {
  DC_REQUIRE_GPU();
  const std::vector<char> cubin = compile_for_device(kCopySource, "copy");
  ASSERT_FALSE(cubin.empty());

  std::vector<Tensor> bufs = {ramp()};
  GpuRunResult r = run_on_gpu(device(), copy_kernel(2048, 1024), cubin, bufs);  // > 1024 threads
  EXPECT_EQ(r.status, JobStatus::launch_error) << r.error;
  EXPECT_FALSE(r.context_lost);

  const int64_t too_much = device().smem_per_block_optin() + 1024;
  r = run_on_gpu(device(), copy_kernel(256, too_much), cubin, bufs);
  EXPECT_EQ(r.status, JobStatus::launch_error) << r.error;
  EXPECT_FALSE(device().lost());

  // Opted-in dynamic shared memory beyond 48 KiB works, and the results are right.
  r = run_on_gpu(device(), copy_kernel(256, 64 * 1024), cubin, bufs);
  ASSERT_TRUE(r.ok()) << r.error;
  for (int i = 0; i < 256; ++i) EXPECT_EQ(bufs[1].data<float>()[i], 2.0f * (i + 1)) << i;

  // Half the threads: the other half keeps the NaN poison.
  r = run_on_gpu(device(), copy_kernel(128, 1024), cubin, bufs);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(bufs[1].data<float>()[127], 256.0f);
  EXPECT_TRUE(std::isnan(bufs[1].data<float>()[128]));
}

// Static shared memory counts towards the 48 KiB a launch gets without opting in (cuda.h:
// the default dynamic limit is 48 KiB minus the static size): 4 KiB static + 46 KiB dynamic.
const char* kStaticSmemSource = R"(
extern "C" __global__ void dc_copy(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float fixed[1024];
  extern __shared__ float staged[];
  const int i = threadIdx.x;
  if (i < 256) fixed[i] = in[i];
  __syncthreads();
  if (i < 256) { staged[i] = fixed[(i + 1) % 256]; out[i] = staged[i] * 2.0f; }
}
)";

TEST(OnGpuFaults, StaticSharedMemoryCountsTowardsTheOptIn) {
  DC_REQUIRE_GPU();
  const std::vector<char> cubin = compile_for_device(kStaticSmemSource, "static + dynamic smem");
  ASSERT_FALSE(cubin.empty());
  std::vector<Tensor> bufs = {ramp()};
  const GpuRunResult r = run_on_gpu(device(), copy_kernel(256, 46 * 1024), cubin, bufs);
  ASSERT_TRUE(r.ok()) << r.error;
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(bufs[1].data<float>()[i], 2.0f * static_cast<float>((i + 1) % 256 + 1)) << i;
}

// An illegal address kills the context: run it in a fresh process (a death test re-runs
// the binary) so that the other tests keep a healthy one.
void fault_in_child() {
  const Gpu& g = gpu();
  if (!g.device) std::exit(2);
  const CompileResult cr = compile_cuda(kCopySource, g.info.arch);
  if (!cr.ok) std::exit(3);
  GeneratedKernel k;
  k.template_name = "test";
  k.buffers = {KernelBuffer{"out", BufferRole::output, DType::f32, {1}, false}};
  Launch l;
  l.kernel = "dc_fault";
  l.args = {0};
  k.launches = {l};
  std::vector<Tensor> bufs;
  const GpuRunResult r = run_on_gpu(*g.device, k, cr.cubin, bufs);
  std::cerr << "fault run: " << job_status_name(r.status) << ": " << r.error << "\n";
  const bool classified = r.status == JobStatus::runtime_fault && r.context_lost && g.device->lost();
  // A well-formed run afterwards (its input given) must be refused as the same lost context.
  std::vector<Tensor> copy_bufs{ramp()};
  const GpuRunResult after = run_on_gpu(*g.device, copy_kernel(256, 1024), cr.cubin, copy_bufs);
  std::cerr << "run after the fault: " << job_status_name(after.status) << ": " << after.error << "\n";
  std::exit(classified && after.status == JobStatus::runtime_fault ? 0 : 1);
}

TEST(OnGpuFaults, IllegalAddressIsAStickyRuntimeFault) {
  DC_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(fault_in_child(), ::testing::ExitedWithCode(0), "fault run: runtime_fault");
}

TEST(OnGpuTiming, SamplesCoverTheMinimumDuration) {
  DC_REQUIRE_GPU();
  const Workload w = find_workload(kCases[4]);  // matmul+add+gelu
  const auto variants = some_variants(w, 1);
  ASSERT_FALSE(variants.empty());
  const GeneratedKernel k = generate_kernel(w, variants[0]);
  const std::vector<char> cubin = compile_for_device(k.source, variants[0].key());
  ASSERT_FALSE(cubin.empty());
  const std::vector<Tensor> in = random_workload_inputs(w, 5);

  for (L2Policy policy : {L2Policy::automatic, L2Policy::flush, L2Policy::none}) {
    TimingOptions o;
    o.l2 = policy;
    std::vector<Tensor> bufs;
    ASSERT_EQ(bind_inputs(w, k, in, &bufs), "");
    const TimingResult r = time_on_gpu(device(), k, cubin, bufs, o);
    ASSERT_TRUE(r.ok()) << job_status_name(r.status) << ": " << r.error;
    ASSERT_GE(r.samples_us.size(), static_cast<size_t>(o.min_samples));
    const double total = std::accumulate(r.samples_us.begin(), r.samples_us.end(), 0.0);
    EXPECT_GE(total, o.min_total_ms * 1000.0 * 0.999);
    for (double s : r.samples_us) {
      EXPECT_GT(s, 0.0);
      EXPECT_LT(s, 1e6) << "a tiny GEMM taking a second";
    }
    std::vector<double> sorted = r.samples_us;
    std::sort(sorted.begin(), sorted.end());
    std::cout << variants[0].key() << " [" << r.l2_method << "]: " << sorted.size()
              << " samples, min " << sorted.front() << " us, median "
              << sorted[sorted.size() / 2] << " us\n";
  }
}

// A kernel of a few microseconds: its samples still add up to min_total_ms (the sample cap
// no longer stops it first), and none includes the device-side spin timed in front of it.
TEST(OnGpuTiming, MicrosecondKernelReachesTheMinimumDurationWithoutTheSpin) {
  DC_REQUIRE_GPU();
  const std::vector<char> cubin = compile_for_device(kCopySource, "copy");
  ASSERT_FALSE(cubin.empty());
  TimingOptions o;
  o.spin_us = 50;  // far above the copy's few microseconds: a sample with it would show
  const TimingResult r = time_on_gpu(device(), copy_kernel(256, 1024), cubin, {ramp()}, o);
  ASSERT_TRUE(r.ok()) << job_status_name(r.status) << ": " << r.error;
  const double total = std::accumulate(r.samples_us.begin(), r.samples_us.end(), 0.0);
  EXPECT_GE(total, o.min_total_ms * 1000.0 * 0.999);
  std::vector<double> sorted = r.samples_us;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  EXPECT_GT(sorted.front(), 0.0);
  EXPECT_LT(median, 0.5 * o.spin_us) << "the spin leaked into the samples";
  std::cout << "copy [" << r.l2_method << "]: " << sorted.size() << " samples, min " << sorted.front()
            << " us, median " << median << " us\n";
}

// split-K's shape: a zeroed output, then two launches accumulating into it. Timed as one
// captured graph: both launches and the memset in every sample, no gaps between them.
TEST(OnGpuTiming, MultiLaunchVariantIsTimedAsOneGraph) {
  DC_REQUIRE_GPU();
  const std::vector<char> cubin = compile_for_device(kCopySource, "accumulate");
  ASSERT_FALSE(cubin.empty());
  GeneratedKernel k = copy_kernel(256, 0);
  k.buffers[1].zero_init = true;
  k.launches[0].kernel = "dc_accumulate";
  k.launches.push_back(k.launches[0]);
  std::vector<Tensor> bufs = {ramp()};
  const GpuRunResult run = run_on_gpu(device(), k, cubin, bufs);
  ASSERT_TRUE(run.ok()) << run.error;
  for (int i = 0; i < 256; ++i) EXPECT_EQ(bufs[1].data<float>()[i], 2.0f * (i + 1)) << i;

  TimingOptions o;
  o.spin_us = 50;
  const TimingResult r = time_on_gpu(device(), k, cubin, {ramp()}, o);
  ASSERT_TRUE(r.ok()) << job_status_name(r.status) << ": " << r.error;
  ASSERT_GE(r.samples_us.size(), static_cast<size_t>(o.min_samples));
  const double total = std::accumulate(r.samples_us.begin(), r.samples_us.end(), 0.0);
  EXPECT_GE(total, o.min_total_ms * 1000.0 * 0.999);
  std::vector<double> sorted = r.samples_us;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_LT(sorted[sorted.size() / 2], 0.5 * o.spin_us);
  std::cout << "memset + 2 launches as a graph: " << sorted.size() << " samples, median "
            << sorted[sorted.size() / 2] << " us\n";
}

}  // namespace
}  // namespace dc
