// The per-parameter calibration fit (calibration_fit.h): within workloads, what each value of a
// template's parameters costs on this device beyond what the model prices. A fixed-effects
// model per (kind, math unit, template): log(measured / estimated) = the workload's level + the
// sum of the variant's value effects, fitted by backfitting (Gauss-Seidel over the effects,
// ridge-shrunk) so that parameters that move together share the residual instead of each
// taking all of it.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "calibration_fit.h"
#include "ir/error.h"

namespace dc {

namespace {

struct Row {
  size_t workload = 0;
  double y = 0;                    // log ratio
  std::vector<size_t> value_of;    // per parameter of the group: the index of its value
};

struct Param {
  std::string name;
  std::vector<int64_t> values;     // sorted
  std::vector<double> effect;      // per value, log
  std::vector<int> informative;    // per value: results in workloads that vary the parameter
  std::vector<int> workloads;      // per value: such workloads
};

struct Group {
  std::vector<Param> params;
  std::vector<Row> rows;
  size_t workloads = 0;
};

using GroupKey = std::tuple<ClusterKind, MathUnit, std::string>;

// The usable samples by (kind, unit, template), their keys parsed; a group's parameters are
// the names every one of its keys carries (a template's keys carry the same names per path).
std::map<GroupKey, std::vector<std::pair<const EstimatorSample*, VariantKeyParts>>> group_samples(
    const std::vector<EstimatorSample>& samples) {
  std::map<GroupKey, std::vector<std::pair<const EstimatorSample*, VariantKeyParts>>> out;
  for (const EstimatorSample& s : samples) {
    if (!(std::isfinite(s.ratio) && s.ratio > 0) || is_reference_key(s.variant_key)) continue;
    std::optional<VariantKeyParts> k = parse_variant_key(s.variant_key);
    if (!k || k->params.empty()) continue;
    out[{s.kind, math_unit_of_path(k->precision), k->template_name}].emplace_back(&s, std::move(*k));
  }
  return out;
}

Group build_group(const std::vector<std::pair<const EstimatorSample*, VariantKeyParts>>& members) {
  Group g;
  std::map<std::string, std::map<int64_t, size_t>> values;  // name -> value -> index
  for (const auto& [name, v] : members.front().second.params) values[name];
  for (const auto& m : members)
    for (auto it = values.begin(); it != values.end();)
      it = m.second.params.count(it->first) ? std::next(it) : values.erase(it);
  for (const auto& m : members)
    for (auto& [name, index] : values) index[m.second.params.at(name)];
  for (auto& [name, index] : values) {
    Param p;
    p.name = name;
    for (auto& [value, i] : index) {
      i = p.values.size();
      p.values.push_back(value);
    }
    p.effect.assign(p.values.size(), 0.0);
    p.informative.assign(p.values.size(), 0);
    p.workloads.assign(p.values.size(), 0);
    g.params.push_back(std::move(p));
  }
  std::map<std::string, size_t> workload_index;
  for (const auto& [sample, key] : members) {
    Row r;
    r.workload = workload_index.emplace(sample->workload, workload_index.size()).first->second;
    r.y = std::log(sample->ratio);
    for (auto& [name, index] : values) r.value_of.push_back(index.at(key.params.at(name)));
    g.rows.push_back(std::move(r));
  }
  g.workloads = workload_index.size();
  return g;
}

// Per parameter and value: the results (and workloads) where the parameter varies within the
// workload, the only ones that say anything about a value against the others.
void count_informative(Group& g) {
  for (size_t pi = 0; pi < g.params.size(); ++pi) {
    Param& p = g.params[pi];
    std::vector<std::map<size_t, int>> per_workload(g.workloads);  // value -> results
    for (const Row& r : g.rows) ++per_workload[r.workload][r.value_of[pi]];
    for (const auto& counts : per_workload) {
      if (counts.size() < 2) continue;
      for (const auto& [value, n] : counts) {
        p.informative[value] += n;
        ++p.workloads[value];
      }
    }
  }
}

// Gauss-Seidel over the effects. Each row keeps the running sum of its values' effects, so a
// sweep is O(rows x params): a farm service fits a shared DB of 10^5 results on request.
void backfit(Group& g, const ParamFitOptions& o) {
  std::vector<double> level(g.workloads, 0.0);
  std::vector<double> effects(g.rows.size(), 0.0);  // per row: the sum of its values' effects
  const auto update_levels = [&] {
    std::vector<double> sum(g.workloads, 0.0);
    std::vector<int> n(g.workloads, 0);
    for (size_t i = 0; i < g.rows.size(); ++i) {
      sum[g.rows[i].workload] += g.rows[i].y - effects[i];
      ++n[g.rows[i].workload];
    }
    for (size_t w = 0; w < g.workloads; ++w) level[w] = sum[w] / n[w];
  };
  update_levels();
  for (int it = 0; it < o.iterations; ++it) {
    double moved = 0;  // the largest change of an effect in this sweep
    for (size_t pi = 0; pi < g.params.size(); ++pi) {
      Param& p = g.params[pi];
      std::vector<double> sum(p.values.size(), 0.0);
      std::vector<int> n(p.values.size(), 0);
      for (size_t i = 0; i < g.rows.size(); ++i) {
        const Row& r = g.rows[i];
        const size_t v = r.value_of[pi];
        sum[v] += r.y - level[r.workload] - (effects[i] - p.effect[v]);
        ++n[v];
      }
      std::vector<double> effect(p.values.size());
      double mean = 0;
      for (size_t v = 0; v < p.values.size(); ++v) {
        effect[v] = sum[v] / (n[v] + o.shrinkage);
        mean += effect[v] * n[v];
      }
      mean /= static_cast<double>(g.rows.size());
      for (size_t v = 0; v < p.values.size(); ++v) {
        effect[v] -= mean;  // the levels carry what all values share
        moved = std::max(moved, std::fabs(effect[v] - p.effect[v]));
      }
      for (size_t i = 0; i < g.rows.size(); ++i) {
        const size_t v = g.rows[i].value_of[pi];
        effects[i] += effect[v] - p.effect[v];
      }
      p.effect = std::move(effect);
    }
    update_levels();
    if (moved < 1e-12) break;
  }
}

}  // namespace

std::vector<FittedParamFactor> fit_param_factors(const std::string& gpu, const std::vector<EstimatorSample>& samples,
                                                 const ParamFitOptions& o) {
  DC_USER_CHECK(o.min_samples >= 1 && o.min_workloads >= 1 && o.shrinkage >= 0 && o.max_factor >= 1 &&
                    std::isfinite(o.max_factor) && o.iterations >= 1,
                "per-parameter calibration fit: bad options");
  std::vector<FittedParamFactor> out;
  for (const auto& [key, members] : group_samples(samples)) {
    Group g = build_group(members);
    count_informative(g);
    backfit(g, o);
    const auto& [kind, unit, template_name] = key;
    for (const Param& p : g.params)
      for (size_t v = 0; v < p.values.size(); ++v) {
        if (p.informative[v] < o.min_samples || p.workloads[v] < o.min_workloads) continue;
        FittedParamFactor f;
        f.group = {gpu, kind, unit, template_name};
        f.param = p.name;
        f.value = p.values[v];
        f.samples = p.informative[v];
        const double raw = std::exp(p.effect[v]);
        f.factor = std::clamp(raw, 1 / o.max_factor, o.max_factor);
        f.clamped = f.factor != raw;
        out.push_back(std::move(f));
      }
  }
  return out;
}

int apply_param_fit(const std::vector<FittedParamFactor>& fit, Calibration& calibration) {
  for (const FittedParamFactor& f : fit) calibration.set_param(f.group, f.param, f.value, f.factor);
  return static_cast<int>(fit.size());
}

std::string describe_param_fit(const std::vector<FittedParamFactor>& fit, size_t max_shown) {
  std::vector<const FittedParamFactor*> shown;
  for (const FittedParamFactor& f : fit)
    if (std::fabs(std::log(f.factor)) >= std::log(1.02)) shown.push_back(&f);
  std::stable_sort(shown.begin(), shown.end(), [](const auto* a, const auto* b) {
    return std::fabs(std::log(a->factor)) > std::fabs(std::log(b->factor));
  });
  const size_t hidden = shown.size() > max_shown ? shown.size() - max_shown : 0;
  shown.resize(shown.size() - hidden);
  std::string out;
  for (const FittedParamFactor* f : shown)
    out += fmt::format("{}{} {}={} x{:.2f} ({}{})", out.empty() ? "" : ", ", std::get<3>(f->group), f->param,
                       f->value, f->factor, f->samples, f->clamped ? ", clamped" : "");
  if (out.empty()) return fmt::format("{} value(s), none off by 2 % or more", fit.size());
  return hidden ? fmt::format("{}; {} more", out, hidden) : out;
}

}  // namespace dc
