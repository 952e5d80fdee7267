// The analytic performance model: how long one variant of a workload should take on one
// GPU type, from the GPU's public figures (gpus.yaml) and the variant's parameters, and
// which resource binds it. Used to prune variants that are hopeless before anything is
// compiled or measured, so it errs towards the optimistic side and must be cheap
// (>= 100,000 estimates per second on one core; estimator/bench_estimator.cpp).
// docs/estimator.md gives the formulas, the assumptions and where the model is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "ir/precision.h"
#include "gpu/gpu_spec.h"
#include "ir/workload.h"
#include "param_space.h"
#include "rank_features.h"
#include "variant.h"

namespace dc {

// Per (GPU type, cluster kind, math unit) multiplicative correction of the model, fitted
// from the tuning DB's measurements (measured / estimated; calibration_fit.h) or set by the
// config. `factors` holds the CUDA-core (fp32) factor of a kind, `unit_factors` a tensor-core
// unit's own. A factor never crosses units: a unit without its own (too few results of its
// own: the fit says so in its log line) runs uncalibrated, factor 1.
//
// `param_factors` reorder a workload's variants: per (GPU type, kind, math unit, template),
// the factor of a parameter's value relative to the template's other values of it, fitted
// from measurements within workloads (calibration_fit.h, fit_param_factors): a cost of the
// device that the model lacks, e.g. block_k 32 on PoCL's CPU device (docs/estimator.md,
// "Per-parameter calibration"). A value without a factor counts 1.
//
// `rank_vectors` order them instead, where a template has one: per (GPU type, kind, math
// unit, template), the weights of the pairwise ranking calibration (calibration_rank_fit.h),
// a score w·x(v) over the variant's features (rank_features.h) that orders a workload's
// variants by estimate x exp(score) (Estimate::rank_log) and leaves the estimate itself alone:
// the fitted weights amplify the model's own spread (the estimate's log weighs up to 18), which
// ranks well within a workload but is no time a plan can compare across workloads. A template
// with a vector has no per-parameter factors (docs/estimator.md, "Pairwise ranking
// calibration").
struct Calibration {
  using ParamGroup = std::tuple<std::string, ClusterKind, MathUnit, std::string>;  // gpu, kind, unit, template
  using ValueFactors = std::map<std::string, std::map<int64_t, double>>;          // param -> value -> factor

  std::map<std::pair<std::string, ClusterKind>, double> factors;
  std::map<std::tuple<std::string, ClusterKind, MathUnit>, double> unit_factors;
  std::map<ParamGroup, ValueFactors> param_factors;
  std::map<ParamGroup, RankVector> rank_vectors;

  double factor(const std::string& gpu, ClusterKind kind, MathUnit unit = MathUnit::fp32) const;
  // factor(gpu, kind, the path's unit) times the factor of each parameter value that has one.
  double variant_factor(const std::string& gpu, ClusterKind kind, const Variant& v) const;
  // The same of a variant key; a key that does not parse: the kind's factor alone.
  double variant_factor(const std::string& gpu, ClusterKind kind, const std::string& variant_key) const;
  // The ranking score of a variant whose template has a rank vector (of its features with the
  // uncalibrated estimate `estimate_us`), else 0.
  double rank_log(const GpuSpec& gpu, const WorkloadShape& s, const Variant& v, double estimate_us) const;
  // The same of a variant key (a key that does not parse: 0).
  double rank_log(const GpuSpec& gpu, const WorkloadShape& s, const std::string& variant_key,
                  double estimate_us) const;
  // UserError unless 0 < factor < infinity. Unit fp32 sets `factors`, the others
  // `unit_factors`.
  void set(const std::string& gpu, ClusterKind kind, double factor, MathUnit unit = MathUnit::fp32);
  // UserError unless 0 < factor < infinity.
  void set_param(const ParamGroup& group, const std::string& param, int64_t value, double factor);
};

struct Estimate {
  double seconds = 0;          // (max(compute, dram, smem, l2) + launch) x the variant's calibration factor
  // The ranking calibration's score (Calibration::rank_vectors; 0 without one): a workload's
  // variants are ordered by seconds x exp(rank_log) (rank_seconds, prune.h).
  double rank_log = 0;
  double compute_s = 0;        // arithmetic pipes, with occupancy, latency hiding and waves
  double dram_s = 0;           // DRAM traffic after tile reuse and L2, with bytes in flight
  double smem_s = 0;           // shared-memory bank traffic
  double l2_s = 0;             // global loads through the SMs' L2 ports (tiles re-read from L2)
  double launch_s = 0;         // launch overhead
  double occupancy = 0;        // resident warps per SM / the SM's maximum
  int64_t waves = 0;           // ceil(blocks / (SMs x resident blocks per SM))
  double wave_efficiency = 0;  // blocks / (waves x SMs x resident blocks per SM)
  std::string bound;      // "compute", "dram", "l2", "smem", "launch", "latency"; "unfit" if the
                          // variant cannot run on the GPU (seconds is then infinite)
  double dram_bytes = 0;  // modelled DRAM traffic
  int blocks_per_sm = 0;
};

// Modelling constants (docs/estimator.md says where each comes from).
namespace model {
constexpr double kDramEfficiency = 0.90;    // best sustained fraction of datasheet bandwidth
constexpr double kDramLatencyS = 500e-9;    // load-to-use latency of a DRAM access
constexpr double kL2LatencyCycles = 300;    // a K-tile's loads, mostly L2 hits
constexpr double kSmemBytesPerClk = 128;    // 32 banks x 4 bytes per SM
constexpr double kL2BytesPerClkPerSm = 32;  // L2 bandwidth per SM (A100: 5120 B/clk / 108 SMs = 47)
constexpr double kL2Efficiency = 0.8;       // sustained fraction of it
constexpr double kSfuPerClk = 16;  // exp/rsqrt lanes per SM
constexpr double kShuffleLatencyCycles = 30;
constexpr double kSyncLatencyCycles = 100;
constexpr double kL2ReuseRowBytes = 64 * 1024;  // rows up to this size are re-read from L2
}  // namespace model

// Peak FLOP/s of a precision path: fp32 on the CUDA cores, the others on tensor cores.
double peak_flops(const GpuSpec& gpu, const std::string& precision);

// The DeepCuts floor (upper bound on performance): max(FLOPs / peak, bytes / bandwidth).
double floor_seconds(const Workload& w, const GpuSpec& gpu, const std::string& precision = "fp32");
double floor_seconds(const WorkloadShape& s, const GpuSpec& gpu,
                     const std::string& precision = "fp32");

// Analyses the workload on every call: for many variants, analyze_workload once and use
// the WorkloadShape overload.
Estimate estimate(const Workload& w, const Variant& v, const GpuSpec& gpu,
                  const Calibration& calibration = {});
Estimate estimate(const WorkloadShape& s, const Variant& v, const GpuSpec& gpu,
                  const Calibration& calibration = {});

}  // namespace dc
