// internal_error through a tune (coordinator/tune.cpp's handling of farm results): a dc
// bug reported for a job is counted in the summary, never recorded in the tuning DB as a
// verdict on the variant, and the next tune measures that variant again. The farm is the
// in-process one behind a wrapper that turns one variant's results into internal_error,
// as a worker with a bug would report them after the broker's retries.
#include <gtest/gtest.h>

#include <memory>

#include "farm_inprocess.h"
#include "farm_testing.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "tune.h"
#include "tune_report.h"

namespace dc {
namespace {

// Forwards to `inner`; while `buggy`, every result of the first non-reference variant it
// submitted comes back as internal_error. Counts that variant's submissions.
class BuggyWorkerFarm final : public Farm {
 public:
  explicit BuggyWorkerFarm(std::unique_ptr<Farm> inner, bool buggy, std::string workload = "",
                           std::string key = "")
      : inner_(std::move(inner)), buggy_(buggy), workload_(std::move(workload)), key_(std::move(key)) {}

  void submit(FarmJob job) override {
    if (key_.empty() && job.variant_kernel.variant_key != reference_variant().key()) {
      workload_ = job.workload;
      key_ = job.variant_kernel.variant_key;
    }
    if (job.workload == workload_ && job.variant_kernel.variant_key == key_) ++sent_;
    inner_->submit(std::move(job));
  }
  std::vector<Measurement> collect(std::chrono::milliseconds timeout) override {
    std::vector<Measurement> out = inner_->collect(timeout);
    for (Measurement& m : out)
      if (buggy_ && m.workload == workload_ && m.variant_key == key_) {
        m.status = JobStatus::internal_error;
        m.error = "attempt 1: internal error on worker w: internal error in the worker: test";
        m.samples_us.clear();
        m.median_us = m.min_us = 0;
      }
    return out;
  }
  FarmStatus status() const override { return inner_->status(); }
  void shutdown() override { inner_->shutdown(); }

  const std::string& workload() const { return workload_; }
  const std::string& key() const { return key_; }
  int sent() const { return sent_; }

 private:
  std::unique_ptr<Farm> inner_;
  bool buggy_;
  std::string workload_, key_;
  int sent_ = 0;
};

TEST(FarmInternalErrors, CountedInTheSummaryNeverRecordedAndMeasuredAgain) {
  const GpuCatalog catalog = GpuCatalog::builtin();
  TuneOptions o;
  o.gpus = {&catalog.require("h100")};
  o.emulated = true;
  o.check_winners = false;
  o.seed_k = 0;
  o.worker_wait = std::chrono::milliseconds(2000);
  InProcessFarmOptions f;
  f.gpu_types = {"h100"};
  f.cache_dir = testing::shared_compile_cache();
  const std::string model = std::string(DC_SOURCE_DIR) + "/examples/tiny_cnn/model.onnx";
  auto db = make_memory_db();

  BuggyWorkerFarm buggy(make_inprocess_farm(f), /*buggy=*/true);
  const TuneResult first = tune(model, buggy, *db, o);
  ASSERT_FALSE(buggy.key().empty());
  EXPECT_EQ(buggy.sent(), 1);
  EXPECT_EQ(first.results, first.jobs) << "the internal error is a result of the run";
  ASSERT_EQ(first.gpus.size(), 1u);
  EXPECT_EQ(first.gpus[0].by_status.at(JobStatus::internal_error), 1);
  EXPECT_EQ(first.gpus[0].by_status.at(JobStatus::ok), first.jobs - 1);
  EXPECT_EQ(first.gpus[0].failed_variants.count(JobStatus::internal_error), 0u)
      << "not a failed, excluded variant";
  const std::string summary = tune_gpu_summary(first, first.gpus[0]);
  EXPECT_NE(summary.find("1 internal_error"), std::string::npos) << summary;

  MeasurementQuery q;
  q.workload = buggy.workload();
  q.variant_key = buggy.key();
  EXPECT_TRUE(db->query(q).empty()) << "nothing recorded against the variant";
  q = MeasurementQuery{};
  q.status = JobStatus::internal_error;
  EXPECT_TRUE(db->query(q).empty());

  // The next tune (no --retune) measures exactly that variant again, and records it.
  BuggyWorkerFarm healthy(make_inprocess_farm(f), /*buggy=*/false, buggy.workload(), buggy.key());
  const TuneResult second = tune(model, healthy, *db, o);
  EXPECT_EQ(healthy.sent(), 1);
  EXPECT_EQ(second.jobs, 1);
  EXPECT_EQ(second.gpus[0].by_status.at(JobStatus::ok), 1);
  q = MeasurementQuery{};
  q.workload = buggy.workload();
  q.variant_key = buggy.key();
  ASSERT_EQ(db->query(q).size(), 1u);
  EXPECT_EQ(db->query(q)[0].status, JobStatus::ok);
}

}  // namespace
}  // namespace dc
