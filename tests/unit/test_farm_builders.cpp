// The worker's builders (common/farm/builder_pool.h): compile processes that fill the
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
  s.wire.set_lease_id(lease);
  s.wire.set_attempt(1);
  s.wire.set_device_index(device);
  return s.wire;
}

// Device 0: a real compile child (dc-worker --compile-child) of an emulated H100; device 1:
// a compile child that dies at once, as one whose NVRTC crashed would.
std::function<std::vector<std::string>(int32_t)> children(const std::string& cache) {
  return [cache](int32_t device) -> std::vector<std::string> {
    if (device == 1) return {"/bin/sh", "-c", "kill -SEGV $$"};
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
  EXPECT_TRUE(compile_with_cache(good.variant.source, arch, cache).from_cache);
  EXPECT_FALSE(compile_with_cache(crashing.variant.source, arch, cache).from_cache);
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

}  // namespace
}  // namespace dc
