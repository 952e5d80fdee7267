// Regression tests of the fuzzers' findings (tests/fuzz/, docs/bench/fuzz.md): each input
// that made a harness crash, time out or throw something other than a UserError, replayed
// through the same entry point, now a clear UserError.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ir/error.h"
#include "merge.h"
#include "migrate.h"
#include "onnx/import.h"
#include "ir/tensor_limit.h"
#include "onnx/test_data.h"
#include "sqlite.h"
#include "testing.h"
#include "tune_config.h"

namespace dc {
namespace {

namespace fs = std::filesystem;

fs::path fuzz_input(const std::string& name) { return fs::path(testing::source_dir()) / "tests/data/fuzz" / name; }

// A scratch folder holding `files` (name -> bytes), removed at the end of the test.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name) : dir(fs::temp_directory_path() / name) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
};

// A fuzz_db_import finding replayed: a copy of tests/data/fuzz/NAME (SQLite makes -wal/-shm
// files beside a WAL database it attaches) and a fresh DB to merge it into.
std::string copy_input(const Scratch& s, const std::string& name) {
  const std::string copy = (s.dir / name).string();
  fs::copy_file(fuzz_input(name), copy);
  return copy;
}
struct ImportReplay {
  Scratch scratch;
  std::string other;
  sqlite::Connection into;
  explicit ImportReplay(const std::string& name)
      : scratch("dc_fuzz_" + name), other(copy_input(scratch, name)),
        into(open_tuning_connection((scratch.dir / "into.db").string(), false)) {}
  std::string error() {
    return testing::user_error_of([&] { (void)merge_tuning_db(into, other); });
  }
};

// fuzz_tensor_pb: an int64 tensor of shape 1194691x112 with no values allocated (and zeroed)
// a GiB before noticing that the values are missing: a timeout.
TEST(FuzzRegressions, TensorFileWithoutValuesIsRefusedBeforeAllocating) {
  const std::string msg = testing::user_error_of([] { (void)read_tensor_file(fuzz_input("tensor_large_shape_no_data.pb").string()); });
  EXPECT_NE(msg.find("holds 0 values but its shape 1194691x112 needs 133805392"), std::string::npos) << msg;
  // The same with 2^40 int64 values (8 TiB): the allocation itself failed (std::bad_alloc).
  Scratch s("dc_fuzz_tensor_huge");
  const std::string huge("\x10\x07\x0a\x06\x80\x80\x40\x80\x80\x40", 10);  // data_type 7, dims [2^20, 2^20]
  EXPECT_NE(testing::user_error_of([&] { (void)read_tensor_file(s.write("input_0.pb", huge)); })
                .find("holds 0 values"),
            std::string::npos);
}

// External data: a non-numeric offset threw std::invalid_argument (std::stoll); a file too
// short for a huge shape was found out only after allocating the tensor (std::bad_alloc).
TEST(FuzzRegressions, ExternalDataIsCheckedBeforeAllocating) {
  Scratch s("dc_fuzz_tensor_external");
  s.write("w.bin", "abcd");
  const std::string location("\x6a\x11\x0a\x08location\x12\x05w.bin", 19);
  const std::string external("\x70\x01", 2);
  const std::string bad_offset = std::string("\x10\x01\x0a\x01\x01", 5) + location +
                                 std::string("\x6a\x0d\x0a\x06offset\x12\x03" "abc", 15) + external;
  EXPECT_NE(testing::user_error_of([&] { (void)read_tensor_file(s.write("input_0.pb", bad_offset)); })
                .find("external data offset 'abc' is not a non-negative integer"),
            std::string::npos);
  const std::string huge = std::string("\x10\x01\x0a\x06\x80\x80\x40\x80\x80\x40", 10) + location + external;
  EXPECT_NE(testing::user_error_of([&] { (void)read_tensor_file(s.write("input_1.pb", huge)); })
                .find("is too short (needs 4398046511104 bytes at offset 0, has 4 bytes)"),
            std::string::npos);
  // A tensor that fits still reads.
  const std::string one = std::string("\x10\x01\x0a\x01\x01", 5) + location + external;
  const NamedTensor t = read_tensor_file(s.write("input_2.pb", one));
  ASSERT_EQ(t.value.numel(), 1);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.value.raw()), 4), "abcd");
}

// fuzz_tune_config: a mapping as a key (`{}: ...`) made yaml-cpp's as<std::string>() throw
// BadConversion, which escaped as a non-UserError.
TEST(FuzzRegressions, TuneConfigKeysMustBeNames) {
  std::ifstream in(fuzz_input("tune_config_mapping_key.yaml"));
  const std::string found((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(found.empty());
  for (const std::string& text : {found, std::string("{a: 1}: 2\n"), std::string("calibration: {[h100]: {conv: 1}}\n"),
                                  std::string("calibration: {h100: {~: 1}}\n"), std::string("precisions: [{a: 1}]\n")}) {
    PlanOptions opts;
    const std::string msg = testing::user_error_of([&] { parse_tune_config(text, "c.yaml", &opts); });
    EXPECT_NE(msg.find("c.yaml"), std::string::npos) << text;
    EXPECT_NE(msg.find("expected a name, not"), std::string::npos) << text << " -> " << msg;
  }
}

// fuzz_onnx_import: an opset-3 Split node test whose graph output's name was changed, so
// that nothing defines it. Opsets below 6 go through ONNX's version converter, which
// dereferenced a null value for that output (SEGV in onnx::graphProtoToGraph).
TEST(FuzzRegressions, GraphOutputThatNothingDefinesIsRefusedBeforeTheConverter) {
  const std::string msg =
      testing::user_error_of([] { (void)import_onnx_file(fuzz_input("onnx_opset3_undefined_output.onnx").string()); });
  EXPECT_NE(msg.find("graph output 'output"), std::string::npos) << msg;
  EXPECT_NE(msg.find("' is defined by no node, graph input or initializer"), std::string::npos) << msg;
}

// fuzz_onnx_import: a model whose OneHot depth is 2^58 + 4 (one byte of the initializer
// changed), left without a static shape, so that import ran the reference executor: the
// output's byte count wrapped around to a small buffer that run_onehot overran
// (heap-buffer-overflow); with depth 2^52 + 4 the allocation itself was out of reach.
TEST(FuzzRegressions, TensorWhoseByteCountOverflowsIsRefused) {
  for (const char* name : {"onnx_onehot_depth_wraps.onnx", "onnx_onehot_depth_huge.onnx"}) {
    const std::string msg = testing::user_error_of([&] { (void)import_onnx_file(fuzz_input(name).string()); });
    // Refused before allocating: now by the fallback's bound (below), under the 1 TiB one.
    EXPECT_NE(msg.find("is too large (over 268435456 bytes)"), std::string::npos) << name << ": " << msg;
  }
  // The 1 TiB bound: 2^39 f32 values (2 TiB) are refused, as is a shape whose element count
  // overflows int64; an empty tensor with a huge dimension is fine.
  EXPECT_NE(testing::user_error_of([] { Tensor(DType::f32, {int64_t{1} << 38, 2}); }).find("is too large (over 1 TiB)"),
            std::string::npos);
  EXPECT_NE(testing::user_error_of([] { Tensor(DType::i64, {int64_t{1} << 32, int64_t{1} << 32}); }).find("is too large"),
            std::string::npos);
  EXPECT_EQ(Tensor(DType::f32, {0, int64_t{1} << 62}).numel(), 0);
}

// fuzz_onnx_import: the model above with a OneHot depth of 1,056,964,612 and a tensor
// upstream left without a static shape: import's fallback ran the whole model with the
// reference executor, and OneHot's output ([2,4,2,depth] f32, 67.6 GB) ran out of memory.
// The fallback bounds each tensor at 256 MiB.
TEST(FuzzRegressions, DataDependentShapeFallbackIsBounded) {
  const std::string msg =
      testing::user_error_of([] { (void)import_onnx_file(fuzz_input("onnx_onehot_depth_1e9_fallback.onnx").string()); });
  EXPECT_NE(msg.find("is too large (over 268435456 bytes)"), std::string::npos) << msg;
  // The limit is scoped: after it, the usual 1 TiB bound applies again.
  {
    const TensorByteLimit limit(1024);
    EXPECT_NE(testing::user_error_of([] { Tensor(DType::f32, {257}); }).find("(over 1024 bytes)"), std::string::npos);
    EXPECT_EQ(Tensor(DType::f32, {256}).numel(), 256);
  }
  EXPECT_EQ(Tensor(DType::f32, {257}).numel(), 257);
}

// fuzz_db_import: a UTF-16 SQLite file could not be attached (SQLITE_ERROR), an InternalError.
TEST(FuzzRegressions, ImportOfAUtf16DbIsAUserError) {
  Scratch s("dc_fuzz_db_utf16");
  const std::string other = (s.dir / "utf16.db").string();
  {
    sqlite::Connection c(other, false);
    c.exec("PRAGMA encoding = 'UTF-16le'");
    c.exec("CREATE TABLE t(x)");
  }
  sqlite::Connection into = open_tuning_connection((s.dir / "into.db").string(), false);
  const std::string msg = testing::user_error_of([&] { (void)merge_tuning_db(into, other); });
  EXPECT_NE(msg.find("cannot import '" + other + "': SQLite cannot attach it"), std::string::npos) << msg;
  EXPECT_NE(msg.find("text encoding"), std::string::npos) << msg;
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM imports"), 0);
}

// fuzz_db_import: a tuned DB at the current schema version with one byte of a column's name
// changed in its CREATE TABLE text (`first_seen_ms` of variants) passed every check, then
// failed the merge's INSERT ("no such column"), an InternalError.
TEST(FuzzRegressions, ImportOfADbWithAnEditedTableIsAUserError) {
  ImportReplay r("db_import_edited_column.db");
  const std::string msg = r.error();
  const std::string& other = r.other;
  sqlite::Connection& into = r.into;
  EXPECT_NE(msg.find("cannot import '" + other + "': its table variants is not defined as schema version " +
                     std::to_string(schema_version()) + " defines it"),
            std::string::npos)
      << msg;
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM imports"), 0);
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM variants"), 0);

  // A missing table is named as such.
  const std::string dropped = (r.scratch.dir / "dropped.db").string();
  {
    sqlite::Connection d = open_tuning_connection(dropped, false);
    d.exec("DROP VIEW IF EXISTS run_gpu_busy_fraction; DROP TABLE run_gpu_busy");
  }
  EXPECT_NE(testing::user_error_of([&] { (void)merge_tuning_db(into, dropped); })
                .find("its table run_gpu_busy is missing"),
            std::string::npos);
  // An index or a view of the file's own is no concern of the merge: it imports.
  const std::string indexed = (r.scratch.dir / "indexed.db").string();
  {
    sqlite::Connection d = open_tuning_connection(indexed, false);
    d.exec("CREATE INDEX mine ON measurements(median_us); CREATE VIEW my_view AS SELECT 1");
  }
  EXPECT_GT(merge_tuning_db(into, indexed).import_id, 0);
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM imports"), 1);
}

// fuzz_db_import: a tuned DB whose one tuning run has precision 'fp64' (two bytes changed).
// quick_check passed it, since SQLite does not load the CHECK constraints of a read-only
// database; the merge's INSERT then failed the CHECK, an InternalError.
TEST(FuzzRegressions, ImportOfARowThatBreaksItsTableIsAUserError) {
  ImportReplay r("db_import_check_violation.db");
  const std::string msg = r.error();
  const std::string& other = r.other;
  sqlite::Connection& into = r.into;
  EXPECT_NE(msg.find("cannot import '" + other + "': a row breaks its table's constraints (CHECK constraint failed"),
            std::string::npos)
      << msg;
  // Rolled back whole: the rows of the steps before tuning_runs are gone too.
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM imports"), 0);
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM measurements"), 0);
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM models"), 0);
}

// fuzz_db_import: a 27 KB DB whose schema record asks SQLite for a huge allocation: ATTACH
// failed with SQLITE_NOMEM, which escaped as std::bad_alloc.
TEST(FuzzRegressions, ImportOfADbSqliteCannotAllocateForIsAUserError) {
  ImportReplay r("db_import_huge_schema_record.db");
  const std::string msg = r.error();
  const std::string& other = r.other;
  sqlite::Connection& into = r.into;
  EXPECT_NE(msg.find("cannot import '" + other + "': SQLite ran out of memory attaching it"), std::string::npos)
      << msg;
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM imports"), 0);
  // The connection is still usable: nothing stays attached (the list holds `temp` too once
  // a migration used temporary tables).
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM pragma_database_list WHERE name = 'src'"), 0);
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM pragma_database_list WHERE name = 'main'"), 1);
}

// fuzz_db_import: a tuned DB whose workloads index lacks a row of its table passed
// quick_check and foreign_key_check (which found the parent through the index), then the
// merge's model_workloads INSERT failed a foreign key in this DB, an InternalError.
TEST(FuzzRegressions, ImportOfADbWhoseIndexDisagreesWithItsTableIsAUserError) {
  ImportReplay r("db_import_index_disagrees.db");
  const std::string msg = r.error();
  const std::string& other = r.other;
  sqlite::Connection& into = r.into;
  EXPECT_NE(msg.find("cannot import '" + other + "': it is damaged (row 1 missing from index sqlite_autoindex_workloads_1)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(into.scalar_int("SELECT count(*) FROM imports"), 0);
}

}  // namespace
}  // namespace dc
