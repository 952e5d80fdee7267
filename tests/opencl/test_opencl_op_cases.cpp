// The op-case table (tests/support/op_cases.h) on PoCL's CPU device: one test per case and
// precision ("Table/OpCasesOnPocl.MatchesTheCpuReference/<op>_<shape>_<dtype>"), the reference
// kernel and the first variant of each of the case's picks in pocl-cpu's parameter space,
// made OpenCL by the dialect layer, compiled by clang to SPIR and run by PoCL (outputs
// poisoned by the runner), compared with the CPU reference executor within the case's bound.
// And the perf mode: `dc_opencl_tests --gtest_also_run_disabled_tests
// --gtest_filter='*DISABLED_TimesEachKernel/<case>*'` times each case's kernels on PoCL (docs/testing.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>

#include "op_case_harness.h"
#include "op_cases.h"
#include "opencl_compile.h"
#include "opencl_dialect.h"
#include "opencl_runner.h"
#include "pocl_testing.h"

namespace dc {
namespace {

using testing::CaseAt;

testing::CaseDevice pocl_device() {
  testing::CaseDevice d;
  d.name = "OpenCL pocl-cpu";
  d.spec = cl().spec;
  d.compile = [](const GeneratedKernel& k, std::string* error) {
    const OpenClCompileResult r = compile_opencl(opencl_source(k), cl().clang, pocl_cache());
    if (!r.ok) *error = r.error;
    return r.binary;
  };
  d.run = [](const GeneratedKernel& k, const std::vector<char>& spir, std::vector<Tensor>& buffers) {
    return run_on_opencl(*cl().device, k, spir, buffers);
  };
  d.time = [](const GeneratedKernel& k, const std::vector<char>& spir, const std::vector<Tensor>& inputs) {
    TimingOptions o;
    o.min_samples = 5;
    o.min_total_ms = 5;
    return time_on_opencl(*cl().device, k, spir, inputs, o);
  };
  d.max_per_pick = 1;  // PoCL builds each kernel for the CPU: the first variant of each pick
  return d;
}

class OpCasesOnPocl : public ::testing::TestWithParam<CaseAt> {};

TEST_P(OpCasesOnPocl, MatchesTheCpuReference) {
  DC_REQUIRE_POCL();
  const CaseAt& at = GetParam();
  const testing::CaseRun run = testing::run_op_case(*at.c, at.storage, pocl_device());
  for (const std::string& f : run.failures) ADD_FAILURE() << f;
  EXPECT_GT(run.kernels, 0u) << "no kernel ran";
}

INSTANTIATE_TEST_SUITE_P(Table, OpCasesOnPocl, ::testing::ValuesIn(testing::op_case_params()),
                         [](const ::testing::TestParamInfo<CaseAt>& i) { return testing::op_case_test_name(i.param); });

// The perf mode, a tool (disabled unless asked for with --gtest_also_run_disabled_tests):
// the case's reference kernel and the first variant of each pick (of each template) timed
// on PoCL (median of the samples), GFLOP/s from the workload's FLOPs. It fails only when a
// kernel does not compile or run.
TEST_P(OpCasesOnPocl, DISABLED_TimesEachKernel) {
  DC_REQUIRE_POCL();
  const CaseAt& at = GetParam();
  for (const testing::CaseTiming& t : testing::time_op_case(*at.c, at.storage, pocl_device())) {
    EXPECT_TRUE(t.error.empty()) << t.kernel << ": " << t.error;
    if (t.error.empty())
      std::printf("%-44s %-5s %10.1f us %8.3f GFLOP/s  %s\n", at.c->name.c_str(), std::string(dtype_name(at.storage)).c_str(),
                  t.median_us, t.gflops, t.kernel.c_str());
  }
}

}  // namespace
}  // namespace dc
