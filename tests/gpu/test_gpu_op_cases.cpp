// The op-case table (tests/support/op_cases.h) on a CUDA GPU: one test per case and precision
// ("Table/OpCasesOnGpu.MatchesTheCpuReference/<op>_<shape>_<dtype>"), the reference kernel and the
// case's variants picked in the device's parameter space, compiled by NVRTC for its
// architecture, run through the CUDA driver (outputs poisoned by the runner) and compared with
// the CPU reference executor within the case's bound. Without a device every test is skipped
// with the reason, or fails under DC_REQUIRE_GPU=1 (gpu_testing.h). The perf mode:
// `dc_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_TimesEachKernel/<case>*'`.
#include <gtest/gtest.h>

#include <cstdio>

#include "gpu_device_testing.h"
#include "nvrtc.h"
#include "op_case_harness.h"
#include "op_cases.h"

namespace dc {
namespace {

using testing::CaseAt;

testing::CaseDevice cuda_device() {
  testing::CaseDevice d;
  d.name = "CUDA " + gpu().info.spec.name + " " + gpu().info.arch;
  d.spec = gpu().info.spec;
  d.compile = [](const GeneratedKernel& k, std::string* error) {
    const CompileResult r = compile_cuda(k.source, gpu().info.arch);
    if (!r.ok) *error = r.error;
    return r.cubin;
  };
  d.run = [](const GeneratedKernel& k, const std::vector<char>& cubin, std::vector<Tensor>& buffers) {
    return run_on_gpu(device(), k, cubin, buffers);
  };
  d.time = [](const GeneratedKernel& k, const std::vector<char>& cubin, const std::vector<Tensor>& inputs) {
    return time_on_gpu(device(), k, cubin, inputs);
  };
  return d;
}

class OpCasesOnGpu : public ::testing::TestWithParam<CaseAt> {};

TEST_P(OpCasesOnGpu, MatchesTheCpuReference) {
  DC_REQUIRE_GPU();
  const CaseAt& at = GetParam();
  const testing::CaseRun run = testing::run_op_case(*at.c, at.storage, cuda_device());
  for (const std::string& f : run.failures) ADD_FAILURE() << f;
  EXPECT_GT(run.kernels, 0u) << "no kernel ran";
}

INSTANTIATE_TEST_SUITE_P(Table, OpCasesOnGpu, ::testing::ValuesIn(testing::op_case_params()),
                         [](const ::testing::TestParamInfo<CaseAt>& i) { return testing::op_case_test_name(i.param); });

// The perf mode, a tool (disabled unless asked for with --gtest_also_run_disabled_tests):
// the case's reference kernel and the first variant of each pick (of each template) timed
// on the GPU (median of the samples), GFLOP/s from the workload's FLOPs. It fails only when a
// kernel does not compile or run.
TEST_P(OpCasesOnGpu, DISABLED_TimesEachKernel) {
  DC_REQUIRE_GPU();
  const CaseAt& at = GetParam();
  for (const testing::CaseTiming& t : testing::time_op_case(*at.c, at.storage, cuda_device())) {
    EXPECT_TRUE(t.error.empty()) << t.kernel << ": " << t.error;
    if (t.error.empty())
      std::printf("%-44s %-5s %10.1f us %8.3f GFLOP/s  %s\n", at.c->name.c_str(), std::string(dtype_name(at.storage)).c_str(),
                  t.median_us, t.gflops, t.kernel.c_str());
  }
}

}  // namespace
}  // namespace dc
