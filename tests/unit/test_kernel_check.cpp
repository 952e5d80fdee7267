// worker/kernel_check.h: the one check of a variant against its reference kernel that the
// CUDA, OpenCL and emulated devices share, driven here by a scripted runner.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernel_check.h"

namespace dc {
namespace {

Workload twice_workload() {
  Workload w;
  w.signature = "twice";
  w.graph.tensors["x"] = TensorInfo{DType::f32, {64}};
  w.graph.tensors["y"] = TensorInfo{DType::f32, {64}};
  w.graph.inputs = {"x"};
  w.graph.outputs = {"y"};
  return w;
}

GeneratedKernel kernel(const std::string& name) {
  GeneratedKernel k;
  k.template_name = name;
  k.buffers = {{"x", BufferRole::input, DType::f32, {64}}, {"y", BufferRole::output, DType::f32, {64}}};
  return k;
}

std::vector<Tensor> inputs() {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f + 0.01f * static_cast<float>(i * 37 % 64);
  return {Tensor::from_vector<float>({64}, x)};
}

// y = 2x; the kernel named "wrong_lane" gets lane 13 wrong by `error`; "fails" fails to run.
KernelRun scripted(float error, JobStatus fail_status = JobStatus::runtime_fault, bool lost = false) {
  return [=](const GeneratedKernel& k, const std::vector<char>&, std::vector<Tensor>& b) {
    GpuRunResult r;
    if (k.template_name == "fails" || (k.template_name == "reference" && fail_status == JobStatus::launch_error)) {
      r.status = fail_status;
      r.error = "launch 0 (k): CUDA_ERROR_ILLEGAL_ADDRESS";
      r.context_lost = lost;
      return r;
    }
    const float* x = b[0].data<float>();
    Tensor y(DType::f32, {64});
    float* p = y.mutable_data<float>();
    for (int i = 0; i < 64; ++i) p[i] = 2 * x[i] + (k.template_name == "wrong_lane" && i == 13 ? error : 0.f);
    b[1] = y;
    return r;
  };
}

ReferenceCheck check(const KernelRun& run, const GeneratedKernel& variant, const std::string& device = "") {
  return check_against_reference(run, twice_workload(), variant, {}, kernel("reference"), {}, Tolerance{1e-5, 1e-7},
                                 inputs(), device);
}

TEST(KernelCheck, AnEqualVariantPassesWithZeroError) {
  const ReferenceCheck c = check(scripted(0), kernel("tiled"));
  EXPECT_TRUE(c.ok()) << c.error;
  EXPECT_EQ(c.max_rel_error, 0);
}

TEST(KernelCheck, OneWrongLaneIsAWrongResultNamingTheOutputAndTheDevice) {
  const ReferenceCheck c = check(scripted(0.5f), kernel("wrong_lane"), " on OpenCL");
  EXPECT_EQ(c.status, JobStatus::wrong_result);
  EXPECT_NE(c.error.find("output y: relative L2 error"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find(" on OpenCL"), std::string::npos) << c.error;
  EXPECT_NEAR(c.max_abs_error, 0.5, 1e-6);
  EXPECT_GT(c.max_rel_error, 1e-5);
}

TEST(KernelCheck, ANaNInOneLaneIsAWrongResult) {
  const ReferenceCheck c = check(scripted(std::numeric_limits<float>::quiet_NaN()), kernel("wrong_lane"));
  EXPECT_EQ(c.status, JobStatus::wrong_result) << c.error;
}

TEST(KernelCheck, AFailingRunKeepsItsStatusAndALostContextIsPassedOn) {
  const ReferenceCheck c = check(scripted(0, JobStatus::runtime_fault, true), kernel("fails"));
  EXPECT_EQ(c.status, JobStatus::runtime_fault);
  EXPECT_TRUE(c.context_lost);
  EXPECT_EQ(c.error.rfind("launch 0", 0), 0u) << c.error;
}

TEST(KernelCheck, AFailingReferenceIsNamedAsTheReference) {
  const ReferenceCheck c = check(scripted(0, JobStatus::launch_error), kernel("tiled"));
  EXPECT_EQ(c.status, JobStatus::launch_error);
  EXPECT_EQ(c.error.rfind("reference kernel: ", 0), 0u) << c.error;
}

TEST(KernelCheck, AKernelReadingNoWorkloadInputIsRefusedNotRun) {
  GeneratedKernel k = kernel("tiled");
  k.buffers[0].name = "z";
  bool ran_variant = false;
  const KernelRun run = [&](const GeneratedKernel& g, const std::vector<char>& bin, std::vector<Tensor>& b) {
    ran_variant = ran_variant || g.template_name == "tiled";
    return scripted(0)(g, bin, b);
  };
  const ReferenceCheck c = check(run, k);
  EXPECT_EQ(c.status, JobStatus::unsupported);
  EXPECT_NE(c.error.find("reads 'z', which is no input of the workload"), std::string::npos) << c.error;
  EXPECT_FALSE(ran_variant);
  k = kernel("tiled");
  k.buffers[0].shape = {32};
  const std::string why = check(scripted(0), k).error;
  EXPECT_NE(why.find("reads 'x' as f32 32 but the workload input is f32 64"), std::string::npos) << why;
}

}  // namespace
}  // namespace dc
