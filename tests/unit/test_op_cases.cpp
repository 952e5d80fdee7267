// The op-case table (tests/support/op_cases.h) on the host emulator: one test per case and
// precision ("Table/OpCasesOnEmulator.MatchesTheCpuReference/<op>_<shape>_<dtype>"), each running
// the case's reference kernel and variants of the A100's space on the emulator (and NVRTC
// for sm_80) against the CPU reference executor; and the harness's own checks: a planted
// wrong kernel and a bound of zero are reported with the case and the worst element.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <set>

#include "op_case_harness.h"
#include "op_cases.h"
#include "pass_testing.h"
#include "testing.h"

namespace dc::testing {
namespace {

class OpCasesOnEmulator : public ::testing::TestWithParam<CaseAt> {};

TEST_P(OpCasesOnEmulator, MatchesTheCpuReference) {
  const CaseAt& at = GetParam();
  const CaseRun run = run_op_case(*at.c, at.storage, emulator_device());
  for (const std::string& f : run.failures) ADD_FAILURE() << f;
  EXPECT_GT(run.kernels, 0u) << "no kernel ran";
}

INSTANTIATE_TEST_SUITE_P(Table, OpCasesOnEmulator, ::testing::ValuesIn(op_case_params()),
                         [](const ::testing::TestParamInfo<CaseAt>& i) { return op_case_test_name(i.param); });

TEST(OpCaseTable, NamesAreUniqueTestNames) {
  std::set<std::string> names;
  for (const CaseAt& at : op_case_params()) {
    const std::string n = op_case_test_name(at);
    EXPECT_TRUE(names.insert(n).second) << "two cases named " << n;
    for (char ch : n) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') << n;
  }
  EXPECT_GE(names.size(), 60u);
}

// A Relu over 4 x 33 whose only kernel is the reference kernel.
OpCase planted_case() {
  return {"planted_relu_4x33", {DType::f32}, [](DType) {
            Graph g;
            add_input(g, "x", {4, 33});
            add_node(g, "Relu", {"x"}, {"y"});
            g.outputs = {"y"};
            CasePart p;
            p.w = workload_of(g, random_graph_inputs(g, 3), ClusterKind::elementwise, &p.inputs);
            return std::vector<CasePart>{p};
          }, {}};
}

TEST(OpCaseHarness, APlantedWrongElementIsReportedWithTheCaseAndTheElement) {
  CaseDevice d = emulator_device();
  const KernelRun emulator = d.run;
  d.run = [emulator](const GeneratedKernel& k, const std::vector<char>& bin, std::vector<Tensor>& bufs) {
    const GpuRunResult r = emulator(k, bin, bufs);
    for (size_t i = 0; i < bufs.size(); ++i)
      if (k.buffers[i].role == BufferRole::output) bufs[i].mutable_data<float>()[17] += 0.5f;  // one wrong element
    return r;
  };
  const CaseRun bad = run_op_case(planted_case(), DType::f32, d);
  ASSERT_EQ(bad.failures.size(), 1u);
  EXPECT_EQ(bad.kernels, 0u);
  EXPECT_NE(bad.failures[0].find("planted_relu_4x33 [f32]"), std::string::npos) << bad.failures[0];
  EXPECT_NE(bad.failures[0].find("reference"), std::string::npos) << bad.failures[0];
  EXPECT_NE(bad.failures[0].find("output t1:"), std::string::npos) << bad.failures[0];
  EXPECT_NE(bad.failures[0].find("worst element 17 of 132"), std::string::npos) << bad.failures[0];
  // The same case with the emulator as it is passes.
  const CaseRun good = run_op_case(planted_case(), DType::f32, emulator_device());
  EXPECT_TRUE(good.failures.empty()) << good.failures.at(0);
  EXPECT_EQ(good.kernels, 1u);
}

TEST(OpCaseHarness, ABoundOfZeroRejectsAOneUlpDifference) {
  std::vector<float> a = random_tensor({50}, 4).to_float_vector(), b = a;
  b[31] = std::nextafter(b[31], 2.f);
  const Tensor ta = Tensor::from_vector<float>({50}, a), tb = Tensor::from_vector<float>({50}, b);
  EXPECT_EQ(compare_output(ta, ta, false, Tolerance{0, 0}), "");
  const std::string why = compare_output(ta, tb, false, Tolerance{0, 0});
  EXPECT_NE(why.find("worst element 31 of 50"), std::string::npos) << why;
  EXPECT_EQ(compare_output(ta, tb, false, Tolerance{1e-5, 0}), "");  // within the fp32 floor
  EXPECT_NE(compare_output(ta, tb, true, {}).find("not bitwise equal; worst element 31"), std::string::npos);
  // Bitwise: -0 is not 0; a NaN matches a NaN, not a number.
  std::vector<float> z = a, zn = a;
  z[5] = 0.f, zn[5] = -0.f;
  EXPECT_NE(compare_output(Tensor::from_vector<float>({50}, z), Tensor::from_vector<float>({50}, zn), true, {}).find("worst element 5 "),
            std::string::npos);
  z[7] = zn[7] = std::numeric_limits<float>::quiet_NaN();
  zn[5] = 0.f;
  EXPECT_EQ(compare_output(Tensor::from_vector<float>({50}, z), Tensor::from_vector<float>({50}, zn), true, {}), "");
  z[9] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(compare_output(Tensor::from_vector<float>({50}, z), Tensor::from_vector<float>({50}, zn), false, {1, 1}).find("worst element 9 "),
            std::string::npos);
}

TEST(OpCaseHarness, APickWithoutAVariantFailsOnTheEmulator) {
  OpCase c = planted_case();
  const auto build = c.build;
  c.build = [build](DType s) {
    std::vector<CasePart> parts = build(s);
    VariantPick none;
    none.accept = [](const Variant&) { return false; };
    parts[0].picks.push_back(none);
    parts[0].templates = {"row_reduce"};
    return parts;
  };
  const CaseRun run = run_op_case(c, DType::f32, emulator_device());
  ASSERT_EQ(run.failures.size(), 2u);
  EXPECT_NE(run.failures[0].find("no variant on a100 satisfies a pick"), std::string::npos) << run.failures[0];
  EXPECT_NE(run.failures[1].find("no row_reduce kernel ran"), std::string::npos) << run.failures[1];
}

TEST(OpCaseHarness, AGeneratorErrorIsAFailureOfTheCase) {
  // An op without naive code: generate_reference throws, the harness names the case.
  const OpCase c{"unknown_op_4", {DType::f32}, [](DType) {
                   CasePart p;
                   add_input(p.w.graph, "x", {4});
                   p.w.graph.tensors["y"] = {DType::f32, {4}};
                   add_node(p.w.graph, "Foo", {"x"}, {"y"});
                   p.w.graph.outputs = {"y"};
                   p.inputs["x"] = random_tensor({4}, 1);
                   return std::vector<CasePart>{p};
                 }, {}};
  const CaseRun run = run_op_case(c, DType::f32, emulator_device());
  ASSERT_EQ(run.failures.size(), 1u);
  EXPECT_NE(run.failures[0].find("unknown_op_4 [f32]: generating the reference kernel: "), std::string::npos) << run.failures[0];
  EXPECT_NE(run.failures[0].find("Foo"), std::string::npos) << run.failures[0];
  EXPECT_EQ(run.kernels, 0u);
}

}  // namespace
}  // namespace dc::testing
