// The pairwise ranking calibration's fit (docs/estimator.md, "Pairwise ranking calibration"):
// per (GPU type, kind, math unit, template), the weights w of rank_features.h's x(v) that best
// order each workload's measured variants, P(i slower than j) = sigma(ln est_i - ln est_j +
// w·(x_i - x_j)) over every pair of one workload's results, features standardised, ridge
// lambda, Newton's method. From real results only (an emulated device's times come from this
// model). A template with a vector uses it instead of its per-parameter factors.
#pragma once

#include <string>
#include <vector>

#include "calibration_fit.h"
#include "rank_features.h"

namespace dc {

// One real ok result, with what the features need: the workload's shape (parsed from the
// DB's canonical text) and the uncalibrated estimate.
struct RankSample {
  std::string workload;  // its signature
  ClusterKind kind = ClusterKind::opaque;
  std::string variant_key;
  WorkloadShape shape;
  double estimate_us = 0;  // uncalibrated
  double measured_us = 0;
  // The tuning run it was measured in (EstimatorSample::run; 0: unknown). Pairs join results
  // of one workload measured in one run only.
  int64_t run = 0;
};

struct RankFitOptions {
  // Fitted on two of three PoCL tunes of MobileNetV2 and scored on the third (each way),
  // lambda 100 ranked best on average; a fit from one run needs it more than a pooled one
  // (docs/bench/estimator-accuracy.md, session 29).
  double ridge = 100;
  // Results in workloads with at least 2 of the template's results, and such workloads, or
  // no vector for the template (its per-parameter factors stay).
  int min_samples = 8;
  int min_workloads = 3;
  int iterations = 100;  // Newton steps at most (it stops when no weight moves by 1e-10)
};

struct FittedRankVector {
  Calibration::ParamGroup group;  // gpu, kind, unit, template
  int samples = 0;                // results in informative workloads
  int workloads = 0;
  int pairs = 0;                  // ordered pairs fitted (ties left out)
  RankVector vector;
};

// Per (kind, math unit, template) of `gpu`'s samples, the vectors that pass the thresholds,
// in group order. `device` gives rank_features its compute units and caches. Pairs are formed
// within one workload's results of one run (paired timing scales each run's times to an
// anchor of its own, so times of different runs do not compare).
std::vector<FittedRankVector> fit_rank_vectors(const GpuSpec& device, const std::vector<RankSample>& samples,
                                               const RankFitOptions& options = {});

// Sets every fitted vector into `calibration`; returns how many.
int apply_rank_fit(const std::vector<FittedRankVector>& fit, Calibration& calibration);

// "conv_implicit_gemm 43 weights (259 results, 33 workloads), ...".
std::string describe_rank_fit(const std::vector<FittedRankVector>& fit);

// The samples' rank inputs: each sample's workload shape from `canonical_of` (signature ->
// canonical text), its estimate from the sample; samples whose shape does not parse are
// left out.
std::vector<RankSample> rank_samples_of(const std::vector<EstimatorSample>& samples,
                                        const std::map<std::string, std::string>& canonical_of);

}  // namespace dc
