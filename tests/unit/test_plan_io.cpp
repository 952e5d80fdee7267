// The plan directory (codegen/plan/plan_io.h, docs/plan-format.md): a hand-built plan of a
// four-node model round-trips exactly, and every kind of damage to the three files is a
// UserError that names the file and the problem.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "generate.h"
#include "ir/workload.h"
#include "plan/plan_io.h"
#include "prelude.h"
#include "testing.h"

namespace dc {
namespace {

namespace fs = std::filesystem;
using dc::testing::make_node;
using dc::testing::random_tensor;

// y = relu(relu(x + w)) + w2: the two Adds share one workload (one module, steps 0 and 2),
// the Relu pair is one step whose reference kernel keeps `b` in scratch.
Graph model() {
  Graph g;
  g.name = "plan_io_model";
  g.opset = 17;
  for (const char* t : {"x", "w", "w2", "a", "b", "c", "y"}) g.tensors[t] = {DType::f32, {2, 3}};
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.initializers["w"] = random_tensor({2, 3}, 1);
  g.initializers["w2"] = random_tensor({2, 3}, 2);
  g.nodes = {make_node("Add", {"x", "w"}, {"a"}), make_node("Relu", {"a"}, {"b"}),
             make_node("Relu", {"b"}, {"c"}), make_node("Add", {"c", "w2"}, {"y"})};
  return g;
}

int add_tensor(ExecPlan& p, std::string name, PlanTensorKind kind, int64_t offset = -1, int first = -1,
               int last = -1) {
  PlanTensor t;
  t.name = std::move(name);
  t.kind = kind;
  t.shape = {2, 3};
  t.offset = offset;
  t.first_step = first;
  t.last_step = last;
  p.tensors.push_back(t);
  return static_cast<int>(p.tensors.size()) - 1;
}

// A step running `module` for workload `w`, its buffers bound by the model's tensor names.
PlanStep step_of(const ExecPlan& p, int module, const Workload& w, std::vector<int> scratch) {
  std::map<std::string, int> id;
  for (size_t i = 0; i < p.tensors.size(); ++i) id[p.tensors[i].name] = static_cast<int>(i);
  PlanStep s;
  s.module = module;
  for (const auto& n : w.source_inputs) s.buffers.push_back(id.at(n));
  for (const auto& n : w.source_outputs) s.buffers.push_back(id.at(n));
  for (int t : scratch) s.buffers.push_back(t);
  s.workload = w.signature;
  s.variant_key = p.modules[static_cast<size_t>(module)].variant_key;
  s.reference = true;
  return s;
}

ExecPlan make_plan() {
  const Graph g = model();
  const Workload add0 = make_workload(g, {0}, ClusterKind::elementwise);
  const Workload relus = make_workload(g, {1, 2}, ClusterKind::elementwise);
  const Workload add1 = make_workload(g, {3}, ClusterKind::elementwise);
  EXPECT_EQ(add0.signature, add1.signature);

  ExecPlan p;
  p.model_name = "plan_io \"tiny\" model\nsecond line";
  p.model_sha256 = std::string(64, 'a');
  p.gpu_type = "a100";
  p.gpu_name = "NVIDIA A100-SXM4-40GB";
  p.gpu_arch = "sm_80";
  p.nvrtc_version = "13.0";
  p.emulated = true;
  p.measured_total_us = 0.1 + 0.2;  // not exactly 0.3: doubles must round-trip exactly
  p.estimated_total_us = 1.0 / 3.0;
  p.reference_steps = 2;
  p.weight_transforms = {"BatchNormalization x53 folded into Conv weights", "Constant x2 folded"};
  p.modules = {generate_reference(add0), generate_reference(relus)};
  EXPECT_EQ(p.modules[1].buffers.size(), 3u);  // a, c and the scratch for b

  const int x = add_tensor(p, "x", PlanTensorKind::input);
  const int w = add_tensor(p, "w", PlanTensorKind::weight, 0);
  const int w2 = add_tensor(p, "w2", PlanTensorKind::weight, 256);
  add_tensor(p, "a", PlanTensorKind::intermediate, 0, 0, 1);
  const int scratch = add_tensor(p, "1.scratch0", PlanTensorKind::scratch, 256, 1, 1);
  add_tensor(p, "c", PlanTensorKind::intermediate, 512, 1, 2);
  const int y = add_tensor(p, "y", PlanTensorKind::output);
  p.inputs = {x};
  p.outputs = {y};
  p.arena_bytes = 768;
  p.unshared_bytes = 3 * 256;
  p.values.resize(p.tensors.size());
  p.values[static_cast<size_t>(w)] = g.initializers.at("w");
  p.values[static_cast<size_t>(w2)] = g.initializers.at("w2");

  p.steps = {step_of(p, 0, add0, {}), step_of(p, 1, relus, {scratch}), step_of(p, 0, add1, {})};
  p.steps[0].cluster = "add#0";
  p.steps[0].nodes = {"Add:a"};
  p.steps[1].cluster = "relu+relu#3";
  p.steps[1].nodes = {"Relu:b", "Relu:c"};
  p.steps[1].reference = false;
  p.steps[1].variant_key = "elementwise/fp32/vec=4";
  p.steps[1].measured_us = 2.718281828459045;
  p.steps[1].estimated_us = 1e-7;
  p.steps[2].cluster = "add#5";
  p.steps[2].nodes = {"Add:y"};
  return p;
}

void expect_modules_equal(const GeneratedKernel& a, const GeneratedKernel& b) {
  EXPECT_EQ(a.template_name, b.template_name);
  EXPECT_EQ(a.variant_key, b.variant_key);
  EXPECT_TRUE(a.source == b.source) << "sources differ";
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t j = 0; j < a.buffers.size(); ++j) {
    EXPECT_EQ(a.buffers[j].name, b.buffers[j].name);
    EXPECT_EQ(a.buffers[j].role, b.buffers[j].role);
    EXPECT_EQ(a.buffers[j].dtype, b.buffers[j].dtype);
    EXPECT_EQ(a.buffers[j].shape, b.buffers[j].shape);
    EXPECT_EQ(a.buffers[j].zero_init, b.buffers[j].zero_init);
  }
  ASSERT_EQ(a.launches.size(), b.launches.size());
  for (size_t l = 0; l < a.launches.size(); ++l) {
    EXPECT_EQ(a.launches[l].kernel, b.launches[l].kernel);
    EXPECT_EQ(a.launches[l].grid, b.launches[l].grid);
    EXPECT_EQ(a.launches[l].block, b.launches[l].block);
    EXPECT_EQ(a.launches[l].dynamic_smem_bytes, b.launches[l].dynamic_smem_bytes);
    EXPECT_EQ(a.launches[l].args, b.launches[l].args);
  }
}

void expect_plans_equal(const ExecPlan& a, const ExecPlan& b) {
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.model_sha256, b.model_sha256);
  EXPECT_EQ(a.gpu_type, b.gpu_type);
  EXPECT_EQ(a.gpu_name, b.gpu_name);
  EXPECT_EQ(a.gpu_arch, b.gpu_arch);
  EXPECT_EQ(a.nvrtc_version, b.nvrtc_version);
  EXPECT_EQ(a.emulated, b.emulated);
  EXPECT_EQ(a.measured_total_us, b.measured_total_us);  // exact: doubles round-trip
  EXPECT_EQ(a.estimated_total_us, b.estimated_total_us);
  EXPECT_EQ(a.reference_steps, b.reference_steps);
  EXPECT_EQ(a.weight_transforms, b.weight_transforms);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_EQ(a.arena_bytes, b.arena_bytes);
  EXPECT_EQ(a.unshared_bytes, b.unshared_bytes);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].kind, b.tensors[i].kind);
    EXPECT_EQ(a.tensors[i].dtype, b.tensors[i].dtype);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    EXPECT_EQ(a.tensors[i].offset, b.tensors[i].offset);
    EXPECT_EQ(a.tensors[i].first_step, b.tensors[i].first_step);
    EXPECT_EQ(a.tensors[i].last_step, b.tensors[i].last_step);
  }
  ASSERT_EQ(a.modules.size(), b.modules.size());
  for (size_t m = 0; m < a.modules.size(); ++m) expect_modules_equal(a.modules[m], b.modules[m]);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].module, b.steps[s].module);
    EXPECT_EQ(a.steps[s].buffers, b.steps[s].buffers);
    EXPECT_EQ(a.steps[s].cluster, b.steps[s].cluster);
    EXPECT_EQ(a.steps[s].nodes, b.steps[s].nodes);
    EXPECT_EQ(a.steps[s].workload, b.steps[s].workload);
    EXPECT_EQ(a.steps[s].variant_key, b.steps[s].variant_key);
    EXPECT_EQ(a.steps[s].reference, b.steps[s].reference);
    EXPECT_EQ(a.steps[s].measured_us, b.steps[s].measured_us);
    EXPECT_EQ(a.steps[s].estimated_us, b.steps[s].estimated_us);
  }
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) {
    EXPECT_EQ(a.values[i].defined(), b.values[i].defined()) << "value " << i;
    if (a.values[i].defined()) {
      EXPECT_TRUE(a.values[i].bitwise_equal(b.values[i])) << "value " << i;
    }
  }
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

void spit(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

class PlanIo : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("dc_plan_io_{}_{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    dir_ = root_ / "a100";
    write_plan(make_plan(), dir_.string());
  }
  void TearDown() override { fs::remove_all(root_); }

  // Replaces the one occurrence of `from` in plan.json by `to`.
  void edit_json(const std::string& from, const std::string& to) {
    std::string text = slurp(dir_ / "plan.json");
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << "'" << from << "' not in plan.json:\n" << text;
    ASSERT_EQ(text.find(from, at + 1), std::string::npos) << "'" << from << "' twice in plan.json";
    spit(dir_ / "plan.json", text.replace(at, from.size(), to));
  }

  // read_plan fails with a UserError whose message holds every one of `parts`.
  void expect_read_error(const std::vector<std::string>& parts) {
    try {
      read_plan(dir_.string());
      ADD_FAILURE() << "read_plan accepted the damaged plan";
    } catch (const UserError& e) {
      for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
    }
  }

  fs::path root_;
  fs::path dir_;
};

TEST_F(PlanIo, RoundTripIsExact) {
  const ExecPlan original = make_plan();
  const ExecPlan back = read_plan(dir_.string());
  expect_plans_equal(back, original);
  // The prelude is in the generated sources; on disk it is written once.
  ASSERT_NE(original.modules[0].source.find(cuda_prelude()), std::string::npos);
  const std::string kernels = slurp(dir_ / "kernels.cu");
  EXPECT_EQ(count(kernels, cuda_prelude()), 1u);
  EXPECT_EQ(count(kernels, "\n// [dc prelude: see the top of this file]\n"), 2u);  // one per module
  EXPECT_EQ(count(kernels, "// ===== module 0: reference reference (steps 0, 2) ====="), 1u) << kernels;
  EXPECT_EQ(count(kernels, "// ===== module 1: reference reference (step 1) ====="), 1u);
  // weights.bin: w at 0, zero padding, w2 at 256.
  const std::string weights = slurp(dir_ / "weights.bin");
  ASSERT_EQ(weights.size(), 256u + 24u);
  EXPECT_EQ(weights.substr(0, 24), std::string(reinterpret_cast<const char*>(original.values[1].raw()), 24));
  EXPECT_EQ(weights.substr(24, 232), std::string(232, '\0'));
  EXPECT_EQ(weights.substr(256), std::string(reinterpret_cast<const char*>(original.values[2].raw()), 24));
  // Only the three files: no temporaries left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 3);
}

TEST_F(PlanIo, SourcesWithoutThePreludeAreStoredAsTheyAre) {
  ExecPlan p = make_plan();
  p.modules[0].source = "// hand-written\n// [dc prelude: see the top of this file]\nextern \"C\" __global__ void k() {}\n";
  p.modules[1].source += "// no newline at the end";
  write_plan(p, dir_.string());
  expect_plans_equal(read_plan(dir_.string()), p);
}

TEST_F(PlanIo, RewritingReplacesThePlan) {
  ExecPlan p = make_plan();
  p.model_name = "second";
  p.values[1] = random_tensor({2, 3}, 99);
  write_plan(p, dir_.string());
  expect_plans_equal(read_plan(dir_.string()), p);
}

TEST_F(PlanIo, PlanJsonIsWhatWritePlanWrites) {
  const ExecPlan p = make_plan();
  const std::string weights = slurp(dir_ / "weights.bin");
  EXPECT_EQ(plan_json(p, slurp(dir_ / "kernels.cu"), weights.size(), fnv1a_hex(weights)),
            slurp(dir_ / "plan.json"));
}

// A plan written by another dc carries that dc's prelude: its kernels are rebuilt with the
// prelude in kernels.cu, never with this build's.
TEST_F(PlanIo, SourcesAreRebuiltWithThePreludeOfTheirOwnFile) {
  const ExecPlan p = make_plan();
  std::string kernels = slurp(dir_ / "kernels.cu");
  const std::string old_line = "// ---- dc prelude ----";
  const std::string new_line = "// ---- dc PRELUDE ----";  // same length: offsets stay
  const size_t at = kernels.find(old_line);
  ASSERT_NE(at, std::string::npos);
  kernels.replace(at, old_line.size(), new_line);
  spit(dir_ / "kernels.cu", kernels);
  const std::string weights = slurp(dir_ / "weights.bin");
  spit(dir_ / "plan.json", plan_json(p, kernels, weights.size(), fnv1a_hex(weights)));
  const ExecPlan back = read_plan(dir_.string());
  ASSERT_FALSE(back.modules.empty());
  std::string want = p.modules[0].source;
  want.replace(want.find(old_line), old_line.size(), new_line);
  EXPECT_EQ(back.modules[0].source, want);
}

TEST_F(PlanIo, TruncatedWeights) {
  fs::resize_file(dir_ / "weights.bin", 256 + 23);
  expect_read_error({"weights.bin", "279 bytes, but plan.json says 280", "truncated"});
}

TEST_F(PlanIo, FlippedWeightByte) {
  std::string w = slurp(dir_ / "weights.bin");
  w[260] = static_cast<char>(w[260] ^ 0x10);
  spit(dir_ / "weights.bin", w);
  expect_read_error({"weights.bin", "checksum", "modified"});
}

TEST_F(PlanIo, EditedKernels) {
  std::string k = slurp(dir_ / "kernels.cu");
  k[k.size() - 5] = k[k.size() - 5] == 'x' ? 'y' : 'x';
  spit(dir_ / "kernels.cu", k);
  expect_read_error({"kernels.cu", "checksum", "edited"});
  spit(dir_ / "kernels.cu", k + "// one more line\n");
  expect_read_error({"kernels.cu", "bytes, but plan.json says"});
}

TEST_F(PlanIo, PlanJsonNotJson) {
  spit(dir_ / "plan.json", "{\"format\": ]");
  expect_read_error({"plan.json", "not valid JSON"});
  spit(dir_ / "plan.json", "just some text");
  expect_read_error({"plan.json:1:1: not valid JSON: expected a JSON value, found 'j'"});
  spit(dir_ / "plan.json", "[1, 2]");
  expect_read_error({"plan.json: expected a JSON object, found an array"});
}

TEST_F(PlanIo, PlanJsonTruncated) {
  const std::string text = slurp(dir_ / "plan.json");
  spit(dir_ / "plan.json", text.substr(0, text.size() / 2));
  expect_read_error({"plan.json", "not valid JSON"});
}

TEST_F(PlanIo, OtherFormatVersion) {
  edit_json("\"format\":\"dc-plan/1\"", "\"format\":\"dc-plan/2\"");
  expect_read_error({"plan.json", "plan format dc-plan/2 is not supported by this dc (reads dc-plan/1)"});
}

TEST_F(PlanIo, MissingAndMistypedFields) {
  edit_json("\"gpu_arch\":\"sm_80\"", "\"gpu_arch_typo\":\"sm_80\"");
  expect_read_error({"plan.json: gpu_arch: missing"});
  write_plan(make_plan(), dir_.string());
  edit_json("{\"module\":1,", "{\"module\":\"1\",");
  expect_read_error({"plan.json: steps[1].module: expected an integer"});
  write_plan(make_plan(), dir_.string());
  edit_json("\"emulated\":true", "\"emulated\":1");
  expect_read_error({"plan.json: emulated: expected true or false"});
  write_plan(make_plan(), dir_.string());
  edit_json("\"name\":\"x\",\"kind\":\"input\",\"dtype\":\"f32\",\"shape\":[2,3]",
            "\"name\":\"x\",\"kind\":\"input\",\"dtype\":\"f32\",\"shape\":[2,-3]");
  expect_read_error({"plan.json: tensors[0].shape: negative dimension -3"});
}

TEST_F(PlanIo, StepModuleOutOfRange) {
  edit_json("{\"module\":1,", "{\"module\":7,");
  expect_read_error({"plan.json: steps[1].module: 7 is out of range (2 modules)"});
}

TEST_F(PlanIo, BufferShapeMismatch) {
  edit_json("\"name\":\"a\",\"kind\":\"intermediate\",\"dtype\":\"f32\",\"shape\":[2,3]",
            "\"name\":\"a\",\"kind\":\"intermediate\",\"dtype\":\"f32\",\"shape\":[3,2]");
  expect_read_error({"plan.json: steps[0].buffers[2]: tensors[3] 'a' (f32 3x2) does not match the module's buffer",
                     "(f32 2x3)"});
}

TEST_F(PlanIo, LiveIntermediatesOverlapInTheArena) {
  // c (steps 1..2) moved onto a (steps 0..1): both live at step 1.
  edit_json("\"name\":\"c\",\"kind\":\"intermediate\",\"dtype\":\"f32\",\"shape\":[2,3],\"offset\":512",
            "\"name\":\"c\",\"kind\":\"intermediate\",\"dtype\":\"f32\",\"shape\":[2,3],\"offset\":0");
  expect_read_error({"plan.json", "tensors[3] 'a' (steps 0..1) and tensors[5] 'c' (steps 1..2) overlap in the arena"});
}

TEST_F(PlanIo, MissingDirectoryAndFiles) {
  EXPECT_THROW(
      {
        try {
          read_plan((root_ / "nowhere").string());
        } catch (const UserError& e) {
          EXPECT_NE(std::string(e.what()).find("nowhere' does not exist"), std::string::npos) << e.what();
          throw;
        }
      },
      UserError);
  fs::remove(dir_ / "kernels.cu");
  expect_read_error({"kernels.cu: missing"});
}

TEST_F(PlanIo, UnwritableDirectory) {
  spit(root_ / "a_file", "x");
  EXPECT_THROW(write_plan(make_plan(), (root_ / "a_file" / "a100").string()), UserError);
}

TEST_F(PlanIo, WritingAnInvalidPlanIsABug) {
  ExecPlan p = make_plan();
  p.values[1] = Tensor();
  EXPECT_THROW(write_plan(p, (root_ / "b").string()), InternalError);
}

TEST(PlanValidate, IntermediateReadBeforeItIsWritten) {
  ExecPlan p = make_plan();
  EXPECT_NO_THROW(validate_plan(p));
  p.steps[0].buffers[0] = 5;  // step 0 reads c, which step 1 writes
  try {
    validate_plan(p, "test plan");
    ADD_FAILURE() << "validate_plan accepted a read before the write";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "test plan: steps[0].buffers[0]: reads intermediate tensors[5] 'c' before any step writes it"),
              std::string::npos)
        << e.what();
  }
}

TEST(PlanValidate, WritesToInputsAndWeightsAreRejected) {
  ExecPlan p = make_plan();
  p.steps[0].buffers[2] = 1;  // step 0's output bound to weight w
  EXPECT_THROW(validate_plan(p), UserError);
  p = make_plan();
  p.tensors[4].last_step = 2;  // scratch live over two steps
  EXPECT_THROW(validate_plan(p), UserError);
}

TEST(PlanTensor, BytesAndKindNames) {
  PlanTensor t;
  t.dtype = DType::f16;
  t.shape = {3, 5, 7};
  EXPECT_EQ(t.bytes(), 3 * 5 * 7 * 2);
  t.shape = {};
  EXPECT_EQ(t.bytes(), 2);
  EXPECT_STREQ(plan_tensor_kind_name(PlanTensorKind::intermediate), "intermediate");
  EXPECT_STREQ(plan_tensor_kind_name(PlanTensorKind::scratch), "scratch");
}

}  // namespace
}  // namespace dc
