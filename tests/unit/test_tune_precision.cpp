// Reuse keeps precisions apart: an fp16 plan's workloads never find fp32 results (their
// signatures include dtypes) yet share a precision-free base signature with their fp32
// form; selection keeps only the plan's math paths (an fp32 plan never selects a tf32
// variant measured on the same f32 workload); the SQLite DB records runs' and plans'
// precision and each workload's base signature.
#include <gtest/gtest.h>

#include "gpu/gpu_catalog.h"
#include "model_loader.h"
#include "nvrtc.h"
#include "passes/apply_precision.h"
#include "sqlite.h"
#include "tune.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

const GpuSpec& h100() {
  static const GpuCatalog c = GpuCatalog::builtin();
  return c.require("h100");
}

PlanOptions options_for(Precision p) {
  PlanOptions o;
  o.precision = p;
  o.space.precisions = math_paths(p);
  return o;
}

Graph tiny_cnn(Precision p) {
  return cli::load_model(load_onnx(std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx"),
                         {}, true, p)
      .simplified;
}

bool has_reduced_tensor(const Workload& w) {
  return w.canonical.find("f16[") != std::string::npos;
}

TEST(ReusePrecision, Fp16WorkloadsNeverFindFp32ResultsButShareTheirBaseSignature) {
  const ModelPlan p32 = plan_by_estimate(tiny_cnn(Precision::fp32), {&h100()}, options_for(Precision::fp32));
  const ModelPlan p16 = plan_by_estimate(tiny_cnn(Precision::fp16), {&h100()}, options_for(Precision::fp16));
  const auto& w32 = p32.workload_set.workloads;
  const auto& w16 = p16.workload_set.workloads;
  ASSERT_EQ(p32.candidates.size(), p16.candidates.size()) << "the pass changes dtypes only";

  // Every fp32 workload measured: its best kept variant, on emulated h100.
  auto db = make_memory_db();
  db->commit_gpu_type(h100());
  const int64_t model = db->commit_model("tiny_cnn", std::string(64, 'a'));
  std::vector<std::pair<WorkloadRecord, int>> records;
  for (const auto& w : w32) records.emplace_back(workload_record(w), 1);
  db->commit_model_workloads(model, records);
  const WorkerInfo worker = testing::test_worker("node", "h100", true, nvrtc_version());
  db->commit_worker(worker);
  int64_t clock = 1;
  for (size_t wi = 0; wi < w32.size(); ++wi) {
    if (p32.gpus[0].workloads[wi].kept.empty()) continue;
    const Variant& v = p32.gpus[0].workloads[wi].kept.front().variant;
    db->commit_variant(w32[wi].signature, v, "src-" + v.key());
    db->commit_measurement(testing::test_measurement(w32[wi].signature, v, worker, 3.0, clock++));
  }

  std::set<std::string> sig32;
  for (const auto& w : w32) sig32.insert(w.signature);
  int reduced = 0;
  for (size_t c = 0; c < p16.candidates.size(); ++c) {
    const Workload& a = w32[p32.workload_set.candidate_workload[c]];
    const Workload& b = w16[p16.workload_set.candidate_workload[c]];
    EXPECT_EQ(precision_free_signature(a.canonical), precision_free_signature(b.canonical))
        << p16.candidates[c].pattern;
    EXPECT_EQ(precision_free_signature(a.canonical), a.signature) << "f32 workloads are their own base";
    if (!has_reduced_tensor(b)) continue;
    ++reduced;
    EXPECT_NE(a.signature, b.signature) << p16.candidates[c].pattern;
    EXPECT_FALSE(sig32.count(b.signature));
    EXPECT_TRUE(db->measured_variants(b.signature, "h100", TimingSource::emulated, "").empty());
    EXPECT_TRUE(db->top_k(b.signature, "h100", TimingSource::emulated, 4).empty());
  }
  EXPECT_GT(reduced, static_cast<int>(p16.candidates.size()) / 2);

  // The fp16 plan's selection finds nothing to reuse in the clusters stored in f16.
  GpuTuneResult g;
  g.gpu = &h100();
  g.source = TimingSource::emulated;
  select_measured(p16, *db, "", g, math_paths(Precision::fp16));
  for (const auto& ch : g.choices) {
    if (has_reduced_tensor(w16[ch.workload])) {
      EXPECT_TRUE(ch.reference) << ch.variant_key;
    }
  }
  // ... while the fp32 plan reuses everything.
  GpuTuneResult g32;
  g32.gpu = &h100();
  g32.source = TimingSource::emulated;
  select_measured(p32, *db, "", g32, math_paths(Precision::fp32));
  EXPECT_EQ(g32.reference_fallbacks, 0);
}

TEST(ReusePrecision, SelectionKeepsOnlyThePlansMathPaths) {
  const Graph g = tiny_cnn(Precision::fp32);
  const ModelPlan plan = plan_by_estimate(g, {&h100()}, options_for(Precision::tf32));
  const auto& ws = plan.workload_set.workloads;
  auto db = make_memory_db();
  db->commit_gpu_type(h100());
  const int64_t model = db->commit_model("tiny_cnn", std::string(64, 'b'));
  std::vector<std::pair<WorkloadRecord, int>> records;
  for (const auto& w : ws) records.emplace_back(workload_record(w), 1);
  db->commit_model_workloads(model, records);
  const WorkerInfo worker = testing::test_worker("node", "h100", true, nvrtc_version());
  db->commit_worker(worker);
  // Per workload: the best fp32 variant at 10 us and, for GEMM-family workloads, the best
  // tf32 variant at 2 us (what an earlier tf32 tune of the same f32 workloads leaves).
  int64_t clock = 1;
  int tf32_workloads = 0;
  for (size_t wi = 0; wi < ws.size(); ++wi) {
    const Variant* fp32 = nullptr;
    const Variant* tf32 = nullptr;
    for (const auto& sv : plan.gpus[0].workloads[wi].kept) {
      if (sv.variant.precision == "fp32" && !fp32) fp32 = &sv.variant;
      if (sv.variant.precision == "tf32" && !tf32) tf32 = &sv.variant;
    }
    for (auto [v, us] : {std::pair{fp32, 10.0}, std::pair{tf32, 2.0}}) {
      if (!v) continue;
      db->commit_variant(ws[wi].signature, *v, "src-" + v->key());
      db->commit_measurement(testing::test_measurement(ws[wi].signature, *v, worker, us, clock++));
    }
    tf32_workloads += tf32 != nullptr;
  }
  ASSERT_GT(tf32_workloads, 0) << "the tf32 space should hold tensor-core variants for convs";
  auto chosen_paths = [&](Precision p) {
    GpuTuneResult r;
    r.gpu = &h100();
    r.source = TimingSource::emulated;
    select_measured(plan, *db, "", r, math_paths(p));
    std::set<std::string> paths;
    for (const auto& c : r.choices)
      if (!c.reference) paths.insert(variant_key_precision(c.variant_key));
    return paths;
  };
  EXPECT_TRUE(chosen_paths(Precision::tf32).count("tf32"));
  EXPECT_EQ(chosen_paths(Precision::fp32), (std::set<std::string>{"fp32"}));
}

TEST(ReusePrecision, SqliteRecordsPrecisionAndBaseSignature) {
  auto db = open_tuning_db(":memory:");
  db->commit_gpu_type(h100());
  const int64_t model = db->commit_model("m", std::string(64, 'c'));
  RunInfo info;
  info.model_id = model;
  info.gpu_types = {"h100"};
  info.precision = "fp16";
  const int64_t run = db->begin_run(info);
  PlanRecord p;
  p.run_id = run;
  p.gpu_type = "h100";
  p.precision = "fp16";
  db->commit_plan(p);
  ASSERT_EQ(db->runs().size(), 1u);
  EXPECT_EQ(db->runs()[0].info.precision, "fp16");
  ASSERT_EQ(db->plans(run).size(), 1u);
  EXPECT_EQ(db->plans(run)[0].precision, "fp16");

  const ModelPlan p16 = plan_by_estimate(tiny_cnn(Precision::fp16), {&h100()}, options_for(Precision::fp16));
  const Workload& w = p16.workload_set.workloads.back();
  db->commit_workload(workload_record(w));
  const auto back = db->find_workload(w.signature);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->base_signature, precision_free_signature(w.canonical));
  EXPECT_EQ(precision_from_name(variant_key_precision("gemm_mma/bf16/block_k=32")), Precision::bf16);
}

}  // namespace
}  // namespace dc
