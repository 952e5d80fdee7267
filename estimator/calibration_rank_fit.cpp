// The pairwise ranking calibration's fit (calibration_rank_fit.h): a ridge-penalised logistic
// regression on the feature differences of every pair of one workload's results, solved by
// Newton's method with a small dense Cholesky solve (a few dozen features).
#include "calibration_rank_fit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/error.h"

namespace dc {

namespace {

using GroupKey = std::tuple<ClusterKind, MathUnit, std::string>;

struct Member {
  const RankSample* sample;
  RankFeatures x;
};

// The results that may be compared: one workload's, measured in one run.
std::pair<std::string, int64_t> batch_of(const Member& m) { return {m.sample->workload, m.sample->run}; }

// The pairs' design: per result its features (dense, in `names` order), per pair its results.
struct Pairs {
  std::vector<std::string> names;
  std::vector<std::vector<double>> x;       // per result
  std::vector<double> log_est, log_meas;    // per result
  std::vector<std::pair<size_t, size_t>> ij;  // per pair
  std::vector<double> scale;                // per feature: the pair differences' sd
};

// Solves A b = r for a symmetric positive definite A (Cholesky); A is overwritten.
std::vector<double> solve_spd(std::vector<std::vector<double>> A, std::vector<double> r) {
  const size_t n = r.size();
  for (size_t j = 0; j < n; ++j) {
    for (size_t k = 0; k < j; ++k) A[j][j] -= A[j][k] * A[j][k];
    A[j][j] = std::sqrt(std::max(A[j][j], 1e-300));
    for (size_t i = j + 1; i < n; ++i) {
      for (size_t k = 0; k < j; ++k) A[i][j] -= A[i][k] * A[j][k];
      A[i][j] /= A[j][j];
    }
  }
  for (size_t i = 0; i < n; ++i) {  // L y = r
    for (size_t k = 0; k < i; ++k) r[i] -= A[i][k] * r[k];
    r[i] /= A[i][i];
  }
  for (size_t i = n; i-- > 0;) {  // L^T b = y
    for (size_t k = i + 1; k < n; ++k) r[i] -= A[k][i] * r[k];
    r[i] /= A[i][i];
  }
  return r;
}

// The pairs of each batch's results (batch_of) whose measured times differ, and each feature's
// standard deviation over the pairs' differences; features constant over them are dropped.
Pairs build_pairs(const std::vector<Member>& members) {
  Pairs p;
  std::set<std::string> names;
  for (const Member& m : members)
    for (const auto& [name, v] : m.x) names.insert(name);
  std::map<std::pair<std::string, int64_t>, std::vector<size_t>> by_batch;
  for (size_t i = 0; i < members.size(); ++i) {
    std::vector<double> row;
    for (const std::string& n : names) {
      auto it = members[i].x.find(n);
      row.push_back(it == members[i].x.end() ? 0.0 : it->second);
    }
    p.x.push_back(std::move(row));
    p.log_est.push_back(std::log(members[i].sample->estimate_us));
    p.log_meas.push_back(std::log(members[i].sample->measured_us));
    by_batch[batch_of(members[i])].push_back(i);
  }
  for (const auto& [batch, idx] : by_batch)
    for (size_t a = 0; a < idx.size(); ++a)
      for (size_t b = a + 1; b < idx.size(); ++b)
        if (p.log_meas[idx[a]] != p.log_meas[idx[b]]) p.ij.emplace_back(idx[a], idx[b]);
  // Each feature's scale: the root mean square of its pair differences. Not their spread about
  // their mean: a pair's orientation is the results' order, so a feature whose differences
  // all point one way (every pair lists its small block first) still ranks.
  std::vector<double> sum2(names.size(), 0.0);
  for (const auto& [i, j] : p.ij)
    for (size_t f = 0; f < names.size(); ++f) {
      const double d = p.x[i][f] - p.x[j][f];
      sum2[f] += d * d;
    }
  const double n = std::max<double>(p.ij.size(), 1);
  std::vector<size_t> keep;
  size_t f = 0;
  for (const std::string& name : names) {
    const double rms = std::sqrt(sum2[f] / n);
    if (rms > 1e-9) keep.push_back(f), p.names.push_back(name), p.scale.push_back(rms);
    ++f;
  }
  for (auto& row : p.x) {
    std::vector<double> kept;
    for (size_t k : keep) kept.push_back(row[k]);
    row = std::move(kept);
  }
  return p;
}

// Newton's method on the mean logistic loss + ridge / pairs * |b|^2 / 2 over standardised
// differences; returns the weights per unit of each feature.
std::vector<double> newton(const Pairs& p, const RankFitOptions& o) {
  const size_t F = p.names.size();
  const double n = static_cast<double>(p.ij.size());
  std::vector<double> b(F, 0.0), d(F);
  for (int it = 0; it < o.iterations; ++it) {
    std::vector<double> grad(F);
    std::vector<std::vector<double>> H(F, std::vector<double>(F, 0.0));
    for (size_t k = 0; k < F; ++k) grad[k] = o.ridge * b[k] / n, H[k][k] = o.ridge / n;
    for (const auto& [i, j] : p.ij) {
      double z = p.log_est[i] - p.log_est[j];
      for (size_t k = 0; k < F; ++k) d[k] = (p.x[i][k] - p.x[j][k]) / p.scale[k], z += d[k] * b[k];
      const double pr = 1 / (1 + std::exp(-z)), slower = p.log_meas[i] > p.log_meas[j] ? 1.0 : 0.0;
      const double w = pr * (1 - pr) / n;
      for (size_t k = 0; k < F; ++k) {
        grad[k] += d[k] * (pr - slower) / n;
        for (size_t l = 0; l <= k; ++l) H[k][l] += d[k] * d[l] * w;
      }
    }
    for (size_t k = 0; k < F; ++k)
      for (size_t l = 0; l < k; ++l) H[l][k] = H[k][l];
    const std::vector<double> step = solve_spd(std::move(H), grad);
    double moved = 0;
    for (size_t k = 0; k < F; ++k) b[k] -= step[k], moved = std::max(moved, std::fabs(step[k]));
    if (moved < 1e-10) break;
  }
  for (size_t k = 0; k < F; ++k) b[k] /= p.scale[k];
  return b;
}

// The members of batches with at least 2 results (the only ones with pairs); `workloads`
// counts the distinct workloads among those batches.
std::vector<Member> informative(std::vector<Member> members, int* workloads) {
  std::map<std::pair<std::string, int64_t>, int> count;
  for (const Member& m : members) ++count[batch_of(m)];
  members.erase(std::remove_if(members.begin(), members.end(), [&](const Member& m) { return count[batch_of(m)] < 2; }),
                members.end());
  std::set<std::string> distinct;
  for (const Member& m : members) distinct.insert(m.sample->workload);
  *workloads = static_cast<int>(distinct.size());
  return members;
}

std::optional<FittedRankVector> fit_group(const std::vector<Member>& all, const RankFitOptions& o) {
  FittedRankVector out;
  const std::vector<Member> members = informative(all, &out.workloads);
  out.samples = static_cast<int>(members.size());
  if (out.samples < o.min_samples || out.workloads < o.min_workloads) return std::nullopt;
  const Pairs p = build_pairs(members);
  out.pairs = static_cast<int>(p.ij.size());
  if (p.ij.empty() || p.names.empty()) return std::nullopt;
  out.vector.names = p.names;
  out.vector.weights = newton(p, o);
  for (size_t k = 0; k < p.names.size(); ++k) {
    double sum = 0;
    for (const auto& row : p.x) sum += row[k];
    out.vector.means.push_back(sum / static_cast<double>(p.x.size()));
  }
  return out;
}

}  // namespace

std::vector<FittedRankVector> fit_rank_vectors(const GpuSpec& device, const std::vector<RankSample>& samples,
                                               const RankFitOptions& o) {
  DC_USER_CHECK(o.ridge > 0 && o.min_samples >= 2 && o.min_workloads >= 1 && o.iterations >= 1,
                "pairwise ranking calibration fit: bad options");
  std::map<GroupKey, std::vector<Member>> groups;
  for (const RankSample& s : samples) {
    if (!(s.estimate_us > 0 && s.measured_us > 0 && std::isfinite(s.estimate_us) && std::isfinite(s.measured_us)) ||
        is_reference_key(s.variant_key))
      continue;
    std::optional<VariantKeyParts> k = parse_variant_key(s.variant_key);
    if (!k || k->params.empty()) continue;
    groups[{s.kind, math_unit_of_path(k->precision), k->template_name}].push_back(
        {&s, rank_features(k->template_name, k->params, s.shape, device, s.estimate_us)});
  }
  std::vector<FittedRankVector> out;
  for (const auto& [key, members] : groups) {
    std::optional<FittedRankVector> f = fit_group(members, o);
    if (!f) continue;
    const auto& [kind, unit, template_name] = key;
    f->group = {device.name, kind, unit, template_name};
    out.push_back(std::move(*f));
  }
  return out;
}

int apply_rank_fit(const std::vector<FittedRankVector>& fit, Calibration& calibration) {
  for (const FittedRankVector& f : fit) calibration.rank_vectors[f.group] = f.vector;
  return static_cast<int>(fit.size());
}

std::string describe_rank_fit(const std::vector<FittedRankVector>& fit) {
  std::string out;
  for (const FittedRankVector& f : fit)
    out += fmt::format("{}{} {} weights ({} results, {} workloads)", out.empty() ? "" : ", ", std::get<3>(f.group),
                       f.vector.names.size(), f.samples, f.workloads);
  return out.empty() ? "none" : out;
}

std::vector<RankSample> rank_samples_of(const std::vector<EstimatorSample>& samples,
                                        const std::map<std::string, std::string>& canonical_of) {
  std::map<std::string, std::optional<WorkloadShape>> shapes;
  std::vector<RankSample> out;
  for (const EstimatorSample& s : samples) {
    auto c = canonical_of.find(s.workload);
    if (c == canonical_of.end() || !(s.estimate_us > 0)) continue;
    auto it = shapes.find(s.workload);
    if (it == shapes.end()) it = shapes.emplace(s.workload, rank_shape_of_canonical(c->second)).first;
    if (!it->second) continue;
    out.push_back({s.workload, s.kind, s.variant_key, *it->second, s.estimate_us, s.ratio * s.estimate_us, s.run});
  }
  return out;
}

}  // namespace dc
