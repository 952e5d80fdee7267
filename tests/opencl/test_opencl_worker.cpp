// dc-worker on an OpenCL device (ctest label "opencl"): the job executor measures for real on
// PoCL's CPU device (clang to SPIR through the compile cache, clBuildProgram, reference check,
// profiling events), and a kernel that fails to build, one that writes out of bounds and one
// that never ends each get their status while the worker serves the next job (the hang in a
// real measurement child, killed by its watchdog). docs/opencl.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "farm_testing.h"
#include "gpu/gpu_catalog.h"
#include "farm_dispatch.h"
#include "job_executor.h"
#include "measure_child.h"
#include "worker_devices.h"

namespace dc {
namespace {

using namespace std::chrono_literals;
using testing::scale_job;

const std::string kWorker = std::string(DC_BIN_DIR) + "/dc-worker";

const farm::GpuInventory& pocl() {
  static const farm::GpuInventory inv = [] {
    std::string why;
    const auto all = opencl_inventory(GpuCatalog::builtin(), {}, &why);
    for (const auto& g : all)
      if (g.gpu_type() == "pocl-cpu") return g;
    return farm::GpuInventory{};
  }();
  return inv;
}

#define DC_REQUIRE_POCL() ASSERT_EQ(pocl().gpu_type(), "pocl-cpu") << "no PoCL CPU device (pocl-opencl-icd)"

farm::Job wire_job(const FarmJob& j, uint64_t lease = 1) {
  FarmDispatcher::Submission s = FarmDispatcher::prepare(j);
  farm::Job wire;  // the dispatcher keeps a job as its bytes (protocol version 4)
  if (!wire.ParseFromString(s.wire)) throw std::runtime_error("a prepared job does not parse");
  wire.set_lease_id(lease);
  wire.set_attempt(1);
  wire.set_device_index(pocl().device_index());
  return wire;
}

ExecutorConfig pocl_config() {
  ExecutorConfig c;
  c.device = pocl();
  c.spec = GpuCatalog::builtin().require("pocl-cpu");
  c.cache_dir = testing::shared_compile_cache();
  c.timing.min_total_ms = 2;
  return c;
}

TEST(OpenClInventory, PoclCarriesItsMeasuredFigures) {
  DC_REQUIRE_POCL();
  EXPECT_EQ(pocl().api(), "opencl");
  EXPECT_EQ(pocl().arch(), "spir64");
  EXPECT_FALSE(pocl().emulated());
  EXPECT_GT(pocl().dram_bandwidth_gbs(), 0.5);   // a probe that ran
  EXPECT_LT(pocl().dram_bandwidth_gbs(), 2000.0);
  EXPECT_GT(pocl().fp32_peak_gflops(), 1.0);
  EXPECT_NE(describe_inventory(pocl()).find("pocl-cpu"), std::string::npos);
}

TEST(OpenClExecutor, MeasuresForReal) {
  DC_REQUIRE_POCL();
  JobExecutor ex(pocl_config());
  bool compiled = false;
  const farm::Result r = execute_wire_job(ex, wire_job(scale_job("ok", "pocl-cpu"), 42), [&] { compiled = true; });
  ASSERT_EQ(r.status(), "ok") << r.error();
  EXPECT_TRUE(compiled);
  EXPECT_FALSE(r.emulated());
  EXPECT_EQ(r.max_rel_error(), 0.0);  // 2 * x either way
  EXPECT_GE(r.samples_us_size(), 10);
  for (double s : r.samples_us()) EXPECT_GT(s, 0.0);
  // The second time the SPIR comes from the compile cache.
  const farm::Result again = execute_wire_job(ex, wire_job(scale_job("ok", "pocl-cpu"), 43), [] {});
  EXPECT_EQ(again.status(), "ok") << again.error();
  EXPECT_TRUE(again.compile_cached());
}

TEST(OpenClExecutor, FailuresAreResultsAndTheExecutorServesOn) {
  DC_REQUIRE_POCL();
  JobExecutor ex(pocl_config());
  auto status_of = [&](FarmJob j) {
    const farm::Result r = execute_wire_job(ex, wire_job(j), [] {});
    return r.status() + ": " + r.error();
  };
  FarmJob broken = scale_job("broken", "pocl-cpu");
  broken.variant_kernel.source += "\nthis is not a kernel;\n";
  EXPECT_EQ(status_of(broken).rfind("compile_error", 0), 0u) << status_of(broken);

  FarmJob wrong = scale_job("wrong", "pocl-cpu");
  wrong.variant_kernel.source.replace(wrong.variant_kernel.source.find("2.f * x[i]"), 10, "3.f * x[i]");
  EXPECT_EQ(status_of(wrong).rfind("wrong_result: output t1", 0), 0u) << status_of(wrong);

  // y has 1000 floats: y[1100] lies in the guard behind it.
  const std::string oob = status_of(scale_job("oob", "pocl-cpu", "  if (i == 0) y[1100] = 1.f;\n"));
  EXPECT_EQ(oob.rfind("runtime_fault", 0), 0u) << oob;
  EXPECT_NE(oob.find("out-of-bounds write"), std::string::npos) << oob;

  EXPECT_EQ(status_of(scale_job("fine", "pocl-cpu")).rfind("ok", 0), 0u);
}

// Paired timing through the executor (docs/opencl.md, "Paired timing"): the first variant of
// a workload is timed alone and anchors the next ones, whose results say with which kernel
// they were timed in turns; with pairing off, every variant is timed alone.
TEST(OpenClExecutor, TheNextVariantOfAWorkloadIsTimedInTurnsWithTheFirst) {
  DC_REQUIRE_POCL();
  auto note_of = [](JobExecutor& ex, const FarmJob& j) {
    const farm::Result r = execute_wire_job(ex, wire_job(j), [] {});
    EXPECT_EQ(r.status(), "ok") << r.error();
    return r.health().note();
  };
  JobExecutor ex(pocl_config());
  EXPECT_NE(note_of(ex, scale_job("first", "pocl-cpu")).find("paired timing: the workload's anchor, timed alone"),
            std::string::npos);
  // One note for every paired result (dc-db health counts results by note).
  const std::string second = note_of(ex, scale_job("second", "pocl-cpu", "", "a distinct source"));
  EXPECT_EQ(second, "OpenCL device: NVML covers NVIDIA GPUs only; paired timing: samples scaled to the workload's anchor");
  EXPECT_EQ(note_of(ex, scale_job("third", "pocl-cpu", "", "another distinct source")), second);

  ExecutorConfig alone = pocl_config();
  alone.timing.pair_cpu_timings = false;
  JobExecutor ex_alone(alone);
  note_of(ex_alone, scale_job("first", "pocl-cpu"));
  EXPECT_EQ(note_of(ex_alone, scale_job("second", "pocl-cpu", "", "a distinct source")).find("anchor"),
            std::string::npos);
}

TEST(OpenClMeasureChild, HungKernelTimesOutAndTheNextChildServes) {
  DC_REQUIRE_POCL();
  MeasureChild child(measure_child_argv(kWorker, pocl(), testing::shared_compile_cache(), "warn"));
  FarmJob hang = scale_job("hang", "pocl-cpu", "  volatile int forever = 1;\n  while (forever) {}\n");
  hang.run_deadline = 3000ms;
  const farm::Result r = child.run(wire_job(hang, 7));
  EXPECT_EQ(r.status(), "timeout") << r.error();
  EXPECT_EQ(r.lease_id(), 7u);
  const farm::Result ok = child.run(wire_job(scale_job("after-hang", "pocl-cpu"), 8));
  EXPECT_EQ(ok.status(), "ok") << ok.error();
  EXPECT_EQ(child.starts(), 2);
}

}  // namespace
}  // namespace dc
