// fp16/bf16 plans end to end on the host emulator: the plan records its precision and the
// tensors' reduced dtypes, weights.bin is about half the fp32 one, the plan round-trips
// through write/read and runs; its outputs stay within the precision's whole-model tolerance
// of the model's fp32 test data, and an attention block with an additive -inf mask gives
// finite outputs.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "gpu/gpu_catalog.h"
#include "model_loader.h"
#include "onnx/test_data.h"
#include "pass_testing.h"
#include "passes/apply_precision.h"
#include "plan/plan_io.h"
#include "plan_build.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "runtime.h"

namespace dc {
namespace {

using namespace dc::testing;

rt::RuntimeOptions emulate_options() {
  rt::RuntimeOptions o;
  o.emulate = true;
  o.cache_dir = ::testing::TempDir() + "dc-emulator-test-cache";
  return o;
}

const GpuSpec& gpu(const std::string& name) {
  static const GpuCatalog catalog = GpuCatalog::builtin();
  return catalog.require(name);
}

struct TempDir {
  explicit TempDir(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = fmt::format("dc_prec_{}_{}_{}_{}", info->test_suite_name(), info->name(),
                                   tag, ::getpid());
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

PlanOptions options_for(Precision p) {
  PlanOptions o;
  o.precision = p;
  o.space.precisions = math_paths(p);
  return o;
}

std::string example(const std::string& name, const std::string& file) {
  return std::string(DC_SOURCE_DIR) + "/examples/" + name + "/" + file;
}

int64_t weights_bin_bytes(const std::string& dir) {
  return static_cast<int64_t>(std::filesystem::file_size(std::filesystem::path(dir) / "weights.bin"));
}

struct Case {
  std::string model;
  Precision precision;
};

class ReducedPrecisionPlan : public ::testing::TestWithParam<Case> {};

TEST_P(ReducedPrecisionPlan, RoundTripsRunsAndMatchesTheFp32TestData) {
  const Case c = GetParam();
  const auto fp32 = cli::load_model(load_onnx(example(c.model, "model.onnx")), {}, true);
  const auto reduced =
      cli::load_model(load_onnx(example(c.model, "model.onnx")), {}, true, c.precision);
  const DType storage = storage_dtype(c.precision);

  const ExecPlan built = build_estimated_plan(reduced.simplified, gpu("h100"), options_for(c.precision));
  EXPECT_EQ(built.precision, c.precision);
  int reduced_tensors = 0;
  for (const auto& t : built.tensors) {
    reduced_tensors += t.dtype == storage;
    if (t.kind == PlanTensorKind::input || t.kind == PlanTensorKind::output) {
      EXPECT_EQ(t.dtype, fp32.simplified.info(t.name).dtype) << t.name << ": model edges keep their dtype";
    }
  }
  EXPECT_GT(reduced_tensors, 0);

  TempDir dir("reduced"), dir32("fp32");
  write_plan(built, dir.path);
  write_plan(build_estimated_plan(fp32.simplified, gpu("h100")), dir32.path);
  const double ratio = static_cast<double>(weights_bin_bytes(dir.path)) / weights_bin_bytes(dir32.path);
  EXPECT_GT(ratio, 0.45) << "weights.bin of " << precision_name(c.precision);
  EXPECT_LT(ratio, 0.6) << "weights.bin of " << precision_name(c.precision);

  const ExecPlan back = read_plan(dir.path);
  EXPECT_EQ(back.precision, c.precision);
  ASSERT_EQ(back.tensors.size(), built.tensors.size());
  for (size_t i = 0; i < back.tensors.size(); ++i) EXPECT_EQ(back.tensors[i].dtype, built.tensors[i].dtype);

  rt::Runtime r = rt::Runtime::open(dir.path, emulate_options());
  const TestData data = read_test_data(example(c.model, "test_data_set_0"));
  for (size_t i = 0; i < r.num_inputs(); ++i) r.set_input(i, data.inputs[i].value);
  r.run();
  const Tolerance tol = whole_model_tolerance(c.precision);
  for (size_t i = 0; i < data.outputs.size(); ++i) {
    const auto cmp = ref::compare_tensors(r.output(i), data.outputs[i].value, tol.rtol, tol.atol);
    EXPECT_TRUE(cmp.pass) << "output " << i << ": rel-L2 " << cmp.rel_l2_error << " max-abs "
                          << cmp.max_abs_error << " " << cmp.problem;
    // Really reduced: not bit-equal to what an fp32 plan computes.
    EXPECT_GT(cmp.rel_l2_error, 1e-6) << "output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, ReducedPrecisionPlan,
                         ::testing::Values(Case{"tiny_cnn", Precision::fp16},
                                           Case{"tiny_cnn", Precision::bf16},
                                           Case{"tiny_transformer", Precision::fp16},
                                           Case{"tiny_transformer", Precision::bf16}),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.model + "_" +
                                  std::string(precision_name(param_info.param.precision));
                         });

// One attention block, x [1,16,64], 4 heads, with a causal additive mask of -inf (the
// constant every fp16 port of a decoder trips over), residual and LayerNorm.
Graph masked_attention_block() {
  constexpr int64_t S = 16, D = 64, H = 4, Dh = 16;
  Graph g;
  add_input(g, "x", {1, S, D});
  for (const char* w : {"Wq", "Wk", "Wv", "Wo"})
    add_initializer(g, w, random_tensor({D, D}, static_cast<uint32_t>(w[1]), -0.2f, 0.2f));
  std::vector<float> mask(S * S, 0.f);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = i + 1; j < S; ++j) mask[i * S + j] = -std::numeric_limits<float>::infinity();
  add_initializer(g, "mask", Tensor::from_vector<float>({1, 1, S, S}, mask));
  add_initializer(g, "split", Tensor::from_vector<int64_t>({4}, {1, S, H, Dh}));
  add_initializer(g, "merge", Tensor::from_vector<int64_t>({3}, {1, S, D}));
  add_initializer(g, "scale", Tensor::scalar<float>(0.25f));
  add_initializer(g, "gamma", random_tensor({D}, 8, 0.5f, 1.5f));
  add_initializer(g, "beta", random_tensor({D}, 9));
  for (const char* p : {"q", "k", "v"}) {
    const std::string w = std::string("W") + p;
    add_node(g, "MatMul", {"x", w}, {std::string(p) + "0"});
    add_node(g, "Reshape", {std::string(p) + "0", "split"}, {std::string(p) + "1"});
  }
  add_node(g, "Transpose", {"q1"}, {"q"}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  add_node(g, "Transpose", {"k1"}, {"kt"}, attrs({{"perm", std::vector<int64_t>{0, 2, 3, 1}}}));
  add_node(g, "Transpose", {"v1"}, {"v"}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  add_node(g, "MatMul", {"q", "kt"}, {"s0"});
  add_node(g, "Mul", {"s0", "scale"}, {"s1"});
  add_node(g, "Add", {"s1", "mask"}, {"s2"});
  add_node(g, "Softmax", {"s2"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(g, "MatMul", {"p", "v"}, {"o0"});
  add_node(g, "Transpose", {"o0"}, {"o1"}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
  add_node(g, "Reshape", {"o1", "merge"}, {"o2"});
  add_node(g, "MatMul", {"o2", "Wo"}, {"o3"});
  add_node(g, "Add", {"o3", "x"}, {"res"});
  add_node(g, "LayerNormalization", {"res", "gamma", "beta"}, {"y"},
           attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5f}}));
  g.outputs = {"y"};
  return with_types(g);
}

TEST(ReducedPrecisionMask, Fp16AttentionWithAnInfMaskIsFiniteAndWithinTolerance) {
  const Graph g32 = masked_attention_block();
  const ref::TensorMap in = {{"x", random_tensor({1, 16, 64}, 5)}};
  const Tensor want = ref::run_graph(g32, in).at("y");
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    SCOPED_TRACE(std::string(precision_name(p)));
    std::vector<std::string> notes;
    const Graph g = apply_precision(g32, p, &notes);
    const ExecPlan built = build_estimated_plan(g, gpu("h100"), options_for(p));
    TempDir dir(std::string(precision_name(p)));
    write_plan(built, dir.path);
    rt::Runtime r = rt::Runtime::open(dir.path, emulate_options());
    r.set_input(0, in.at("x"));
    r.run();
    const auto got = r.output(0).to_float_vector();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
    const Tolerance tol = whole_model_tolerance(p);
    const auto cmp = ref::compare_tensors(r.output(0), want, tol.rtol, tol.atol);
    EXPECT_TRUE(cmp.pass) << "rel-L2 " << cmp.rel_l2_error << " max-abs " << cmp.max_abs_error;
  }
}

}  // namespace
}  // namespace dc
