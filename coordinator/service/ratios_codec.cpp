#include "ratios_codec.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "farm_codec.h"
#include "tuning_db.h"

namespace dc {

namespace {

bool usable(double r) { return std::isfinite(r) && r > 0; }

farm::MathUnitCode unit_code(MathUnit u) {
  switch (u) {
    case MathUnit::tf32: return farm::UNIT_TF32;
    case MathUnit::fp16_bf16: return farm::UNIT_FP16_BF16;
    case MathUnit::fp32: break;
  }
  return farm::UNIT_FP32;
}

MathUnit unit_of_code(int code) {
  switch (code) {
    case farm::UNIT_FP32: return MathUnit::fp32;
    case farm::UNIT_TF32: return MathUnit::tf32;
    case farm::UNIT_FP16_BF16: return MathUnit::fp16_bf16;
    default: throw farm::ProtocolError(str_cat("unknown math unit ", code));
  }
}

// The (gpu, kind, unit, template) a per-parameter factor or a ranking vector belongs to, from
// its message's fields; `what` names the message in the refusal.
Calibration::ParamGroup param_group_from_proto(const std::string& kind_name, int unit, const std::string& template_name,
                                               const std::string& gpu_type, const char* what) {
  const std::optional<ClusterKind> kind = parse_cluster_kind(kind_name);
  if (!kind) throw farm::ProtocolError(str_cat("unknown cluster kind '", kind_name.substr(0, 40), "'"));
  if (template_name.empty()) throw farm::ProtocolError(str_cat(what, " without its template name"));
  return {gpu_type, *kind, unit_of_code(unit), template_name};
}

}  // namespace

std::vector<double> bounded_ratios(std::vector<double> ratios, size_t max_count) {
  ratios.erase(std::remove_if(ratios.begin(), ratios.end(), [](double r) { return !usable(r); }), ratios.end());
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  if (n <= max_count || max_count < 2) return ratios;
  std::vector<double> out;
  out.reserve(max_count);
  for (size_t i = 0; i < max_count; ++i) out.push_back(ratios[i * (n - 1) / (max_count - 1)]);
  return out;
}

void to_proto(const KindUnitRatios& ratios, farm::RatiosReply* reply) {
  for (const auto& [key, values] : ratios) {
    const std::vector<double> sent = bounded_ratios(values);
    if (sent.empty()) continue;
    farm::UnitRatios* u = reply->add_units();
    u->set_kind(cluster_kind_name(key.first));
    u->set_unit(unit_code(key.second));
    u->set_total(std::count_if(values.begin(), values.end(), usable));
    u->mutable_ratios()->Add(sent.begin(), sent.end());
  }
}

KindUnitRatios ratios_from_proto(const farm::RatiosReply& reply) {
  KindUnitRatios out;
  for (const farm::UnitRatios& u : reply.units()) {
    const std::optional<ClusterKind> kind = parse_cluster_kind(u.kind());
    if (!kind) throw farm::ProtocolError(str_cat("unknown cluster kind '", u.kind().substr(0, 40), "'"));
    const std::pair<ClusterKind, MathUnit> key{*kind, unit_of_code(u.unit())};
    if (out.count(key))
      throw farm::ProtocolError(str_cat("the ratios of ", u.kind(), " ", math_unit_name(key.second), " twice"));
    if (static_cast<size_t>(u.ratios_size()) > kMaxRatiosPerUnit)
      throw farm::ProtocolError(str_cat(u.ratios_size(), " ratios of one kind and unit (at most ", kMaxRatiosPerUnit, ")"));
    if (!std::all_of(u.ratios().begin(), u.ratios().end(), usable))
      throw farm::ProtocolError("a ratio that is not finite and positive");
    out[key].assign(u.ratios().begin(), u.ratios().end());
  }
  return out;
}

void to_proto(const std::vector<FittedParamFactor>& fit, farm::RatiosReply* reply) {
  for (size_t i = 0; i < fit.size() && i < kMaxParamFactors; ++i) {
    const FittedParamFactor& f = fit[i];
    farm::ParamFactor* p = reply->add_param_factors();
    p->set_kind(cluster_kind_name(std::get<1>(f.group)));
    p->set_unit(unit_code(std::get<2>(f.group)));
    p->set_template_name(std::get<3>(f.group));
    p->set_param(f.param);
    p->set_value(f.value);
    p->set_factor(f.factor);
    p->set_samples(f.samples);
  }
}

std::vector<FittedParamFactor> param_factors_from_proto(const farm::RatiosReply& reply, const std::string& gpu_type) {
  if (static_cast<size_t>(reply.param_factors_size()) > kMaxParamFactors)
    throw farm::ProtocolError(str_cat(reply.param_factors_size(), " per-parameter factors (at most ", kMaxParamFactors, ")"));
  std::vector<FittedParamFactor> out;
  for (const farm::ParamFactor& p : reply.param_factors()) {
    FittedParamFactor f;
    f.group = param_group_from_proto(p.kind(), p.unit(), p.template_name(), gpu_type, "a per-parameter factor");
    if (p.param().empty()) throw farm::ProtocolError("a per-parameter factor without its parameter name");
    if (!usable(p.factor())) throw farm::ProtocolError("a per-parameter factor that is not finite and positive");
    f.param = p.param();
    f.value = p.value();
    f.factor = p.factor();
    f.samples = p.samples();
    out.push_back(std::move(f));
  }
  return out;
}

void to_proto(const std::vector<FittedRankVector>& fit, farm::RatiosReply* reply) {
  for (size_t i = 0; i < fit.size() && i < kMaxRankVectors; ++i) {
    const FittedRankVector& f = fit[i];
    farm::RankVector* p = reply->add_rank_vectors();
    p->set_kind(cluster_kind_name(std::get<1>(f.group)));
    p->set_unit(unit_code(std::get<2>(f.group)));
    p->set_template_name(std::get<3>(f.group));
    for (const std::string& n : f.vector.names) p->add_names(n);
    for (double w : f.vector.weights) p->add_weights(w);
    for (double m : f.vector.means) p->add_means(m);
    p->set_samples(f.samples);
    p->set_workloads(f.workloads);
    p->set_pairs(f.pairs);
  }
}

namespace {

FittedRankVector rank_vector_from_proto(const farm::RankVector& p, const std::string& gpu_type) {
  FittedRankVector f;
  f.group = param_group_from_proto(p.kind(), p.unit(), p.template_name(), gpu_type, "a ranking vector");
  if (p.names_size() != p.weights_size() || p.names_size() != p.means_size())
    throw farm::ProtocolError(str_cat("a ranking vector of ", p.names_size(), " names, ", p.weights_size(),
                                      " weights and ", p.means_size(), " means"));
  if (static_cast<size_t>(p.names_size()) > kMaxRankFeatures)
    throw farm::ProtocolError(str_cat("a ranking vector of ", p.names_size(), " features (at most ", kMaxRankFeatures, ")"));
  const auto finite = [](double x) { return std::isfinite(x); };
  if (!std::all_of(p.weights().begin(), p.weights().end(), finite) ||
      !std::all_of(p.means().begin(), p.means().end(), finite))
    throw farm::ProtocolError("a ranking vector's weight or mean that is not finite");
  if (std::any_of(p.names().begin(), p.names().end(), [](const std::string& n) { return n.empty(); }))
    throw farm::ProtocolError("a ranking vector's feature without a name");
  f.vector.names.assign(p.names().begin(), p.names().end());
  f.vector.weights.assign(p.weights().begin(), p.weights().end());
  f.vector.means.assign(p.means().begin(), p.means().end());
  f.samples = p.samples();
  f.workloads = p.workloads();
  f.pairs = p.pairs();
  return f;
}

}  // namespace

std::vector<FittedRankVector> rank_vectors_from_proto(const farm::RatiosReply& reply, const std::string& gpu_type) {
  if (static_cast<size_t>(reply.rank_vectors_size()) > kMaxRankVectors)
    throw farm::ProtocolError(str_cat(reply.rank_vectors_size(), " ranking vectors (at most ", kMaxRankVectors, ")"));
  std::vector<FittedRankVector> out;
  std::set<Calibration::ParamGroup> seen;
  for (const farm::RankVector& p : reply.rank_vectors()) {
    out.push_back(rank_vector_from_proto(p, gpu_type));
    if (!seen.insert(out.back().group).second)
      throw farm::ProtocolError(str_cat("the ranking vector of ", p.kind().substr(0, 40), " ",
                                        p.template_name().substr(0, 80), " twice"));
  }
  return out;
}

}  // namespace dc
