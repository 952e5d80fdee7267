// The op-case table (tests/support/op_cases.h) on a CUDA GPU: one test per case and precision
// ("Table/OpCasesOnGpu.MatchesTheCpuReference/<op>_<shape>_<dtype>"), the reference kernel and the
// case's variants picked in the device's parameter space, compiled by NVRTC for its
// architecture, run through the CUDA driver (outputs poisoned by the runner) and compared with
// the CPU reference executor within the case's bound. Without a device every test is skipped
// with the reason, or fails under DC_REQUIRE_GPU=1 (gpu_testing.h). The perf mode is
// tests/bench/op_case_perf.cpp (docs/testing.md).
#include <gtest/gtest.h>

#include "gpu_device_testing.h"
#include "op_case_harness.h"
#include "op_cases.h"

namespace dc {
namespace {

using testing::CaseAt;

class OpCasesOnGpu : public ::testing::TestWithParam<CaseAt> {};

TEST_P(OpCasesOnGpu, MatchesTheCpuReference) {
  DC_REQUIRE_GPU();
  const CaseAt& at = GetParam();
  const testing::CaseRun run = testing::run_op_case(*at.c, at.storage, cuda_case_device());
  for (const std::string& f : run.failures) ADD_FAILURE() << f;
  EXPECT_GT(run.kernels, 0u) << "no kernel ran";
}

INSTANTIATE_TEST_SUITE_P(Table, OpCasesOnGpu, ::testing::ValuesIn(testing::op_case_params()),
                         [](const ::testing::TestParamInfo<CaseAt>& i) { return testing::op_case_test_name(i.param); });

}  // namespace
}  // namespace dc
