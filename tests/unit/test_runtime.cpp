// The plan runtime (codegen/plan_runtime/) on the host-emulator backend: plans run end to end and
// match the CPU reference executor; every user mistake is a UserError naming what is wrong;
// the memory plan is really used (overlapping two live tensors changes the result); a plan
// tuned for another GPU type warns and still runs; and libdcrt's C API (dcrt.h) through a
// full load / set / run / get cycle and its error paths.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "candidates.h"
#include "dcrt.h"
#include "dcrt.hpp"
#include "gpu/gpu_catalog.h"
#include "model_loader.h"
#include "onnx/test_data.h"
#include "pass_testing.h"
#include "plan/plan_io.h"
#include "plan_build.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "runtime.h"

namespace dc {
namespace {

using testing::user_error_of;

using testing::add_initializer;
using testing::add_input;
using testing::add_node;

std::string emulator_cache() { return ::testing::TempDir() + "dc-emulator-test-cache"; }

std::unique_ptr<rt::Backend> emulator() {
  return rt::make_emulator_backend(rt::EmulatorBackendOptions{emulator_cache()});
}

rt::RuntimeOptions emulate_options() {
  rt::RuntimeOptions o;
  o.emulate = true;
  o.cache_dir = emulator_cache();
  return o;
}

const GpuSpec& gpu(const std::string& name) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  return catalog.require(name);
}

// A directory removed at the end of the test.
struct TempDir {
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = fmt::format("dc_runtime_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid());
    std::replace(name.begin(), name.end(), '/', '_');
    path = (std::filesystem::temp_directory_path() / name).string();
    std::filesystem::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

// x -> Relu -> a -> MatMul(W) -> b -> Sigmoid -> c -> Add(c, a) -> y. `a` stays live from
// the first step to the last, across the steps that write b and c.
Graph skip_graph() {
  Graph g;
  g.name = "skip";
  add_input(g, "x", {4, 8});
  add_initializer(g, "W", testing::random_tensor({8, 8}, 3));
  add_node(g, "Relu", {"x"}, {"a"});
  add_node(g, "MatMul", {"a", "W"}, {"b"});
  add_node(g, "Sigmoid", {"b"}, {"c"});
  add_node(g, "Add", {"c", "a"}, {"y"});
  g.outputs = {"y"};
  return testing::with_types(g);
}

// One step per node, each run by its workload's reference kernel.
ExecPlan skip_plan(const Graph& g) {
  const std::vector<Candidate> candidates = {{{0}, ClusterKind::elementwise, "relu"},
                                             {{1}, ClusterKind::gemm, "matmul"},
                                             {{2}, ClusterKind::elementwise, "sigmoid"},
                                             {{3}, ClusterKind::elementwise, "add"}};
  std::vector<StepChoice> choices;
  for (size_t c = 0; c < candidates.size(); ++c) choices.push_back({c, std::nullopt, 0, 0});
  PlanOrigin origin;
  origin.gpu = &gpu("a100");
  return assemble_plan(g, candidates, choices, origin);
}

int tensor_id(const ExecPlan& p, const std::string& name) {
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].name == name) return static_cast<int>(i);
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

// Relative L2 error of `got` against `want` (both f32).
double rel_error(const Tensor& got, const Tensor& want) {
  return ref::compare_tensors(got, want, 0, 0).rel_l2_error;
}

cli::LoadedModel load_example(const std::string& name) {
  return cli::load_model(load_onnx(std::string(DC_SOURCE_DIR) + "/examples/" + name + "/model.onnx"),
                         ImportOptions{}, true);
}

std::string example_data(const std::string& name) {
  return std::string(DC_SOURCE_DIR) + "/examples/" + name + "/test_data_set_0";
}


TEST(RuntimeEmulator, SkipPlanMatchesTheReferenceExecutor) {
  const Graph g = skip_graph();
  rt::Runtime r(skip_plan(g), emulator());
  EXPECT_NE(r.device_description().find("host emulator"), std::string::npos);
  for (const auto& w : r.warnings()) EXPECT_EQ(w.find("plan tuned for"), std::string::npos) << w;
  ASSERT_EQ(r.num_inputs(), 1u);
  ASSERT_EQ(r.num_outputs(), 1u);
  EXPECT_EQ(r.input_info(0).name, "x");
  EXPECT_EQ(r.output_info(0).name, "y");

  // Two runs on different inputs: the second must not see the first's values.
  for (uint32_t seed : {21u, 22u}) {
    const Tensor x = testing::random_tensor({4, 8}, seed);
    r.set_input(0, x);
    r.run();
    const Tensor want = ref::run_graph(g, {{"x", x}}).at("y");
    testing::expect_tensor_near(r.output(0), want, 1e-5f, 1e-5f);
  }
}

TEST(RuntimeEmulator, InputsAreCheckedWithTheirNames) {
  rt::Runtime r(skip_plan(skip_graph()), emulator());
  std::string e = user_error_of([&] { r.set_input(0, testing::random_tensor({4, 9}, 1)); });
  EXPECT_NE(e.find("'x'"), std::string::npos) << e;
  EXPECT_NE(e.find("4x8"), std::string::npos) << e;
  EXPECT_NE(e.find("4x9"), std::string::npos) << e;

  e = user_error_of([&] { r.set_input(0, Tensor(DType::i64, {4, 8})); });
  EXPECT_NE(e.find("'x'"), std::string::npos) << e;
  EXPECT_NE(e.find("i64"), std::string::npos) << e;

  std::vector<float> short_buffer(31);
  e = user_error_of([&] { r.set_input(0, short_buffer.data(), short_buffer.size() * 4); });
  EXPECT_NE(e.find("124 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("128 bytes"), std::string::npos) << e;

  e = user_error_of([&] { r.input_info(1); });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

TEST(RuntimeEmulator, RunBeforeEveryInputIsSetIsRefused) {
  rt::Runtime r(skip_plan(skip_graph()), emulator());
  std::string e = user_error_of([&] { r.output(0); });
  EXPECT_NE(e.find("run the plan first"), std::string::npos) << e;
  e = user_error_of([&] { r.run(); });
  EXPECT_NE(e.find("'x' was never set"), std::string::npos) << e;
}

TEST(RuntimeEmulator, HasNoTiming) {
  rt::Runtime r(skip_plan(skip_graph()), emulator());
  r.set_input(0, testing::random_tensor({4, 8}, 5));
  const std::string e = user_error_of([&] { r.time_runs(1, 3); });
  EXPECT_NE(e.find("no timing"), std::string::npos) << e;
}

// `a` is live from step 0 to step 3; placing `b` (written by step 1) on top of it must
// corrupt the final Add. The Runtime refuses such a plan; the backend, given it anyway,
// computes from the arena and gets it wrong: proof that the arena is what it reads.
TEST(RuntimeEmulator, OverlappingLiveTensorsCorruptTheResult) {
  const Graph g = skip_graph();
  ExecPlan p = skip_plan(g);
  const int a = tensor_id(p, "a"), b = tensor_id(p, "b");
  ASSERT_EQ(p.tensors[a].kind, PlanTensorKind::intermediate);
  ASSERT_EQ(p.tensors[a].bytes(), p.tensors[b].bytes());
  ASSERT_NE(p.tensors[a].offset, p.tensors[b].offset);

  const Tensor x = testing::random_tensor({4, 8}, 9);
  const Tensor want = ref::run_graph(g, {{"x", x}}).at("y");
  const auto run_backend = [&](const ExecPlan& plan) {
    auto backend = emulator();
    backend->load(plan);
    backend->set_input(0, x.raw(), x.nbytes());
    backend->run();
    Tensor y(DType::f32, {4, 8});
    backend->get_output(0, y.raw_mutable(), y.nbytes());
    return y;
  };
  EXPECT_LT(rel_error(run_backend(p), want), 1e-6);  // the valid plan, same path

  p.tensors[b].offset = p.tensors[a].offset;
  EXPECT_GT(rel_error(run_backend(p), want), 1e-2);
  const std::string e = user_error_of([&] { rt::Runtime r(p, emulator()); });
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;
}

TEST(RuntimeEmulator, AKernelFailureNamesTheStep) {
  ExecPlan p = skip_plan(skip_graph());
  const int step = 2;
  GeneratedKernel& k = p.modules[static_cast<size_t>(p.steps[step].module)];
  k.launches.at(0).block = {2048, 1, 1};  // more threads than a block can have
  rt::Runtime r(p, emulator());
  r.set_input(0, testing::random_tensor({4, 8}, 2));
  const std::string e = user_error_of([&] { r.run(); });
  EXPECT_NE(e.find("step 2"), std::string::npos) << e;
  EXPECT_NE(e.find(p.steps[step].cluster), std::string::npos) << e;
  EXPECT_NE(e.find(k.template_name), std::string::npos) << e;
}

TEST(RuntimeEmulator, AKernelThatDoesNotCompileIsRefusedAtLoad) {
  ExecPlan p = skip_plan(skip_graph());
  p.modules.at(1).source += "\nthis is not C++;\n";
  const std::string e = user_error_of([&] { rt::Runtime r(p, emulator()); });
  EXPECT_NE(e.find("module 1"), std::string::npos) << e;
  EXPECT_NE(e.find("does not compile"), std::string::npos) << e;
}

// A backend that says it is an H100 but runs on the emulator.
class PretendH100 : public rt::Backend {
 public:
  std::string device_description() const override { return "pretend H100 (emulated)"; }
  std::string device_gpu_type() const override { return "h100"; }
  void load(const ExecPlan& plan) override { inner_->load(plan); }
  void set_input(size_t i, const void* d, size_t n) override { inner_->set_input(i, d, n); }
  void run() override { inner_->run(); }
  void get_output(size_t i, void* d, size_t n) override { inner_->get_output(i, d, n); }
  std::vector<double> time_runs(int w, int n) override { return inner_->time_runs(w, n); }
  void carry_state(const std::vector<PlanStateUpdate>& u) override { inner_->carry_state(u); }
  void get_weight(int id, void* d, size_t n) override { inner_->get_weight(id, d, n); }
  void set_weight(int id, const void* d, size_t n) override { inner_->set_weight(id, d, n); }

 private:
  std::unique_ptr<rt::Backend> inner_ = emulator();
};

TEST(RuntimeEmulator, APlanForAnotherGpuTypeWarnsAndRuns) {
  const Graph g = skip_graph();
  rt::Runtime r(skip_plan(g), std::make_unique<PretendH100>());
  bool warned = false;
  for (const auto& w : r.warnings())
    warned = warned || w.find("plan tuned for a100 (sm_80) runs on h100") != std::string::npos;
  EXPECT_TRUE(warned) << ::testing::PrintToString(r.warnings());
  const Tensor x = testing::random_tensor({4, 8}, 4);
  r.set_input(0, x);
  r.run();
  testing::expect_tensor_near(r.output(0), ref::run_graph(g, {{"x", x}}).at("y"));
}

// The tiny committed models, planned by estimate (fused clusters, generated variants), run
// from a plan directory written and read back, against the test data's expected outputs
// and the CPU reference executor on random inputs.
class RuntimeTinyModel : public ::testing::TestWithParam<std::string> {};

TEST_P(RuntimeTinyModel, RunsFromItsPlanDirectoryAndMatches) {
  const cli::LoadedModel m = load_example(GetParam());
  const ExecPlan built = build_estimated_plan(m.simplified, gpu("h100"));
  ASSERT_LT(built.steps.size(), m.simplified.nodes.size()) << "expected fused clusters";
  TempDir dir;
  write_plan(built, dir.path);
  rt::Runtime r = rt::Runtime::open(dir.path, emulate_options());
  ASSERT_EQ(r.num_inputs(), m.simplified.inputs.size());
  ASSERT_EQ(r.num_outputs(), m.simplified.outputs.size());

  const TestData data = read_test_data(example_data(GetParam()));
  ASSERT_EQ(data.inputs.size(), r.num_inputs());
  for (size_t i = 0; i < r.num_inputs(); ++i) r.set_input(i, data.inputs[i].value);
  r.run();
  for (size_t i = 0; i < data.outputs.size(); ++i) {
    const auto c = ref::compare_tensors(r.output(i), data.outputs[i].value, 1e-4, 1e-6);
    EXPECT_TRUE(c.pass) << "output " << i << ": rel " << c.rel_l2_error << " " << c.problem;
  }

  // Fresh random floats; integer inputs (token ids) keep the test data's valid values.
  ref::TensorMap in;
  for (size_t i = 0; i < r.num_inputs(); ++i) {
    const PlanTensor& t = r.input_info(i);
    in[t.name] = t.dtype == DType::f32 ? testing::random_tensor(t.shape, 40 + static_cast<uint32_t>(i))
                                       : data.inputs[i].value;
    r.set_input(i, in[t.name]);
  }
  r.run();
  const auto want = ref::run_graph(m.simplified, in);
  for (size_t i = 0; i < r.num_outputs(); ++i)
    EXPECT_LT(rel_error(r.output(i), want.at(r.output_info(i).name)), 1e-5) << "output " << i;
}

INSTANTIATE_TEST_SUITE_P(Examples, RuntimeTinyModel, ::testing::Values("tiny_cnn", "tiny_transformer"));

TEST(RuntimeOpen, AMissingPlanDirectoryIsAUserError) {
  const std::string e =
      user_error_of([&] { rt::Runtime::open("/nonexistent/dc-plan", emulate_options()); });
  EXPECT_NE(e.find("/nonexistent/dc-plan"), std::string::npos) << e;
}

// --- the C API ---

TEST(DcrtCApi, LoadErrorsHaveAStatusAndAMessage) {
  dcrt_plan* plan = reinterpret_cast<dcrt_plan*>(0x1);
  dcrt_options o = dcrt_default_options();
  o.emulate = 1;
  EXPECT_EQ(dcrt_load("/nonexistent/dc-plan", &o, &plan), DCRT_ERROR_LOAD);
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(std::string(dcrt_last_error()).find("/nonexistent/dc-plan"), std::string::npos)
      << dcrt_last_error();

  EXPECT_EQ(dcrt_load(nullptr, &o, &plan), DCRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dcrt_last_error()).find("NULL"), std::string::npos);
  EXPECT_EQ(dcrt_load("x", &o, nullptr), DCRT_ERROR_INVALID_ARGUMENT);
  size_t n = 0;
  EXPECT_EQ(dcrt_num_inputs(nullptr, &n), DCRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dcrt_run(nullptr), DCRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dcrt_set_input(nullptr, 0, &n, sizeof n), DCRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dcrt_get_output(nullptr, 0, &n, sizeof n), DCRT_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(dcrt_status_name(DCRT_ERROR_NOT_READY), "DCRT_ERROR_NOT_READY");
  dcrt_free(nullptr);
}

TEST(DcrtCApi, LoadSetRunGet) {
  const Graph g = skip_graph();
  TempDir dir;
  write_plan(skip_plan(g), dir.path);
  dcrt_options o = dcrt_default_options();
  o.emulate = 1;
  const std::string cache = emulator_cache();
  o.cache_dir = cache.c_str();
  dcrt_plan* plan = nullptr;
  ASSERT_EQ(dcrt_load(dir.path.c_str(), &o, &plan), DCRT_OK) << dcrt_last_error();
  std::unique_ptr<dcrt_plan, void (*)(dcrt_plan*)> owner(plan, dcrt_free);

  size_t inputs = 0, outputs = 0;
  ASSERT_EQ(dcrt_num_inputs(plan, &inputs), DCRT_OK);
  ASSERT_EQ(dcrt_num_outputs(plan, &outputs), DCRT_OK);
  ASSERT_EQ(inputs, 1u);
  ASSERT_EQ(outputs, 1u);
  dcrt_tensor_info info{};
  ASSERT_EQ(dcrt_input_info(plan, 0, &info), DCRT_OK);
  EXPECT_STREQ(info.name, "x");
  EXPECT_STREQ(info.dtype, "f32");
  ASSERT_EQ(info.rank, 2);
  EXPECT_EQ(info.dims[0], 4);
  EXPECT_EQ(info.dims[1], 8);
  EXPECT_EQ(info.bytes, 128u);
  EXPECT_EQ(dcrt_input_info(plan, 1, &info), DCRT_ERROR_INVALID_ARGUMENT);
  const char* device = nullptr;
  ASSERT_EQ(dcrt_device_description(plan, &device), DCRT_OK);
  EXPECT_NE(std::string(device).find("host emulator"), std::string::npos);

  const Tensor x = testing::random_tensor({4, 8}, 31);
  Tensor y(DType::f32, {4, 8});
  EXPECT_EQ(dcrt_run(plan), DCRT_ERROR_NOT_READY);
  EXPECT_NE(std::string(dcrt_last_error()).find("'x'"), std::string::npos) << dcrt_last_error();
  EXPECT_EQ(dcrt_get_output(plan, 0, y.raw_mutable(), y.nbytes()), DCRT_ERROR_NOT_READY);
  EXPECT_EQ(dcrt_set_input(plan, 0, x.raw(), x.nbytes() - 4), DCRT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dcrt_last_error()).find("'x'"), std::string::npos) << dcrt_last_error();
  ASSERT_EQ(dcrt_set_input(plan, 0, x.raw(), x.nbytes()), DCRT_OK) << dcrt_last_error();
  ASSERT_EQ(dcrt_run(plan), DCRT_OK) << dcrt_last_error();
  ASSERT_EQ(dcrt_get_output(plan, 0, y.raw_mutable(), y.nbytes()), DCRT_OK) << dcrt_last_error();
  testing::expect_tensor_near(y, ref::run_graph(g, {{"x", x}}).at("y"));

  double samples[3];
  EXPECT_EQ(dcrt_time_runs(plan, 1, 3, samples), DCRT_ERROR_UNSUPPORTED);
}

// Runtime::open reads weights.bin once: read_plan does not checksum it, the emulator
// backend reads it front to back as it loads the weights and checksums it on the way; a
// modified byte (same size) refuses the plan with the checksum error.
TEST(RuntimeOpen, ReadsWeightsBinOnceAndRefusesAModifiedOne) {
  const Graph g = skip_graph();
  TempDir dir;
  write_plan(skip_plan(g), dir.path);
  const auto bin = std::filesystem::path(dir.path) / "weights.bin";
  const auto size = std::filesystem::file_size(bin);
  ASSERT_GT(size, 0u);
  const uint64_t before = weights_bytes_read();
  rt::Runtime r = rt::Runtime::open(dir.path, emulate_options());
  EXPECT_EQ(weights_bytes_read() - before, size) << "weights.bin must be read exactly once";
  const int w = tensor_id(r.plan(), "W");
  EXPECT_FALSE(r.plan().values[static_cast<size_t>(w)].resident())
      << "the backend's weights come from the one pass, not from the file-backed values";
  const Tensor x = testing::random_tensor({4, 8}, 21);
  r.set_input(0, x);
  r.run();
  EXPECT_EQ(weights_bytes_read() - before, size);
  testing::expect_tensor_near(r.output(0), ref::run_graph(g, {{"x", x}}).at("y"));

  {  // one byte of W changed in place
    std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.write(&c, 1);
  }
  const std::string e = user_error_of([&] { rt::Runtime::open(dir.path, emulate_options()); });
  EXPECT_NE(e.find("weights.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("checksum"), std::string::npos) << e;
  std::filesystem::resize_file(bin, size - 1);
  const std::string short_file = user_error_of([&] { rt::Runtime::open(dir.path, emulate_options()); });
  EXPECT_NE(short_file.find("weights.bin"), std::string::npos) << short_file;
}

TEST(DcrtCApi, ACorruptPlanIsALoadError) {
  TempDir dir;
  write_plan(skip_plan(skip_graph()), dir.path);
  std::filesystem::resize_file(std::filesystem::path(dir.path) / "weights.bin", 100);
  dcrt_options o = dcrt_default_options();
  o.emulate = 1;
  dcrt_plan* plan = nullptr;
  EXPECT_EQ(dcrt_load(dir.path.c_str(), &o, &plan), DCRT_ERROR_LOAD);
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(std::string(dcrt_last_error()).find("weights.bin"), std::string::npos) << dcrt_last_error();
}

TEST(DcrtCppWrapper, RunsAPlanAndThrowsWithTheMessage) {
  const Graph g = skip_graph();
  TempDir dir;
  write_plan(skip_plan(g), dir.path);
  dcrt::Plan plan(dir.path, dcrt::Options{true, 0, emulator_cache()});
  const dcrt::TensorInfo in = plan.input_info(0);
  EXPECT_EQ(in.name, "x");
  EXPECT_EQ(in.dims, (std::vector<int64_t>{4, 8}));
  const Tensor x = testing::random_tensor({4, 8}, 51);
  plan.set_input(0, std::vector<float>(x.data<float>(), x.data<float>() + x.numel()));
  plan.run();
  const std::vector<float> y = plan.output<float>(0);
  testing::expect_tensor_near(Tensor::from_vector<float>({4, 8}, y), ref::run_graph(g, {{"x", x}}).at("y"));

  dcrt::Plan moved = std::move(plan);
  try {
    moved.set_input(0, std::vector<float>(3));
    ADD_FAILURE() << "no dcrt::Error";
  } catch (const dcrt::Error& e) {
    EXPECT_EQ(e.status(), DCRT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
  try {
    dcrt::Plan missing("/nonexistent/dc-plan", dcrt::Options{true, 0, ""});
    ADD_FAILURE() << "no dcrt::Error";
  } catch (const dcrt::Error& e) {
    EXPECT_EQ(e.status(), DCRT_ERROR_LOAD);
  }
}

}  // namespace
}  // namespace dc
