// The coordinator's view of the measurement farm: jobs go in, Measurements come out.
// Implementations: the ZeroMQ broker (farm_broker.h: remote and local dc-worker daemons)
// and an in-process one for tests. `tune` is written against this interface only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "calibration_fit.h"
#include "calibration_rank_fit.h"
#include "farm/measure_job.h"
#include "farm/measurement.h"
#include "ir/tolerance.h"
#include "ir/kernel.h"
#include "ir/precision.h"
#include "ir/workload.h"

namespace dc {

// A measurement job (common/farm/measure_job.h) with what the coordinator's farms do with it.
struct FarmJob : MeasureJob {
  // Workers that should not take this job while another worker of its type is connected,
  // by the names the farm's Measurements carry (Measurement::worker): a finalist's first
  // worker when tune measures it again elsewhere, and workers tune has quarantined
  // (docs/tune.md, "Finalists measured twice"). Taken anyway when no other worker serves
  // the type, so a job never waits for ever. The farm service passes it on to its broker.
  std::set<std::string> avoid_workers;
  // fnv1a_hex of variant_kernel.source where the submitter has it already (the farm service
  // hashes every job it is sent): the dispatcher then does not hash the source again. "" =
  // the dispatcher computes it.
  std::string variant_source_hash;
  // The job as a serialized farm::Job, where the submitter has it so (the farm service
  // forwards a tune's bytes: common/farm/job_wire.h): the dispatcher sends these bytes, and
  // the kernels above stay empty (the MeasureJob's other fields are read from the bytes).
  // "" = the dispatcher serialises the MeasureJob.
  std::string wire_bytes;

  // For the farm service (`tune --farm`, coordinator/service/): what its tuning DB records
  // of the job's workload and variant, and how it may answer. Ignored by other farms.
  struct ServiceInfo {
    std::string workload_kind;        // cluster kind name
    std::string workload_canonical;
    std::string workload_base_signature;
    std::string variant_template;
    std::string variant_precision;
    std::map<std::string, int64_t> variant_params;
    bool emulated = false;            // the tune's source for the GPU type
    std::string nvrtc_major;          // the toolchain whose results the tune reuses
    bool reuse = true;                // may be answered from the DB (not --retune, not a check)
  } service;
};

// One connected worker, for `dc-coordinator status`.
struct FarmWorkerState {
  std::string worker_id;
  std::string host;
  std::vector<std::string> gpu_types;  // one per device
  std::vector<int32_t> device_indexes; // the worker's index of each device, same order
  std::vector<int> device_leases;      // jobs each device holds now, same order
  int leases = 0;                      // jobs it holds now
};

struct FarmStatus {
  std::map<std::string, int> workers_per_gpu_type;  // live workers (emulated included)
  std::map<std::string, int> emulated_workers_per_gpu_type;
  std::vector<FarmWorkerState> workers;             // filled by the broker; may be empty
  std::map<std::string, int64_t> queued_per_gpu_type;
  int64_t queued = 0;
  int64_t in_flight = 0;
  int64_t done = 0;
};

class Farm {
 public:
  virtual ~Farm() = default;
  // Queues a job for its GPU type. Never blocks on the network.
  virtual void submit(FarmJob job) = 0;
  // Results that arrived, waiting up to `timeout` for at least one. Every submitted job
  // yields exactly one Measurement eventually (ok, a failure class, or worker_lost after
  // the attempts are exhausted) — never zero, never two.
  virtual std::vector<Measurement> collect(std::chrono::milliseconds timeout) = 0;
  virtual FarmStatus status() const = 0;
  // Stops dispatching; in-flight results already received are kept.
  virtual void shutdown() = 0;
  // The tune marked one of this farm's results implausible in its DB (a quarantined
  // worker's, docs/tune.md): a farm that keeps a DB of its own (the farm service) marks it
  // there too. The others record into the tune's DB only: nothing to do.
  virtual void mark_implausible(const Measurement& /*m*/, const std::string& /*why*/) {}
  // A farm that keeps a DB of its own (the farm service) answers the estimator's ratios from
  // it, as TuningDb::estimator_ratios does (measured / estimate per cluster kind and math
  // unit, of the GPU type's results of that source and storage), with the per-parameter
  // factors it fitted from them (real results only) and, where `rank_vectors` asks (tune
  // --rank-calibration), the pairwise ranking vectors: the calibrate stage of a `tune --farm`
  // fits and applies them. nullopt: no DB of its own; the tune's DB answers.
  struct Ratios {
    std::map<std::pair<ClusterKind, MathUnit>, std::vector<double>> by_unit;
    std::vector<FittedParamFactor> param_fit;
    std::vector<FittedRankVector> rank_fit;  // real results only, when asked
  };
  virtual std::optional<Ratios> estimator_ratios(const std::string& /*gpu_type*/, bool /*emulated*/,
                                                 const std::string& /*storage*/, bool /*rank_vectors*/) {
    return std::nullopt;
  }
};

}  // namespace dc
