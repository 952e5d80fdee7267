// The plan runtime's CUDA backend (codegen/plan_runtime/backend_cuda.cpp) without a GPU: small
// hand-made plans whose kernels are the fake driver's built-in behaviours
// (tests/support/fake_cuda.cpp: copy, accumulate, fault, resources), compiled for real by
// NVRTC, run through graph capture and replay or direct launches. It checks what the
// backend itself decides: where every buffer lives (inputs, outputs, arena and weight
// offsets), zeroing before every run, launch limits, error messages and cleanup; and that
// a real plan's generated modules compile, load and launch in the right number.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_cuda.h"
#include "cuda_driver.h"
#include "gpu/gpu_catalog.h"
#include "ir/error.h"
#include "model_loader.h"
#include "plan_build.h"

namespace dc::rt {
namespace {

double fake_get(const char* key) {
  static auto* get = [] {
    void* h = dlopen(DC_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    return h ? reinterpret_cast<double (*)(const char*)>(dlsym(h, "dc_fake_cuda_get")) : nullptr;
  }();
  return get ? get(key) : -1;
}

void fake_set(const char* key, double v) {
  static auto* set = [] {
    void* h = dlopen(DC_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    return h ? reinterpret_cast<void (*)(const char*, double)>(dlsym(h, "dc_fake_cuda_set"))
             : nullptr;
  }();
  if (set) set(key, v);
}

std::shared_ptr<const cuda::Driver> fake_driver() {
  const cuda::DriverLoad load = cuda::load_driver(DC_FAKE_CUDA);
  EXPECT_TRUE(load.driver) << load.error;
  void* h = dlopen(DC_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
  if (h) reinterpret_cast<void (*)()>(dlsym(h, "dc_fake_cuda_reset"))();
  return load.driver;
}

constexpr int64_t kN = 8;

PlanTensor tensor(const std::string& name, PlanTensorKind kind, int64_t offset = -1) {
  PlanTensor t;
  t.name = name;
  t.kind = kind;
  t.shape = {kN};
  t.offset = offset;
  return t;
}

// A module of one kernel over `roles` (f32[8] buffers), launched with 8 threads.
GeneratedKernel module(const std::string& kernel, const std::vector<BufferRole>& roles,
                       bool zero_init = false, const std::string& body = "") {
  GeneratedKernel k;
  k.template_name = "fake";
  k.variant_key = kernel;
  std::string params;
  Launch l;
  l.kernel = kernel;
  l.block = {kN, 1, 1};
  for (size_t i = 0; i < roles.size(); ++i) {
    k.buffers.push_back({"b" + std::to_string(i), roles[i], DType::f32, {kN}, zero_init});
    params += (i ? ", " : "") + std::string("float* b") + std::to_string(i);
    l.args.push_back(static_cast<int>(i));
  }
  k.source = "extern \"C\" __global__ void " + kernel + "(" + params + ") {" + body + "}\n";
  k.launches = {l};
  return k;
}

PlanStep step(int module, std::vector<int> buffers, const std::string& cluster) {
  PlanStep s;
  s.module = module;
  s.buffers = std::move(buffers);
  s.cluster = cluster;
  return s;
}

std::vector<float> iota(float start) {
  std::vector<float> v(kN);
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// x -> t (arena, offset 256) -> y; w (weights, offset 256) -> z; acc zeroed, then += 1.
ExecPlan copy_plan() {
  ExecPlan p;
  p.model_name = "fake";
  p.tensors = {tensor("x", PlanTensorKind::input),
               tensor("w", PlanTensorKind::weight, 256),
               tensor("t", PlanTensorKind::intermediate, 256),
               tensor("y", PlanTensorKind::output),
               tensor("z", PlanTensorKind::output),
               tensor("acc", PlanTensorKind::output)};
  p.inputs = {0};
  p.outputs = {3, 4, 5};
  p.modules = {module("copy", {BufferRole::input, BufferRole::output}),
               module("accumulate", {BufferRole::output}, /*zero_init=*/true)};
  p.steps = {step(0, {0, 2}, "copy#0"), step(0, {2, 3}, "copy#1"), step(0, {1, 4}, "copy#2"),
             step(1, {5}, "accumulate#3")};
  p.arena_bytes = 512;
  p.values.resize(p.tensors.size());
  p.values[1] = Tensor::from_vector<float>({kN}, iota(100.f));
  return p;
}

// One step running `kernel` on one output.
ExecPlan one_kernel_plan(const std::string& kernel, const std::string& body = "") {
  ExecPlan p;
  p.tensors = {tensor("y", PlanTensorKind::output)};
  p.outputs = {0};
  p.modules = {module(kernel, {BufferRole::output}, false, body)};
  p.steps = {step(0, {0}, kernel + "#0")};
  p.values.resize(1);
  return p;
}

std::vector<float> output(Backend& b, size_t index) {
  std::vector<float> v(kN, -1.f);
  b.get_output(index, v.data(), v.size() * sizeof(float));
  return v;
}

std::unique_ptr<Backend> backend(bool graph) {
  CudaBackendOptions o;
  o.use_cuda_graph = graph;
  return make_cuda_backend(fake_driver(), o);
}

std::string load_error(const ExecPlan& plan, bool graph) {
  auto b = backend(graph);
  try {
    b->load(plan);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

// The UserError message of run() ("no error" when it succeeds).
std::string run_error(Backend& b) {
  try {
    b.run();
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class CudaBackendModes : public ::testing::TestWithParam<bool> {};

TEST_P(CudaBackendModes, BuffersLandWhereThePlanSaysAndZeroInitRepeats) {
  const ExecPlan plan = copy_plan();
  auto b = backend(GetParam());
  EXPECT_EQ(b->device_gpu_type(), "a100");
  EXPECT_EQ(b->device_description(), "NVIDIA A100-SXM4-40GB (cuda:0, sm_80)");
  b->load(plan);
  for (float start : {1.f, 50.f}) {  // a second input: the graph reads the buffer anew
    const std::vector<float> x = iota(start);
    b->set_input(0, x.data(), x.size() * sizeof(float));
    b->run();
    b->run();
    EXPECT_EQ(output(*b, 0), x);
    EXPECT_EQ(output(*b, 1), iota(100.f)) << "the weight at offset 256";
    EXPECT_EQ(output(*b, 2), std::vector<float>(kN, 1.f)) << "zeroed before every run";
  }
  EXPECT_EQ(fake_get("launches"), 4 * 4);
  EXPECT_EQ(fake_get("graph_launches"), GetParam() ? 4 : 0);
}

TEST_P(CudaBackendModes, TimesOneSamplePerRun) {
  const ExecPlan plan = copy_plan();
  auto b = backend(GetParam());
  b->load(plan);
  const std::vector<double> us = b->time_runs(2, 5);
  ASSERT_EQ(us.size(), 5u);
  for (double t : us) EXPECT_NEAR(t, 4 * 250.0, 1e-3);  // four launches of 0.25 ms (fake clock)
  EXPECT_EQ(fake_get("launches"), 7 * 4);
  EXPECT_THROW(b->time_runs(0, 0), UserError);
}

TEST_P(CudaBackendModes, LaunchRefusalNamesTheStep) {
  ExecPlan plan = one_kernel_plan("resources");
  auto b = backend(GetParam());
  std::string error = "no error";
  try {
    b->load(plan);  // the graph is captured here
    b->run();
  } catch (const UserError& e) {
    error = e.what();
  }
  EXPECT_TRUE(contains(error, "step 0 (resources#0), kernel resources")) << error;
  EXPECT_TRUE(contains(error, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")) << error;
  EXPECT_FALSE(contains(error, "context is lost")) << error;
}

TEST_P(CudaBackendModes, AFaultLosesTheContext) {
  const ExecPlan plan = one_kernel_plan("fault");
  auto b = backend(GetParam());
  b->load(plan);
  const std::string error = run_error(*b);
  EXPECT_TRUE(contains(error, "CUDA_ERROR_ILLEGAL_ADDRESS")) << error;
  EXPECT_TRUE(contains(error, "context is lost")) << error;
  try {
    b->run();
    ADD_FAILURE() << "a second run after a fault";
  } catch (const UserError& e) {
    EXPECT_TRUE(contains(e.what(), "lost its CUDA context")) << e.what();
  }
}

// Direct launches: step 0 faults (seen only at the next synchronisation), step 1 is
// refused. The refusal must not hide the fault: the context is lost, and both are said.
TEST(CudaBackend, AFaultBeforeARefusedLaunchLosesTheContext) {
  ExecPlan plan = one_kernel_plan("fault");
  plan.modules.push_back(module("resources", {BufferRole::output}));
  plan.steps.push_back(step(1, {0}, "resources#1"));
  auto b = backend(false);
  b->load(plan);
  const std::string error = run_error(*b);
  EXPECT_TRUE(contains(error, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")) << error;
  EXPECT_TRUE(contains(error, "CUDA_ERROR_ILLEGAL_ADDRESS")) << error;
  EXPECT_TRUE(contains(error, "context is lost")) << error;
  EXPECT_THROW(b->run(), UserError);
}

INSTANTIATE_TEST_SUITE_P(GraphAndDirect, CudaBackendModes, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "Graph" : "Direct");
                         });

TEST(CudaBackend, WrongSizesAndIndicesAreUserErrors) {
  const ExecPlan plan = copy_plan();
  auto b = backend(true);
  b->load(plan);
  const std::vector<float> x(kN + 1);
  EXPECT_THROW(b->set_input(0, x.data(), x.size() * sizeof(float)), UserError);
  EXPECT_THROW(b->set_input(1, x.data(), kN * sizeof(float)), UserError);
  std::vector<float> y(kN);
  EXPECT_THROW(b->get_output(0, y.data(), 4), UserError);
  EXPECT_THROW(b->get_output(3, y.data(), kN * sizeof(float)), UserError);
}

TEST(CudaBackend, LaunchesBeyondTheDeviceAreRefusedAtLoad) {
  fake_driver();
  fake_set("max_threads_per_function", 4);  // as if the kernel needed many registers
  {
    CudaBackendOptions o;
    auto b = make_cuda_backend(cuda::load_driver(DC_FAKE_CUDA).driver, o);
    try {
      b->load(copy_plan());
      ADD_FAILURE() << "loaded";
    } catch (const UserError& e) {
      EXPECT_TRUE(contains(e.what(), "steps 0 (copy#0), 1 (copy#1) and 1 more")) << e.what();
      EXPECT_TRUE(contains(e.what(), "8 threads per block")) << e.what();
      EXPECT_TRUE(contains(e.what(), "at most 4")) << e.what();
    }
  }
  ExecPlan plan = copy_plan();
  plan.modules[1].launches[0].dynamic_smem_bytes = 200 * 1024;
  const std::string error = load_error(plan, true);
  EXPECT_TRUE(contains(error, "step 3 (accumulate#3)")) << error;
  EXPECT_TRUE(contains(error, "204800 bytes of dynamic")) << error;
}

TEST(CudaBackend, CompileErrorsNameTheModuleAndTheirSteps) {
  ExecPlan plan = copy_plan();
  plan.modules[1].source = "extern \"C\" __global__ void accumulate(float* b0) { nope; }\n";
  const std::string error = load_error(plan, true);
  EXPECT_TRUE(contains(error, "module 1 (fake accumulate)")) << error;
  EXPECT_TRUE(contains(error, "step 3 (accumulate#3)")) << error;
  EXPECT_TRUE(contains(error, "does not compile for sm_80")) << error;
  EXPECT_TRUE(contains(error, "nope")) << error;
}

TEST(CudaBackend, CorruptBindingsAreUserErrors) {
  ExecPlan plan = copy_plan();
  plan.steps[1].buffers[1] = 42;
  EXPECT_TRUE(contains(load_error(plan, true), "corrupt plan: step 1 (copy#1)"));
  plan = copy_plan();
  plan.tensors[2].offset = 496;  // 32 bytes from 496 leave the 512-byte arena
  EXPECT_TRUE(contains(load_error(plan, true), "outside the arena"));
  plan = copy_plan();
  plan.values[1] = Tensor();
  EXPECT_TRUE(contains(load_error(plan, true), "weight w has no value"));
}

TEST(CudaBackend, ReleasesEverythingItHeld) {
  {
    const ExecPlan plan = copy_plan();
    auto b = backend(true);
    b->load(plan);
    b->run();
    EXPECT_EQ(fake_get("streams"), 1);
    EXPECT_EQ(fake_get("graph_execs"), 1);
    EXPECT_EQ(fake_get("graphs"), 0) << "the captured graph is freed once instantiated";
    EXPECT_EQ(fake_get("modules"), 2);
    EXPECT_EQ(fake_get("live_allocations"), 6);  // x, y, z, acc, arena, weights
  }
  for (const char* key : {"streams", "graph_execs", "graphs", "modules", "live_allocations",
                          "contexts", "events"})
    EXPECT_EQ(fake_get(key), 0) << key;
}

// The example transformer's estimated plan for the fake A100: every module compiles with
// NVRTC for sm_80 and passes the launch checks; each run launches every step's kernels and
// zeroes its zero_init buffers, through the graph as directly.
TEST(CudaBackend, RealPlanCompilesLoadsAndLaunchesEveryStep) {
  const cli::LoadedModel m = cli::load_model(
      load_onnx(std::string(DC_SOURCE_DIR) + "/examples/tiny_transformer/model.onnx"),
      ImportOptions{}, true);
  const ExecPlan plan =
      build_estimated_plan(m.simplified, GpuCatalog::builtin().require("a100"), PlanOptions{});
  size_t launches = 0, zero_fills = 0;
  for (const PlanStep& s : plan.steps) {
    const GeneratedKernel& k = plan.modules[static_cast<size_t>(s.module)];
    launches += k.launches.size();
    for (const KernelBuffer& b : k.buffers) zero_fills += b.zero_init ? 1 : 0;
  }
  for (bool graph : {true, false}) {
    CudaBackendOptions o;
    o.cache_dir = ::testing::TempDir() + "dc-backend-cuda-test-cache";
    o.use_cuda_graph = graph;
    auto b = make_cuda_backend(fake_driver(), o);
    b->load(plan);
    EXPECT_EQ(fake_get("modules"), static_cast<double>(plan.modules.size()));
    for (size_t i = 0; i < plan.inputs.size(); ++i) {
      const std::vector<char> x(static_cast<size_t>(plan.tensors[static_cast<size_t>(plan.inputs[i])].bytes()));
      b->set_input(i, x.data(), x.size());
    }
    b->run();
    b->run();
    EXPECT_EQ(fake_get("launches"), 2.0 * static_cast<double>(launches));
    EXPECT_EQ(fake_get("small_memsets"), 2.0 * static_cast<double>(zero_fills));
  }
}

TEST(CudaBackend, NoSuchDeviceIsAUserError) {
  CudaBackendOptions o;
  o.device = 3;
  try {
    make_cuda_backend(fake_driver(), o);
    ADD_FAILURE() << "opened device 3";
  } catch (const UserError& e) {
    EXPECT_TRUE(contains(e.what(), "no CUDA device 3: the driver reports 1")) << e.what();
  }
}

}  // namespace
}  // namespace dc::rt
