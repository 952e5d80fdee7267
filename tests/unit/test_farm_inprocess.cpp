// The in-process test farm (tests/support/farm_inprocess.h): threads running the production
// JobExecutor on jobs in the dispatcher's wire form. So its results are the emulated
// worker's: NVRTC compiles (compile errors, registers), the host-emulator check against the
// reference kernel when a job asks, and times from the emulated device's timing model.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>

#include "emulated_timing.h"
#include "farm_inprocess.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "pass_testing.h"
#include "plan_estimate.h"

namespace dc {
namespace {

const GpuCatalog& catalog() {
  static const GpuCatalog c = GpuCatalog::builtin();
  return c;
}

// Relu -> Sigmoid on [8, 256]: a job for the first kept variant of a workload whose kernel
// computes the Sigmoid.
FarmJob sigmoid_job() {
  Graph g;
  g.name = "chain2";
  g.opset = 17;
  testing::add_input(g, "x", {8, 256});
  testing::add_node(g, "Relu", {"x"}, {"r"});
  testing::add_node(g, "Sigmoid", {"r"}, {"y"});
  g.outputs = {"y"};
  g = testing::with_types(g);
  const ModelPlan plan = plan_by_estimate(g, {&catalog().require("h100")}, PlanOptions{});
  for (size_t wi = 0; wi < plan.workload_set.workloads.size(); ++wi) {
    const Workload& w = plan.workload_set.workloads[wi];
    if (plan.gpus[0].workloads[wi].kept.empty()) continue;
    FarmJob j;
    j.gpu_type = "h100";
    j.workload = w.signature;
    j.reference = generate_reference(w);
    j.variant_kernel = generate_kernel(w, plan.gpus[0].workloads[wi].kept.front().variant);
    if (j.variant_kernel.source.find("dc_sigmoid(", j.variant_kernel.source.find("__global__")) == std::string::npos) continue;
    j.job_id = w.signature + "/" + j.variant_kernel.variant_key + "/h100";
    j.estimate_us = 4;
    j.seed = 7;
    return j;
  }
  ADD_FAILURE() << "no workload of the chain has a Sigmoid kernel";
  return {};
}

std::map<std::string, Measurement> collect_n(Farm& farm, size_t n) {
  std::map<std::string, Measurement> got;
  for (int i = 0; i < 1200 && got.size() < n; ++i)
    for (auto& m : farm.collect(std::chrono::milliseconds(100))) got[m.variant_key] = m;
  return got;
}

std::string temp_cache() {
  return (std::filesystem::path(::testing::TempDir()) / ("dc-inprocess-cache-" + std::to_string(::getpid()))).string();
}

TEST(InProcessFarm, EmulatorCheckPassesForGeneratedKernelsAndCatchesAWrongOne) {
  InProcessFarmOptions f;
  f.gpu_types = {"h100"};
  f.workers_per_type = 2;
  f.cache_dir = temp_cache();
  auto farm = make_inprocess_farm(f);
  FarmJob j = sigmoid_job();
  ASSERT_FALSE(j.variant_kernel.source.empty());
  j.check_on_emulator = true;
  farm->submit(j);
  // The same kernel with its sigmoid(v) turned into 0.5 + v: the outputs differ.
  FarmJob bad = j;
  const auto pos = bad.variant_kernel.source.find("dc_sigmoid(", bad.variant_kernel.source.find("__global__"));
  bad.variant_kernel.source.replace(pos, 11, "(0.5f+");
  bad.variant_kernel.variant_key += "-broken";
  farm->submit(bad);
  const auto got = collect_n(*farm, 2);
  ASSERT_EQ(got.size(), 2u);
  const Measurement& ok = got.at(j.variant_kernel.variant_key);
  EXPECT_EQ(ok.status, JobStatus::ok) << ok.error;
  EXPECT_TRUE(ok.emulated);
  EXPECT_LT(ok.max_rel_error, 1e-5);
  EXPECT_EQ(got.at(bad.variant_kernel.variant_key).status, JobStatus::wrong_result);
  EXPECT_GT(got.at(bad.variant_kernel.variant_key).max_rel_error, 1e-3);
  EXPECT_EQ(farm->status().done, 2);
  std::filesystem::remove_all(f.cache_dir);
}

TEST(InProcessFarm, CompilesWithNvrtcAndTimesWithTheEmulatedTimingModel) {
  InProcessFarmOptions f;
  f.gpu_types = {"h100"};
  auto farm = make_inprocess_farm(f);
  const FarmJob j = sigmoid_job();
  farm->submit(j);
  FarmJob bad = j;
  bad.variant_kernel.source += "\nthis is not CUDA;\n";
  bad.variant_kernel.variant_key += "-broken";
  farm->submit(bad);
  const auto got = collect_n(*farm, 2);
  ASSERT_EQ(got.size(), 2u);
  const Measurement& ok = got.at(j.variant_kernel.variant_key);
  ASSERT_EQ(ok.status, JobStatus::ok) << ok.error;
  EXPECT_GT(ok.registers, 0);
  EXPECT_GT(ok.compile_seconds, 0);
  // The samples are the emulated worker's timing model's for this kernel, not the estimate.
  const CompileResult c = compile_cuda(j.variant_kernel.source, catalog().require("h100").sm_arch());
  ASSERT_TRUE(c.ok) << c.error;
  const EmulatedTiming t = emulated_timing(j.variant_kernel, catalog().require("h100"), c.kernels,
                                           EmulatedWork{j.flops, "fp32"}, j.seed, 10);
  ASSERT_TRUE(t.ok) << t.error;
  EXPECT_EQ(ok.samples_us, t.samples_us);
  EXPECT_EQ(got.at(bad.variant_kernel.variant_key).status, JobStatus::compile_error);
  EXPECT_FALSE(got.at(bad.variant_kernel.variant_key).error.empty());
}

TEST(InProcessFarm, UnknownGpuTypeIsAUserError) {
  InProcessFarmOptions f;
  f.gpu_types = {"no-such-gpu"};
  EXPECT_THROW(make_inprocess_farm(f), UserError);
}

}  // namespace
}  // namespace dc
