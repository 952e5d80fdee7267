// Fitting the estimator's calibration (estimator.h) from measurements: per cluster kind and
// math unit (CUDA-core fp32, tf32 tensor cores, fp16/bf16 tensor cores), the factor that
// maps the model's uncalibrated estimates onto measured times. The input is measured /
// estimated per result (TuningDb::estimator_ratios); the fit is the median of the log
// ratios, so a few pathological results (a throttled GPU, a tiny kernel dominated by launch
// noise) do not move it. A unit with too few results of its own gets no factor: its
// estimates run uncalibrated (never another unit's factor), and describe_fit says so.
// docs/estimator.md, "Calibration".
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
  MathUnit unit = MathUnit::fp32;
  int samples = 0;       // usable ratios (finite and positive)
  double factor = 1;     // exp(median of log ratios), clamped; 1 when too few samples
  bool used = false;     // samples >= min_samples
  bool clamped = false;  // the median lay outside [min_factor, max_factor]
};

// measured / estimated per (kind, math unit), as TuningDb::estimator_ratios answers.
using CalibrationRatios = std::map<std::pair<ClusterKind, MathUnit>, std::vector<double>>;

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
