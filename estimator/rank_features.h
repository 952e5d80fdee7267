// The features of the pairwise ranking calibration (docs/estimator.md, "Pairwise ranking
// calibration"): per variant, named figures x(v) from its template, parameters, the workload's
// shape and the device, whose weighted sum w·x(v) scales the model's estimate by exp(w·x(v)).
// The same function serves the fit (calibration_rank_fit.h: shapes parsed from the DB's
// canonical text) and every estimate (estimator.cpp: the WorkloadShape), so both see one x(v).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_spec.h"
#include "param_space.h"

namespace dc {

// name -> value, e.g. "lbm" (log2 block_m), "lest" (ln of the uncalibrated estimate in us).
using RankFeatures = std::map<std::string, double>;

// x(v): conv_implicit_gemm, depthwise_direct, elementwise and row_reduce get figures derived
// from the shape (padding waste, work-groups and the last wave's fill over the device's
// compute units, the work-group's footprint over its L1 and L2, ...); any other template log2
// of every parameter (key-only). Every template: "lest", ln(estimate_us), the uncalibrated estimate.
RankFeatures rank_features(const std::string& template_name, const std::map<std::string, int64_t>& params,
                           const WorkloadShape& shape, const GpuSpec& gpu, double estimate_us);

// The figures of `shape` that rank_features reads, from a workload's canonical text (the
// DB's `workloads.canonical`; ir/workload.h): a Conv's geometry (conv, depthwise) and the
// output elements (the most of any output). nullopt for text it cannot read.
std::optional<WorkloadShape> rank_shape_of_canonical(const std::string& canonical);

// One template's fitted weights: a variant's ranking score is sum_i w_i (x_i - mean_i). The
// means (the features' over the fit's results) change no order; they keep the scores, which
// `dc-db calibration` prints, near 0. A feature the variant lacks counts 0.
struct RankVector {
  std::vector<std::string> names;
  std::vector<double> weights;  // per unit of the feature
  std::vector<double> means;

  double log_score(const RankFeatures& x) const;
};

}  // namespace dc
