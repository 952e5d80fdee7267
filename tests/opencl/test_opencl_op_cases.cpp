// The op-case table (tests/support/op_cases.h) on PoCL's CPU device: one test per case and
// precision ("Table/OpCasesOnPocl.MatchesTheCpuReference/<op>_<shape>_<dtype>"), the reference
// kernel and the first variant of each of the case's picks (of each template, for a pick of
// every template) in pocl-cpu's parameter space, made OpenCL by the dialect layer, compiled
// by clang to SPIR and run by PoCL (outputs poisoned by the runner), compared with the CPU
// reference executor within the case's bound.
// The perf mode is tests/bench/op_case_perf.cpp (docs/testing.md).
#include <gtest/gtest.h>

#include "op_case_harness.h"
#include "op_cases.h"
#include "pocl_testing.h"

namespace dc {
namespace {

using testing::CaseAt;

class OpCasesOnPocl : public ::testing::TestWithParam<CaseAt> {};

TEST_P(OpCasesOnPocl, MatchesTheCpuReference) {
  DC_REQUIRE_POCL();
  const CaseAt& at = GetParam();
  const testing::CaseRun run = testing::run_op_case(*at.c, at.storage, pocl_case_device());
  for (const std::string& f : run.failures) ADD_FAILURE() << f;
  EXPECT_GT(run.kernels, 0u) << "no kernel ran";
}

INSTANTIATE_TEST_SUITE_P(Table, OpCasesOnPocl, ::testing::ValuesIn(testing::op_case_params()),
                         [](const ::testing::TestParamInfo<CaseAt>& i) { return testing::op_case_test_name(i.param); });

}  // namespace
}  // namespace dc
