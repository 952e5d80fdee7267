// The estimator's ratios on the wire (farm.proto: RatiosRequest, RatiosReply; docs/farm.md,
// "Calibration through the service"): a `tune --farm` fits its calibration from the
// service's DB as a local tune fits it from its own. Bounded on the way out, checked on the
// way in.
#pragma once

#include <cstddef>
#include <map>
#include <utility>
#include <vector>

#include "calibration_fit.h"
#include "calibration_rank_fit.h"
#include "farm.pb.h"
#include "ir/precision.h"
#include "ir/workload.h"

namespace dc {

// measured / estimated per (cluster kind, math unit), as TuningDb::estimator_ratios answers.
using KindUnitRatios = std::map<std::pair<ClusterKind, MathUnit>, std::vector<double>>;

// Ratios of one (kind, unit) in a reply: the usable ones (finite and positive: all a fit
// uses), at most this many. 2^12 + 1 is odd, so the middle of the evenly spaced order
// statistics sent is the middle of them all. Every kind and unit at once stays below 1 MiB.
inline constexpr size_t kMaxRatiosPerUnit = 4097;

// The usable ratios sorted, or, where there are more than `max_count` (>= 2), `max_count`
// evenly spaced order statistics of them: the smallest, the largest and the middle among them.
std::vector<double> bounded_ratios(std::vector<double> ratios, size_t max_count = kMaxRatiosPerUnit);

// The reply's units: bounded_ratios of each (kind, unit) that has any usable ratio, with
// how many the DB holds.
void to_proto(const KindUnitRatios& ratios, farm::RatiosReply* reply);
// The ratios of a reply; farm::ProtocolError for an unknown kind or unit, a unit twice, a
// ratio that is not finite and positive, or more than kMaxRatiosPerUnit of one unit.
KindUnitRatios ratios_from_proto(const farm::RatiosReply& reply);

// Per-parameter factors in a reply: at most this many (a template has a dozen parameters of a
// few values each; a service with every template of every kind and unit stays far below).
inline constexpr size_t kMaxParamFactors = 4096;
// The service's fit into the reply (the first kMaxParamFactors).
void to_proto(const std::vector<FittedParamFactor>& fit, farm::RatiosReply* reply);
// The reply's factors as a fit of `gpu_type`; farm::ProtocolError for an unknown kind or unit,
// an empty template or parameter name, a factor that is not finite and positive, or more
// than kMaxParamFactors.
std::vector<FittedParamFactor> param_factors_from_proto(const farm::RatiosReply& reply, const std::string& gpu_type);

// Ranking vectors in a reply: at most this many, of at most kMaxRankFeatures features each
// (a template's fit has a few dozen; one per template of every kind and unit stays far below).
inline constexpr size_t kMaxRankVectors = 256;
inline constexpr size_t kMaxRankFeatures = 256;
// The service's fit into the reply (the first kMaxRankVectors).
void to_proto(const std::vector<FittedRankVector>& fit, farm::RatiosReply* reply);
// The reply's vectors as a fit of `gpu_type`; farm::ProtocolError for an unknown kind, an
// empty template or feature name, names, weights and means of different lengths, a weight or
// mean that is not finite, a template twice, or more than the bounds above.
std::vector<FittedRankVector> rank_vectors_from_proto(const farm::RatiosReply& reply, const std::string& gpu_type);

}  // namespace dc
