// The tune driver: the stages in order (tune_stages.h has one file per stage), each timed
// and logged by StageLog; the stages return typed results and only this file assembles
// the TuneResult. Shaped like the simplify driver (common/passes/simplify.cpp).
#include "tune.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "ir/error.h"
#include "nvrtc.h"
#include "sha256.h"
#include "train_options.h"
#include "tune_stages.h"

namespace dc {

namespace {

using namespace tune_stage;

// The toolchain whose results a GPU type reuses and selects: the NVRTC that compiles for it
// here (12 for sm_70, 13 for sm_80 where both are installed).
std::string nvrtc_major_for(const GpuSpec& gpu) {
  const std::string v = nvrtc_version_for(gpu.sm_arch());
  return toolchain_major(v.empty() ? nvrtc_version() : v);
}

std::string model_name_from_path(const std::string& path) {
  const std::filesystem::path p(path);
  // models/resnet50/model.onnx -> resnet50
  if (p.stem() == "model" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return p.stem().string();
}

class Driver {
 public:
  Driver(Farm& farm, TuningDb& db, const TuneOptions& opts, TuneResult& r)
      : farm_(farm), db_(db), opts_(opts), r_(r), log_(opts, r.stages) {
    ledger_.farm = &farm_;
  }

  // The stages after load (tune() runs it), in order.
  void run(const Graph& g) {
    ModelVariants enumerated = log_.run("variants", [&] { return variants(g, opts_); },
                                        [](const ModelVariants& v) { return describe(v); });
    const Calibrated cal = log_.run("calibrate", [&] { return calibrate(db_, farm_, opts_, log_, enumerated); },
                                    [](const Calibrated& c) { return describe(c); });
    r_.calibration = cal.calibration;
    r_.plan = log_.run("estimate", [&] { return estimate(std::move(enumerated), opts_, r_.calibration); },
                       [](const ModelPlan& p) { return describe(p); });
    r_.run_id = log_.run("open run", [&] { return record_model(db_, r_.plan, opts_, r_.calibration); },
                         [&](int64_t id) { return fmt::format("model '{}' in the DB, run {}", r_.model_name, id); });
    const WorkerCensus census = log_.run("farm", [&] { return wait_for_workers(farm_, opts_, log_); },
                                         [](const WorkerCensus& c) { return c.line; });
    init_gpus(cal, census);
    const Lookup todo = log_.run("lookup", [&] {
      return lookup(r_.plan, r_.gpus, db_, opts_, r_.calibration); },
      [&](const Lookup& l) { return describe(l, opts_); });
    absorb(todo);
    // Each worker's drift sentinel before the measure stage and after it (tune_drift.cpp).
    const auto probe = [&](std::vector<PlannedJob> jobs) { return measure_sentinels(jobs); };
    const auto measure = [&](std::vector<PlannedJob> jobs) { return generate_dispatch_collect(jobs); };
    Sentinels sentinels;
    if (opts_.cross_check) sentinels = first_sentinels(r_.plan, r_.gpus, todo.jobs, ledger_, probe);
    generate_dispatch_collect(todo.jobs);
    if (opts_.cross_check && !r_.interrupted) {
      const Drifted drifted = log_.run("drift", [&] {
        return drift_check(r_.plan, r_.gpus, sentinels, db_, ledger_, log_, probe, measure); },
        [](const Drifted& d) { return describe(d); });
      for (size_t gi = 0; gi < r_.gpus.size(); ++gi) r_.gpus[gi].drift = drifted.per_gpu[gi];
    }
    Checked checked;
    if (wants_check()) check(checked, {});
    CrossChecked crossed;
    if (opts_.cross_check && !r_.interrupted) {
      crossed = log_.run("cross-check", [&] {
        return cross_check(r_.plan, r_.gpus, db_, opts_, ledger_, log_, measure); },
        [](const CrossChecked& c) { return describe(c); });
      for (size_t gi = 0; gi < r_.gpus.size(); ++gi) r_.gpus[gi].cross_check = crossed.per_gpu[gi];
      // New winners (a quarantine, a re-measure that ranks differently) get their check too.
      if (crossed.sent > 0 && wants_check()) check(checked, crossed.again);
    }
    for (const auto& [gi, workers] : ledger_.quarantined) r_.gpus[gi].quarantined = workers;
    r_.gpus = log_.run("select", [&] {
      return select(r_.plan, r_.gpus, db_, opts_, checked.checked, crossed.again); },
      [](const std::vector<GpuTuneResult>& s) { return describe(s); });
    log_.run("commit plans", [&] {
      const RunStatus s = record_plans(db_, r_.run_id, r_.plan, r_.gpus, opts_, r_.interrupted, r_.complete());
      run_ended_ = true;
      return s; },
      [&](RunStatus) {
        return fmt::format("plans committed; run {} {}", r_.run_id, r_.interrupted ? "interrupted" : "ended"); });
  }

  // A run that ends by an exception stays visible as failed, not as running forever.
  void abandon_run() noexcept {
    if (r_.run_id == 0 || run_ended_) return;
    try {
      db_.end_run(r_.run_id, RunStatus::failed);
    } catch (...) {
    }
    run_ended_ = true;
  }

 private:
  void init_gpus(const Calibrated& cal, const WorkerCensus& census) {
    for (size_t gi = 0; gi < opts_.gpus.size(); ++gi) {
      GpuTuneResult gr;
      gr.gpu = opts_.gpus[gi];
      gr.calibration_fit = cal.fits[gi];
      gr.workers = census.workers[gi];
      gr.source = census.sources[gi];
      gr.nvrtc_major = opts_.nvrtc_major.empty() ? nvrtc_major_for(*gr.gpu) : opts_.nvrtc_major;
      r_.gpus.push_back(std::move(gr));
    }
  }

  void absorb(const Lookup& l) {
    for (size_t gi = 0; gi < r_.gpus.size(); ++gi) {
      GpuTuneResult& gr = r_.gpus[gi];
      const LookupCounts& c = l.per_gpu[gi];
      gr.variants_planned += c.planned;
      gr.variants_reused += c.reused;
      gr.variants_settled += c.settled;
      gr.variants_seeded += c.seeded;
      gr.abandoned += c.abandoned;
      for (const auto& [level, n] : c.seed_levels) gr.seed_levels[level] += n;
    }
  }

  // The check stage; `again` are the cross-check's second measurements (not checks).
  void check(Checked& checked, const CheckedSet& again) {
    const Checked c = log_.run("check", [&] {
      return check_winners(r_.plan, r_.gpus, db_, opts_, r_.calibration,
                           [&](std::vector<PlannedJob> jobs) { return generate_dispatch_collect(jobs); }, again); },
      [](const Checked& got) { return describe(got); });
    for (size_t gi = 0; gi < r_.gpus.size(); ++gi) r_.gpus[gi].checks_failed += c.failed_per_gpu[gi];
    checked.checked.insert(c.checked.begin(), c.checked.end());
    checked.sent += c.sent;
    checked.failed += c.failed;
  }

  bool wants_check() const {
    const bool any_emulated = std::any_of(r_.gpus.begin(), r_.gpus.end(),
                                          [](const GpuTuneResult& gr) { return gr.source == TimingSource::emulated; });
    return any_emulated && opts_.check_winners && !r_.interrupted;
  }

  // The generate, dispatch and collect stages for a list of jobs (the lookup's, then each
  // check round's); their counts go to the result.
  Collected generate_dispatch_collect(const std::vector<PlannedJob>& jobs) {
    std::vector<FarmJob> farm_jobs = log_.run("generate", [&] { return generate(jobs, r_.plan, r_.gpus, opts_); },
        [](const std::vector<FarmJob>& f) { return fmt::format("{} kernels generated", f.size()); });
    Dispatched sent = log_.run("dispatch", [&] {
      return dispatch(jobs, std::move(farm_jobs), r_.plan, r_.gpus, farm_, db_, opts_, ledger_); },
      [](const Dispatched& d) { return fmt::format("{} jobs sent", d.jobs); });
    Collected got = log_.run("collect", [&] { return collect(sent, r_.gpus, farm_, db_, opts_, ledger_, log_); },
        [](const Collected& c) {
          return fmt::format("{} results committed{}", c.results,
                             c.interrupted ? fmt::format(" (interrupted: {} outstanding)", c.outstanding) : "");
        });
    r_.jobs += sent.jobs;
    r_.results += got.results;
    r_.interrupted = r_.interrupted || got.interrupted;
    for (size_t gi = 0; gi < r_.gpus.size(); ++gi) {
      GpuTuneResult& gr = r_.gpus[gi];
      gr.jobs += sent.sent[gi];
      gr.checks += sent.checks[gi];
      gr.results += got.per_gpu_results[gi];
      gr.abandoned += got.abandoned[gi];
      for (const auto& [status, n] : got.by_status[gi]) gr.by_status[status] += n;
      for (const auto& [device, seconds] : got.busy_seconds[gi]) gr.device_busy_seconds[device] += seconds;
      gr.internal_error_workloads.insert(got.internal_error_workloads[gi].begin(), got.internal_error_workloads[gi].end());
      for (const auto& [worker, n] : got.implausible_by_worker[gi]) gr.implausible_by_worker[worker] += n;
      gr.measure_seconds += got.seconds;
    }
    return got;
  }

  // Drift sentinels: generate, dispatch and collect without the stage lines and the counts
  // of the tune's jobs (they are probes of the workers, not recorded).
  Collected measure_sentinels(const std::vector<PlannedJob>& jobs) {
    Dispatched sent = dispatch(jobs, generate(jobs, r_.plan, r_.gpus, opts_), r_.plan, r_.gpus, farm_, db_, opts_, ledger_);
    Collected got = collect(sent, r_.gpus, farm_, db_, opts_, ledger_, log_);
    r_.interrupted = r_.interrupted || got.interrupted;
    return got;
  }

  Farm& farm_;
  TuningDb& db_;
  const TuneOptions& opts_;
  TuneResult& r_;
  StageLog log_;
  Ledger ledger_;
  bool run_ended_ = false;
};

}  // namespace

bool TuneResult::complete() const {
  for (const auto& g : gpus)
    if (!g.has_results() || g.drift.untrusted) return false;
  return !gpus.empty() && internal_error_jobs() == 0;
}

int64_t TuneResult::internal_error_jobs() const {
  int64_t n = 0;
  for (const auto& g : gpus) n += g.internal_error_jobs();
  return n;
}

int64_t TuneResult::internal_error_workloads() const {
  int64_t n = 0;
  for (const auto& g : gpus) n += static_cast<int64_t>(g.internal_error_workloads.size());
  return n;
}

TuneResult tune_graph(const Graph& simplified, Farm& farm, TuningDb& db, const TuneOptions& opts,
                      TuneResult result) {
  DC_INTERNAL_CHECK(!opts.gpus.empty(), "tune needs at least one GPU type");
  DC_INTERNAL_CHECK(!opts.model_name.empty() && !opts.model_sha256.empty(),
                    "tune_graph needs the model's name and hash");
  const auto t0 = Clock::now();
  result.model_name = opts.model_name;
  result.model_sha256 = opts.model_sha256;
  result.graph = simplified;
  result.precision = opts.plan.precision;
  Driver d(farm, db, opts, result);
  try {
    d.run(result.graph);
  } catch (...) {
    d.abandon_run();
    throw;
  }
  result.seconds += seconds_since(t0);
  return result;
}

TuneResult tune(const std::string& model_path, Farm& farm, TuningDb& db, const TuneOptions& opts) {
  const auto t0 = Clock::now();
  TuneResult r;
  StageLog log(opts, r.stages);
  LoadedGraph loaded = load(model_path, opts, log);
  r.weight_transforms = std::move(loaded.weight_transforms);
  if (opts.training) r.training = cli::plan_training(*opts.training, model_path, opts.plan.precision);
  TuneOptions o = opts;
  if (o.model_name.empty()) o.model_name = model_name_from_path(model_path);
  if (o.model_sha256.empty()) o.model_sha256 = sha256_file_hex(model_path);
  r = tune_graph(loaded.graph, farm, db, o, std::move(r));
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace dc
