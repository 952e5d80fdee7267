// Zero-copy binding (dcrt_input_device_buffer / dcrt_output_device_buffer, used by the Python
// package's CUDA path): the CUDA backend's io_device_address is the very buffer the launches
// read and write. On the fake driver (tests/support/fake_cuda.cpp) device memory is host
// memory, so the test writes an input through the address and reads the output through the
// other, with no set_input or get_output in between.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend_cuda.h"
#include "cuda_driver.h"
#include "ir/error.h"

namespace dc::rt {
namespace {

constexpr int64_t kN = 8;

std::shared_ptr<const cuda::Driver> fake_driver() {
  const cuda::DriverLoad load = cuda::load_driver(DC_FAKE_CUDA);
  EXPECT_TRUE(load.driver) << load.error;
  void* h = dlopen(DC_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
  if (h) reinterpret_cast<void (*)()>(dlsym(h, "dc_fake_cuda_reset"))();
  return load.driver;
}

PlanTensor io_tensor(const std::string& name, PlanTensorKind kind) {
  PlanTensor t;
  t.name = name;
  t.kind = kind;
  t.shape = {kN};
  return t;
}

// x -> y through the fake driver's built-in "copy" kernel.
ExecPlan copy_plan() {
  ExecPlan p;
  p.model_name = "fake";
  p.tensors = {io_tensor("x", PlanTensorKind::input), io_tensor("y", PlanTensorKind::output)};
  p.inputs = {0};
  p.outputs = {1};
  GeneratedKernel k;
  k.template_name = "fake";
  k.variant_key = "copy";
  k.buffers = {{"b0", BufferRole::input, DType::f32, {kN}, false},
               {"b1", BufferRole::output, DType::f32, {kN}, false}};
  k.source = "extern \"C\" __global__ void copy(float* b0, float* b1) {}\n";
  Launch l;
  l.kernel = "copy";
  l.block = {kN, 1, 1};
  l.args = {0, 1};
  k.launches = {l};
  p.modules = {k};
  PlanStep s;
  s.module = 0;
  s.buffers = {0, 1};
  s.cluster = "copy#0";
  p.steps = {s};
  p.values.resize(p.tensors.size());
  return p;
}

TEST(DeviceBuffers, AreTheBuffersTheLaunchesUse) {
  for (bool graph : {true, false}) {
    CudaBackendOptions o;
    o.use_cuda_graph = graph;
    auto b = make_cuda_backend(fake_driver(), o);
    const ExecPlan plan = copy_plan();
    b->load(plan);
    const uint64_t in = b->io_device_address(false, 0);
    const uint64_t out = b->io_device_address(true, 0);
    ASSERT_NE(in, 0u);
    ASSERT_NE(out, 0u);
    EXPECT_NE(in, out);
    EXPECT_EQ(b->io_device_address(false, 0), in) << "stable: the CUDA graph captured it";
    for (float start : {3.f, -7.f}) {
      std::vector<float> x(kN), y(kN, -1.f);
      for (int64_t i = 0; i < kN; ++i) x[i] = start + 0.5f * static_cast<float>(i);
      std::memcpy(reinterpret_cast<void*>(in), x.data(), kN * sizeof(float));  // "device to device"
      b->run();
      std::memcpy(y.data(), reinterpret_cast<const void*>(out), kN * sizeof(float));
      EXPECT_EQ(y, x) << (graph ? "graph" : "direct");
    }
    EXPECT_THROW(b->io_device_address(false, 1), UserError);
    EXPECT_THROW(b->io_device_address(true, 1), UserError);
  }
}

TEST(DeviceBuffers, TheEmulatorHasNone) {
  auto b = make_emulator_backend({});
  EXPECT_EQ(b->io_device_address(false, 0), 0u);
}

}  // namespace
}  // namespace dc::rt
