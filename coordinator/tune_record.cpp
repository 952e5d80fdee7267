// The record stages: the model and its workloads with the start of the run (before any
// job is sent), and at the end the chosen plans with the run's status.
#include <sstream>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/json_writer.h"
#include "tune_stages.h"

namespace dc::tune_stage {

namespace {

// The run's options as given, plus the calibration factors its estimates used (per kind and
// unit, per parameter value: "conv fp32 conv_implicit_gemm block_k=32", and each ranking
// vector's weight and mean per feature: "conv fp32 conv_implicit_gemm rank lbk" / "... mean").
std::string options_json(const TuneOptions& opts, const Calibration& calibration) {
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_object();
  for (const GpuSpec* gpu : opts.gpus) {
    j.key(gpu->name).begin_object();
    for (const auto& [key, factor] : calibration.factors)
      if (key.first == gpu->name) j.field(cluster_kind_name(key.second), factor);
    for (const auto& [key, factor] : calibration.unit_factors)
      if (std::get<0>(key) == gpu->name)
        j.field(std::string(cluster_kind_name(std::get<1>(key))) + " " +
                    std::string(math_unit_name(std::get<2>(key))),
                factor);
    for (const auto& [group, params] : calibration.param_factors)
      if (std::get<0>(group) == gpu->name)
        for (const auto& [param, values] : params)
          for (const auto& [value, factor] : values)
            j.field(fmt::format("{} {} {} {}={}", cluster_kind_name(std::get<1>(group)),
                                math_unit_name(std::get<2>(group)), std::get<3>(group), param, value),
                    factor);
    for (const auto& [group, vector] : calibration.rank_vectors)
      if (std::get<0>(group) == gpu->name)
        for (size_t i = 0; i < vector.names.size(); ++i) {
          const std::string prefix = fmt::format("{} {} {} rank {}", cluster_kind_name(std::get<1>(group)),
                                                 math_unit_name(std::get<2>(group)), std::get<3>(group),
                                                 vector.names[i]);
          j.field(prefix, vector.weights[i]);
          j.field(prefix + " mean", vector.means[i]);
        }
    j.end_object();
  }
  j.end_object();
  std::string options = opts.options_json;
  const size_t close = options.find_last_of('}');
  DC_INTERNAL_CHECK(!options.empty() && options.front() == '{' && close != std::string::npos,
                    "tune options must be a JSON object, got '", options, "'");
  const bool empty = options.find_first_not_of(" \t\n", 1) == close;
  options.insert(close, fmt::format("{}\"calibration\":{}", empty ? "" : ",", os.str()));
  return options;
}

}  // namespace

int64_t record_model(TuningDb& db, const ModelPlan& plan, const TuneOptions& opts,
                     const Calibration& calibration) {
  for (const GpuSpec* gpu : opts.gpus) db.commit_gpu_type(*gpu);
  const int64_t model_id = db.commit_model(opts.model_name, opts.model_sha256);
  std::map<size_t, int> counts;
  for (size_t w : plan.workload_set.candidate_workload) ++counts[w];
  std::vector<std::pair<WorkloadRecord, int>> records;
  for (const auto& [w, n] : counts)
    records.emplace_back(workload_record(plan.workload_set.workloads[w]), n);
  db.commit_model_workloads(model_id, records);
  RunInfo info;
  info.model_id = model_id;
  for (const GpuSpec* gpu : opts.gpus) info.gpu_types.push_back(gpu->name);
  info.options_json = options_json(opts, calibration);
  info.host = opts.host;
  info.precision = std::string(precision_name(opts.plan.precision));
  return db.begin_run(info);
}

RunStatus record_plans(TuningDb& db, int64_t run_id, const ModelPlan& plan,
                       const std::vector<GpuTuneResult>& gpus, const TuneOptions& opts,
                       bool interrupted, bool complete) {
  for (const auto& gr : gpus) {
    if (!gr.has_results()) continue;
    PlanRecord p;
    p.precision = std::string(precision_name(opts.plan.precision));
    p.run_id = run_id;
    p.gpu_type = gr.gpu->name;
    p.source = gr.source;
    for (const auto& c : gr.choices) {
      PlanChoice pc;
      pc.cluster = fmt::format("{}#{}", plan.candidates[c.candidate].pattern, c.candidate);
      pc.workload = plan.workload_set.workloads[c.workload].signature;
      pc.variant_key = c.reference ? kReferenceTemplate : c.variant_key;
      pc.estimated_us = c.estimated_us;
      pc.measured_us = c.measured_us;
      p.choices.push_back(std::move(pc));
    }
    p.estimated_total_us = gr.estimated_total_us;
    p.measured_total_us = gr.measured_total_us;
    db.commit_plan(p);
  }
  for (const auto& gr : gpus) db.commit_gpu_busy(gr.busy_records(run_id));
  int64_t ie_jobs = 0, ie_workloads = 0;
  for (const auto& gr : gpus) {
    ie_jobs += gr.internal_error_jobs();
    ie_workloads += static_cast<int64_t>(gr.internal_error_workloads.size());
  }
  if (ie_jobs > 0) db.commit_run_internal_errors(run_id, ie_jobs, ie_workloads);
  const RunStatus status =
      interrupted ? RunStatus::interrupted : (complete ? RunStatus::ok : RunStatus::failed);
  db.end_run(run_id, status);
  return status;
}

}  // namespace dc::tune_stage

namespace dc {

std::vector<GpuBusyRecord> GpuTuneResult::busy_records(int64_t run_id) const {
  std::vector<GpuBusyRecord> out;
  if (measure_seconds <= 0 || !gpu) return out;
  for (const auto& [worker, busy] : device_busy_seconds)
    out.push_back({run_id, gpu->name, worker, busy, measure_seconds});
  return out;
}

}  // namespace dc
