// dc-db calibration: the estimator's calibration factors that a tune would fit from this
// DB (estimator/calibration_fit.h), per cluster kind, with the results behind each.
#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "calibration_rank_fit.h"
#include "rank_fit_db.h"
#include "gpu/gpu_catalog.h"
#include "dc_db.h"
#include "ir/error.h"
#include "tuning_db.h"

namespace dc::dcdb {

namespace po = boost::program_options;

namespace {

void require_gpu_type(const TuningDb& db, const std::string& gpu) {
  std::string known;
  for (const GpuTypeRecord& g : db.gpu_types()) {
    if (g.name == gpu) return;
    known += (known.empty() ? "" : ", ") + g.name;
  }
  throw_user_error("no GPU type '", gpu, "' in the tuning DB (GPU types: ",
                   known.empty() ? "none" : known, ")");
}

std::string note(const FittedFactor& f, const CalibrationFitOptions& o) {
  if (!f.used)
    return fmt::format("too few (a tune needs {}): uncalibrated", o.min_samples);
  if (f.clamped) return fmt::format("clamped to [{}, {}]", o.min_factor, o.max_factor);
  return "";
}

// The per-parameter factors (real results only, as a tune fits them).
void print_param_fit(const std::vector<FittedParamFactor>& fit) {
  const ParamFitOptions o;
  if (fit.empty()) {
    std::cout << fmt::format("\nper-parameter factors: none (a value needs {} results in {} workloads that vary "
                             "its parameter)\n", o.min_samples, o.min_workloads);
    return;
  }
  std::cout << "\nper-parameter factors (within workloads; a tune multiplies a variant's estimate by its values'):\n";
  Table t({"kind", "unit", "template", "parameter", ">value", ">results", ">factor"});
  for (const FittedParamFactor& f : fit)
    t.add({cluster_kind_name(std::get<1>(f.group)), std::string(math_unit_name(std::get<2>(f.group))),
           std::get<3>(f.group), f.param, std::to_string(f.value), std::to_string(f.samples),
           fmt::format("{:.3f}{}", f.factor, f.clamped ? " (clamped)" : "")});
  t.print(std::cout);
}

// The pairwise ranking vectors (real results only, as a tune fits them): one row per template,
// with its largest weights per unit of the feature.
void print_rank_fit(const std::vector<FittedRankVector>& fit) {
  const RankFitOptions o;
  if (fit.empty()) {
    std::cout << fmt::format("\npairwise ranking vectors: none (a template needs {} results in {} workloads with "
                             "2 or more)\n", o.min_samples, o.min_workloads);
    return;
  }
  std::cout << "\npairwise ranking vectors (within workloads; they replace a template's per-parameter factors):\n";
  Table t({"kind", "unit", "template", ">results", ">workloads", ">pairs", ">features", "largest weights"});
  for (const FittedRankVector& f : fit) {
    std::vector<size_t> order(f.vector.names.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::fabs(f.vector.weights[a]) > std::fabs(f.vector.weights[b]);
    });
    std::string largest;
    for (size_t i = 0; i < std::min<size_t>(4, order.size()); ++i)
      largest += fmt::format("{}{} {:+.3f}", i ? ", " : "", f.vector.names[order[i]], f.vector.weights[order[i]]);
    t.add({cluster_kind_name(std::get<1>(f.group)), std::string(math_unit_name(std::get<2>(f.group))),
           std::get<3>(f.group), std::to_string(f.samples), std::to_string(f.workloads), std::to_string(f.pairs),
           std::to_string(f.vector.names.size()), largest});
  }
  t.print(std::cout);
}

// The real calibration fits of `gpu` from `tuning_db`: per-parameter factors, ranking vectors.
Calibration fit_variant_calibration(const TuningDb& tuning_db, const GpuSpec& gpu,
                                    std::vector<FittedParamFactor>* params, std::vector<FittedRankVector>* ranks) {
  const std::vector<EstimatorSample> samples = tuning_db.estimator_samples(gpu.name, TimingSource::real, "");
  *params = fit_param_factors(gpu.name, samples);
  *ranks = fit_rank_vectors_of_db(tuning_db, gpu, samples);
  Calibration c;
  apply_param_fit(*params, c);
  apply_rank_fit(*ranks, c);
  for (const FittedRankVector& f : *ranks) c.param_factors.erase(f.group);
  return c;
}

// `--factors-of DB2`: "MEASUREMENT_ID FACTOR" per real result of DB2 with an estimate (any
// status): what this DB's real fits multiply the variant's estimate by to rank it among its
// workload's variants (its per-parameter factors, or exp of its ranking score), without the
// per-kind factor (which reorders nothing). What scripts/bench_opencl.py
// --rank-calibration-from scores.
void print_factors_of(const Calibration& c, const GpuSpec& gpu, const std::string& other) {
  sqlite::Connection conn = open_for_reading(other);
  sqlite::Query q = conn.query(
      "SELECT m.id, w.kind, v.key, m.estimate_us, w.canonical FROM measurements m "
      "JOIN variants v ON v.id = m.variant_id JOIN workloads w ON w.signature = v.workload "
      "WHERE m.gpu_type = ? AND m.emulated = 0 AND m.estimate_us > 0");
  q.bind_all(gpu.name);
  while (q.step()) {
    const std::optional<ClusterKind> kind = parse_cluster_kind(q.text(1));
    std::optional<WorkloadShape> shape = rank_shape_of_canonical(q.text(4));
    if (!kind || !shape) continue;
    shape->kind = *kind;
    const std::string key = q.text(2);
    const double est = q.real(3);
    const double factor = c.variant_factor(gpu.name, *kind, key) / c.factor(gpu.name, *kind, math_unit_of_key(key)) *
                          std::exp(c.rank_log(gpu, *shape, key, est));
    std::cout << fmt::format("{} {:.9g}\n", q.int64(0), factor);
  }
}

}  // namespace

int cmd_calibration(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc(
      "dc-db calibration: the estimator's calibration factors a tune fits from this DB\n"
      "(per cluster kind and math unit: the median of measured / estimated over the ok\n"
      "results with an estimate; a unit with too few results of its own runs uncalibrated;\n"
      "a factor the tune config sets for the kind wins over it), and from real\n"
      "results the per-parameter factors that reorder a workload's variants");
  desc.add_options()("help,h", "this text")("gpu", po::value<std::string>()->required(),
                                            "GPU type, e.g. h100")(
      "emulated", po::bool_switch(), "emulated results instead of real ones")(
      "factors-of", po::value<std::string>(),
      "only print 'MEASUREMENT_ID FACTOR' for every real result with an estimate in this other DB: "
      "the per-parameter or ranking factor this DB's fit gives it (scripts/bench_opencl.py)");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  const std::string gpu = (*vm)["gpu"].as<std::string>();
  const bool emulated = (*vm)["emulated"].as<bool>();
  const std::unique_ptr<TuningDb> tuning_db = open_tuning_db(db, /*read_only=*/true);
  require_gpu_type(*tuning_db, gpu);
  std::vector<FittedParamFactor> params;
  std::vector<FittedRankVector> ranks;
  if (vm->count("factors-of")) {
    const GpuCatalog catalog = GpuCatalog::builtin();
    const GpuSpec& spec = catalog.require(gpu);
    print_factors_of(fit_variant_calibration(*tuning_db, spec, &params, &ranks), spec,
                     (*vm)["factors-of"].as<std::string>());
    return kExitOk;
  }
  const CalibrationFitOptions options;
  const std::vector<FittedFactor> fit =
      fit_calibration(tuning_db->estimator_ratios(gpu, source_of(emulated)), options);
  std::cout << fmt::format("calibration for {} ({} results)\n", gpu, source_arg(emulated));
  if (fit.empty()) {
    std::cout << "no ok results with an estimate: the model runs uncalibrated\n";
    sqlite::Connection conn = open_for_reading(db);
    note_other_source(conn, gpu, emulated);
    return kExitOk;
  }
  const bool notes = std::any_of(fit.begin(), fit.end(),
                                 [&](const FittedFactor& f) { return !note(f, options).empty(); });
  Table t(notes ? std::vector<std::string>{"kind", "unit", ">results", ">factor", "note"}
                : std::vector<std::string>{"kind", "unit", ">results", ">factor"});
  for (const FittedFactor& f : fit) {
    std::vector<std::string> row = {cluster_kind_name(f.kind), std::string(math_unit_name(f.unit)),
                                    std::to_string(f.samples),
                                    f.used ? fmt::format("{:.3f}", f.factor) : "-"};
    if (notes) row.push_back(note(f, options));
    t.add(std::move(row));
  }
  t.print(std::cout);
  if (emulated) return kExitOk;
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec* spec = catalog.find(gpu);
  if (!spec) {
    print_param_fit(fit_param_factors(gpu, tuning_db->estimator_samples(gpu, TimingSource::real, "")));
    std::cout << "\npairwise ranking vectors: none (" << gpu << " is not in the GPU table)\n";
    return kExitOk;
  }
  fit_variant_calibration(*tuning_db, *spec, &params, &ranks);
  print_param_fit(params);
  print_rank_fit(ranks);
  return kExitOk;
}

}  // namespace dc::dcdb
