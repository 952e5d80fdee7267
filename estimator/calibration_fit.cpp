#include "calibration_fit.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ir/error.h"

namespace dc {

namespace {

double median_of_sorted(const std::vector<double>& v) {
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

FittedFactor fit_one(ClusterKind kind, MathUnit unit, const std::vector<double>& ratios,
                     const CalibrationFitOptions& o) {
  std::vector<double> logs;
  for (double r : ratios)
    if (std::isfinite(r) && r > 0) logs.push_back(std::log(r));
  FittedFactor f;
  f.kind = kind;
  f.unit = unit;
  f.samples = static_cast<int>(logs.size());
  f.used = f.samples >= o.min_samples;
  if (!f.used) return f;
  std::sort(logs.begin(), logs.end());
  const double raw = std::exp(median_of_sorted(logs));
  f.factor = std::clamp(raw, o.min_factor, o.max_factor);
  f.clamped = f.factor != raw;
  return f;
}

}  // namespace

size_t compare_with_todays_estimates(std::vector<EstimatorSample>& samples, const EstimateTable& today) {
  size_t changed = 0;
  for (EstimatorSample& s : samples) {
    const auto it = today.find({s.workload, s.variant_key});
    if (it == today.end() || !(it->second > 0) || !(s.estimate_us > 0)) continue;
    const double measured_us = s.ratio * s.estimate_us;
    s.estimate_us = it->second;
    s.ratio = measured_us / it->second;
    ++changed;
  }
  return changed;
}

CalibrationRatios ratios_of(const std::vector<EstimatorSample>& samples) {
  CalibrationRatios out;
  for (const EstimatorSample& s : samples) out[{s.kind, math_unit_of_key(s.variant_key)}].push_back(s.ratio);
  return out;
}

std::vector<FittedFactor> fit_calibration(const CalibrationRatios& ratios,
                                          const CalibrationFitOptions& options) {
  DC_USER_CHECK(options.min_samples >= 1, "calibration fit: min_samples must be >= 1");
  DC_USER_CHECK(options.min_factor > 0 && options.min_factor <= options.max_factor &&
                    std::isfinite(options.max_factor),
                "calibration fit: need 0 < min_factor <= max_factor < infinity");
  std::vector<FittedFactor> out;
  for (const auto& [key, r] : ratios) {
    FittedFactor f = fit_one(key.first, key.second, r, options);
    if (f.samples > 0) out.push_back(f);
  }
  return out;
}

std::vector<FittedFactor> fit_calibration(const std::map<ClusterKind, std::vector<double>>& ratios,
                                          const CalibrationFitOptions& options) {
  CalibrationRatios by_unit;
  for (const auto& [kind, r] : ratios) by_unit[{kind, MathUnit::fp32}] = r;
  return fit_calibration(by_unit, options);
}

int apply_fit(const std::string& gpu, const std::vector<FittedFactor>& fit, const Calibration& keep,
              Calibration& calibration) {
  int set = 0;
  for (const FittedFactor& f : fit) {
    const bool config_has_it = f.unit == MathUnit::fp32 ? keep.factors.count({gpu, f.kind}) != 0
                                                        : keep.unit_factors.count({gpu, f.kind, f.unit}) != 0;
    if (!f.used || config_has_it) continue;
    calibration.set(gpu, f.kind, f.factor, f.unit);
    ++set;
  }
  return set;
}

std::string describe_fit(const std::vector<FittedFactor>& fit) {
  std::string out;
  for (const FittedFactor& f : fit) {
    out += out.empty() ? "" : ", ";
    const std::string name =
        f.unit == MathUnit::fp32
            ? std::string(cluster_kind_name(f.kind))
            : fmt::format("{} {}", cluster_kind_name(f.kind), math_unit_name(f.unit));
    if (f.used)
      out += fmt::format("{} x{:.2f} ({}{})", name, f.factor, f.samples, f.clamped ? ", clamped" : "");
    else
      out += fmt::format("{}: {} too few{}", name, f.samples,
                         ", uncalibrated");
  }
  return out.empty() ? "no results with an estimate" : out;
}

}  // namespace dc
