// The plan runtime (libdcrt) on a real GPU (ctest label "gpu"): plans of the tiny example
// models, as the estimator picks them and with every node on its reference kernel, run
// through the CUDA backend (codegen/plan_runtime/backend_cuda.cpp) and compared with the CPU
// reference executor on random inputs; the CUDA graph and direct launches agree; timing
// gives one positive sample per run; wrong inputs, launches beyond the device and a plan
// tuned for another GPU type are reported. Without a CUDA driver or device every test is
// skipped with the reason. See docs/gpu-runtime.md, "Plan runtime (libdcrt) on the GPU".
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>

#include "device_discovery.h"
#include "ir/precision.h"
#include "model_loader.h"
#include "param_space.h"
#include "plan_build.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "runtime.h"
#include "testing.h"
#include "gpu_testing.h"

namespace dc {
namespace {

using testing::user_error_of;

// The first usable device, found once per process.
struct Gpu {
  bool found = false;
  DiscoveredDevice info;
  std::string why;  // when there is none
};

const Gpu& gpu() {
  static const Gpu* const g = [] {
    auto* out = new Gpu;
    for (const auto& d : discover_devices(GpuCatalog::builtin(), &out->why)) {
      if (!d.usable()) {
        out->why += (out->why.empty() ? "" : "; ") + describe_device(d);
        continue;
      }
      out->found = true;
      out->info = d;
      std::cout << "GPU " << describe_device(d) << "\n";
      break;
    }
    return out;
  }();
  return *g;
}

#define DC_REQUIRE_GPU() DC_SKIP_WITHOUT_GPU(!gpu().found, "no CUDA device: " << gpu().why)

std::string cache_dir() {
  return (std::filesystem::temp_directory_path() / "dc-runtime-gpu-test-cache").string();
}

rt::RuntimeOptions options(bool graph) {
  rt::RuntimeOptions o;
  o.device = gpu().info.ordinal;
  o.cache_dir = cache_dir();
  o.use_cuda_graph = graph;
  return o;
}

struct Model {
  Graph imported;    // what the CPU reference runs
  Graph simplified;  // what the plans are built from
};

const Model& model(const std::string& name) {
  static std::map<std::string, Model> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    cli::LoadedModel m = cli::load_model(
        load_onnx(testing::source_dir() + "/examples/" + name + "/model.onnx"),
        ImportOptions{}, true);
    it = loaded.emplace(name, Model{std::move(m.imported), std::move(m.simplified)}).first;
  }
  return it->second;
}

// The least-estimate plan for this device's GPU type, or every node on its reference kernel.
ExecPlan plan_for(const std::string& name, bool reference_only) {
  return build_estimated_plan(model(name).simplified, gpu().info.spec, PlanOptions{},
                              reference_only);
}

// Floats uniform in [-1, 1); integers (attention masks) mostly 1, some 0.
Tensor random_input(const PlanTensor& t, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor out(t.dtype, t.shape);
  const int64_t n = out.numel();
  if (t.dtype == DType::f32) {
    float* p = out.mutable_data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(rng() % 2000000) / 1e6f - 1.f;
  } else if (t.dtype == DType::i64) {
    int64_t* p = out.mutable_data<int64_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = i == 0 || rng() % 4 != 0 ? 1 : 0;
  } else {
    ADD_FAILURE() << "no random values for input " << t.name << " of " << dtype_name(t.dtype);
  }
  return out;
}

std::vector<Tensor> random_inputs(const ExecPlan& p, uint32_t seed) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    in.push_back(random_input(p.tensors[static_cast<size_t>(p.inputs[i])], seed + static_cast<uint32_t>(i)));
  return in;
}

std::vector<Tensor> run_plan(rt::Runtime& r, const std::vector<Tensor>& in) {
  for (size_t i = 0; i < in.size(); ++i) r.set_input(i, in[i]);
  r.run();
  std::vector<Tensor> out;
  for (size_t i = 0; i < r.num_outputs(); ++i) out.push_back(r.output(i));
  return out;
}


// ---- plans against the CPU ------------------------------------------------------------

struct Case {
  const char* model;
  bool reference_only;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << (c.reference_only ? " reference" : " estimated");
}

class RuntimeOnGpu : public ::testing::TestWithParam<Case> {};

TEST_P(RuntimeOnGpu, PlanMatchesTheCpuReference) {
  DC_REQUIRE_GPU();
  const Case& c = GetParam();
  rt::Runtime r(plan_for(c.model, c.reference_only), options(true));
  std::cout << c.model << ": " << r.plan().steps.size() << " steps, " << r.plan().modules.size()
            << " modules on " << r.device_description() << "\n";
  for (uint32_t seed : {11u, 12u}) {  // the second run must not see the first's values
    const std::vector<Tensor> in = random_inputs(r.plan(), seed);
    ref::TensorMap in_map;
    for (size_t i = 0; i < in.size(); ++i) in_map[r.input_info(i).name] = in[i];
    const ref::TensorMap want = ref::run_graph(model(c.model).imported, in_map);
    const std::vector<Tensor> got = run_plan(r, in);
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string& name = r.output_info(i).name;
      // A whole model in fp32 in another summation order: a little above one kernel's 1e-5.
      const ref::Comparison cmp = ref::compare_tensors(got[i], want.at(name), 1e-4, 1e-6);
      EXPECT_TRUE(cmp.pass) << "output " << name << ": rel. L2 " << cmp.rel_l2_error
                            << ", max abs. " << cmp.max_abs_error << " " << cmp.problem;
      std::cout << "  " << name << " rel. L2 vs CPU " << cmp.rel_l2_error << "\n";
    }
  }
}

// Reference kernels have no atomics, so both ways of launching give the same bits; the
// estimated plan may use split-K (atomicAdd, order-dependent), so only nearly the same.
TEST_P(RuntimeOnGpu, GraphAndDirectLaunchesAgree) {
  DC_REQUIRE_GPU();
  const Case& c = GetParam();
  rt::Runtime graph(plan_for(c.model, c.reference_only), options(true));
  rt::Runtime direct(plan_for(c.model, c.reference_only), options(false));
  const std::vector<Tensor> in = random_inputs(graph.plan(), 5);
  const std::vector<Tensor> a = run_plan(graph, in);
  const std::vector<Tensor> b = run_plan(direct, in);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (c.reference_only) {
      EXPECT_TRUE(a[i].bitwise_equal(b[i])) << "output " << graph.output_info(i).name;
    } else {
      const ref::Comparison cmp = ref::compare_tensors(a[i], b[i], 1e-6, 1e-7);
      EXPECT_TRUE(cmp.pass) << "output " << graph.output_info(i).name << ": rel. L2 "
                            << cmp.rel_l2_error;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, RuntimeOnGpu,
                         ::testing::Values(Case{"tiny_cnn", false}, Case{"tiny_cnn", true},
                                           Case{"tiny_transformer", false},
                                           Case{"tiny_transformer", true}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::string(p.param.model) +
                                  (p.param.reference_only ? "_reference" : "_estimated");
                         });

// ---- reduced-precision plans ------------------------------------------------------------

// fp16/bf16/tf32 plans (tensor-core GEMM, convolution and attention kernels, f16/bf16 storage)
// against the fp32 model on the CPU, at the precision's whole-model tolerance (docs/precision.md).
struct PrecisionCase {
  const char* model;
  Precision precision;
};

void PrintTo(const PrecisionCase& c, std::ostream* os) {
  *os << c.model << " " << precision_name(c.precision);
}

class RuntimeOnGpuPrecision : public ::testing::TestWithParam<PrecisionCase> {};

TEST_P(RuntimeOnGpuPrecision, PlanIsWithinTheWholeModelTolerance) {
  DC_REQUIRE_GPU();
  const PrecisionCase& c = GetParam();
  const std::string path = math_paths(c.precision).front();
  if (!gpu_has_precision(gpu().info.spec, path))
    GTEST_SKIP() << gpu().info.spec.name << " has no " << path << " tensor cores";
  cli::LoadedModel m = cli::load_model(
      load_onnx(testing::source_dir() + "/examples/" + c.model + "/model.onnx"), ImportOptions{},
      true, c.precision);
  PlanOptions o;
  o.precision = c.precision;
  o.space.precisions = math_paths(c.precision);
  rt::Runtime r(build_estimated_plan(m.simplified, gpu().info.spec, o), options(true));
  EXPECT_EQ(r.plan().precision, c.precision);
  const Tolerance tol = whole_model_tolerance(c.precision);
  for (uint32_t seed : {21u, 22u}) {
    const std::vector<Tensor> in = random_inputs(r.plan(), seed);
    ref::TensorMap in_map;
    for (size_t i = 0; i < in.size(); ++i) in_map[r.input_info(i).name] = in[i];
    const ref::TensorMap want = ref::run_graph(model(c.model).imported, in_map);
    const std::vector<Tensor> got = run_plan(r, in);
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string& name = r.output_info(i).name;
      EXPECT_EQ(got[i].dtype(), want.at(name).dtype()) << "outputs keep the model's dtype";
      const ref::Comparison cmp = ref::compare_tensors(got[i], want.at(name), tol.rtol, tol.atol);
      EXPECT_TRUE(cmp.pass) << "output " << name << ": rel. L2 " << cmp.rel_l2_error
                            << ", max abs. " << cmp.max_abs_error << " " << cmp.problem;
      std::cout << "  " << c.model << " " << precision_name(c.precision) << " " << name
                << " rel. L2 vs fp32 CPU " << cmp.rel_l2_error << "\n";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    TinyModels, RuntimeOnGpuPrecision,
    ::testing::Values(PrecisionCase{"tiny_cnn", Precision::fp16}, PrecisionCase{"tiny_cnn", Precision::bf16},
                      PrecisionCase{"tiny_cnn", Precision::tf32},
                      PrecisionCase{"tiny_transformer", Precision::fp16},
                      PrecisionCase{"tiny_transformer", Precision::bf16},
                      PrecisionCase{"tiny_transformer", Precision::tf32}),
    [](const ::testing::TestParamInfo<PrecisionCase>& p) {
      return std::string(p.param.model) + "_" + std::string(precision_name(p.param.precision));
    });

// ---- timing, errors, another GPU type -------------------------------------------------

TEST(RuntimeOnGpuDevice, TimeRunsGivesOnePositiveSamplePerRun) {
  DC_REQUIRE_GPU();
  for (bool graph : {true, false}) {
    rt::Runtime r(plan_for("tiny_transformer", false), options(graph));
    const std::vector<Tensor> in = random_inputs(r.plan(), 3);
    for (size_t i = 0; i < in.size(); ++i) r.set_input(i, in[i]);
    const std::vector<double> us = r.time_runs(3, 20);
    ASSERT_EQ(us.size(), 20u);
    double sum = 0;
    for (double t : us) {
      EXPECT_TRUE(std::isfinite(t) && t > 0) << t;
      sum += t;
    }
    std::cout << (graph ? "CUDA graph" : "direct launches") << ": mean " << sum / 20 << " us over "
              << r.plan().steps.size() << " steps\n";
  }
}

TEST(RuntimeOnGpuDevice, WrongInputsAreUserErrors) {
  DC_REQUIRE_GPU();
  rt::Runtime r(plan_for("tiny_cnn", true), options(true));
  const PlanTensor& in = r.input_info(0);
  Shape wrong = in.shape;
  wrong.back() += 1;
  std::string e = user_error_of([&] { r.set_input(0, Tensor(in.dtype, wrong)); });
  EXPECT_NE(e.find(in.name), std::string::npos) << e;
  const std::vector<char> short_buffer(static_cast<size_t>(in.bytes()) - 4);
  e = user_error_of([&] { r.set_input(0, short_buffer.data(), short_buffer.size()); });
  EXPECT_NE(e.find(std::to_string(in.bytes())), std::string::npos) << e;

  // The backend alone (no Runtime in front) refuses too.
  const ExecPlan plan = plan_for("tiny_cnn", true);
  auto backend = rt::make_cuda_backend({gpu().info.ordinal, cache_dir(), true});
  backend->load(plan);
  e = user_error_of([&] { backend->set_input(0, short_buffer.data(), short_buffer.size()); });
  EXPECT_NE(e.find("bytes"), std::string::npos) << e;
}

TEST(RuntimeOnGpuDevice, LaunchesBeyondTheDeviceAreRefusedAtLoad) {
  DC_REQUIRE_GPU();
  ExecPlan plan = plan_for("tiny_cnn", true);
  ASSERT_FALSE(plan.steps.empty());
  // Copies, not a reference into plan: plan is assigned again below.
  const size_t module = static_cast<size_t>(plan.steps[0].module);
  const std::string cluster = plan.steps[0].cluster;
  plan.modules[module].launches[0].block = {2048, 1, 1};
  auto backend = rt::make_cuda_backend({gpu().info.ordinal, cache_dir(), true});
  std::string e = user_error_of([&] { backend->load(plan); });
  EXPECT_NE(e.find(cluster), std::string::npos) << e;
  EXPECT_NE(e.find("block 2048x1x1"), std::string::npos) << e;

  plan = plan_for("tiny_cnn", true);
  plan.modules[module].launches[0].dynamic_smem_bytes = 1 << 20;
  backend = rt::make_cuda_backend({gpu().info.ordinal, cache_dir(), true});
  e = user_error_of([&] { backend->load(plan); });
  EXPECT_NE(e.find("1048576 bytes of dynamic"), std::string::npos) << e;
}

TEST(RuntimeOnGpuDevice, PlanForAnotherGpuTypeWarnsAndRuns) {
  DC_REQUIRE_GPU();
  if (gpu().info.spec.generic) GTEST_SKIP() << "the device is not in gpus.yaml: no GPU type";
  // Another type whose kernels fit this device's shared memory (an older, smaller GPU).
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec* other = nullptr;
  for (const GpuSpec& s : catalog.all())
    if (s.name != gpu().info.spec.name &&
        s.smem_per_block_bytes <= gpu().info.attributes.smem_per_block_optin) {
      other = &s;
      break;
    }
  ASSERT_NE(other, nullptr) << "no other GPU type fits " << gpu().info.spec.name;
  ExecPlan plan = build_estimated_plan(model("tiny_cnn").simplified, *other, PlanOptions{}, false);
  ASSERT_EQ(plan.gpu_type, other->name);
  rt::Runtime r(std::move(plan), options(true));
  bool warned = false;
  for (const auto& w : r.warnings()) warned = warned || w.find("tuned for " + other->name) != std::string::npos;
  EXPECT_TRUE(warned) << "no warning about the plan's GPU type";
  const std::vector<Tensor> in = random_inputs(r.plan(), 8);
  ref::TensorMap in_map;
  for (size_t i = 0; i < in.size(); ++i) in_map[r.input_info(i).name] = in[i];
  const ref::TensorMap want = ref::run_graph(model("tiny_cnn").imported, in_map);
  const std::vector<Tensor> got = run_plan(r, in);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(ref::compare_tensors(got[i], want.at(r.output_info(i).name), 1e-4, 1e-6).pass);
}

}  // namespace
}  // namespace dc
