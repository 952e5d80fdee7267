// The in-memory tuning DB: the same contract as the SQLite one (the interface tests run
// against both), kept in maps; nothing survives the process.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "ir/error.h"
#include "records.h"
#include "tuning_db.h"
#include "variant.h"

namespace dc {

namespace {

class MemoryDb final : public TuningDb {
 public:
  void commit_gpu_type(const GpuSpec& spec) override {
    std::lock_guard lock(mu_);
    gpus_[spec.name] = {spec.name, spec.arch, spec.cc_major, spec.cc_minor};
  }

  void commit_worker(const WorkerInfo& w) override {
    std::lock_guard lock(mu_);
    require_gpu(w.gpu_type);
    workers_[w.name] = w;
  }

  int64_t commit_model(const std::string& name, const std::string& sha256) override {
    std::lock_guard lock(mu_);
    DC_INTERNAL_CHECK(sha256.size() == 64, "model sha256 '", sha256, "' is not 64 hex digits");
    auto it = std::find(models_.begin(), models_.end(), std::pair(name, sha256));
    if (it != models_.end()) return it - models_.begin() + 1;
    models_.emplace_back(name, sha256);
    return static_cast<int64_t>(models_.size());
  }

  void commit_workload(const WorkloadRecord& w) override {
    std::lock_guard lock(mu_);
    workloads_.emplace(w.signature, w);
  }

  void commit_model_workloads(int64_t model_id,
                              const std::vector<std::pair<WorkloadRecord, int>>& ws) override {
    std::lock_guard lock(mu_);
    DC_INTERNAL_CHECK(model_id >= 1 && model_id <= static_cast<int64_t>(models_.size()),
                      "unknown model id ", model_id);
    for (const auto& [w, count] : ws) {
      DC_INTERNAL_CHECK(count > 0, "workload ", w.signature, " counted ", count, " times");
      workloads_.emplace(w.signature, w);
      model_workloads_[model_id][w.signature] = count;
    }
  }

  bool commit_variant(const std::string& workload, const Variant& v,
                      const std::string& source_hash) override {
    std::lock_guard lock(mu_);
    DC_INTERNAL_CHECK(workloads_.count(workload), "variant ", v.key(), " of unknown workload ",
                      workload, ": commit the workload first");
    const auto [it, added] = variants_.insert_or_assign({workload, v.key()}, source_hash);
    return added;
  }

  bool commit_measurement(const Measurement& in) override { return commit(in, /*first_only=*/false); }
  bool commit_first_measurement(const Measurement& in) override { return commit(in, /*first_only=*/true); }

  bool commit(const Measurement& in, bool first_only) {
    const Measurement m = checked_measurement(in);
    std::lock_guard lock(mu_);
    DC_INTERNAL_CHECK(variants_.count({m.workload, m.variant_key}), "measurement of unknown variant ",
                      m.variant_key, " of workload ", m.workload, ": commit the variant first");
    require_gpu(m.gpu_type);
    auto w = workers_.find(m.worker);
    DC_INTERNAL_CHECK(w != workers_.end(), "measurement from unknown worker '", m.worker,
                      "': commit the worker first");
    DC_INTERNAL_CHECK(w->second.emulated == m.emulated, "measurement from worker '", m.worker,
                      "' disagrees with it on being emulated");
    if (first_only && is_final_status(m.status)) {
      const TimingSource source = m.emulated ? TimingSource::emulated : TimingSource::real;
      for (const Measurement* x : of(m.workload, m.gpu_type))
        if (x->variant_key == m.variant_key && x->source_hash == m.source_hash &&
            is_final(*x, source, toolchain_major(m.nvrtc_version)))
          return false;
    }
    const auto id = std::tuple(m.workload, m.variant_key, m.gpu_type, m.worker, m.finished_unix_ms);
    if (!job_ids_.insert(id).second) return false;
    by_workload_gpu_[{m.workload, m.gpu_type}].push_back(measurements_.size());
    measurements_.push_back(m);
    return true;
  }

  bool mark_implausible(const Measurement& m, const std::string& why) override {
    std::lock_guard lock(mu_);
    for (Measurement& x : measurements_)
      if (x.status == JobStatus::ok && x.workload == m.workload && x.variant_key == m.variant_key &&
          x.gpu_type == m.gpu_type && x.worker == m.worker && x.finished_unix_ms == m.finished_unix_ms) {
        x.status = JobStatus::implausible;
        x.error = why;
        return true;
      }
    return false;
  }

  int64_t begin_run(const RunInfo& run) override {
    std::lock_guard lock(mu_);
    DC_INTERNAL_CHECK(run.model_id >= 1 && run.model_id <= static_cast<int64_t>(models_.size()),
                      "run of unknown model id ", run.model_id);
    for (const auto& g : run.gpu_types) require_gpu(g);
    runs_.push_back({static_cast<int64_t>(runs_.size()) + 1, random_run_uid(), run, now_unix_ms(),
                     0, RunStatus::running});
    return runs_.back().id;
  }

  void end_run(int64_t run_id, RunStatus status) override {
    std::lock_guard lock(mu_);
    RunRecord& r = require_run(run_id);
    r.status = status;
    r.ended_ms = now_unix_ms();
  }

  void commit_run_internal_errors(int64_t run_id, int64_t jobs, int64_t workloads) override {
    std::lock_guard lock(mu_);
    RunRecord& r = require_run(run_id);
    r.internal_error_jobs = jobs;
    r.internal_error_workloads = workloads;
  }

  void commit_plan(const PlanRecord& plan) override {
    std::lock_guard lock(mu_);
    require_run(plan.run_id);
    require_gpu(plan.gpu_type);
    plans_[{plan.run_id, plan.gpu_type}] = plan;
  }

  void commit_gpu_busy(const std::vector<GpuBusyRecord>& records) override {
    std::lock_guard lock(mu_);
    for (const auto& r : records) {
      require_run(r.run_id);
      require_gpu(r.gpu_type);
      DC_INTERNAL_CHECK(workers_.count(r.worker), "busy record of unknown worker '", r.worker, "'");
      DC_INTERNAL_CHECK(r.busy_seconds >= 0 && r.measure_seconds > 0, "busy record of worker '",
                        r.worker, "': ", r.busy_seconds, " s busy over ", r.measure_seconds, " s");
      gpu_busy_[{r.run_id, r.gpu_type, r.worker}] = r;
    }
  }

  bool has_measurement(const std::string& workload, const std::string& variant_key,
                       const std::string& gpu_type, TimingSource source,
                       const std::string& nvrtc_major) const override {
    std::lock_guard lock(mu_);
    for (const Measurement* m : of(workload, gpu_type))
      if (m->variant_key == variant_key && is_final(*m, source, nvrtc_major)) return true;
    return false;
  }

  std::set<std::string> measured_variants(const std::string& workload, const std::string& gpu_type,
                                          TimingSource source,
                                          const std::string& nvrtc_major) const override {
    std::lock_guard lock(mu_);
    std::set<std::string> out;
    for (const Measurement* m : of(workload, gpu_type))
      if (is_final(*m, source, nvrtc_major)) out.insert(m->variant_key);
    return out;
  }

  std::map<std::string, std::set<std::string>> measured_source_hashes(
      const std::string& workload, const std::string& gpu_type, TimingSource source,
      const std::string& nvrtc_major) const override {
    std::lock_guard lock(mu_);
    std::map<std::string, std::set<std::string>> out;
    for (const Measurement* m : of(workload, gpu_type))
      if (is_final(*m, source, nvrtc_major)) out[m->variant_key].insert(m->source_hash);
    return out;
  }

  std::vector<Measurement> query(const MeasurementQuery& q) const override {
    std::lock_guard lock(mu_);
    std::vector<Measurement> out;
    for (const Measurement& m : measurements_) {
      if ((q.workload && m.workload != *q.workload) ||
          (q.variant_key && m.variant_key != *q.variant_key) ||
          (q.gpu_type && m.gpu_type != *q.gpu_type) || (q.worker && m.worker != *q.worker) ||
          (q.source && source_of(m.emulated) != *q.source) || (q.status && m.status != *q.status) ||
          (q.current_source_only && variants_.at({m.workload, m.variant_key}) != m.source_hash))
        continue;
      out.push_back(m);
    }
    std::stable_sort(out.begin(), out.end(), [](const Measurement& a, const Measurement& b) {
      return a.finished_unix_ms < b.finished_unix_ms;
    });
    if (q.limit >= 0 && out.size() > static_cast<size_t>(q.limit))
      out.resize(static_cast<size_t>(q.limit));
    return out;
  }

  std::vector<EstimatorSample> estimator_samples(const std::string& gpu_type, TimingSource source,
                                                 const std::string& storage) const override {
    std::lock_guard lock(mu_);
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (const RunRecord& r : runs_) runs.emplace_back(r.started_ms, r.id);
    std::sort(runs.begin(), runs.end());
    std::vector<EstimatorSample> out;
    for (const Measurement& m : measurements_) {
      if (m.gpu_type != gpu_type || source_of(m.emulated) != source ||
          m.status != JobStatus::ok || !(m.estimate_us > 0) || !(m.median_us > 0) ||
          (!storage.empty() && workload_storage(workloads_.at(m.workload).canonical) != storage))
        continue;
      out.push_back({m.workload, workloads_.at(m.workload).kind, m.variant_key, m.median_us / m.estimate_us,
                     m.estimate_us, run_begun_by(runs, m.finished_unix_ms)});
    }
    return out;
  }

  std::optional<WorkloadRecord> find_workload(const std::string& signature) const override {
    std::lock_guard lock(mu_);
    auto it = workloads_.find(signature);
    if (it == workloads_.end()) return std::nullopt;
    return it->second;
  }

  std::vector<std::pair<std::string, int>> model_workloads(int64_t model_id) const override {
    std::lock_guard lock(mu_);
    auto it = model_workloads_.find(model_id);
    if (it == model_workloads_.end()) return {};
    return {it->second.begin(), it->second.end()};
  }

  std::vector<GpuTypeRecord> gpu_types() const override {
    std::lock_guard lock(mu_);
    std::vector<GpuTypeRecord> out;
    for (const auto& [name, g] : gpus_) out.push_back(g);
    return out;
  }

  std::vector<RunRecord> runs() const override {
    std::lock_guard lock(mu_);
    return runs_;
  }

  std::vector<PlanRecord> plans(int64_t run_id) const override {
    std::lock_guard lock(mu_);
    std::vector<PlanRecord> out;
    for (const auto& [key, p] : plans_)
      if (key.first == run_id) out.push_back(p);
    return out;
  }

  std::vector<GpuBusyRecord> gpu_busy(int64_t run_id) const override {
    std::lock_guard lock(mu_);
    std::vector<GpuBusyRecord> out;
    for (const auto& [key, r] : gpu_busy_)
      if (std::get<0>(key) == run_id) out.push_back(r);
    return out;
  }

 private:
  // The measurements of one workload on one GPU type, in commit order.
  std::vector<const Measurement*> of(const std::string& workload, const std::string& gpu) const {
    std::vector<const Measurement*> out;
    auto it = by_workload_gpu_.find({workload, gpu});
    if (it != by_workload_gpu_.end())
      for (size_t i : it->second) out.push_back(&measurements_[i]);
    return out;
  }
  static bool is_final(const Measurement& m, TimingSource source, const std::string& nvrtc_major) {
    return source_of(m.emulated) == source && is_final_status(m.status) &&
           (nvrtc_major.empty() || toolchain_major(m.nvrtc_version) == nvrtc_major);
  }
  void require_gpu(const std::string& name) const {
    DC_INTERNAL_CHECK(gpus_.count(name), "unknown GPU type '", name,
                      "': commit the GPU type first");
  }
  RunRecord& require_run(int64_t id) {
    DC_INTERNAL_CHECK(id >= 1 && id <= static_cast<int64_t>(runs_.size()), "unknown run id ", id);
    return runs_[static_cast<size_t>(id - 1)];
  }

  mutable std::mutex mu_;
  std::map<std::string, GpuTypeRecord> gpus_;
  std::map<std::string, WorkerInfo> workers_;
  std::vector<std::pair<std::string, std::string>> models_;  // id - 1 -> (name, sha256)
  std::map<std::string, WorkloadRecord> workloads_;
  std::map<int64_t, std::map<std::string, int>> model_workloads_;
  std::map<std::pair<std::string, std::string>, std::string> variants_;  // -> source hash
  std::vector<Measurement> measurements_;                                // in commit order
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> by_workload_gpu_;
  std::set<std::tuple<std::string, std::string, std::string, std::string, int64_t>> job_ids_;
  std::vector<RunRecord> runs_;
  std::map<std::pair<int64_t, std::string>, PlanRecord> plans_;
  std::map<std::tuple<int64_t, std::string, std::string>, GpuBusyRecord> gpu_busy_;
};

}  // namespace

std::unique_ptr<TuningDb> make_memory_db() { return std::make_unique<MemoryDb>(); }

}  // namespace dc
