// The worker's builders (worker/builder_pool.h): compile processes that fill the
// compile cache ahead of the measurement child; a crash of one is a compile_error for that
// job alone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "builder_pool.h"
#include "compile_cache.h"
#include "farm_dispatch.h"
#include "farm_testing.h"
#include "gpu/gpu_catalog.h"
#include "measure_child.h"
#include "worker_devices.h"

namespace dc {
namespace {

using testing::scale_job;

const std::string kWorker = std::string(DC_BIN_DIR) + "/dc-worker";

std::string fresh_cache() {
  return ::testing::TempDir() + "dc-builders-" + std::to_string(std::random_device{}()) + "-" +
         std::to_string(::getpid());
}

farm::Job wire_job(const FarmJob& j, uint64_t lease, int32_t device) {
  FarmDispatcher::Submission s = FarmDispatcher::prepare(j);
  farm::Job wire;  // the dispatcher keeps a job as its bytes (protocol version 4)
  if (!wire.ParseFromString(s.wire)) throw std::runtime_error("a prepared job does not parse");
  wire.set_lease_id(lease);
  wire.set_attempt(1);
  wire.set_device_index(device);
  return wire;
}

// Device 0: a real compile child (dc-worker --compile-child) of an emulated H100; device 1:
// a compile child that dies once it has the job (its first byte, on fd 3), as one whose NVRTC
// crashed would. Dying before the job was handed over is another case (the hand-over fails:
// the build is skipped), and the race between the two made this test fail once.
std::function<std::vector<std::string>(int32_t)> children(const std::string& cache) {
  return [cache](int32_t device) -> std::vector<std::string> {
    if (device == 1) return {"/bin/sh", "-c", "head -c 1 <&3 >/dev/null; kill -SEGV $$"};
    std::vector<std::string> argv =
        measure_child_argv(kWorker, emulated_inventory(GpuCatalog::builtin(), "h100", 0), cache, "warn");
    std::replace(argv.begin(), argv.end(), std::string("--measure-child"), std::string("--compile-child"));
    return argv;
  };
}

TEST(BuilderPool, CompilesAheadIntoTheCacheAndACrashFailsOnlyItsJob) {
  const std::string cache = fresh_cache();
  const std::string tag = std::to_string(std::random_device{}());
  const FarmJob good = scale_job("good", "h100", "", "builders " + tag);
  const FarmJob crashing = scale_job("crashing", "h100", "", "builders crash " + tag);
  {
    BuilderPool pool(2, children(cache));
    const farm::Job a = wire_job(good, 11, 0);
    const farm::Job b = wire_job(crashing, 12, 1);
    pool.submit(a);
    pool.submit(b);
    // Wait for both builds: take() returns once a started build is done.
    for (int i = 0; i < 200; ++i) {
      if (pool.stats().built == 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(pool.stats().built, 2) << "the builders did not finish in 10 s";
    EXPECT_FALSE(pool.take(a).has_value()) << "a built job is measured (from the cache)";
    const std::optional<farm::Result> v = pool.take(b);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->status(), "compile_error");
    EXPECT_NE(v->error().find("compile process died"), std::string::npos) << v->error();
    EXPECT_EQ(v->lease_id(), 12u);
    EXPECT_EQ(pool.stats().crashed, 1);
  }
  // The good job's kernel is in the cache: the measurement child's compile is a hit.
  const std::string arch = emulated_inventory(GpuCatalog::builtin(), "h100", 0).arch();
  EXPECT_TRUE(compile_with_cache(good.variant_kernel.source, arch, cache).from_cache);
  EXPECT_FALSE(compile_with_cache(crashing.variant_kernel.source, arch, cache).from_cache);
  std::filesystem::remove_all(cache);
}

TEST(BuilderPool, AJobTheLaneReachesFirstIsLeftToTheMeasurementChild) {
  const std::string cache = fresh_cache();
  BuilderPool pool(1, children(cache));
  const std::string tag = std::to_string(std::random_device{}());
  std::vector<farm::Job> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(wire_job(scale_job("j" + std::to_string(i), "h100", "", tag + "/" + std::to_string(i)), 20 + i, 0));
  for (const farm::Job& j : jobs) pool.submit(j);
  // The last one is still queued behind the others on the single builder.
  EXPECT_FALSE(pool.take(jobs.back()).has_value());
  EXPECT_EQ(pool.stats().skipped, 1);
  for (size_t i = 0; i + 1 < jobs.size(); ++i) EXPECT_FALSE(pool.take(jobs[i]).has_value());
  std::filesystem::remove_all(cache);
}

TEST(BuilderPool, CompileErrorsAndTimeoutsKeepTheirStatus) {
  farm::Job job;
  job.set_lease_id(3);
  farm::Result r;
  r.set_status("compile_error");
  EXPECT_FALSE(build_verdict(job, r).has_value()) << "cached: the measurement child reports it in full";
  r.set_status("timeout");
  ASSERT_TRUE(build_verdict(job, r).has_value());
  EXPECT_EQ(build_verdict(job, r)->status(), "timeout");
  r.set_status("ok");
  EXPECT_FALSE(build_verdict(job, r).has_value());
}


// ---- a compile that runs away -------------------------------------------------------------

// A kernel whose compile runs for minutes: F<N> force-inlines F<N-1> and F<N-2>, so the code
// NVVM optimises grows like Fibonacci(N) (N = 22 already takes 7 s of NVRTC, each step ~1.6x
// more; N = 30 would take about half an hour).
FarmJob runaway_compile_job(const std::string& tag) {
  FarmJob j = scale_job("runaway", "h100", "  if (i < 1000) y[i] += F<30>::f(x, x[i]);\n", "runaway " + tag);
  const std::string templates =
      "template <int N> struct F { __device__ __forceinline__ static float f(const float* x, float a) {\n"
      "  return F<N - 1>::f(x, a) * x[N & 1023] + F<N - 2>::f(x, a + 1.f); } };\n"
      "template <> struct F<1> { __device__ __forceinline__ static float f(const float* x, float a) { return a * x[1]; } };\n"
      "template <> struct F<0> { __device__ __forceinline__ static float f(const float* x, float a) { return a + x[0]; } };\n";
  std::string& src = j.variant_kernel.source;
  const size_t at = src.find("extern \"C\" __global__ void scale(");
  EXPECT_NE(at, std::string::npos);
  src.insert(at, templates);
  j.compile_deadline = std::chrono::milliseconds(2000);
  return j;
}

// The builder's compile child is killed at the job's compile deadline: a timeout for that
// job alone; the pool builds the next job, and the measurement child measures it.
TEST(BuilderPool, ARunawayCompileIsKilledAtItsDeadlineAndTheWorkerKeepsServing) {
  const std::string cache = fresh_cache();
  const std::string tag = std::to_string(std::random_device{}());
  BuilderPool pool(1, children(cache));
  const farm::Job runaway = wire_job(runaway_compile_job(tag), 31, 0);
  const farm::Job good = wire_job(scale_job("after-runaway", "h100", "", "runaway next " + tag), 32, 0);
  const auto t0 = std::chrono::steady_clock::now();
  pool.submit(runaway);
  pool.submit(good);
  while (pool.stats().built == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::optional<farm::Result> v = pool.take(runaway);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(v.has_value()) << "the runaway compile was not stopped";
  EXPECT_EQ(v->status(), "timeout") << v->error();
  EXPECT_NE(v->error().find("compile exceeded its deadline of 2000 ms"), std::string::npos) << v->error();
  EXPECT_EQ(v->lease_id(), 31u);
  EXPECT_GE(took, std::chrono::milliseconds(2000));
  EXPECT_LT(took, std::chrono::seconds(20)) << "killed at the deadline, not when NVRTC gave up";
  // The next job compiles in a new child; the measurement child then measures it (a hit).
  EXPECT_FALSE(pool.take(good).has_value());
  MeasureChild measure(measure_child_argv(kWorker, emulated_inventory(GpuCatalog::builtin(), "h100", 0), cache, "warn"));
  FarmJob good_job = scale_job("after-runaway", "h100", "", "runaway next " + tag);
  good_job.check_on_emulator = true;
  const farm::Result r = measure.run(wire_job(good_job, 33, 0));
  EXPECT_EQ(r.status(), "ok") << r.error();
  std::filesystem::remove_all(cache);
}

// Without builders the measurement child compiles, under the same deadline.
TEST(MeasureChild, ARunawayCompileTimesOutAndTheNextJobIsMeasured) {
  const std::string cache = fresh_cache();
  const std::string tag = std::to_string(std::random_device{}());
  MeasureChild child(measure_child_argv(kWorker, emulated_inventory(GpuCatalog::builtin(), "h100", 0), cache, "warn"));
  const auto t0 = std::chrono::steady_clock::now();
  const farm::Result r = child.run(wire_job(runaway_compile_job(tag), 41, 0));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status(), "timeout") << r.error();
  EXPECT_NE(r.error().find("compile exceeded its deadline of 2000 ms"), std::string::npos) << r.error();
  EXPECT_LT(took, std::chrono::seconds(20));
  EXPECT_EQ(child.pid(), 0) << "the compiling child is killed";
  const farm::Result ok = child.run(wire_job(scale_job("next", "h100", "", "runaway next " + tag), 42, 0));
  EXPECT_EQ(ok.status(), "ok") << ok.error();
  EXPECT_EQ(child.starts(), 2);
  std::filesystem::remove_all(cache);
}

// PoCL's CPU device computes on the cores the builders would compile on, so a worker that
// serves one compiles in its measurement child (no builders) unless told otherwise; a GPU,
// real or emulated, keeps one builder per core.
TEST(BuilderPool, NoneByDefaultBesideADeviceThatComputesOnTheHostsCores) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  auto device = [](const std::string& type, bool emulated) {
    farm::GpuInventory g;
    g.set_gpu_type(type);
    g.set_emulated(emulated);
    return g;
  };
  EXPECT_EQ(default_builders({device("pocl-cpu", false)}, catalog, 16), 0);
  EXPECT_EQ(default_builders({device("h100", false), device("pocl-cpu", false)}, catalog, 16), 0);
  EXPECT_EQ(default_builders({device("h100", false)}, catalog, 16), 16);
  EXPECT_EQ(default_builders({device("h100", true)}, catalog, 2), 2);
  EXPECT_EQ(default_builders({device("arc-a770", false)}, catalog, 4), 4);  // an OpenCL GPU
  EXPECT_EQ(default_builders({device("h100", false)}, catalog, 0), 1);      // cores unknown
}

}  // namespace
}  // namespace dc
