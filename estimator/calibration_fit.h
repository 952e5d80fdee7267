// Fitting the estimator's calibration (estimator.h) from measurements: per cluster kind, the
// factor that maps the model's uncalibrated estimates onto measured times. The input is
// measured / estimated per result (TuningDb::estimator_ratios); the fit is the median of
// the log ratios, so a few pathological results (a throttled GPU, a tiny kernel dominated
// by launch noise) do not move it. docs/estimator.md, "Calibration".
#pragma once

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
  int samples = 0;       // usable ratios (finite and positive)
  double factor = 1;     // exp(median of log ratios), clamped; 1 when too few samples
  bool used = false;     // samples >= min_samples
  bool clamped = false;  // the median lay outside [min_factor, max_factor]
};

// One entry per kind that has any usable ratio, in kind order.
std::vector<FittedFactor> fit_calibration(const std::map<ClusterKind, std::vector<double>>& ratios,
                                          const CalibrationFitOptions& options = {});

// Sets the used factors of `fit` for `gpu` into `calibration`, except where `keep` already
// has an entry (an explicit factor wins). Returns how many were set.
int apply_fit(const std::string& gpu, const std::vector<FittedFactor>& fit, const Calibration& keep,
              Calibration& calibration);

// "conv x1.31 (200), gemm x0.87 (212), reduction: 3 too few": a fit in one line.
std::string describe_fit(const std::vector<FittedFactor>& fit);

}  // namespace dc
