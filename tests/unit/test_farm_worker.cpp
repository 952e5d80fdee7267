// dc-worker's pieces: the emulated timing model, the compile cache, the job executor on an
// emulated device (host-emulator check), the measurement child with its watchdog (a real
// `dc-worker --measure-child` process), and the protocol client against a real broker.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "compile_cache.h"
#include "cuda_driver.h"
#include "emulated_timing.h"
#include "farm_broker.h"
#include "farm_client.h"
#include "farm_testing.h"
#include "job_wire.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "ir/index_bounds.h"
#include "job_executor.h"
#include "measure_child.h"
#include "random_inputs.h"
#include "pass_testing.h"
#include "variant_tolerance.h"
#include "worker_devices.h"

namespace dc {
namespace {

using namespace std::chrono_literals;
using testing::scale_job;
using testing::scale_kernel;

const std::string kWorker = std::string(DC_BIN_DIR) + "/dc-worker";

std::string cache_dir() { return ::testing::TempDir() + "dc-farm-test-cache"; }

GpuSpec h100() { return GpuCatalog::builtin().require("h100"); }

// A fresh tag per test run: sources that must really compile.
std::string run_tag() {
  static const std::string tag = std::to_string(std::random_device{}()) + "-" + std::to_string(::getpid());
  return tag;
}

farm::Job wire_job(const FarmJob& j, uint64_t lease = 1) {
  FarmDispatcher::Submission s = FarmDispatcher::prepare(j);
  farm::Job wire;  // the dispatcher keeps a job as its bytes (protocol version 4)
  if (!wire.ParseFromString(s.wire)) throw std::runtime_error("a prepared job does not parse");
  wire.set_lease_id(lease);
  wire.set_attempt(1);
  wire.set_device_index(0);
  return wire;
}

// ---- emulated timing ----------------------------------------------------------------------

TEST(EmulatedTiming, RooflineOfASmallKernelByHand) {
  // 1000 floats in and out (8000 bytes), 8 blocks of 128 threads, 16 registers: 16 blocks
  // per SM fit (thread limit), occupancy 1, one wave using 8 of 2112 slots. By hand (see
  // emulated_timing.cpp's constants): t_mem = 8000 / (3350e9 x 0.85), t_comp = 8 x 1024 /
  // (66.9 TFLOPS x 0.85), roof = t_mem + 0.15 t_comp, / (8/2112)^0.75, + 2.2 us = 2.38542 us.
  const GeneratedKernel k = scale_kernel(1000);
  const EmulatedTiming t = emulated_timing(k, h100(), {{"scale", 16}}, {}, 1);
  ASSERT_TRUE(t.ok) << t.error;
  EXPECT_NEAR(t.model_us / t.variation, 2.385419916715835, 1e-9);
  EXPECT_GE(t.variation, 0.8);
  EXPECT_LE(t.variation, 1.2);
  ASSERT_EQ(t.samples_us.size(), 10u);
}

TEST(EmulatedTiming, BandwidthBoundAndOccupancyByHand) {
  // 2^24 floats: 128 MiB through 3.35 TB/s; 63 waves. Then 256 threads x 128 registers:
  // 2 blocks per SM, occupancy 0.25, memory efficiency 0.6 instead of 0.85.
  GeneratedKernel k = scale_kernel(1 << 24);
  EmulatedTiming t = emulated_timing(k, h100(), {{"scale", 16}}, {}, 1);
  EXPECT_NEAR(t.model_us / t.variation, 50.22739656942962, 1e-7);
  k.launches[0].block = {256, 1, 1};
  k.launches[0].grid = {(1 << 24) / 256, 1, 1};
  t = emulated_timing(k, h100(), {{"scale", 128}}, {}, 1);
  EXPECT_NEAR(t.model_us / t.variation, 69.67610910379136, 1e-7);
}

TEST(EmulatedTiming, VariationIsPerVariantAndNoiseIsSeeded) {
  GeneratedKernel a = scale_kernel(1 << 20), b = a;
  b.variant_key = "another";
  const auto ta = emulated_timing(a, h100(), {}, {}, 5);
  const auto ta2 = emulated_timing(a, h100(), {}, {}, 5);
  const auto ta3 = emulated_timing(a, h100(), {}, {}, 6);
  const auto tb = emulated_timing(b, h100(), {}, {}, 5);
  EXPECT_EQ(ta.samples_us, ta2.samples_us);        // deterministic
  EXPECT_NE(ta.samples_us, ta3.samples_us);        // the seed changes the noise ...
  EXPECT_DOUBLE_EQ(ta.model_us, ta3.model_us);     // ... not the model
  EXPECT_NE(ta.variation, tb.variation);           // the key changes the variation
  EXPECT_NEAR(ta.model_us / ta.variation, tb.model_us / tb.variation, 1e-9);
  for (double s : ta.samples_us) {
    EXPECT_GT(s, 0.85 * ta.model_us);  // 2% noise, a 10% outlier now and then
    EXPECT_LT(s, 1.25 * ta.model_us);
  }
}

TEST(EmulatedTiming, WhatTheEmulatedGpuWouldRefuseIsALaunchError) {
  GeneratedKernel k = scale_kernel(1000);
  k.launches[0].dynamic_smem_bytes = 300 * 1024;  // H100: 227 KiB per block
  EmulatedTiming t = emulated_timing(k, h100(), {}, {}, 1);
  EXPECT_FALSE(t.ok);
  EXPECT_NE(t.error.find("shared memory"), std::string::npos) << t.error;
  k.launches[0].dynamic_smem_bytes = 0;
  k.launches[0].block = {1024, 1, 1};
  t = emulated_timing(k, h100(), {{"scale", 255}}, {}, 1);  // 255 x 1024 > 65536 registers
  EXPECT_FALSE(t.ok);
  EXPECT_NE(t.error.find("registers"), std::string::npos) << t.error;
}

// ---- compile cache ------------------------------------------------------------------------

TEST(CompileCache, SecondCompileComesFromDiskAndCorruptionIsRecompiled) {
  const std::string dir = ::testing::TempDir() + "dc-compile-cache-" + run_tag();
  const std::string source = scale_kernel(1000, "", "cache " + run_tag()).source;
  const CachedCompile a = compile_with_cache(source, "sm_80", dir);
  ASSERT_TRUE(a.result.ok) << a.result.error;
  EXPECT_FALSE(a.from_cache);
  const CachedCompile b = compile_with_cache(source, "sm_80", dir);
  EXPECT_TRUE(b.from_cache);
  EXPECT_EQ(b.result.cubin, a.result.cubin);
  ASSERT_EQ(b.result.kernels.size(), 1u);
  EXPECT_EQ(b.result.kernels[0].registers, a.result.kernels[0].registers);
  EXPECT_EQ(b.result.kernels[0].kernel, "scale");
  // Another arch is another entry.
  EXPECT_FALSE(compile_with_cache(source, "sm_90", dir).from_cache);
  // A damaged entry is not trusted.
  const auto entry = std::filesystem::path(dir) / "nvrtc" / (compile_cache_key(source, "sm_80") + ".bin");
  ASSERT_TRUE(std::filesystem::exists(entry));
  std::ofstream(entry, std::ios::trunc) << "garbage";
  const CachedCompile c = compile_with_cache(source, "sm_80", dir);
  EXPECT_FALSE(c.from_cache);
  EXPECT_EQ(c.result.cubin, a.result.cubin);
  // A truncated entry (a writer killed part-way, a full disk) is not trusted either.
  std::string whole;
  {
    std::ifstream in(entry, std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(whole.size(), 8u);
  std::ofstream(entry, std::ios::trunc | std::ios::binary) << whole.substr(0, whole.size() - 3);
  const CachedCompile d = compile_with_cache(source, "sm_80", dir);
  EXPECT_FALSE(d.from_cache);
  EXPECT_EQ(d.result.cubin, a.result.cubin);
  EXPECT_TRUE(compile_with_cache(source, "sm_80", dir).from_cache);
  // Failures are cached too.
  const CachedCompile bad = compile_with_cache("extern \"C\" __global__ void f() { nope; } // " + run_tag(), "sm_80", dir);
  EXPECT_FALSE(bad.result.ok);
  const CachedCompile bad2 = compile_with_cache("extern \"C\" __global__ void f() { nope; } // " + run_tag(), "sm_80", dir);
  EXPECT_TRUE(bad2.from_cache);
  EXPECT_FALSE(bad2.result.ok);
  EXPECT_NE(bad2.result.error.find("nope"), std::string::npos) << bad2.result.error;
  std::filesystem::remove_all(dir);
}

// ---- the workload a job describes ------------------------------------------------------

TEST(JobWorkload, RandomInputsMatchTheCoordinatorsWorkload) {
  // The coordinator's workload: Gather(data [5, 3], indices i64 [4]) -> [4, 3].
  Workload real;
  real.graph.inputs = {"t0", "t1"};
  real.graph.outputs = {"t2"};
  real.graph.tensors["t0"] = {DType::f32, {5, 3}};
  real.graph.tensors["t1"] = {DType::i64, {4}};
  real.graph.tensors["t2"] = {DType::f32, {4, 3}};
  Node g;
  g.op = "Gather";
  g.inputs = {"t0", "t1"};
  g.outputs = {"t2"};
  real.graph.nodes.push_back(g);
  EXPECT_EQ(input_index_bounds(real.graph), (std::vector<int64_t>{0, 5}));
  // What the worker gets: the reference kernel's buffers and the index bounds.
  GeneratedKernel ref;
  ref.buffers = {{"t0", BufferRole::input, DType::f32, {5, 3}, false},
                 {"t1", BufferRole::input, DType::i64, {4}, false},
                 {"t2", BufferRole::output, DType::f32, {4, 3}, false},
                 {"scratch0", BufferRole::scratch, DType::f32, {7}, false}};
  MeasureJob job;
  job.index_bounds = {0, 5};
  const Workload w = job_workload(ref);
  EXPECT_EQ(w.graph.inputs, real.graph.inputs);
  EXPECT_EQ(w.graph.outputs, real.graph.outputs);
  EXPECT_TRUE(w.graph.nodes.empty());  // nothing to re-derive a bound from
  for (uint32_t seed : {1u, 99u}) {
    job.seed = seed;
    const auto want = random_workload_inputs(real, seed);
    const auto got = job_inputs(job, ref);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_TRUE(got[0].bitwise_equal(want[0]));
    EXPECT_TRUE(got[1].bitwise_equal(want[1]));
    for (int64_t v : got[1].to_int64_vector()) EXPECT_LT(v, 5);
  }
  // Without the bound the indices would be 0 or 1: the bound matters.
  MeasureJob unbounded;
  unbounded.seed = 1;
  job.seed = 1;
  bool above_one = false;
  for (int64_t v : job_inputs(job, ref)[1].to_int64_vector()) above_one |= v > 1;
  for (int64_t v : job_inputs(unbounded, ref)[1].to_int64_vector()) EXPECT_LE(v, 1);
  EXPECT_TRUE(above_one);
}

TEST(JobWorkload, IndexBoundsOfEveryIndexingOp) {
  Graph g;
  testing::add_input(g, "data", {6, 9, 4});
  testing::add_input(g, "ge", {6, 2, 4}, DType::i64);
  testing::add_input(g, "nd", {3, 2}, DType::i64);
  testing::add_input(g, "sc", {2, 9, 4}, DType::i32);
  testing::add_input(g, "upd", {2, 9, 4});
  testing::add_input(g, "oh", {5}, DType::i64);
  testing::add_input(g, "plain", {5}, DType::i64);
  testing::add_initializer(g, "depth", Tensor::from_vector<int64_t>({1}, {11}));
  testing::add_initializer(g, "onoff", Tensor::from_vector<float>({2}, {0.f, 1.f}));
  testing::add_node(g, "GatherElements", {"data", "ge"}, {"o1"}, testing::attrs({{"axis", int64_t{1}}}));
  testing::add_node(g, "GatherND", {"data", "nd"}, {"o2"});
  testing::add_node(g, "ScatterElements", {"data", "sc", "upd"}, {"o3"}, testing::attrs({{"axis", int64_t{-1}}}));
  testing::add_node(g, "OneHot", {"oh", "depth", "onoff"}, {"o4"});
  testing::add_node(g, "Relu", {"plain"}, {"o5"});
  // GatherElements axis 1: 9; GatherND with 2 index components: min(6, 9); ScatterElements
  // axis -1: 4; OneHot: its constant depth; an integer nobody indexes with: 0.
  EXPECT_EQ(input_index_bounds(g), (std::vector<int64_t>{0, 9, 6, 4, 0, 11, 0}));
}

// ---- the executor on an emulated device ---------------------------------------------------

ExecutorConfig emulated_config() {
  ExecutorConfig c;
  c.device = emulated_inventory(GpuCatalog::builtin(), "h100", 0);
  c.spec = h100();
  c.cache_dir = cache_dir();
  return c;
}

TEST(JobExecutor, EmulatedJobWithHostCheck) {
  JobExecutor ex(emulated_config());
  FarmJob j = scale_job("ok", "h100");
  j.check_on_emulator = true;
  bool compiled = false;
  const farm::Result r = execute_wire_job(ex, wire_job(j, 42), [&] { compiled = true; });
  EXPECT_EQ(r.status(), "ok") << r.error();
  EXPECT_TRUE(compiled);
  EXPECT_EQ(r.lease_id(), 42u);
  EXPECT_TRUE(r.emulated());
  EXPECT_EQ(r.driver_version(), "emulated");
  EXPECT_EQ(r.samples_us_size(), 10);
  EXPECT_GT(r.registers(), 0);
  EXPECT_EQ(r.max_rel_error(), 0.0);  // same arithmetic as the reference
  EXPECT_EQ(r.source_hash(), fnv1a_hex(j.variant_kernel.source));
  // An emulated device has no health to report, and says so instead of inventing figures.
  ASSERT_TRUE(r.has_health());
  EXPECT_FALSE(r.health().sampled());
  EXPECT_EQ(r.health().sm_clock_mhz(), 0u);
  EXPECT_EQ(r.health().note(), "emulated device: its times are modelled");
}

// A [4, 4096] x [4096, 8] MatMul in `t` storage as the coordinator sees it.
Workload gemm_k4096(DType t) {
  Graph g;
  testing::add_input(g, "a", {4, 4096}, t);
  testing::add_input(g, "b", {4096, 8}, t);
  testing::add_node(g, "MatMul", {"a", "b"}, {"c"});
  g.tensors["c"] = {t, {4, 8}};
  g.outputs = {"c"};
  return make_workload(g, {0}, ClusterKind::gemm);
}

// The reference kernel followed by a second kernel that scales output element i by
// 1 + e or 1 - e (alternating): a variant whose relative L2 error is e.
GeneratedKernel off_by(const GeneratedKernel& reference, double e, const std::string& tag) {
  GeneratedKernel k = reference;
  k.template_name = "off_by";
  k.variant_key = "off-by-" + tag;
  size_t out = 0;
  while (k.buffers[out].role != BufferRole::output) ++out;
  const bool half = k.buffers[out].dtype == DType::f16;
  const std::string type = half ? "dc_half" : "float";
  const std::string n = std::to_string(shape_numel(k.buffers[out].shape));
  k.source += "\n// " + tag + "\nextern \"C\" __global__ void off_by(" + type + "* y) {\n"
              "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  const float f = (i % 2 ? 1.f + " + std::to_string(e) + "f : 1.f - " + std::to_string(e) + "f);\n"
              "  if (i < " + n + ") y[i] = " + (half ? "dc_from_f32<dc_half>(dc_to_f32(y[i]) * f)" : "y[i] * f") +
              ";\n}\nDC_EXPORT_KERNEL(off_by)\n";
  Launch l;
  l.kernel = "off_by";
  l.grid = {1, 1, 1};
  l.block = {128, 1, 1};
  l.args = {static_cast<int32_t>(out)};
  k.launches.push_back(l);
  return k;
}

// The executor's own interface is dc's data: a MeasureJob in, a JobOutcome out (the wire's
// Job and Result only at execute_wire_job); a job without a valid bound is refused there too.
TEST(JobExecutor, TakesAMeasureJobAndGivesAnOutcome) {
  JobExecutor ex(emulated_config());
  FarmJob j = scale_job("domain", "h100");
  j.check_on_emulator = true;
  const JobOutcome o = ex.execute(j, [] {});
  EXPECT_EQ(o.status, JobStatus::ok) << o.error;
  EXPECT_EQ(o.samples_us.size(), 10u);
  EXPECT_TRUE(o.emulated);
  EXPECT_EQ(o.source_hash, fnv1a_hex(j.variant_kernel.source));
  ASSERT_TRUE(o.health.has_value());
  EXPECT_FALSE(o.health->sampled);
  const JobOutcome built = ex.build(j);
  EXPECT_EQ(built.status, JobStatus::ok) << built.error;
  EXPECT_TRUE(built.samples_us.empty());  // compiled, not timed
  j.tolerance.rtol = 0;
  const JobOutcome refused = ex.execute(j, [] {});
  EXPECT_EQ(refused.status, JobStatus::unsupported);
  EXPECT_NE(refused.error.find("malformed job: the job carries no valid tolerance"), std::string::npos) << refused.error;
}

TEST(JobExecutor, AppliesTheCoordinatorsBoundExactly) {
  // The coordinator's bound for K = 4096 (docs/precision.md: the K-term of fp32, and the f16
  // output's rounding on the fp16 path), sent in the job: a variant off by half of it passes
  // on the worker, one off by twice of it fails, and one off by 0.8 of it passes although it
  // is above the 1e-5 a worker that re-derived its own bound from the kernel's buffers would
  // have applied in fp32 (in fp16 it would have ignored the f16 output).
  JobExecutor ex(emulated_config());
  for (const auto& [path, storage] :
       std::vector<std::pair<std::string, DType>>{{"fp32", DType::f32}, {"fp16", DType::f16}}) {
    const Workload w = gemm_k4096(storage);
    const Tolerance bound = variant_tolerance(path, w);
    EXPECT_DOUBLE_EQ(bound.rtol, kernel_tolerance(path, storage, 4096).rtol) << path;
    EXPECT_GT(bound.rtol, path == "fp32" ? 1.25e-5 : kernel_tolerance(path, DType::f32, 4096).rtol) << path;
    FarmJob j;
    j.gpu_type = "h100";
    j.workload = w.signature;
    j.precision = path;
    j.reference = generate_reference(w);
    j.tolerance = bound;
    j.seed = 11;
    j.check_on_emulator = true;
    for (const double factor : {0.5, 0.8, 2.0}) {
      j.job_id = path + "-" + std::to_string(factor);
      j.variant_kernel = off_by(j.reference, factor * bound.rtol, j.job_id + run_tag());
      const farm::Result r = execute_wire_job(ex, wire_job(j), [] {});
      EXPECT_EQ(r.status(), factor < 1 ? "ok" : "wrong_result") << path << " x" << factor << ": " << r.error();
      EXPECT_NEAR(r.max_rel_error(), factor * bound.rtol, 0.1 * bound.rtol) << path << " x" << factor;
    }
  }
}

TEST(JobExecutor, AJobWithoutABoundIsMalformed) {
  JobExecutor ex(emulated_config());
  farm::Job wire = wire_job(scale_job("nobound", "h100"));
  wire.set_rtol(0);
  const farm::Result r = execute_wire_job(ex, wire, [] {});
  EXPECT_EQ(r.status(), "unsupported");
  EXPECT_NE(r.error().find("no valid tolerance"), std::string::npos) << r.error();
}

TEST(JobExecutor, FailuresAreResults) {
  JobExecutor ex(emulated_config());
  auto status_of = [&](FarmJob j) {
    const farm::Result r = execute_wire_job(ex, wire_job(j), [] {});
    return r.status() + ": " + r.error();
  };
  FarmJob wrong = scale_job("wrong", "h100");
  wrong.variant_kernel.source.replace(wrong.variant_kernel.source.find("2.f * x[i]"), 10, "3.f * x[i]");
  wrong.check_on_emulator = true;
  EXPECT_EQ(status_of(wrong).rfind("wrong_result: output t1: relative L2 error 0.5", 0), 0u) << status_of(wrong);
  // Unchecked, an emulated device only models the time.
  wrong.check_on_emulator = false;
  EXPECT_EQ(status_of(wrong).rfind("ok", 0), 0u);

  FarmJob broken = scale_job("broken", "h100");
  broken.variant_kernel.source += "\nthis is not cuda;\n";
  EXPECT_EQ(status_of(broken).rfind("compile_error", 0), 0u) << status_of(broken);

  FarmJob fault = scale_job("fault", "h100", "  if (i == 0) y[1000] = 1.f;\n");
  fault.check_on_emulator = true;
  const std::string f = status_of(fault);
  EXPECT_EQ(f.rfind("runtime_fault", 0), 0u) << f;
  EXPECT_NE(f.find("out-of-bounds"), std::string::npos) << f;

  EXPECT_EQ(status_of(scale_job("other", "a100")).rfind("unsupported: job for a100", 0), 0u);
  FarmJob fp8 = scale_job("fp8", "h100");
  fp8.precision = "fp8";
  EXPECT_EQ(status_of(fp8).rfind("unsupported: unknown precision", 0), 0u);
}

// An exception from dc's own code is internal_error (never final), not a verdict on the
// variant; a CUDA failure stays the device's answer.
TEST(JobExecutor, ExceptionsFromDcCodeAreInternalErrors) {
  FarmJob j = scale_job("bug", "h100");
  ExecutorConfig broken = emulated_config();
  broken.spec = GpuSpec{};  // no figures: the timing model's invariant check fails
  JobExecutor ex(broken);
  farm::Result r = execute_wire_job(ex, wire_job(j, 5), [] {});
  EXPECT_EQ(r.status(), "internal_error") << r.error();
  EXPECT_EQ(r.error().rfind("internal error in the worker: ", 0), 0u) << r.error();
  EXPECT_EQ(r.lease_id(), 5u);

  JobExecutor good(emulated_config());
  r = execute_wire_job(good, wire_job(j), [] { throw std::bad_alloc(); });
  EXPECT_EQ(r.status(), "internal_error") << r.error();
  r = execute_wire_job(good, wire_job(j), [] { throw 42; });
  EXPECT_EQ(r.status(), "internal_error") << r.error();
  r = execute_wire_job(good, wire_job(j), [] {
    throw cuda::CudaError(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "launch 0: cuLaunchKernel: too many resources");
  });
  EXPECT_EQ(r.status(), "launch_error") << r.error();
  r = execute_wire_job(good, wire_job(j), [] {});
  EXPECT_EQ(r.status(), "ok") << r.error() << " (the executor stays usable)";
}

// ---- the measurement child -------------------------------------------------------------

std::vector<std::string> child_argv() {
  return measure_child_argv(kWorker, emulated_inventory(GpuCatalog::builtin(), "h100", 0), cache_dir(), "warn");
}

TEST(MeasureChild, HungKernelTimesOutAndTheNextChildServes) {
  MeasureChild child(child_argv());
  FarmJob hang = scale_job("hang", "h100", "  volatile int forever = 1;\n  while (forever) {}\n");
  hang.check_on_emulator = true;
  hang.run_deadline = 1500ms;
  const auto t0 = std::chrono::steady_clock::now();
  const farm::Result r = child.run(wire_job(hang, 7));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status(), "timeout") << r.error();
  EXPECT_EQ(r.lease_id(), 7u);
  EXPECT_NE(r.error().find("run exceeded its deadline of 1500 ms"), std::string::npos) << r.error();
  EXPECT_GE(took, 1500ms);
  EXPECT_LT(took, 15s);
  EXPECT_EQ(child.pid(), 0);  // killed
  FarmJob good = scale_job("good", "h100");
  good.check_on_emulator = true;
  const farm::Result ok = child.run(wire_job(good, 8));
  EXPECT_EQ(ok.status(), "ok") << ok.error();
  EXPECT_EQ(child.starts(), 2);
}

TEST(MeasureChild, CompileDeadlineIsSeparate) {
  MeasureChild child(child_argv());
  FarmJob j = scale_job("slow-compile", "h100", "", "compile " + run_tag());
  j.check_on_emulator = true;
  j.compile_deadline = 1ms;  // no compile is that fast
  const farm::Result r = child.run(wire_job(j));
  EXPECT_EQ(r.status(), "timeout");
  EXPECT_NE(r.error().find("compile exceeded its deadline of 1 ms"), std::string::npos) << r.error();
}

TEST(MeasureChild, ChildKilledMidJobIsARuntimeFault) {
  MeasureChild child(child_argv());
  FarmJob hang = scale_job("hang", "h100", "  volatile int forever = 1;\n  while (forever) {}\n");
  hang.check_on_emulator = true;
  hang.run_deadline = 20000ms;
  std::thread killer([&] {
    // Wait for the child to exist and be busy, then kill it as a crash would.
    for (int i = 0; i < 200 && child.pid() == 0; ++i) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(700ms);
    ::kill(child.pid(), SIGKILL);
  });
  const farm::Result r = child.run(wire_job(hang));
  killer.join();
  EXPECT_EQ(r.status(), "runtime_fault");
  EXPECT_NE(r.error().find("killed by signal 9"), std::string::npos) << r.error();
  FarmJob good = scale_job("good", "h100");
  EXPECT_EQ(child.run(wire_job(good)).status(), "ok");
  EXPECT_EQ(child.starts(), 2);
}

// A child that breaks the framing is dc's bug (the child is dc's own program), not the
// variant's: internal_error, and the child is killed.
TEST(MeasureChild, MalformedMessageIsAnInternalError) {
  MeasureChild child({"/bin/sh", "-c", "printf '\\377\\377\\377\\377' >&3; exec sleep 30"});
  const farm::Result r = child.run(wire_job(scale_job("j", "h100"), 3));
  EXPECT_EQ(r.status(), "internal_error") << r.error();
  EXPECT_NE(r.error().find("malformed message"), std::string::npos) << r.error();
  EXPECT_EQ(r.lease_id(), 3u);
  EXPECT_EQ(child.pid(), 0);  // killed
}

TEST(MeasureChild, MissingExecutableIsAResult) {
  MeasureChild child({"/nonexistent/dc-worker", "--measure-child"});
  const farm::Result r = child.run(wire_job(scale_job("j", "h100")));
  EXPECT_EQ(r.status(), "runtime_fault");
  EXPECT_NE(r.error().find("exited with status 127"), std::string::npos) << r.error();
}

// ---- the protocol client against a broker -----------------------------------------------

FarmBrokerOptions fast_broker() {
  FarmBrokerOptions o;
  o.heartbeat = 100ms;
  return o;
}

FarmClientOptions client_options(const std::string& endpoint, const std::string& id) {
  FarmClientOptions o;
  o.endpoint = endpoint;
  o.worker_id = id;
  o.heartbeat = 100ms;
  o.reconnect_min = 50ms;
  o.reconnect_max = 200ms;
  return o;
}

farm::GpuInventory fake_device(const std::string& type) {
  farm::GpuInventory g;
  g.set_gpu_type(type);
  g.set_emulated(true);
  return g;
}

JobRunner sleeping_runner(std::chrono::milliseconds d) {
  return [d](const farm::Job&) {
    std::this_thread::sleep_for(d);
    farm::Result r;
    r.set_status("ok");
    r.add_samples_us(static_cast<double>(d.count()));
    return r;
  };
}

// Version 4: jobs reach a worker as the bytes a tune sent, unparsed by the service. A job
// whose bytes do not parse as a Job is answered at once as a failed result (recorded, not
// lost), and the worker goes on: with one credit per device, a credit it failed to give back
// would stall every later job.
TEST(FarmClient, AJobWhoseBytesDoNotParseIsAFailedResultAndTheWorkerServesOn) {
  FarmBroker broker(fast_broker());
  FarmClient client(client_options(broker.endpoint(), "parser"), {fake_device("h100")}, {sleeping_runner(1ms)});
  std::thread t([&] { EXPECT_EQ(client.run(), FarmClient::Outcome::stopped); });
  FarmJob bad = scale_job("unparsable", "h100");
  // A well-formed top level (the service reads it) whose reference kernel (field 7) holds a
  // field of wire type 7, which no protobuf message parses.
  std::string bytes = farm::to_proto(MeasureJob(bad)).SerializeAsString();
  bytes += std::string("\x3a\x02\xff\x01", 4);
  std::string_view source;
  ASSERT_NO_THROW(farm::read_job_head(bytes, &source));
  ASSERT_FALSE(farm::Job().ParseFromString(bytes));
  bad.variant_source_hash = fnv1a_hex(bad.variant_kernel.source);
  bad.wire_bytes = bytes;
  broker.submit(bad);
  for (int i = 0; i < 5; ++i) broker.submit(scale_job("good" + std::to_string(i), "h100"));
  const auto ms = testing::collect_n(broker, 6, 5s);
  client.stop();
  t.join();
  ASSERT_EQ(ms.size(), 6u);
  int ok = 0;
  for (const Measurement& m : ms) {
    if (m.job_id == "unparsable") {
      EXPECT_EQ(m.status, JobStatus::unsupported);
      EXPECT_NE(m.error.find("do not parse"), std::string::npos) << m.error;
      EXPECT_EQ(m.attempts, 1) << "a verdict, not a lost lease";
    } else {
      EXPECT_EQ(m.status, JobStatus::ok) << m.job_id;
      ++ok;
    }
  }
  EXPECT_EQ(ok, 5);
}

TEST(FarmClient, StopFinishesTheJobInHandThenSaysBye) {
  FarmBroker broker(fast_broker());
  FarmClient client(client_options(broker.endpoint(), "drainer"), {fake_device("h100")}, {sleeping_runner(400ms)});
  std::thread t([&] { EXPECT_EQ(client.run(), FarmClient::Outcome::stopped); });
  broker.submit(scale_job("in-hand", "h100"));
  for (int i = 0; i < 200 && broker.status().in_flight == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(broker.status().in_flight, 1);
  client.stop();
  broker.submit(scale_job("not-taken", "h100"));
  t.join();
  const auto ms = testing::collect_n(broker, 1, 2s);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].status, JobStatus::ok);
  EXPECT_EQ(ms[0].worker, "drainer/0");
  std::this_thread::sleep_for(100ms);
  const FarmStatus st = broker.status();
  EXPECT_EQ(st.workers_per_gpu_type.count("h100"), 0u);  // Bye ended the session at once
  EXPECT_EQ(st.queued, 1);
  EXPECT_EQ(client.stats().jobs_done, 1);
}

TEST(FarmClient, ReconnectsToARestartedCoordinator) {
  auto broker = std::make_unique<FarmBroker>(fast_broker());
  const std::string endpoint = broker->endpoint();
  FarmClient client(client_options(endpoint, "phoenix"), {fake_device("h100")}, {sleeping_runner(1ms)});
  std::thread t([&] { client.run(); });
  for (int i = 0; i < 200 && client.stats().welcomes < 1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(client.stats().welcomes, 1);
  broker.reset();  // the coordinator goes away ...
  FarmBrokerOptions o = fast_broker();
  o.endpoint = endpoint;
  broker = std::make_unique<FarmBroker>(o);  // ... and comes back on the same port
  for (int i = 0; i < 500 && client.stats().welcomes < 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(client.stats().welcomes, 2);
  EXPECT_GE(client.stats().reconnects, 1);
  broker->submit(scale_job("after", "h100"));
  EXPECT_EQ(testing::collect_n(*broker, 1, 3s).size(), 1u);
  client.stop();
  t.join();
}

// A worker that waits out a long reconnect backoff (no coordinator) stops at once when asked
// to and holds nothing: the wait is for a coordinator that nobody needs any more (dc-worker
// under systemd or Slurm gets SIGTERM while its service is down).
TEST(FarmClient, StopDuringAReconnectBackoffEndsItAtOnce) {
  FarmClientOptions o = client_options("tcp://127.0.0.1:1", "orphan");
  o.reconnect_min = 30s;
  o.reconnect_max = 30s;
  FarmClient client(o, {fake_device("h100")}, {sleeping_runner(1ms)});
  std::thread t([&] { EXPECT_EQ(client.run(), FarmClient::Outcome::stopped); });
  for (int i = 0; i < 300 && client.stats().reconnects < 1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(client.stats().reconnects, 1);  // in the 30 s backoff now
  const auto asked = std::chrono::steady_clock::now();
  client.stop();
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 5s);
}

// A runner that throws (dc's code on the worker's side) reports internal_error; the broker
// retries it (here on the only worker) and finally reports it, never as the variant's fault.
TEST(FarmClient, ThrowingRunnerIsAnInternalErrorRetriedByTheBroker) {
  FarmBrokerOptions o = fast_broker();
  o.heartbeat = 1000ms;  // a slow machine must not declare the worker dead
  o.max_attempts = 2;
  FarmBroker broker(o);
  std::atomic<int> calls{0};
  JobRunner buggy = [&](const farm::Job&) -> farm::Result {
    ++calls;
    throw_internal_error("an invariant of the worker");
  };
  FarmClient client(client_options(broker.endpoint(), "buggy"), {fake_device("h100")}, {buggy});
  std::thread t([&] { client.run(); });
  broker.submit(scale_job("j", "h100"));
  const auto ms = testing::collect_n(broker, 1, 20s);
  client.stop();
  t.join();
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].status, JobStatus::internal_error);
  EXPECT_EQ(ms[0].attempts, 2);
  EXPECT_NE(ms[0].error.find("an invariant of the worker"), std::string::npos) << ms[0].error;
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(broker.counters().internal_errors, 2);
}

TEST(FarmClient, RefusalEndsTheRun) {
  FarmBrokerOptions o = fast_broker();
  o.require_emulated = false;
  FarmBroker broker(o);
  FarmClient client(client_options(broker.endpoint(), "emu"), {fake_device("h100")}, {sleeping_runner(1ms)});
  EXPECT_EQ(client.run(), FarmClient::Outcome::refused);
  EXPECT_NE(client.refusal().find("real GPUs only"), std::string::npos) << client.refusal();
}

}  // namespace
}  // namespace dc
