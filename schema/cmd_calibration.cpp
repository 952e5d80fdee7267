// dc-db calibration: the estimator's calibration factors that a tune would fit from this
// DB (estimator/calibration_fit.h), per cluster kind, with the results behind each.
#include <algorithm>
#include <iostream>

#include <fmt/format.h>

#include "calibration_fit.h"
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
      "emulated", po::bool_switch(), "emulated results instead of real ones");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  const std::string gpu = (*vm)["gpu"].as<std::string>();
  const bool emulated = (*vm)["emulated"].as<bool>();
  const std::unique_ptr<TuningDb> tuning_db = open_tuning_db(db, /*read_only=*/true);
  require_gpu_type(*tuning_db, gpu);
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
  if (!emulated) print_param_fit(fit_param_factors(gpu, tuning_db->estimator_samples(gpu, TimingSource::real, "")));
  return kExitOk;
}

}  // namespace dc::dcdb
