// The tuning database: every result the farm produces, kept and reused across models and
// GPU types (docs/tuning-db.md). An interface, after TVM's Database, with two
// implementations: SQLite for use (open_tuning_db) and an in-memory one for tests
// (make_memory_db). Unlike TVM's it is target-aware: every query names the GPU type and the
// source, and emulated results never answer a query for real ones.
//
// Records refer to each other by natural keys (GPU type name, worker name, workload
// signature, variant key), which must have been committed first: a dangling reference is a
// bug in the caller (InternalError). Environment failures (read-only file, full disk, a DB
// from a newer dc) are UserErrors. Methods may be called from several threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "calibration_fit.h"
#include "farm/measurement.h"
#include "gpu/gpu_spec.h"
#include "ir/precision.h"
#include "ir/workload.h"
#include "variant.h"

namespace dc {

// Which kind of device produced a time: a real device or an emulated device's timing model.
// ("source" alone means a kernel's text: a GeneratedKernel's source, its source_hash.)
enum class TimingSource { real, emulated };
std::string_view source_name(TimingSource s);  // "real", "emulated"
inline TimingSource source_of(bool emulated) { return emulated ? TimingSource::emulated : TimingSource::real; }

// The run a result was measured in (EstimatorSample::run): the latest begun when it finished,
// the higher id on a tie, 0 before any. `runs` holds (started_ms, id), sorted; both DBs call
// this, so they apply one rule.
inline int64_t run_begun_by(const std::vector<std::pair<int64_t, int64_t>>& runs, int64_t unix_ms) {
  const auto it = std::upper_bound(runs.begin(), runs.end(), std::make_pair(unix_ms, INT64_MAX));
  return it == runs.begin() ? 0 : std::prev(it)->second;
}

// One GPU of one host, as the worker reported it in its HELLO.
struct WorkerInfo {
  std::string name;  // "host/device": Measurement::worker
  std::string host;
  std::string device;  // CUDA device name, or "emulated h100"
  std::string gpu_type;
  std::string driver_version;
  std::string nvrtc_version;
  bool emulated = false;
};

// What the DB keeps of a Workload (not its graph).
struct WorkloadRecord {
  std::string signature;
  ClusterKind kind = ClusterKind::opaque;
  std::string canonical;
  int64_t flops = 0;
  int64_t bytes = 0;
  // Precision-free identity (precision_free_signature of `canonical`): equal for the f32,
  // f16 and bf16 forms of one cluster. "" = the signature (an f32 workload).
  std::string base_signature;
};
WorkloadRecord workload_record(const Workload& w);
// A workload's storage from its canonical text, as the workload_storage view says: "bf16" or
// "f16" when a tensor has that type, else "f32".
std::string workload_storage(const std::string& canonical);
std::optional<ClusterKind> parse_cluster_kind(std::string_view name);

struct GpuTypeRecord {
  std::string name;
  std::string arch;
  int cc_major = 0;
  int cc_minor = 0;
};

enum class RunStatus { running, ok, failed, interrupted };
std::string_view run_status_name(RunStatus s);
std::optional<RunStatus> parse_run_status(std::string_view name);

struct RunInfo {
  int64_t model_id = 0;
  std::vector<std::string> gpu_types;
  std::string options_json = "{}";  // the tune's options, for the record
  std::string host;                 // where the coordinator runs
  std::string precision = "fp32";   // the plan's precision the run tuned for
};

struct RunRecord {
  int64_t id = 0;
  std::string uid;  // random, stable across merged DBs
  RunInfo info;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;  // 0 while running (or after the coordinator was killed)
  RunStatus status = RunStatus::running;
  int64_t internal_error_jobs = 0;       // jobs that ended in internal_error (migration 0006)
  int64_t internal_error_workloads = 0;  // distinct workloads among them, summed over GPU types
};

// The variant chosen for one cluster of a plan.
struct PlanChoice {
  std::string cluster;  // the plan's name for the cluster
  std::string workload;
  std::string variant_key;
  double estimated_us = 0;
  double measured_us = 0;
};

struct PlanRecord {
  int64_t run_id = 0;
  std::string gpu_type;
  TimingSource source = TimingSource::real;
  std::vector<PlanChoice> choices;
  double estimated_total_us = 0;
  double measured_total_us = 0;
  std::string precision = "fp32";  // the plan's precision
};

// One device's share of a tuning run's measure stage (table run_gpu_busy, migration 0005).
struct GpuBusyRecord {
  int64_t run_id = 0;
  std::string gpu_type;
  std::string worker;          // the device's worker name (committed before)
  double busy_seconds = 0;     // its run phases (check + timing) for the run's jobs
  double measure_seconds = 0;  // the wall time of the run's measure stage (> 0)
};

// THE GPU busy fraction of a GPU type in a run: the devices' busy seconds over (measure
// seconds x devices); 0 for no records. The tune summary prints it and `dc-db runs` shows
// it from the DB (the run_gpu_busy_fraction view computes the same).
double gpu_busy_fraction(const std::vector<GpuBusyRecord>& devices_of_one_gpu_type);

// Filters for query(); unset fields match everything. Results are in the order of
// finished time, then of commit.
struct MeasurementQuery {
  std::optional<std::string> workload;
  std::optional<std::string> variant_key;
  std::optional<std::string> gpu_type;
  std::optional<std::string> worker;
  std::optional<TimingSource> source;  // unset: both sources (exports); tunes must set it
  std::optional<JobStatus> status;
  // Only results of the variant's current source: the measurement's source_hash equals the
  // variant's (variants.source_hash, which every tune refreshes with the hash of the source
  // its generator writes today). The others are stale (`dc-db stale`).
  bool current_source_only = false;
  int64_t limit = -1;  // negative: no limit
};

// "12" from "12.4.131": results carry over within a toolchain major version.
std::string toolchain_major(std::string_view version);

// What TuningDb::best_variants answers: the results of one GPU type and source.
struct BestVariantQuery {
  std::string gpu_type;
  TimingSource source = TimingSource::real;
  // Results of this toolchain major version only (toolchain_major); "" = the newest major
  // among the results the query finds.
  std::string nvrtc_major;
  std::vector<std::string> math_paths;  // variants of these math paths only; empty = any
  std::optional<std::string> workload;  // one workload; unset = every workload with results
  // Stale results (MeasurementQuery::current_source_only) answer for nothing: tune sets it.
  bool current_source_only = false;
  // Results of these workers (Measurement::worker) answer for nothing: the workers a tune
  // quarantined (docs/tune.md, "Finalists measured twice").
  std::set<std::string> exclude_workers;
};

// The best variant of one workload, and how its variants fared.
struct WorkloadBest {
  std::string workload;
  std::string variant_key;  // "" when no variant qualifies
  double median_us = 0;     // the best variant's least median
  double min_us = 0;        // of that measurement
  double estimate_us = 0;   // of that measurement (uncalibrated)
  std::string source_hash;  // of that measurement: the source that ran
  int results = 0;          // final results of the best variant (each ok)
  int ok_variants = 0;      // variants that qualify
  std::vector<std::string> ranked;  // their keys, fastest first (variant_key first)
  // Variants excluded by a final failure, by the class of their first one.
  std::map<JobStatus, int> failed_variants;
  bool has_best() const { return !variant_key.empty(); }
};

// Equal twice over a DB's life only if no row can have changed in between: a cache of what
// was read from it (the farm service's fitted calibration) is current while it is.
struct DbContentStamp {
  int64_t own_changes = 0;    // rows this connection's statements changed
  int64_t others_version = 0;  // PRAGMA data_version: moves when another connection commits
  uint64_t rollbacks = 0;      // a rollback undoes own changes without lowering their count
  bool operator==(const DbContentStamp&) const = default;
};

class TuningDb {
 public:
  virtual ~TuningDb() = default;

  // None where the implementation cannot tell (then nothing read from it may be cached).
  virtual std::optional<DbContentStamp> content_stamp() const { return std::nullopt; }

  // A batch: the writes of this thread until it ends are one transaction (the farm service
  // commits a loop's rows at once instead of one transaction per row); other threads' calls
  // wait for it. commit() makes them durable; a batch destroyed uncommitted rolls them back.
  // A write that fails inside it undoes only itself (a savepoint, or for a write of one
  // statement SQLite's own undo of that statement). Batches do not nest.
  class Batch {
   public:
    virtual ~Batch() = default;
    virtual void commit() = 0;
  };
  // The default: each write stays its own transaction (an in-memory DB).
  virtual std::unique_ptr<Batch> begin_batch() {
    struct EachWriteItsOwn final : Batch {
      void commit() override {}
    };
    return std::make_unique<EachWriteItsOwn>();
  }

  // ---- records (each call is one transaction; committing the same record again is a no-op
  // or, where noted, refreshes it)
  virtual void commit_gpu_type(const GpuSpec& spec) = 0;       // refreshes the spec snapshot
  virtual void commit_worker(const WorkerInfo& worker) = 0;    // refreshes versions, last seen
  // The id of the model with this name and file hash, created if new.
  virtual int64_t commit_model(const std::string& name, const std::string& sha256) = 0;
  virtual void commit_workload(const WorkloadRecord& workload) = 0;
  // Commits the workloads and records how often the model contains each (replacing counts).
  virtual void commit_model_workloads(
      int64_t model_id, const std::vector<std::pair<WorkloadRecord, int>>& workloads) = 0;
  // Refreshes the source hash of a variant committed before. True when the variant is new
  // here: then no measurement names it yet (the farm service skips its DB lookup).
  virtual bool commit_variant(const std::string& workload, const Variant& variant,
                              const std::string& source_hash) = 0;
  // One result, committed durably as it arrives. The same job again (same variant, GPU
  // type, worker and finished time) is ignored: returns false.
  virtual bool commit_measurement(const Measurement& m) = 0;
  // As commit_measurement, unless the variant already has a final result for the GPU type,
  // source and NVRTC major of `m` (has_measurement) of the same source_hash (a stale
  // result does not stop a new one), checked in the same transaction: when
  // two tunes on one DB measure a variant at the same time, the first result recorded wins
  // and the other is not added (returns false). worker_lost is committed as ever.
  virtual bool commit_first_measurement(const Measurement& m) = 0;
  // Turns one recorded ok result (found by its identity: workload, variant, GPU type, worker
  // and finished time) into `implausible`, with `why` as its error: the figure of a worker
  // that a tune quarantined answers for nothing, in this tune and later ones (docs/tune.md,
  // "Finalists measured twice"). False when no such ok row exists.
  virtual bool mark_implausible(const Measurement& m, const std::string& why) = 0;
  virtual int64_t begin_run(const RunInfo& run) = 0;
  virtual void end_run(int64_t run_id, RunStatus status) = 0;
  // How many of the run's jobs, and of its workloads, ended in internal_error (a dc bug;
  // such results are never recorded as measurements). Replaces the run's counts.
  virtual void commit_run_internal_errors(int64_t run_id, int64_t jobs, int64_t workloads) = 0;
  virtual void commit_plan(const PlanRecord& plan) = 0;  // replaces the run's plan for the GPU
  // Replaces the run's busy record of each (GPU type, worker) given.
  virtual void commit_gpu_busy(const std::vector<GpuBusyRecord>& records) = 0;

  // ---- queries
  // True if this variant has a final result (any status but worker_lost, which says
  // nothing about the variant) for the GPU type and source, with the toolchain major
  // version (empty: any).
  virtual bool has_measurement(const std::string& workload, const std::string& variant_key,
                               const std::string& gpu_type, TimingSource source,
                               const std::string& nvrtc_major) const = 0;
  // The keys of all such variants of the workload: one lookup per workload for a tune.
  virtual std::set<std::string> measured_variants(const std::string& workload,
                                                  const std::string& gpu_type, TimingSource source,
                                                  const std::string& nvrtc_major) const = 0;
  // Per variant key of the workload: the source hashes of its final results (as
  // measured_variants). A tune reuses a result only for the hash its generator writes today.
  virtual std::map<std::string, std::set<std::string>> measured_source_hashes(
      const std::string& workload, const std::string& gpu_type, TimingSource source,
      const std::string& nvrtc_major) const = 0;
  // The k fastest variants with an ok result, one measurement per variant (its lowest
  // median), by median then key. The reference kernel (key "reference/...") is a baseline,
  // not a variant: never among them.
  // Defined once, through query() (best_variants.cpp), for both implementations.
  std::vector<Measurement> top_k(const std::string& workload, const std::string& gpu_type, TimingSource source,
                                 int k) const;
  virtual std::vector<Measurement> query(const MeasurementQuery& q) const = 0;
  // Every ok result of the GPU type and source that had an estimate (the estimator_error
  // view): its workload, the workload's cluster kind, the variant key and median / estimate,
  // what the estimator's calibration is fitted from (estimator/calibration_fit.h).
  // Estimates are stored uncalibrated, so the ratios do not depend on the factors earlier
  // tunes used. `storage` ("f32", "f16", "bf16"; "" = any): results of workloads of that
  // storage only (workload_storage), so that a plan's factors come from its own precision's
  // results.
  virtual std::vector<EstimatorSample> estimator_samples(const std::string& gpu_type, TimingSource source,
                                                         const std::string& storage) const = 0;
  // Their ratios by the workload's cluster kind and the math unit of the variant's path
  // (math_unit_of_key): what the per-kind factors are fitted from.
  std::map<std::pair<ClusterKind, MathUnit>, std::vector<double>> estimator_ratios(
      const std::string& gpu_type, TimingSource source, const std::string& storage = "") const {
    return ratios_of(estimator_samples(gpu_type, source, storage));
  }
  virtual std::optional<WorkloadRecord> find_workload(const std::string& signature) const = 0;
  // (signature, count) by signature.
  virtual std::vector<std::pair<std::string, int>> model_workloads(int64_t model_id) const = 0;
  virtual std::vector<GpuTypeRecord> gpu_types() const = 0;  // by name
  virtual std::vector<RunRecord> runs() const = 0;           // by id
  virtual std::vector<PlanRecord> plans(int64_t run_id) const = 0;  // by GPU type
  virtual std::vector<GpuBusyRecord> gpu_busy(int64_t run_id) const = 0;  // by GPU type, worker

  // THE definition of "best variant" (schema/best_variants.cpp, docs/tuning-db.md): tune's
  // selection, `dc-db best`, `dc-db compare`, `dc-db models`/`summary` and the report all ask
  // this. Per workload, among the variants with a final result for the GPU type, source,
  // toolchain and math paths: a variant with any final failure (wrong_result from a check
  // included) is excluded; the reference kernel is a baseline, never a candidate;
  // worker_lost says nothing about a variant. The best is the least median of ok results,
  // ties by key. By workload signature. Answered through query(): the same for every DB.
  std::vector<WorkloadBest> best_variants(const BestVariantQuery& q) const;
};

// The SQLite tuning DB at `path` (":memory:" for a private one), created and migrated as
// needed. Read-only opens never write and refuse a DB that needs a migration.
std::unique_ptr<TuningDb> open_tuning_db(const std::string& path, bool read_only = false);

// A tuning DB that lives in memory: for tests, and for tunes run without --db.
std::unique_ptr<TuningDb> make_memory_db();

}  // namespace dc
