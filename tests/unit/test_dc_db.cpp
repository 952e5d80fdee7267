// dc-db end to end: a DB filled through the C++ interface with known values, then the
// built binary (DC_BIN_DIR/dc-db) asked about it; every figure checked was computed by hand.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/wait.h>

#include <sqlite3.h>

#include "gpu/gpu_catalog.h"
#include "model_loader.h"
#include "sha256.h"
#include "tune.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

using testing::test_gpu;
using testing::test_measurement;
using testing::test_variant;
using testing::test_worker;
using testing::test_workload;

struct Output {
  int rc = -1;
  std::string text;  // stdout and stderr
};

Output run_dc_db(const std::string& args) {
  const std::string cmd = std::string(DC_BIN_DIR) + "/dc-db " + args + " 2>&1";
  Output out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.text.append(buf.data(), n);
  const int status = ::pclose(p);
  out.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// The line of `text` that contains `key`, or "".
std::string line_with(const std::string& text, const std::string& key) {
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);)
    if (has(line, key)) return line;
  return "";
}

// Whitespace-separated words of a line.
std::vector<std::string> words(const std::string& line) {
  std::istringstream is(line);
  std::vector<std::string> out;
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

class DcDb : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = open_tuning_db(path_);
    db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
    db->commit_gpu_type(test_gpu("a100", "ampere", 8, 0));
    const WorkerInfo h100 = test_worker("node1", "h100", false);
    const WorkerInfo a100 = test_worker("node2", "a100", false);
    const WorkerInfo emu = test_worker("laptop", "h100", true);
    for (const auto& w : {h100, a100, emu}) db->commit_worker(w);
    const int64_t model = db->commit_model("resnet50", sha256_hex("resnet50 model bytes"));
    db->commit_model_workloads(model, {{test_workload("wa", ClusterKind::conv), 3},
                                       {test_workload("wb", ClusterKind::gemm), 1}});
    // Current sources: those the measurements below ran (test_measurement's source_hash).
    for (const auto& [w, v] : {std::pair{"wa", conv32_}, {"wa", conv64_}, {"wb", gemm128_}, {"wb", reference_}})
      db->commit_variant(w, v, "src-" + v.key());
    auto commit = [&](const std::string& w, const Variant& v, const WorkerInfo& worker,
                      double median, double estimate, int64_t t) {
      Measurement m = test_measurement(w, v, worker, median, t);
      m.estimate_us = estimate;
      db->commit_measurement(m);
    };
    commit("wa", conv32_, h100, 8, 4, 1'700'000'000'000);
    commit("wa", conv64_, h100, 12, 4, 1'700'000'001'000);
    commit("wb", gemm128_, h100, 5, 5, 1'700'000'002'000);
    commit("wb", reference_, h100, 20, 0, 1'700'000'003'000);
    commit("wa", conv32_, a100, 16, 4, 1'700'000'004'000);
    commit("wb", gemm128_, a100, 15, 5, 1'700'000'005'000);
    commit("wa", conv64_, emu, 1, 4, 1'700'000'006'000);  // must never show as real
    const int64_t run = db->begin_run({model, {"h100"}, "{}", "coordhost", "fp32"});
    db->commit_plan({run, "h100", TimingSource::real,
                     {{"c0", "wa", conv32_.key(), 4, 8}, {"c1", "wb", gemm128_.key(), 5, 5}},
                     25, 29, "fp32"});
    db->commit_gpu_busy({{run, "h100", h100.name, 6, 8}, {run, "h100", emu.name, 4, 8}});
    db->end_run(run, RunStatus::ok);
  }

  Output dc_db(const std::string& args) { return run_dc_db("--db " + path_ + " " + args); }

  testing::TempDir dir_;
  std::string path_ = dir_.file("tune.db");
  Variant conv32_ = test_variant(32, "conv_implicit_gemm");
  Variant conv64_ = test_variant(64, "conv_implicit_gemm");
  Variant gemm128_ = test_variant(128, "gemm_tiled");
  Variant reference_ = test_variant(1, "reference");
};

TEST_F(DcDb, Summary) {
  const Output o = dc_db("summary");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "gpu types     2 (a100, h100)")) << o.text;
  EXPECT_TRUE(has(o.text, "workers       3 (2 real, 1 emulated)")) << o.text;
  EXPECT_TRUE(has(o.text, "measurements  7 (6 real, 1 emulated)")) << o.text;
  EXPECT_TRUE(has(o.text, "tuning runs   1")) << o.text;
  // h100 real: 4 results, all ok, 2 workloads with a result.
  const auto h100 = words(line_with(o.text, "h100      real"));
  ASSERT_GE(h100.size(), 6u) << o.text;
  EXPECT_EQ(std::vector<std::string>(h100.begin(), h100.begin() + 6),
            (std::vector<std::string>{"h100", "real", "4", "4", "2", "-"}))
      << o.text;
}

TEST_F(DcDb, BestIsPerWorkloadAndNeverEmulated) {
  Output o = dc_db("best --gpu h100");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "best variants on h100 (real): 2 workloads")) << o.text;
  const std::string wa = line_with(o.text, "wa ");
  EXPECT_TRUE(has(wa, conv32_.key()) && has(wa, "8.000 us") && has(wa, "7.500 us")) << o.text;
  EXPECT_TRUE(has(line_with(o.text, "wb "), gemm128_.key())) << o.text;
  EXPECT_FALSE(has(o.text, "1.000 us")) << o.text;  // the emulated time

  o = dc_db("best --gpu h100 --emulated");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "best variants on h100 (emulated): 1 workloads")) << o.text;
  EXPECT_TRUE(has(line_with(o.text, "wa "), "1.000 us")) << o.text;

  // wa: 3 x 8 us, wb: 1 x 5 us.
  o = dc_db("best --gpu h100 --model resnet50");
  EXPECT_TRUE(has(o.text, "2 workloads of 2 in the model; sum of best times x count 29.00 us")) << o.text;

  o = dc_db("best --gpu a100 --emulated");
  EXPECT_EQ(o.rc, 0);
  EXPECT_TRUE(has(o.text, "note: no emulated results for a100, but 2 real ones")) << o.text;
}

TEST_F(DcDb, CompareGpuTypes) {
  const Output o = dc_db("compare --gpus h100,a100");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(line_with(o.text, "wa "), "2.00")) << o.text;  // 16 / 8
  EXPECT_TRUE(has(line_with(o.text, "wb "), "3.00")) << o.text;  // 15 / 5
  // 8 + 5 = 13 on h100, 16 + 15 = 31 on a100: 31 / 13 = 2.38.
  EXPECT_TRUE(has(o.text, "h100 13.00 us a100 31.00 us (2.38x)")) << o.text;
  EXPECT_EQ(dc_db("compare --gpus h100").rc, 2);
}

TEST_F(DcDb, EstimatorError) {
  const Output o = dc_db("estimator-error --gpu h100");
  ASSERT_EQ(o.rc, 0) << o.text;
  // conv: ratios 8/4 = 2 and 12/4 = 3: geomean sqrt(6) = 2.449, median |log| = log sqrt(6).
  const std::string conv = line_with(o.text, "conv ");
  EXPECT_TRUE(has(conv, "2.449") && has(conv, "144.9%") && has(conv, "3.000")) << o.text;
  EXPECT_TRUE(has(line_with(o.text, "gemm "), "1.000")) << o.text;
  // all: ratios 2, 3, 1 (the reference result has no estimate): geomean 6^(1/3) = 1.817.
  const std::string all = line_with(o.text, "(all)");
  EXPECT_TRUE(has(all, " 3 ") && has(all, "1.817") && has(all, "100.0%")) << o.text;
}

TEST_F(DcDb, ModelsWorkloadsRuns) {
  Output o = dc_db("models");
  ASSERT_EQ(o.rc, 0) << o.text;
  const std::string row = line_with(o.text, "resnet50");
  EXPECT_TRUE(has(row, sha256_hex("resnet50 model bytes").substr(0, 12))) << o.text;
  EXPECT_TRUE(has(row, "a100 (real) 2/2, h100 (emulated) 1/2, h100 (real) 2/2")) << o.text;

  o = dc_db("workloads --model resnet50 --gpu a100");
  ASSERT_EQ(o.rc, 0) << o.text;
  const std::string wa = line_with(o.text, "wa ");
  EXPECT_TRUE(has(wa, "conv") && has(wa, "16.00 us") && has(wa, conv32_.key())) << o.text;
  EXPECT_TRUE(has(o.text, "best on a100")) << o.text;

  o = dc_db("runs");
  ASSERT_EQ(o.rc, 0) << o.text;
  const std::string run = line_with(o.text, "resnet50");
  EXPECT_TRUE(has(run, "coordhost") && has(run, " ok ") &&
              has(run, "h100: 29.00 us (est. 25.00 us)"))
      << o.text;
  EXPECT_TRUE(has(run, "h100: 62.5% over 2 device(s)")) << o.text;  // (6 + 4) / (8 x 2)
}

TEST_F(DcDb, ExportCsvAndJson) {
  const std::string csv = dir_.file("out.csv");
  Output o = dc_db("export --format csv --out " + csv);
  ASSERT_EQ(o.rc, 0) << o.text;
  std::ifstream in(csv);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 8u);  // header + 7 measurements
  EXPECT_EQ(lines[0].substr(0, 30), "id,workload,kind,variant,templ");
  EXPECT_TRUE(has(lines[1], ",wa,conv,")) << lines[1];
  EXPECT_TRUE(has(lines[1], ",h100,real,node1/0,node1,")) << lines[1];
  EXPECT_TRUE(has(lines[7], ",emulated,laptop/0,")) << lines[7];

  o = dc_db("export --format json --gpu a100");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "\"samples_us\":[16,16.5,15.5]")) << o.text;
  EXPECT_FALSE(has(o.text, "\"h100\"")) << o.text;
  EXPECT_EQ(dc_db("export --format xml").rc, 2);
}

TEST_F(DcDb, ImportAnotherDb) {
  const std::string other = dir_.file("other.db");
  {
    auto db = open_tuning_db(other);
    db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
    const WorkerInfo w = test_worker("farm2", "h100", false);
    db->commit_worker(w);
    db->commit_workload(test_workload("wa", ClusterKind::conv));
    db->commit_variant("wa", conv32_, "s1");
    db->commit_measurement(test_measurement("wa", conv32_, w, 7, 1'700'000'100'000));
  }
  Output o = dc_db("import " + other);
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "1 measurements, 0 variants, 0 workloads")) << o.text;
  o = dc_db("import " + other);
  EXPECT_TRUE(has(o.text, ": 0 measurements")) << o.text;
  o = dc_db("best --gpu h100");
  EXPECT_TRUE(has(line_with(o.text, "wa "), "7.000 us")) << o.text;
  o = dc_db("summary");
  EXPECT_TRUE(has(o.text, "imports       2")) << o.text;
  EXPECT_TRUE(has(o.text, "measurements  8 (7 real, 1 emulated)")) << o.text;
}

// One number from a DB file (sqlite3 directly: what the file holds, whatever dc-db says).
int64_t count_in(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* q = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
      n = sqlite3_column_type(q, 0) == SQLITE_TEXT
              ? (std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 0))) == "ok" ? 1 : 0)
              : sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  return n;
}

// Moving results between services: `export --format sqlite` from one DB, `import` into
// another (twice: nothing twice), a damaged export refused with nothing written.
TEST_F(DcDb, ExportSqliteImportsIntoAnotherServiceOnce) {
  const std::string file = dir_.file("results.dcdb");
  Output o = dc_db("export --format sqlite --out " + file);
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "wrote 7 measurements")) << o.text;
  EXPECT_EQ(count_in(file, "SELECT count(*) FROM measurements"), 7);
  EXPECT_EQ(dc_db("export --format sqlite --out " + file).rc, 2);  // never over an existing file
  EXPECT_EQ(dc_db("export --format sqlite").rc, 2);                 // needs --out

  // Another service's DB with a result of its own.
  const std::string other = dir_.file("service2.db");
  {
    auto db = open_tuning_db(other);
    db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
    const WorkerInfo w = test_worker("farm2", "h100", false);
    db->commit_worker(w);
    db->commit_workload(test_workload("wa", ClusterKind::conv));
    db->commit_variant("wa", conv32_, "s1");
    db->commit_measurement(test_measurement("wa", conv32_, w, 7, 1'700'000'100'000));
  }
  o = run_dc_db("--db " + other + " import " + file);
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, ": 7 measurements")) << o.text;
  o = run_dc_db("--db " + other + " import " + file);
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, ": 0 measurements")) << o.text;
  EXPECT_EQ(count_in(other, "SELECT count(*) FROM measurements"), 8);
  EXPECT_EQ(count_in(other, "SELECT count(*) FROM (SELECT 1 FROM measurements m JOIN variants v ON v.id = "
                            "m.variant_id JOIN workers w ON w.id = m.worker_id GROUP BY v.workload, v.key, "
                            "m.gpu_type, w.name, m.finished_ms HAVING count(*) > 1)"),
            0);
  EXPECT_EQ(count_in(other, "SELECT count(*) FROM plans"), 1);
  EXPECT_EQ(count_in(other, "PRAGMA integrity_check"), 1);

  // One GPU type only.
  const std::string a100 = dir_.file("a100.dcdb");
  ASSERT_EQ(dc_db("export --format sqlite --gpu a100 --out " + a100).rc, 0);
  EXPECT_EQ(count_in(a100, "SELECT count(*) FROM measurements"), 2);
  EXPECT_EQ(count_in(a100, "SELECT count(*) FROM measurements WHERE gpu_type <> 'a100'"), 0);

  // Damaged: a page of the export overwritten with garbage, and a truncated copy. Refused
  // with the reason; the DB is as it was.
  const std::string damaged = dir_.file("damaged.dcdb");
  {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 3 * 4096u);
    for (size_t i = 2 * 4096 + 8; i < 3 * 4096; ++i) bytes[i] = static_cast<char>(0xA5 ^ (i * 31));
    std::ofstream(damaged, std::ios::binary) << bytes;
    std::ofstream(dir_.file("truncated.dcdb"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  for (const std::string& bad : {damaged, dir_.file("truncated.dcdb")}) {
    o = run_dc_db("--db " + other + " import " + bad);
    EXPECT_EQ(o.rc, 2) << o.text;
    EXPECT_TRUE(has(o.text, "error: cannot import '" + bad + "'")) << o.text;
    EXPECT_EQ(count_in(other, "SELECT count(*) FROM measurements"), 8);
  }
  EXPECT_EQ(count_in(other, "PRAGMA integrity_check"), 1);
}

TEST_F(DcDb, ReportIsOneSelfContainedPage) {
  const std::string html_path = dir_.file("report.html");
  const Output o = dc_db("report --out " + html_path);
  ASSERT_EQ(o.rc, 0) << o.text;
  std::ifstream in(html_path);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(has(html, "<h3>resnet50 on h100 (real, precision fp32)</h3>")) << html.substr(0, 2000);
  EXPECT_TRUE(has(html, "total measured 29.00 us, estimated 25.00 us"));
  EXPECT_TRUE(has(html, ">c0</text>") && has(html, ">c1</text>"));  // one bar per cluster
  EXPECT_TRUE(has(html, "Measured vs estimated"));
  // wb on h100: reference 20 us / best 5 us.
  EXPECT_TRUE(has(html, "<title>gemm_tiled/fp32/block_m=128,block_n=64</title>"));
  EXPECT_TRUE(has(html, ">4 x</text>"));
  EXPECT_TRUE(has(html, "real results: 2 GPU types, 2 workloads measured on all"));
  EXPECT_GE(std::count(html.begin(), html.end(), '\n'), 20);
  // Self-contained: no scripts, no external resources.
  EXPECT_FALSE(has(html, "<script"));
  EXPECT_FALSE(has(html, "src="));
  EXPECT_FALSE(has(html, "href="));
}

TEST_F(DcDb, ErrorsAreOneLineWithExitCode2) {
  for (const std::string args : {"frobnicate", "best", "best --gpu t4", "workloads --model vgg",
                                 "import", "export"}) {
    const Output o = dc_db(args);
    EXPECT_EQ(o.rc, 2) << args << ": " << o.text;
    EXPECT_EQ(o.text.rfind("error: ", 0), 0u) << args << ": " << o.text;
    EXPECT_EQ(std::count(o.text.begin(), o.text.end(), '\n'), 1) << args << ": " << o.text;
  }
  EXPECT_TRUE(has(dc_db("best --gpu t4").text, "GPU types: a100, h100"));
  EXPECT_EQ(run_dc_db("summary").rc, 2);                                  // no --db
  EXPECT_EQ(run_dc_db("--db " + dir_.file("none.db") + " summary").rc, 2);  // no such file
  EXPECT_EQ(run_dc_db("--help").rc, 0);
  EXPECT_EQ(dc_db("best --help").rc, 0);
}

// "Best variant" has one definition (TuningDb::best_variants): the fastest variant of a
// workload that then failed its host-emulator check (wrong_result) is neither chosen by
// tune's selection nor listed by dc-db best or compare, which both name the next best.
TEST_F(DcDb, WinnerThatFailedItsCheckIsNotTheBest) {
  {
    auto db = open_tuning_db(path_);
    Measurement check = test_measurement("wa", conv32_, test_worker("node1", "h100", false), 0,
                                         1'700'000'007'000, JobStatus::wrong_result);
    db->commit_measurement(check);
  }
  Output o = dc_db("best --gpu h100");
  ASSERT_EQ(o.rc, 0) << o.text;
  const std::string wa = line_with(o.text, "wa ");
  EXPECT_TRUE(has(wa, conv64_.key()) && has(wa, "12.00 us")) << o.text;
  EXPECT_FALSE(has(o.text, conv32_.key())) << o.text;
  o = dc_db("compare --gpus h100,a100");
  EXPECT_TRUE(has(line_with(o.text, "wa "), "1.33")) << o.text;  // 16 / 12, not 16 / 8
  o = dc_db("workloads --gpu h100");
  EXPECT_TRUE(has(line_with(o.text, "wa "), conv64_.key())) << o.text;
}

// A variant whose generator now writes another source (a template changed): its results are
// stale. dc-db stale lists them; best, compare and workloads answer as tune selects, with the
// next best variant, until a tune measures the new source.
TEST_F(DcDb, StaleResultsAreListedAndAnswerForNothing) {
  Output o = dc_db("stale");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "no stale measurements")) << o.text;
  open_tuning_db(path_)->commit_variant("wa", conv32_, "src-after-a-template-change");
  o = dc_db("stale --gpu h100");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(line_with(o.text, "wa "), conv32_.key())) << o.text;
  EXPECT_TRUE(has(line_with(o.text, "wa "), "src-after-a-template-change")) << o.text;
  EXPECT_TRUE(has(o.text, "1 stale measurements")) << o.text;
  o = dc_db("best --gpu h100");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(line_with(o.text, "wa "), conv64_.key()) && has(line_with(o.text, "wa "), "12.00 us")) << o.text;
  EXPECT_FALSE(has(o.text, conv32_.key())) << o.text;
}

// dc-db health: per worker, the NVML figures stored with its results; a worker without any
// (emulated) says "no health data" with the reason, and gets no figures.
TEST_F(DcDb, HealthShowsEachWorkersFiguresAndNoneForEmulatedDevices) {
  {
    auto db = open_tuning_db(path_);
    const WorkerInfo gpu = test_worker("node3", "h100", false), emu = test_worker("laptop", "h100", true);
    db->commit_worker(gpu);
    int64_t t = 1'800'000'000'000;
    for (auto [clock, temp, reasons] : {std::tuple{1980, 52, 0x0}, {1755, 71, 0x1}, {1410, 64, 0x4}}) {
      Measurement m = test_measurement("wa", conv32_, gpu, 8, ++t);
      m.health.sampled = true;
      m.health.sm_clock_mhz = clock;
      m.health.max_sm_clock_mhz = 1980;
      m.health.temperature_c = temp;
      m.health.clock_event_reasons = static_cast<uint64_t>(reasons);
      m.health.ecc_known = true;
      m.health.ecc_uncorrected = 0;
      ASSERT_TRUE(db->commit_measurement(m));
    }
    Measurement e = test_measurement("wa", conv32_, emu, 1, ++t);
    e.health.note = "emulated device: its times are modelled";
    ASSERT_TRUE(db->commit_measurement(e));
  }
  Output o = dc_db("health --gpu h100");
  ASSERT_EQ(o.rc, 0) << o.text;
  const std::vector<std::string> row = words(line_with(o.text, "node3/"));
  ASSERT_EQ(row.size(), 10u) << o.text;  // worker gpu timed with-health SM(3 words) C reasons ECC
  EXPECT_EQ(row[2], "3") << o.text;
  EXPECT_EQ(row[3], "3") << o.text;
  EXPECT_EQ(row[4] + " " + row[5] + " " + row[6], "1410-1980 of 1980") << o.text;
  EXPECT_EQ(row[7], "71") << o.text;
  EXPECT_EQ(row[8], "0x5") << o.text;
  EXPECT_EQ(row[9], "0") << o.text;
  EXPECT_TRUE(has(o.text, "worker laptop/0: 1 results with no health data (emulated device: its times are modelled)"))
      << o.text;
  EXPECT_TRUE(has(o.text, "results with no health data (none recorded)")) << o.text;  // the fixture's rows
  EXPECT_FALSE(has(line_with(o.text, "laptop/0 "), "MHz")) << o.text;
  o = dc_db("health --worker nobody");
  ASSERT_EQ(o.rc, 0) << o.text;
  EXPECT_TRUE(has(o.text, "no timed measurements")) << o.text;
}

TEST(BestVariant, TuneSelectionAndDcDbAgreeAndSkipAWinnerThatFailedItsCheck) {
  testing::TempDir dir;
  const std::string path = dir.file("tune.db");
  static const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& h100 = catalog.require("h100");
  const Graph g = cli::load_model(load_onnx(std::string(DC_SOURCE_DIR) +
                                            "/examples/tiny_cnn/model.onnx"), {}, true).simplified;
  const ModelPlan plan = plan_by_estimate(g, {&h100}, PlanOptions{});
  const auto& ws = plan.workload_set.workloads;
  const WorkerInfo worker = test_worker("node1", "h100", false, "12.4");
  std::vector<std::string> winners, runners_up;  // per workload with two kept variants
  {
    auto db = open_tuning_db(path);
    db->commit_gpu_type(h100);
    db->commit_worker(worker);
    std::vector<std::pair<WorkloadRecord, int>> records;
    for (const auto& w : ws) records.emplace_back(workload_record(w), 1);
    db->commit_model_workloads(db->commit_model("tiny", sha256_hex("tiny")), records);
    int64_t t = 1;
    for (size_t wi = 0; wi < ws.size(); ++wi) {
      const auto& kept = plan.gpus[0].workloads[wi].kept;
      if (kept.size() < 2) continue;
      const Variant& fast = kept[0].variant;
      const Variant& slow = kept[1].variant;
      // The variants' current sources are those their measurements ran (test_measurement's
      // source_hash): selection counts results of the current source only.
      db->commit_variant(ws[wi].signature, fast, "src-" + fast.key());
      db->commit_variant(ws[wi].signature, slow, "src-" + slow.key());
      db->commit_measurement(test_measurement(ws[wi].signature, fast, worker, 1.0, t++));
      db->commit_measurement(test_measurement(ws[wi].signature, slow, worker, 3.0 + wi, t++));
      // The check of the winner: wrong_result.
      db->commit_measurement(
          test_measurement(ws[wi].signature, fast, worker, 0, t++, JobStatus::wrong_result));
      winners.push_back(fast.key());
      runners_up.push_back(slow.key());
    }
    ASSERT_FALSE(winners.empty());
  }
  auto db = open_tuning_db(path, /*read_only=*/true);
  GpuTuneResult gr;
  gr.gpu = &h100;
  select_measured(plan, *db, "12", gr);
  EXPECT_EQ(gr.failed_variants[JobStatus::wrong_result], static_cast<int64_t>(winners.size()));
  const Output o = run_dc_db("--db " + path + " best --gpu h100");
  ASSERT_EQ(o.rc, 0) << o.text;
  for (size_t wi = 0, i = 0; wi < ws.size(); ++wi) {
    if (plan.gpus[0].workloads[wi].kept.size() < 2) continue;
    EXPECT_EQ(gr.best_key[wi], runners_up[i]) << ws[wi].signature;
    EXPECT_EQ(gr.best_us[wi], 3.0 + wi);
    const std::string line = line_with(o.text, ws[wi].signature);
    EXPECT_TRUE(has(line, runners_up[i])) << o.text;
    EXPECT_FALSE(has(line, winners[i])) << o.text;
    ++i;
  }
  // No chosen cluster runs its workload's failed winner (keys repeat across workloads).
  std::map<size_t, std::string> failed_winner;
  for (size_t wi = 0, i = 0; wi < ws.size(); ++wi)
    if (plan.gpus[0].workloads[wi].kept.size() >= 2) failed_winner[wi] = winners[i++];
  for (const auto& c : gr.choices) {
    if (!failed_winner.count(c.workload)) continue;
    EXPECT_NE(c.variant_key, failed_winner.at(c.workload));
  }
}

}  // namespace
}  // namespace dc
