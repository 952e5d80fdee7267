// Weights that stay on disk (issue 17): file-backed tensors read only when a value is
// needed; ONNX external data and a .onnx file's large raw_data imported without reading
// them; a plan's weights.bin streamed from the model's files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <onnx/onnx_pb.h>

#include "gpu/gpu_catalog.h"
#include "ir/error.h"
#include "model_loader.h"
#include "onnx/import.h"
#include "passes/apply_precision.h"
#include "plan/plan_io.h"
#include "plan_build.h"
#include "ref/executor.h"
#include "testing.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

namespace fs = std::filesystem;

using Folder = testing::TempDir;  // a fresh folder per test, removed at the end

void write_bytes(const std::string& path, const void* data, size_t n, uint64_t offset = 0) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::string pad(offset, '\0');
  out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(FileBackedTensor, ReadsOnlyWhenNeededAndOnceForAllCopies) {
  Folder dir;
  const Tensor want = testing::random_tensor({64, 33}, 7);
  for (uint64_t offset : {uint64_t{4096}, uint64_t{13}}) {  // mapped, read
    write_bytes(dir.file("w.bin"), want.raw(), want.nbytes(), offset);
    const Tensor t = Tensor::from_file(DType::f32, {64, 33}, dir.file("w.bin"), offset);
    const Tensor copy = t;
    EXPECT_FALSE(t.resident());
    std::vector<char> part(100);
    t.copy_bytes(40, part.size(), part.data());
    EXPECT_EQ(std::memcmp(part.data(), want.raw() + 40, part.size()), 0);
    const Tensor deep = t.clone();
    EXPECT_FALSE(t.resident()) << "clone must read the file, not make the source resident";
    EXPECT_TRUE(same_bytes(deep, want));
    EXPECT_EQ(t.data<float>()[65], want.data<float>()[65]);
    EXPECT_TRUE(copy.resident()) << "copies share one read";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.raw()) % 64, 0u);
    EXPECT_TRUE(same_bytes(copy, want));
  }
}

TEST(FileBackedTensor, AFileThatShrankIsAUserError) {
  Folder dir;
  const Tensor want = testing::random_tensor({256}, 8);
  write_bytes(dir.file("w.bin"), want.raw(), want.nbytes());
  const Tensor t = Tensor::from_file(DType::f32, {256}, dir.file("w.bin"), 0);
  fs::resize_file(dir.file("w.bin"), 100);
  EXPECT_THROW(t.raw(), UserError);
  std::vector<char> all(want.nbytes());
  EXPECT_THROW(t.copy_bytes(0, all.size(), all.data()), UserError);
}

// y = x[2,256] @ W[256,128] + b[128]: W is 128 KiB (stays on disk), b is inline.
struct MatMulModel {
  Tensor w = testing::random_tensor({256, 128}, 11);
  Tensor b = testing::random_tensor({128}, 12);

  onnx::ModelProto proto(bool external, uint64_t offset = 4096) const {
    onnx::ModelProto m;
    m.set_ir_version(7);
    m.add_opset_import()->set_version(13);
    auto* g = m.mutable_graph();
    g->set_name("matmul");
    auto value_info = [](onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
      v->set_name(name);
      auto* tt = v->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(onnx::TensorProto::FLOAT);
      for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
    };
    value_info(g->add_input(), "x", {2, 256});
    value_info(g->add_output(), "y", {2, 128});
    auto tensor = [&](const std::string& name, const Tensor& t) {
      auto* p = g->add_initializer();
      p->set_name(name);
      p->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : t.shape()) p->add_dims(d);
      return p;
    };
    auto* wp = tensor("W", w);
    if (external) {
      wp->set_data_location(onnx::TensorProto::EXTERNAL);
      for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
               {"location", "w.bin"}, {"offset", std::to_string(offset)}, {"length", std::to_string(w.nbytes())}}) {
        auto* e = wp->add_external_data();
        e->set_key(k);
        e->set_value(v);
      }
    } else {
      wp->set_raw_data(w.raw(), w.nbytes());
    }
    tensor("b", b)->set_raw_data(b.raw(), b.nbytes());
    auto* mm = g->add_node();
    mm->set_op_type("MatMul");
    mm->add_input("x");
    mm->add_input("W");
    mm->add_output("xw");
    auto* add = g->add_node();
    add->set_op_type("Add");
    add->add_input("xw");
    add->add_input("b");
    add->add_output("y");
    return m;
  }

  void save(const Folder& dir, bool external) const {
    const std::string bytes = proto(external).SerializeAsString();
    write_bytes(dir.file("model.onnx"), bytes.data(), bytes.size());
    if (external) write_bytes(dir.file("w.bin"), w.raw(), w.nbytes(), 4096);
  }

  Tensor expected(const Tensor& x) const {
    Tensor y(DType::f32, {2, 128});
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 128; ++j) {
        float acc = 0;
        for (int k = 0; k < 256; ++k) acc += x.data<float>()[i * 256 + k] * w.data<float>()[k * 128 + j];
        y.mutable_data<float>()[i * 128 + j] = acc + b.data<float>()[j];
      }
    return y;
  }
};

void expect_runs_like_the_model(const Graph& g, const MatMulModel& m) {
  const Tensor x = testing::random_tensor({2, 256}, 13);
  const auto out = ref::run_graph(g, {{"x", x}});
  testing::expect_tensor_near(out.at("y"), m.expected(x), 1e-4f, 1e-4f);
}

TEST(ExternalData, LargeWeightsStayOnDiskUntilAValueIsNeeded) {
  Folder dir;
  const MatMulModel m;
  m.save(dir, /*external=*/true);
  const Graph g = import_onnx_file(dir.file("model.onnx"));
  EXPECT_EQ(g.inputs, std::vector<std::string>{"x"}) << "a detached weight is no runtime input";
  ASSERT_TRUE(g.initializers.count("W"));
  EXPECT_FALSE(g.initializers.at("W").resident());
  EXPECT_EQ(g.info("xw").shape, (Shape{2, 128}));
  EXPECT_TRUE(same_bytes(g.initializers.at("W"), m.w));
  expect_runs_like_the_model(g, m);
}

TEST(ExternalData, InlineRawDataIsLeftInTheOnnxFile) {
  Folder dir;
  const MatMulModel m;
  m.save(dir, /*external=*/false);
  OnnxModel model = load_onnx(dir.file("model.onnx"));
  ASSERT_EQ(model.raw_data_in_file().size(), 1u) << "W's 128 KiB; b is small";
  EXPECT_FALSE(model.proto().graph().initializer(0).has_raw_data());
  const Graph g = import_onnx(std::move(model));
  EXPECT_FALSE(g.initializers.at("W").resident());
  EXPECT_TRUE(same_bytes(g.initializers.at("W"), m.w));
  expect_runs_like_the_model(g, m);
}

TEST(ExternalData, ProblemsWithTheDataFileAreUserErrors) {
  Folder dir;
  const MatMulModel m;
  m.save(dir, /*external=*/true);
  fs::resize_file(dir.file("w.bin"), 4096 + m.w.nbytes() - 1);
  EXPECT_THROW(import_onnx_file(dir.file("model.onnx")), UserError);
  fs::remove(dir.file("w.bin"));
  EXPECT_THROW(import_onnx_file(dir.file("model.onnx")), UserError);
  const std::string beyond = m.proto(true, uint64_t{1} << 40).SerializeAsString();
  write_bytes(dir.file("model.onnx"), beyond.data(), beyond.size());
  write_bytes(dir.file("w.bin"), m.w.raw(), m.w.nbytes(), 4096);
  try {
    import_onnx_file(dir.file("model.onnx"));
    FAIL() << "an offset beyond the file imported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("too short"), std::string::npos) << e.what();
  }
}

TEST(ExternalData, PlanWritingStreamsWeightsWithoutReadingThemIntoMemory) {
  Folder dir;
  const MatMulModel m;
  m.save(dir, /*external=*/true);
  const cli::LoadedModel loaded = cli::load_model(load_onnx(dir.file("model.onnx")), {}, true);
  const ExecPlan plan = build_estimated_plan(loaded.simplified, GpuCatalog::builtin().require("h100"));
  write_plan(plan, dir.file("plan"));
  EXPECT_FALSE(loaded.simplified.initializers.at("W").resident());
  const ExecPlan back = read_plan(dir.file("plan"));
  bool found = false;
  for (size_t i = 0; i < back.tensors.size(); ++i)
    if (back.tensors[i].name == "W") {
      found = true;
      EXPECT_TRUE(same_bytes(back.values[i], m.w));
    }
  EXPECT_TRUE(found);
}

// --precision fp16/bf16 of a model whose weights are on disk: each converted weight stays a
// description (file range + conversion) through planning; write_plan converts it chunk by
// chunk, and the notes about clamped values are those of the in-memory conversion.
TEST(ExternalData, ReducedPrecisionWeightsStayOnDiskUntilThePlanIsWritten) {
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    Folder dir;
    MatMulModel m;
    m.w.mutable_data<float>()[5] = 1e6f;  // clamped in fp16
    m.w.mutable_data<float>()[77] = -7e4f;
    m.save(dir, /*external=*/true);
    std::vector<std::string> in_memory_notes;
    Graph eager = cli::load_model(load_onnx(dir.file("model.onnx")), {}, true).simplified;
    (void)eager.initializers.at("W").raw();  // resident: converted in memory, as before
    eager = apply_precision(std::move(eager), p, &in_memory_notes);
    const cli::LoadedModel loaded = cli::load_model(load_onnx(dir.file("model.onnx")), {}, true, p);
    const Tensor& w = loaded.simplified.initializers.at("W");
    EXPECT_EQ(w.dtype(), storage_dtype(p));
    EXPECT_FALSE(w.resident()) << precision_name(p);
    EXPECT_EQ(loaded.precision_notes, in_memory_notes);
    EXPECT_EQ(in_memory_notes.size(), p == Precision::fp16 ? 1u : 0u);
    const ExecPlan plan = build_estimated_plan(loaded.simplified, GpuCatalog::builtin().require("h100"));
    write_plan(plan, dir.file("plan"));
    EXPECT_FALSE(w.resident()) << "write_plan must stream the conversion";
    const ExecPlan back = read_plan(dir.file("plan"));
    bool found = false;
    for (size_t i = 0; i < back.tensors.size(); ++i)
      if (back.tensors[i].name == "W") {
        found = true;
        EXPECT_TRUE(same_bytes(back.values[i], eager.initializers.at("W"))) << precision_name(p);
      }
    EXPECT_TRUE(found);
  }
}

}  // namespace
}  // namespace dc
