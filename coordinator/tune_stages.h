// The stages of `tune`, in the order tune.cpp runs them (docs/tune.md): each a free function
// with typed inputs and outputs in a file of its own (tune_<stage>.cpp), timed and logged by
// one helper (StageLog). Stages read the options and the earlier stages' outputs and return
// what they found; only the driver (tune.cpp) assembles the TuneResult.
//
//   load (import, simplify, precision) -> variants -> calibrate -> estimate -> record model ->
//   farm -> lookup -> generate -> dispatch -> collect -> check -> select -> record plans
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tune.h"
#include "ir/clock.h"

namespace dc::tune_stage {

using Clock = std::chrono::steady_clock;

// The one helper that times and logs stages: each finished stage is one line (spdlog, and
// the console when there is one) and one StageTime of the result.
class StageLog {
 public:
  StageLog(const TuneOptions& opts, std::vector<StageTime>& stages) : opts_(opts), stages_(stages) {}
  void record(const std::string& name, double seconds, const std::string& detail);
  void notice(const std::string& text) const;  // a line that is not a stage
  // Runs `stage`, then records its time with the line describe(its result) gives.
  template <class Stage, class Describe>
  auto run(const std::string& name, Stage&& stage, Describe&& describe) {
    const auto t0 = Clock::now();
    auto out = stage();
    record(name, seconds_since(t0), describe(out));
    return out;
  }

 private:
  const TuneOptions& opts_;
  std::vector<StageTime>& stages_;
};

// ---- load: import + simplify + precision through model_loader (tune_load.cpp)
struct LoadedGraph {
  Graph graph;                                 // simplified, then apply_precision
  std::vector<std::string> weight_transforms;  // what the plan's weights carry
};
LoadedGraph load(const std::string& model_path, const TuneOptions& opts, StageLog& log);

// ---- variants (tune_estimate.cpp): candidates, workloads and each GPU type's variants,
// enumerated once for the calibrate and estimate stages (enumerate_model_variants).
ModelVariants variants(const Graph& g, const TuneOptions& opts);
std::string describe(const ModelVariants& v);

// ---- calibrate (tune_calibrate.cpp)
struct Calibrated {
  Calibration calibration;                           // config factors, then the DB's fit
  std::vector<std::vector<FittedFactor>> fits;       // per requested GPU type
  bool from_db = false;
  int fitted = 0;                                    // factors taken from the fit
  int param_fitted = 0;                              // per-parameter factors taken (real results)
  int rank_fitted = 0;                               // pairwise ranking vectors taken (real results)
  TimingSource source = TimingSource::real;
};
// The ratios come from the farm's DB where it has one (Farm::estimator_ratios), else from db,
// whose results of the model's workloads are compared with today's (uncalibrated) estimates
// of their variants, the variants stage's.
Calibrated calibrate(const TuningDb& db, Farm& farm, const TuneOptions& opts, const StageLog& log,
                     const ModelVariants& variants);
std::string describe(const Calibrated& c);

// ---- estimate (tune_estimate.cpp): the variants stage's variants, estimated with the
// calibration and pruned, and the cover (plan_by_estimate).
ModelPlan estimate(ModelVariants variants, const TuneOptions& opts, const Calibration& calibration);
std::string describe(const ModelPlan& plan);

// ---- record the model and begin the run (tune_record.cpp)
int64_t record_model(TuningDb& db, const ModelPlan& plan, const TuneOptions& opts,
                     const Calibration& calibration);
// ---- record the plans and end the run (tune_record.cpp)
RunStatus record_plans(TuningDb& db, int64_t run_id, const ModelPlan& plan,
                       const std::vector<GpuTuneResult>& gpus, const TuneOptions& opts,
                       bool interrupted, bool complete);

// ---- farm: wait for workers (tune_workers.cpp)
struct WorkerCensus {
  std::vector<int> workers;      // per requested GPU type: live workers when dispatching
  std::vector<TimingSource> sources;   // per requested GPU type: emulated when every worker is
  std::string line;              // "workers: h100 2 (2 emulated)"
};
WorkerCensus wait_for_workers(const Farm& farm, const TuneOptions& opts, const StageLog& log);

// One variant to measure on one GPU type.
struct PlannedJob {
  size_t gpu = 0;       // index into the requested GPU types
  size_t workload = 0;  // index into the workload set
  Variant variant;
  double estimate_us = 0;  // uncalibrated: what the result stores
  bool check = false;      // host-emulator check of a winner
  bool again = false;      // a second measurement by design (a finalist's cross-check)
  std::set<std::string> avoid_workers;  // FarmJob::avoid_workers (quarantined ones are added)
  // A drift sentinel (tune_drift.cpp): a probe of the worker, not of the variant; its result
  // goes to Ledger::sentinels only (not recorded in the DB, not counted as a job of the tune).
  bool sentinel = false;
};

// What a result stores as its estimate: the model's figure without calibration (the
// factor of the variant's kind and math unit, and of its parameter values, divided out), so that
// measured / estimated fits the factor itself (the calibrate stage).
double uncalibrated_us(const Calibration& c, const GpuSpec& gpu, const Workload& w,
                       const std::string& variant_key, double calibrated_us);

// ---- lookup: what the DB already has, plus seeds from other GPU types (tune_lookup.cpp)
struct LookupCounts {
  int64_t planned = 0, reused = 0, seeded = 0, abandoned = 0;
  int64_t stale = 0;  // variants (reference kernels included) whose results are of another source
  int64_t settled = 0;  // kept variants not measured: their workload was tuned before (lookup)
  std::map<SeedLevel, int> seed_levels;
};
struct Lookup {
  std::vector<PlannedJob> jobs;
  std::vector<LookupCounts> per_gpu;
};
// `gpus` gives each GPU type's spec, source and workers (the farm stage's census).
// Refreshes each planned variant's current source hash in the DB (TuningDb::commit_variant):
// the hash of the source this build's generator writes; results of another hash are stale.
Lookup lookup(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, TuningDb& db,
              const TuneOptions& opts, const Calibration& calibration);
std::string describe(const Lookup& l, const TuneOptions& opts);

// "<workload>/<variant key>/<gpu type>": FarmJob::job_id, and how results find their job.
std::string job_key(const std::string& workload, const std::string& variant, const std::string& gpu);

// ---- generate (tune_generate.cpp): one FarmJob per planned job, in the same order.
// A job's run deadline: `configured`, or 1000x the workload's fp32 floor on `gpu` if longer
// (at most an hour).
std::chrono::milliseconds run_deadline(const Workload& w, const GpuSpec& gpu, std::chrono::milliseconds configured);
std::vector<FarmJob> generate(const std::vector<PlannedJob>& jobs, const ModelPlan& plan,
                              const std::vector<GpuTuneResult>& gpus, const TuneOptions& opts);

// A result's variant on one GPU type: (GPU index, workload signature, variant key).
using ResultKey = std::tuple<size_t, std::string, std::string>;

// What this run has sent and recorded, across dispatch rounds (tune_measure.cpp).
struct Ledger {
  std::set<std::pair<std::string, std::string>> variants;  // (workload, key) committed
  std::set<std::string> workers;                           // committed
  std::set<size_t> warned_source;                          // GPU types warned about
  // This run's ok results per (GPU index, workload, variant key), in arrival order, without
  // their samples: what the cross-check compares.
  std::map<std::tuple<size_t, std::string, std::string>, std::vector<Measurement>> ok_results;
  // Per GPU index: workers quarantined by the cross-check (worker -> why). Every job
  // dispatched after a quarantine avoids them.
  std::map<size_t, std::map<std::string, std::string>> quarantined;
  std::set<ResultKey> moved;  // measured again because only quarantined workers had (once each)
  // Per GPU index: the drift sentinels' results (any status, without samples), in arrival order.
  std::map<size_t, std::vector<Measurement>> sentinels;
  // The farm, told of every result this tune marks implausible (Farm::mark_implausible: the
  // farm service marks its own DB's row too).
  Farm* farm = nullptr;
};

// ---- dispatch (tune_measure.cpp): variants committed, jobs submitted.
struct Dispatched {
  std::map<std::string, size_t> gpu_of;  // outstanding job key -> GPU index
  std::map<size_t, int64_t> per_gpu;     // GPU index -> jobs outstanding
  std::set<std::string> check_keys;      // job keys of winner checks and cross-checks (a second result by design)
  std::set<std::string> sentinel_keys;   // job keys of drift sentinels (Ledger::sentinels, not the DB)
  std::map<std::string, double> floor_us;  // job key -> the variant's floor (plausibility.h)
  std::vector<int64_t> sent, checks;     // per GPU index
  int64_t jobs = 0;
  std::unique_ptr<Progress> progress;
};
Dispatched dispatch(const std::vector<PlannedJob>& jobs, std::vector<FarmJob> farm_jobs,
                    const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, Farm& farm,
                    TuningDb& db, const TuneOptions& opts, Ledger& ledger);

// ---- collect (tune_measure.cpp): every result committed as it arrives.
struct Collected {
  int64_t results = 0;                                  // committed (late ones included)
  std::vector<int64_t> per_gpu_results, abandoned;      // per GPU index
  std::vector<std::map<JobStatus, int64_t>> by_status;  // per GPU index
  std::vector<std::map<std::string, double>> busy_seconds;  // per GPU index, per device: run phases
  std::vector<std::set<std::string>> internal_error_workloads;  // per GPU index: signatures
  std::vector<std::map<std::string, int64_t>> implausible_by_worker;  // per GPU index
  double seconds = 0;                                   // the collect loop's wall time
  bool interrupted = false;
  size_t outstanding = 0;  // left when interrupted
};
Collected collect(Dispatched& d, const std::vector<GpuTuneResult>& gpus, Farm& farm, TuningDb& db,
                  const TuneOptions& opts, Ledger& ledger, const StageLog& log);

// ---- check: the host-emulator check of winners (tune_check.cpp)
using CheckedSet = std::set<std::tuple<size_t, std::string, std::string>>;  // gpu, workload, key
struct Checked {
  CheckedSet checked;                 // checked in this run
  int64_t sent = 0, failed = 0;
  std::vector<int> failed_per_gpu;    // winners rejected, per GPU index
};
// `measure` runs generate -> dispatch -> collect for a list of jobs.
Checked check_winners(const ModelPlan& plan, std::vector<GpuTuneResult> gpus, const TuningDb& db,
                      const TuneOptions& opts, const Calibration& calibration,
                      const std::function<Collected(std::vector<PlannedJob>)>& measure,
                      const CheckedSet& again = {});
std::string describe(const Checked& c);
// A winner counts as checked when this run checked it or, without --retune, when it has
// a second final result in the DB (its check job's) from an earlier run.
// `again`: variants this run measured twice by design (cross-checks), whose second result
// is not a check.
bool is_checked(const CheckedSet& checked, const ModelPlan& plan, size_t gpu, const ClusterChoice& c,
                bool retune, const CheckedSet& again = {});

// The variant of a key measured for a workload: from the plan's kept variants, else from
// the GPU's space (an earlier run's or a seed: Variant::from_key); nullptr when neither has
// it.
class VariantFinder {
 public:
  VariantFinder(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus) : plan_(plan), gpus_(gpus) {}
  const Variant* find(size_t gi, size_t wi, const std::string& key);

 private:
  const ModelPlan& plan_;
  const std::vector<GpuTuneResult>& gpus_;
  std::map<std::tuple<size_t, size_t, std::string>, std::optional<Variant>> parsed_;
};

// ---- quarantine (tune_quarantine.cpp): the one mechanism behind the cross-check's and the
// drift check's verdicts.
// Marks `worker`'s ok results of this run on GPU index gi implausible in the DB (why as their
// error); returns how many.
int64_t mark_run_results(size_t gi, const std::string& worker, const std::string& why, TuningDb& db,
                         const Ledger& ledger);
// Quarantines `worker` for the rest of the tune (Ledger::quarantined: every later job avoids
// it, selection leaves it out), marks its results of this run ("worker W quarantined by
// tune's <check>: <reason>") and says so loudly; returns how many results were marked.
int64_t quarantine(size_t gi, const std::string& worker, const std::string& check, const std::string& reason,
                   const std::vector<GpuTuneResult>& gpus, TuningDb& db, Ledger& ledger, const StageLog& log);
// A variant measured again by design (PlannedJob::again), avoiding `avoid`; nullopt when
// this build's space has no such variant.
std::optional<PlannedJob> again_job(const ModelPlan& plan, VariantFinder& variants, const ResultKey& k,
                                    const Measurement& first, std::set<std::string> avoid);
// The variants only quarantined workers measured in this run, each once per tune
// (Ledger::moved), as jobs for the other workers.
std::vector<PlannedJob> moved_jobs(const ModelPlan& plan, VariantFinder& variants, Ledger& ledger);

// ---- drift (tune_drift.cpp): each worker times a sentinel, the reference kernel of the
// type's cheapest workload, before the measure stage and again after it; a worker whose two
// medians disagree by the noise model (medians_agree) has drifted (docs/tune.md, "Drift").
struct Sentinels {
  struct PerGpu {
    std::optional<size_t> workload;             // the sentinel's workload; none: not checked
    std::vector<std::string> workers;           // in the order of their first sentinel
    std::map<std::string, Measurement> first, last;
    // Timed again where `last` disagreed with `first` (kDriftConfirmations at most): drift
    // is a lasting change, so one agreeing re-timing makes the worker steady.
    std::map<std::string, std::vector<Measurement>> again;
    size_t taken = 0;                           // Ledger::sentinels[gi] entries looked at
    int64_t jobs = 0;
  };
  std::vector<PerGpu> per_gpu;
};
// The first sentinels, for the GPU types `planned` has jobs for: rounds of one job per type,
// each avoiding the workers that already timed one, until each live worker has. `probe` runs
// generate -> dispatch -> collect for sentinel jobs.
Sentinels first_sentinels(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus,
                          const std::vector<PlannedJob>& planned, Ledger& ledger,
                          const std::function<Collected(std::vector<PlannedJob>)>& probe);
inline constexpr int kDriftConfirmations = 2;
// Two sentinel timings agree by the noise model (medians_agree) or when their medians are
// within kDriftTimerUs: a timing event's resolution is about 0.5 us (CUDA's events; PoCL's
// launch jitter is of that order too), so a sub-microsecond sentinel that moves by less
// than two of those says nothing about the device.
inline constexpr double kDriftTimerUs = 1.0;
bool sentinels_agree(const Measurement& a, const Measurement& b);
struct Drifted {
  std::vector<GpuTuneResult::Drift> per_gpu;
  int64_t sent = 0;  // results of quarantined workers measured again (jobs of the tune)
};
// The last sentinels, the verdicts and their consequences: with a steady worker of the type
// left, a drifting one is quarantined and what only it measured goes to `measure`; without
// one, its results of this run are marked implausible and the type is not trusted
// (GpuTuneResult::Drift::untrusted: the tune does not say ok).
Drifted drift_check(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, Sentinels& sentinels,
                    TuningDb& db, Ledger& ledger, const StageLog& log,
                    const std::function<Collected(std::vector<PlannedJob>)>& probe,
                    const std::function<Collected(std::vector<PlannedJob>)>& measure);
std::string describe(const Drifted& d);

// ---- cross-check: finalists measured twice, quarantine (tune_cross_check.cpp)
// The noise model: two results agree when the larger median is at most
// max(kCrossCheckNoise, kCrossCheckMads x the larger MAD / median of the two) above the
// smaller (docs/tune.md, "Finalists measured twice").
inline constexpr double kCrossCheckNoise = 0.10;
inline constexpr double kCrossCheckMads = 3.0;
bool medians_agree(const Measurement& a, const Measurement& b);
// ---- the drift check's sentinel (tune_drift.cpp), by the noise model above
// The sentinel's floor (plausibility_floor_us), at least: its reference kernel then runs long
// enough that the timer's resolution (kDriftTimerUs) is within the noise model's ratio
// (kCrossCheckNoise), so a change of the device's speed moves its median beyond both. The
// cheapest workload's was a few microseconds (MobileNetV2 on PoCL: a 4.2 us kernel), where
// a launch's jitter alone read x1.30 once.
inline constexpr double kSentinelFloorUs = kDriftTimerUs / kCrossCheckNoise;
// The GPU type's sentinel workload: the least floor at or above kSentinelFloorUs, or where no
// workload reaches it, the greatest.
size_t sentinel_workload(const ModelPlan& plan, const GpuSpec& gpu);

struct CrossChecked {
  std::vector<GpuTuneResult::CrossCheck> per_gpu;
  int64_t sent = 0;                  // jobs: second and third measurements, moved results
  std::vector<std::string> quarantined;  // "h100 worker W"
  CheckedSet again;                  // finalists measured again (is_checked)
};
// `measure` runs generate -> dispatch -> collect for a list of jobs (their results land in
// the ledger); the ledger's quarantine list grows as workers are found out of line.
// A quarantined worker's ok results of this run are marked implausible in the DB
// (TuningDb::mark_implausible), so that later tunes do not select them either.
CrossChecked cross_check(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, TuningDb& db,
                         const TuneOptions& opts, Ledger& ledger, const StageLog& log,
                         const std::function<Collected(std::vector<PlannedJob>)>& measure);
std::string describe(const CrossChecked& c);

// ---- select (tune_select.cpp): select_measured per GPU type, winners marked checked.
std::vector<GpuTuneResult> select(const ModelPlan& plan, std::vector<GpuTuneResult> gpus,
                                  const TuningDb& db, const TuneOptions& opts,
                                  const CheckedSet& checked, const CheckedSet& again = {});
std::string describe(const std::vector<GpuTuneResult>& selected);

}  // namespace dc::tune_stage
