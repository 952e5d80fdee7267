// The dispatch and collect stages: variants committed and jobs submitted; then every
// result committed as it arrives, in its own transaction, until each job has its result,
// the stop flag is set, or a GPU type has had no worker for worker_wait.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "estimator.h"
#include "ir/error.h"
#include "plausibility.h"
#include "sha256.h"
#include "tune_stages.h"

namespace dc::tune_stage {

namespace {

constexpr auto kCollectPoll = std::chrono::milliseconds(200);

WorkerInfo worker_of(const Measurement& m) {
  WorkerInfo w;
  w.name = m.worker;
  w.host = m.host.empty() ? m.worker.substr(0, m.worker.find('/')) : m.host;
  // The worker's own name for the device; failing that, the GPU type.
  if (!m.device.empty()) w.device = m.device;
  else w.device = m.emulated ? "emulated " + m.gpu_type : m.gpu_type;
  w.gpu_type = m.gpu_type;
  w.driver_version = m.driver_version;
  w.nvrtc_version = m.nvrtc_version;
  w.emulated = m.emulated;
  return w;
}

// An ok result below the variant's floor becomes `implausible`, loudly, with the worker's name.
Measurement checked_plausible(Measurement m, const std::string& key, const Dispatched& d) {
  const auto floor = d.floor_us.find(key);
  if (m.status != JobStatus::ok || floor == d.floor_us.end()) return m;
  const std::string why = implausibility(m.median_us, floor->second);
  if (why.empty()) return m;
  spdlog::error("{}: IMPLAUSIBLE time from worker {}: {}; recorded as implausible, never selected", key,
                m.worker, why);
  m.status = JobStatus::implausible;
  m.error = str_cat("worker ", m.worker, ": ", why);
  return m;
}

// A drift sentinel's result (tune_drift.cpp): for the drift check only, never recorded.
void accept_sentinel(const Measurement& m, const std::string& key, Dispatched& d, Ledger& ledger, Collected& c) {
  const auto it = d.gpu_of.find(key);
  if (it == d.gpu_of.end()) return;  // late: its round is over
  const size_t gi = it->second;
  d.gpu_of.erase(it);
  --d.per_gpu[gi];
  ++c.per_gpu_results[gi];
  spdlog::info("{}: drift sentinel from worker {}: {} {:.4g} us", key, m.worker, job_status_name(m.status), m.median_us);
  Measurement kept = m;
  kept.samples_us.clear();
  ledger.sentinels[gi].push_back(std::move(kept));
  d.progress->job_done(m.gpu_type, m.status == JobStatus::ok);
}

// One result: committed at once, in its own transaction.
void accept(const Measurement& in, Dispatched& d, const std::vector<GpuTuneResult>& gpus,
            TuningDb& db, const TuneOptions& opts, Ledger& ledger, Collected& c) {
  const std::string key = job_key(in.workload, in.variant_key, in.gpu_type);
  const Measurement m = checked_plausible(in, key, d);
  if (!ledger.variants.count({m.workload, m.variant_key})) {
    spdlog::warn("result for a job this tune did not send ({}): ignored", key);
    return;
  }
  if (ledger.workers.insert(m.worker).second) {
    db.commit_worker(worker_of(m));
    spdlog::info("worker {}: device health {}", m.worker, describe_health(m.health));
  }
  if (d.sentinel_keys.count(key)) return accept_sentinel(m, key, d, ledger, c);
  // internal_error is a dc bug, not a verdict on the variant: counted and logged, never
  // recorded (a later tune measures the variant again).
  if (m.status == JobStatus::internal_error)
    spdlog::error("{}: INTERNAL ERROR (a dc bug; not recorded; the tune will not say ok): {}", key, m.error);
  else if (m.status == JobStatus::unhealthy)
    spdlog::error("{}: not timed: every device that took it was unhealthy (not recorded): {}", key, m.error);
  else if (opts.retune || d.check_keys.count(key) ? !db.commit_measurement(m) : !db.commit_first_measurement(m))
    // Another tune on this DB recorded the variant first (or this is a resend): not added,
    // so that two tunes at once leave one result per variant (docs/tuning-db.md).
    spdlog::info("{}: already recorded by another tune on this DB: this result is not added", key);
  ++c.results;
  const auto it = d.gpu_of.find(key);
  if (it == d.gpu_of.end()) return;  // a late result of a job given up: kept, not counted
  const size_t gi = it->second;
  d.gpu_of.erase(it);
  --d.per_gpu[gi];
  ++c.per_gpu_results[gi];
  ++c.by_status[gi][m.status];
  if (m.status == JobStatus::internal_error) c.internal_error_workloads[gi].insert(m.workload);
  if (m.status == JobStatus::implausible) ++c.implausible_by_worker[gi][m.worker];
  c.busy_seconds[gi][m.worker] += m.run_seconds;
  if (m.status == JobStatus::ok) {
    Measurement kept = m;  // what the cross-check compares: the summary, not the samples
    kept.samples_us.clear();
    kept.samples_us.shrink_to_fit();
    ledger.ok_results[{gi, m.workload, m.variant_key}].push_back(std::move(kept));
  }
  if (m.emulated != (gpus[gi].source == TimingSource::emulated) && ledger.warned_source.insert(gi).second)
    spdlog::warn("{} results from {} devices arrive in a {} tune: they are kept but not used",
                 m.gpu_type, m.emulated ? "emulated" : "real", source_name(gpus[gi].source));
  if (m.status != JobStatus::ok) spdlog::debug("{}: {} ({})", key, job_status_name(m.status), m.error);
  d.progress->job_done(m.gpu_type, m.status == JobStatus::ok);
}

// The jobs of a GPU type that has had no worker for worker_wait are given up.
void give_up_workerless(const Farm& farm, Dispatched& d, const std::vector<GpuTuneResult>& gpus,
                        const TuneOptions& opts, std::map<size_t, Clock::time_point>& since,
                        Collected& c) {
  const FarmStatus s = farm.status();
  for (auto& [gi, n] : d.per_gpu) {
    if (n == 0) continue;
    const std::string& type = gpus[gi].gpu->name;
    const auto it = s.workers_per_gpu_type.find(type);
    if (it != s.workers_per_gpu_type.end() && it->second > 0) {
      since.erase(gi);
      continue;
    }
    if (Clock::now() - since.emplace(gi, Clock::now()).first->second < opts.worker_wait) continue;
    spdlog::warn("no {} worker for {:.0f} s: giving up its {} outstanding jobs (a rerun "
                 "measures them)", type, std::chrono::duration<double>(opts.worker_wait).count(), n);
    for (auto j = d.gpu_of.begin(); j != d.gpu_of.end();) {
      if (j->second == gi) j = d.gpu_of.erase(j);
      else ++j;
    }
    c.abandoned[gi] += n;
    n = 0;
  }
}

}  // namespace

Dispatched dispatch(const std::vector<PlannedJob>& jobs, std::vector<FarmJob> farm_jobs,
                    const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, Farm& farm,
                    TuningDb& db, const TuneOptions& opts, Ledger& ledger) {
  DC_INTERNAL_CHECK(jobs.size() == farm_jobs.size(), "generated ", farm_jobs.size(), " jobs for ",
                    jobs.size());
  Dispatched d;
  d.sent.assign(gpus.size(), 0);
  d.checks.assign(gpus.size(), 0);
  d.progress = std::make_unique<Progress>(opts.progress);
  for (size_t i = 0; i < farm_jobs.size(); ++i) {
    const PlannedJob& pj = jobs[i];
    const Workload& w = plan.workload_set.workloads[pj.workload];
    if (ledger.variants.insert({w.signature, pj.variant.key()}).second)
      db.commit_variant(w.signature, pj.variant, fnv1a_hex(farm_jobs[i].variant_kernel.source));
    const std::string& gpu = gpus[pj.gpu].gpu->name;
    const std::string key = job_key(w.signature, pj.variant.key(), gpu);
    DC_INTERNAL_CHECK(d.gpu_of.emplace(key, pj.gpu).second, "job ", key, " planned twice");
    d.floor_us[key] = plausibility_floor_us(w, *gpus[pj.gpu].gpu, pj.variant.precision);
    ++d.per_gpu[pj.gpu];
    d.progress->add_jobs(gpu, 1);
    ++d.sent[pj.gpu];
    if (pj.check) ++d.checks[pj.gpu];
    if (pj.check || pj.again) d.check_keys.insert(key);
    if (pj.sentinel) d.sentinel_keys.insert(key);
    FarmJob& fj = farm_jobs[i];
    fj.avoid_workers = pj.avoid_workers;
    if (const auto q = ledger.quarantined.find(pj.gpu); q != ledger.quarantined.end())
      for (const auto& [worker, why] : q->second) fj.avoid_workers.insert(worker);
    ++d.jobs;
    // What the farm service (tune --farm) records and may answer from its DB.
    FarmJob::ServiceInfo& si = farm_jobs[i].service;
    si.workload_kind = cluster_kind_name(w.kind);
    si.workload_canonical = w.canonical;
    si.workload_base_signature = workload_record(w).base_signature;
    si.variant_template = pj.variant.template_name;
    si.variant_precision = pj.variant.precision;
    si.variant_params = pj.variant.params;
    si.emulated = gpus[pj.gpu].source == TimingSource::emulated;
    si.nvrtc_major = gpus[pj.gpu].nvrtc_major;
    si.reuse = !opts.retune && !pj.check && !pj.again && !pj.sentinel;
    farm.submit(std::move(farm_jobs[i]));
  }
  return d;
}

Collected collect(Dispatched& d, const std::vector<GpuTuneResult>& gpus, Farm& farm, TuningDb& db,
                  const TuneOptions& opts, Ledger& ledger, const StageLog& log) {
  Collected c;
  c.per_gpu_results.assign(gpus.size(), 0);
  c.abandoned.assign(gpus.size(), 0);
  c.by_status.resize(gpus.size());
  c.busy_seconds.resize(gpus.size());
  c.internal_error_workloads.resize(gpus.size());
  c.implausible_by_worker.resize(gpus.size());
  const auto t0 = Clock::now();
  std::map<size_t, Clock::time_point> workerless_since;
  auto last_status = Clock::now();
  while (!d.gpu_of.empty()) {
    if (opts.stop && opts.stop->load()) {
      c.interrupted = true;
      log.notice(fmt::format("interrupted: stopping the farm; {} results outstanding are not "
                             "waited for (a rerun measures them)", d.gpu_of.size()));
      farm.shutdown();
      for (auto& m : farm.collect(std::chrono::milliseconds(0))) accept(m, d, gpus, db, opts, ledger, c);
      c.outstanding = d.gpu_of.size();
      break;
    }
    for (auto& m : farm.collect(kCollectPoll)) accept(m, d, gpus, db, opts, ledger, c);
    d.progress->tick();
    if (Clock::now() - last_status >= std::chrono::seconds(1)) {
      last_status = Clock::now();
      give_up_workerless(farm, d, gpus, opts, workerless_since, c);
    }
  }
  c.seconds = seconds_since(t0);
  d.progress->finish();
  return c;
}

}  // namespace dc::tune_stage
