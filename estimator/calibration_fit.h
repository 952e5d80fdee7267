// Fitting the estimator's calibration (estimator.h) from measurements: per cluster kind and
// math unit (CUDA-core fp32, tf32 tensor cores, fp16/bf16 tensor cores), the factor that
// maps the model's uncalibrated estimates onto measured times. The input is measured /
// estimated per result (TuningDb::estimator_ratios); the fit is the median of the log
// ratios, so a few pathological results (a throttled GPU, a tiny kernel dominated by launch
// noise) do not move it. A unit with too few results of its own gets no factor: its
// estimates run uncalibrated (never another unit's factor), and describe_fit says so.
// docs/estimator.md, "Calibration".
//
// The per-parameter fit (fit_param_factors) reorders a workload's variants: from real
// measurements only, per (kind, math unit, template), the cost of each parameter value
// relative to the template's other values, within workloads. docs/estimator.md,
// "Per-parameter calibration".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "estimator.h"
#include "ir/workload.h"

namespace dc {

struct CalibrationFitOptions {
  int min_samples = 8;      // fewer results of a kind: no factor (the model's own figure)
  double min_factor = 0.1;  // fits beyond these are clamped: a factor of 50 says the
  double max_factor = 10;   // model or the data is broken, not that the GPU is slow
};

struct FittedFactor {
  ClusterKind kind = ClusterKind::opaque;
  MathUnit unit = MathUnit::fp32;
  int samples = 0;       // usable ratios (finite and positive)
  double factor = 1;     // exp(median of log ratios), clamped; 1 when too few samples
  bool used = false;     // samples >= min_samples
  bool clamped = false;  // the median lay outside [min_factor, max_factor]
};

// measured / estimated per (kind, math unit), as TuningDb::estimator_ratios answers.
using CalibrationRatios = std::map<std::pair<ClusterKind, MathUnit>, std::vector<double>>;

// One ok result with an estimate, as the per-parameter fit reads it
// (TuningDb::estimator_samples).
struct EstimatorSample {
  std::string workload;  // its signature
  ClusterKind kind = ClusterKind::opaque;
  std::string variant_key;
  double ratio = 0;  // measured / estimated (uncalibrated)
  double estimate_us = 0;  // the uncalibrated estimate (the ranking fit's "lest" and offsets)
  // The tuning run it was measured in: the latest run begun when it finished (0: none known).
  // The ranking fit compares results of one run only.
  int64_t run = 0;
};

struct ParamFitOptions {
  // Results with the value, in workloads whose results differ in that parameter, or no
  // factor for the value; and at least this many such workloads.
  int min_samples = 8;
  int min_workloads = 3;
  // Ridge shrinkage: a value's log factor is its residuals' sum over (results + this), so
  // only a value with hundreds of results moves far from 1. Chosen on PoCL's paired
  // MobileNetV2 tunes, each run's fit scored on the other's results: 4 and 16 overfit (worse
  // than no factors out of sample), 64 to 256 rank better in both directions, 128 best
  // (docs/bench/estimator-accuracy.md, "Per-parameter calibration").
  double shrinkage = 128;
  double max_factor = 2;  // factors are clamped to [1 / max_factor, max_factor]
  int iterations = 500;   // backfitting sweeps at most (it stops when no effect moves by 1e-12)
};

struct FittedParamFactor {
  Calibration::ParamGroup group;  // gpu, kind, unit, template
  std::string param;
  int64_t value = 0;
  int samples = 0;      // results with the value in workloads that vary the parameter
  double factor = 1;    // clamped
  bool clamped = false;
};

// Per (kind, math unit, template) of `gpu`'s samples: log(ratio) = the workload's own
// level + the sum over the variant's parameters of its value's effect, fitted by
// backfitting with ridge shrinkage; the workload levels absorb whatever the variants of a
// workload share (the per-kind factor does that part), so only differences between a
// workload's variants inform an effect. Each parameter's effects are centred (mean 0 over
// its results). Returns the values that pass the options' thresholds, in group order.
std::vector<FittedParamFactor> fit_param_factors(const std::string& gpu,
                                                 const std::vector<EstimatorSample>& samples,
                                                 const ParamFitOptions& options = {});

// Sets every fitted value's factor into `calibration`; returns how many.
int apply_param_fit(const std::vector<FittedParamFactor>& fit, Calibration& calibration);

// "conv_implicit_gemm block_k=32 x1.12 (64), block_k=8 x0.97 (40), ...": the factors off 1
// by at least 2 %, largest first, at most `max_shown`, and how many are not shown.
std::string describe_param_fit(const std::vector<FittedParamFactor>& fit, size_t max_shown = 6);

// Today's uncalibrated estimates in us, by (workload signature, variant key).
using EstimateTable = std::map<std::pair<std::string, std::string>, double>;

// Compares each sample found in `today` with today's estimate of its variant instead of the
// one recorded with it (which an older model may have made: a fit against it would learn the
// old model's errors and apply them to the new one). Samples not in the table keep theirs.
// Returns how many changed.
size_t compare_with_todays_estimates(std::vector<EstimatorSample>& samples, const EstimateTable& today);

// The samples' ratios by kind and the math unit of the variant's path (math_unit_of_key):
// what fit_calibration reads.
CalibrationRatios ratios_of(const std::vector<EstimatorSample>& samples);

// One entry per (kind, unit) that has any usable ratio, in (kind, unit) order. Each unit's
// factor comes from its own ratios only.
std::vector<FittedFactor> fit_calibration(const CalibrationRatios& ratios,
                                          const CalibrationFitOptions& options = {});
// The same for ratios of the fp32 unit alone.
std::vector<FittedFactor> fit_calibration(const std::map<ClusterKind, std::vector<double>>& ratios,
                                          const CalibrationFitOptions& options = {});

// Sets the used factors of `fit` for `gpu` into `calibration`, except where `keep` already
// has an entry for the same kind and unit (the config's factor wins over that unit's fit).
// Returns how many were set.
int apply_fit(const std::string& gpu, const std::vector<FittedFactor>& fit, const Calibration& keep,
              Calibration& calibration);

// "conv x1.31 (200), gemm x0.87 (212), gemm fp16/bf16 x0.52 (40), conv tf32: 3 too few,
// uncalibrated, reduction: 3 too few, uncalibrated": a fit in one line (fp32 is not named).
std::string describe_fit(const std::vector<FittedFactor>& fit);

}  // namespace dc
