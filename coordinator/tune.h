// The tuning pipeline behind `dc-coordinator tune`, written against two interfaces only:
// the measurement farm (farm.h) and the tuning DB (schema/tuning_db.h). tune.cpp lists the
// stages in order; each is a free function with typed inputs and outputs in a file of its
// own (tune_stages.h), timed and logged by one helper (docs/tune.md):
//
//   load (import, simplify, precision) -> calibrate (fit the estimator's factors from the
//   DB's results) -> estimate (candidates/variants/estimate/prune) -> record model -> farm
//   (wait for workers) -> lookup (DB reuse, cross-GPU seeds) -> generate -> dispatch ->
//   collect (every result committed as it arrives) -> check winners (emulated) -> select
//   -> record plans
//
// Reuse: a variant with a final result in the DB for the GPU type, the source (real or
// emulated) and the NVRTC major version, of the source hash that today's generator writes
// for it, is not sent again unless `retune`; a result of another source is stale: the
// variant is measured again, and selection never uses the stale result. Because every
// result is committed on arrival, rerunning a tune that was killed measures only what is
// missing. Selection uses every qualifying result in the DB, not only this run's, through
// the DB's one definition of the best variant (TuningDb::best_variants).
//
// Results carry the estimate without calibration, so the calibrate stage's fit of measured
// / estimated finds the factor itself whatever factors earlier tunes used.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <ostream>
#include <string>
#include <vector>

#include "calibration_fit.h"
#include "cover.h"
#include "farm.h"
#include "onnx/import.h"
#include "passes/training_spec.h"
#include "plan/plan.h"
#include "plan_estimate.h"
#include "progress.h"
#include "reuse.h"
#include "tuning_db.h"

namespace dc {

struct TuneOptions {
  std::vector<const GpuSpec*> gpus;  // the requested GPU types
  PlanOptions plan;                  // pruning, precisions, calibration
  // Fit calibration factors per requested GPU type and kind from the DB's results of this
  // tune's source (real, or emulated for an emulated tune); plan.calibration's entries win.
  bool calibration_from_db = true;
  // With it, also fit per-parameter factors from the DB's real results (calibration_fit.h:
  // fit_param_factors; docs/estimator.md, "Per-parameter calibration").
  bool calibration_params = true;
  // With both, fit pairwise ranking vectors instead of a template's per-parameter factors
  // where the data allows (calibration_rank_fit.h). Off by default: a tune that let the
  // vectors fitted on one PoCL run choose its variants picked worse convolutions
  // (docs/bench/estimator-accuracy.md, session 28).
  bool calibration_rank = false;
  ImportOptions import;
  // --train: tune the model's training step (docs/training.md) instead of its inference.
  std::optional<TrainingSpec> training;
  bool retune = false;         // measure again what the DB already has
  bool emulated = false;       // the farm's devices are emulated: results are TimingSource::emulated
  // Emulated tunes: run the host-emulator correctness check (a job with check_on_emulator)
  // on the winner of every chosen cluster; a winner that fails it is excluded and the
  // selection runs again.
  bool check_winners = true;
  // A GPU type with more than one worker: measure the two best variants of each workload
  // again on another worker, and quarantine a worker whose times are out of line
  // (docs/tune.md, "Finalists measured twice"). --no-cross-check turns it off.
  bool cross_check = true;
  // Also measure each workload's naive reference kernel once per GPU type: the baseline of
  // `dc-db report`'s "speedup over the reference kernel" (never chosen by selection).
  bool measure_reference = true;
  // A workload that this GPU type has never measured also tries the best k variants of the
  // nearest GPU type that has (schema/reuse.h), in addition to the estimator's picks.
  int seed_k = 4;
  uint64_t input_seed = 1;     // inputs of every job derive from it and the workload
  std::chrono::milliseconds compile_deadline{60000};
  std::chrono::milliseconds run_deadline{30000};
  // How long to wait for a first worker of each GPU type before dispatching, and how long
  // a type may have no worker at all while its jobs wait before they are given up.
  std::chrono::milliseconds worker_wait{30000};
  std::string nvrtc_major;     // toolchain major version for reuse; "" = per GPU type, the
                               // NVRTC that compiles for it here (nvrtc_major_for)
  std::string model_name;      // the model's name in the DB ("" = from the path)
  std::string model_sha256;    // "" = of the model file
  std::string options_json = "{}";  // recorded with the run
  std::string host;            // where the coordinator runs, recorded with the run
  Progress::Mode progress = Progress::Mode::quiet;
  std::ostream* console = nullptr;  // stage lines and notices; nullptr = silent
  const std::atomic<bool>* stop = nullptr;  // when set: stop collecting, keep what arrived
};

// The kernel chosen for one cluster of the cover.
struct ClusterChoice {
  size_t candidate = 0;        // index into ModelPlan::candidates
  size_t workload = 0;         // index into ModelPlan::workload_set.workloads
  std::string variant_key;     // "" when reference
  bool reference = false;      // no successful measurement: the naive reference kernel
  double measured_us = 0;      // best qualifying median (0 for the reference kernel)
  double estimated_us = 0;     // the estimator's figure for the chosen variant (or best)
  int results = 0;             // final results of the chosen variant in the DB
  std::string source_hash;     // of the measured source the time belongs to (plan writing checks it)
  bool checked = false;        // passed the host-emulator check (emulated tunes)
};

struct GpuTuneResult {
  const GpuSpec* gpu = nullptr;
  TimingSource source = TimingSource::real;
  std::string nvrtc_major;             // the toolchain whose results this type reuses and selects
  std::vector<FittedFactor> calibration_fit;  // from the DB (empty when not fitted)
  int workers = 0;                     // live workers of the type when dispatching
  int64_t variants_planned = 0;        // kept after pruning, plus seeds
  int64_t variants_reused = 0;         // already in the DB: not sent
  int64_t variants_settled = 0;        // newly kept of workloads tuned before: not sent (lookup)
  int64_t variants_seeded = 0;         // added from another GPU type's results
  std::map<SeedLevel, int> seed_levels;  // workloads by the level that answered
  int64_t jobs = 0;                    // sent in this run (checks included)
  int64_t checks = 0;                  // of which host-emulator checks of winners
  int64_t results = 0;                 // received in this run
  int64_t abandoned = 0;               // not sent or given up: no worker of the type
  std::map<JobStatus, int64_t> by_status;  // this run's results by class
  // Each device's busy time (its run phases: check + timing) by worker, for the devices
  // that sent results, and the measure stage's wall time. busy_records() is what the DB
  // stores (run_gpu_busy), gpu_busy_fraction() what the summary prints: the same figure.
  std::map<std::string, double> device_busy_seconds;
  double measure_seconds = 0;
  std::vector<GpuBusyRecord> busy_records(int64_t run_id) const;  // none when unknown
  double gpu_busy_fraction() const { return dc::gpu_busy_fraction(busy_records(0)); }
  // Per workload (parallel to the workload set): best qualifying median and its variant,
  // over every result in the DB; 0 / "" when the workload has none.
  std::vector<double> best_us;
  std::vector<std::string> best_key;
  // Variants of the model with a final failure in the DB, by class (excluded from selection).
  std::map<JobStatus, int64_t> failed_variants;
  int64_t ok_variants = 0;             // variants with a qualifying ok result in the DB
  CoverResult cover;                   // over measured times (candidate indices)
  std::vector<ClusterChoice> choices;  // one per chosen candidate, in node order
  double measured_total_us = 0;        // sum over measured choices
  double estimated_total_us = 0;       // the estimator's figures for the same choices
  double estimate_cover_us = 0;        // the least-estimate cover (what `plan` shows)
  int reference_fallbacks = 0;         // chosen clusters run by the reference kernel
  int unmeasured_clusters = 0;         // multi-node candidates left out: no measurement
  int checks_failed = 0;               // winners rejected by the host-emulator check
  // Workloads with a job that ended in internal_error (a dc bug; never recorded): the tune
  // does not say ok while there is one (summary, exit status, `dc-db runs`).
  std::set<std::string> internal_error_workloads;
  // Results below their variant's floor (plausibility.h), by the worker that reported them.
  std::map<std::string, int64_t> implausible_by_worker;
  // Finalists measured twice (tune_cross_check.cpp; docs/tune.md).
  struct CrossCheck {
    bool done = false;        // the type had more than one worker: finalists were cross-checked
    int64_t remeasured = 0;   // finalists measured again, avoiding their first worker
    int64_t agreed = 0;       // pairs of two workers within the noise model
    int64_t disagreed = 0;    // pairs beyond it: each got a third measurement
    int64_t unpaired = 0;     // a second measurement that failed or came from the same worker
    int64_t moved = 0;        // results of quarantined workers measured again elsewhere
    int64_t marked = 0;       // their ok results of this run marked implausible in the DB
  } cross_check;
  // Drift over the tune (tune_drift.cpp; docs/tune.md, "Drift over a tune"): each worker's
  // sentinel, the reference kernel of the type's cheapest workload, timed before the measure
  // stage and after it.
  struct Drift {
    std::string sentinel;     // the sentinel's workload; "" = not checked (nothing measured)
    int64_t jobs = 0;         // sentinel jobs: not recorded, not counted in `jobs`
    std::map<std::string, std::pair<double, double>> medians;  // worker -> first, last median (us)
    std::vector<std::string> unchecked;           // workers without both sentinel results
    std::map<std::string, std::string> drifted;   // worker -> its figures
    // A drifting worker with no steady worker of the type to measure again on: its results
    // of this run are marked implausible and the tune does not say ok.
    bool untrusted = false;
    int64_t moved = 0;        // results of drifting (quarantined) workers measured again
    int64_t marked = 0;       // results of drifting workers marked implausible
  } drift;
  // Workers this tune quarantined (Measurement::worker -> why): no new jobs for the rest of
  // the tune, and their results are not selected (select_measured excludes them).
  std::map<std::string, std::string> quarantined;
  int64_t internal_error_jobs() const {
    const auto it = by_status.find(JobStatus::internal_error);
    return it == by_status.end() ? 0 : it->second;
  }
  bool has_results() const { return ok_variants > 0; }
};

struct StageTime {
  std::string name;
  double seconds = 0;
  std::string detail;
};

struct TuneResult {
  std::string model_name;
  std::string model_sha256;
  // Rewrites simplification made that the plan's weights carry (plan_build.h's
  // describe_weight_transforms); empty when tune_graph was given a simplified graph.
  std::vector<std::string> weight_transforms;
  Graph graph;                        // simplified, then apply_precision
  Precision precision = Precision::fp32;  // the plan's (opts.plan.precision)
  std::optional<PlanTraining> training;   // --train: what the plans' training steps do
  ModelPlan plan;                     // candidates, workloads, estimates
  Calibration calibration;            // the factors the estimates used: config, then DB fit
  std::vector<GpuTuneResult> gpus;    // in the order requested
  std::vector<StageTime> stages;
  int64_t run_id = 0;
  int64_t jobs = 0;                   // sent in this run
  int64_t results = 0;                // received and committed in this run
  bool interrupted = false;           // stopped before every result arrived
  double seconds = 0;
  // True when every requested GPU type has results, no job ended in internal_error and no
  // type's only steady figures drifted (Drift::untrusted) (the command's exit status).
  bool complete() const;
  int64_t internal_error_jobs() const;       // over the GPU types
  int64_t internal_error_workloads() const;  // distinct per GPU type, summed
};

// The whole pipeline from an ONNX file.
TuneResult tune(const std::string& model_path, Farm& farm, TuningDb& db, const TuneOptions& opts);

// From a simplified graph on (candidates onwards); opts.model_name and opts.model_sha256
// must be set. `result` may carry the stages already run.
TuneResult tune_graph(const Graph& simplified, Farm& farm, TuningDb& db, const TuneOptions& opts,
                      TuneResult result = {});

// Selection on what the DB holds for one GPU type: the best variant per workload by
// TuningDb::best_variants (a variant with any final failure is excluded; results of the
// toolchain `nvrtc_major` only, "" = the newest in the DB), then the cover with the
// least measured time. Clusters without a measurement are left out of the cover search
// (their sub-clusters and singletons cover them); a singleton without one falls back to
// the reference kernel at a prohibitive cost, so it is chosen only when nothing else can
// cover the node. Fills best_*, failed_variants, ok_variants, cover, choices and totals.
// Results of the type's quarantined workers (GpuTuneResult::quarantined) are left out.
// Only variants of the plan's math paths qualify (PlanOptions::space.precisions): an fp32
// plan never selects a tf32 variant an earlier tf32 tune measured on the same f32 workload.
void select_measured(const ModelPlan& plan, const TuningDb& db, const std::string& nvrtc_major,
                     GpuTuneResult& gpu,
                     const std::vector<std::string>& math_paths = {"fp32"});

// The cost standing in for an unmeasured reference kernel in the cover search.
inline constexpr double kReferenceCostUs = 1e6;

}  // namespace dc
