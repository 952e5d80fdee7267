#include "tune.h"

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "generate.h"
#include "ir/error.h"
#include "ir/json_writer.h"
#include "ir/parallel.h"
#include "nvrtc.h"
#include "passes/apply_precision.h"
#include "passes/simplify.h"
#include "plan_build.h"
#include "sha256.h"
#include "variant_tolerance.h"

namespace dc {

namespace {

// Per workload input: the extent of the dimension a Gather indexes with it, or 0.
std::vector<int64_t> gather_index_bounds(const Workload& w) {
  std::vector<int64_t> bounds(w.graph.inputs.size(), 0);
  for (const Node& n : w.graph.nodes) {
    if (n.op != "Gather" || !n.has_input(1)) continue;
    const Shape& data = w.graph.info(n.input(0)).shape;
    const int64_t axis = normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(data.size()), "Gather");
    for (size_t i = 0; i < w.graph.inputs.size(); ++i)
      if (w.graph.inputs[i] == n.input(1)) bounds[i] = data[static_cast<size_t>(axis)];
  }
  return bounds;
}


using Clock = std::chrono::steady_clock;
constexpr auto kCollectPoll = std::chrono::milliseconds(200);
constexpr int kMaxCheckRounds = 4;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Records a finished stage: logged, timed, and shown on the console when there is one.
void end_stage(TuneResult& r, const TuneOptions& o, const std::string& name, Clock::time_point t0,
               const std::string& detail) {
  r.stages.push_back({name, seconds_since(t0), detail});
  spdlog::info("tune: {} ({:.3f} s): {}", name, r.stages.back().seconds, detail);
  if (o.console)
    *o.console << fmt::format("tune: {:<10} {:7.3f} s  {}\n", name, r.stages.back().seconds, detail)
               << std::flush;
}

void notice(const TuneOptions& o, const std::string& text) {
  spdlog::info("tune: {}", text);
  if (o.console) *o.console << "tune: " << text << "\n" << std::flush;
}

std::string model_name_from_path(const std::string& path) {
  const std::filesystem::path p(path);
  // models/resnet50/model.onnx -> resnet50
  if (p.stem() == "model" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return p.stem().string();
}

// "conv x1.20, gemm x0.90": the factors of one GPU type.
std::string describe_factors(const Calibration& c, const std::string& gpu) {
  std::string out;
  for (const auto& [key, factor] : c.factors)
    if (key.first == gpu)
      out += fmt::format("{}{} x{:.2f}", out.empty() ? "" : ", ", cluster_kind_name(key.second), factor);
  return out;
}

std::string job_key(const std::string& workload, const std::string& variant, const std::string& gpu) {
  return workload + "/" + variant + "/" + gpu;
}

// One variant to measure on one GPU type.
struct PlannedJob {
  size_t gpu = 0;       // index into TuneResult::gpus
  size_t workload = 0;  // index into the workload set
  Variant variant;
  double estimate_us = 0;  // uncalibrated: what the result stores
  bool check = false;   // host-emulator check of a winner
};

// Everything the collect loop needs to know about what is outstanding.
struct Outstanding {
  std::map<std::string, size_t> gpu_of;  // job key -> gpu index
  std::map<size_t, int64_t> per_gpu;     // gpu index -> jobs outstanding
  std::map<size_t, Clock::time_point> workerless_since;
};

class Pipeline {
 public:
  Pipeline(Farm& farm, TuningDb& db, const TuneOptions& opts, TuneResult& r)
      : farm_(farm), db_(db), opts_(opts), r_(r) {
    nvrtc_major_ = opts.nvrtc_major.empty() ? toolchain_major(nvrtc_version()) : opts.nvrtc_major;
  }

  void run(const Graph& g) {
    for (const GpuSpec* gpu : opts_.gpus) {
      GpuTuneResult gr;
      gr.gpu = gpu;
      gr.source = opts_.emulated ? Source::emulated : Source::real;
      r_.gpus.push_back(std::move(gr));
    }

    auto t = Clock::now();
    end_stage(r_, opts_, "calibrate", t, calibrate());

    t = Clock::now();
    PlanOptions plan_options = opts_.plan;
    plan_options.calibration = r_.calibration;
    r_.plan = plan_by_estimate(g, opts_.gpus, plan_options);
    size_t kept = 0;
    for (const auto& gp : r_.plan.gpus)
      for (const auto& w : gp.workloads) kept += w.kept.size();
    end_stage(r_, opts_, "estimate", t,
              fmt::format("{} candidate clusters, {} distinct workloads, {} variants kept over {} GPU "
                          "type(s)", r_.plan.candidates.size(), workloads().size(), kept,
                          opts_.gpus.size()));

    t = Clock::now();
    record_model();
    end_stage(r_, opts_, "record", t, fmt::format("model '{}' in the DB, run {}", r_.model_name, r_.run_id));

    t = Clock::now();
    end_stage(r_, opts_, "farm", t, wait_for_workers());

    t = Clock::now();
    std::vector<PlannedJob> jobs = lookup();
    int64_t reused = 0;
    for (const auto& gr : r_.gpus) reused += gr.variants_reused;
    const auto references = std::count_if(jobs.begin(), jobs.end(),
                                          [](const PlannedJob& j) { return is_reference(j.variant); });
    end_stage(r_, opts_, "lookup", t,
              fmt::format("{} variants to measure{}, {} already in the DB{}",
                          static_cast<int64_t>(jobs.size()) - references,
                          references ? fmt::format(" (+ {} reference kernels)", references) : "", reused,
                          opts_.retune ? " (--retune: measured again)" : ""));

    measure(std::move(jobs), "generate", "dispatch", "collect");

    const bool any_emulated = std::any_of(r_.gpus.begin(), r_.gpus.end(),
                                          [](const GpuTuneResult& gr) { return gr.source == Source::emulated; });
    if (any_emulated && opts_.check_winners && !interrupted()) {
      t = Clock::now();
      end_stage(r_, opts_, "check", t, check_winners());
    }

    t = Clock::now();
    for (auto& gr : r_.gpus) select_measured(r_.plan, db_, nvrtc_major_, gr, opts_.plan.space.precisions);
    mark_checked();
    end_stage(r_, opts_, "select", t, selection_detail());

    t = Clock::now();
    record_plans();
    end_stage(r_, opts_, "record", t,
              fmt::format("plans committed; run {} {}", r_.run_id, r_.interrupted ? "interrupted" : "ended"));
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
  const std::vector<Workload>& workloads() const { return r_.plan.workload_set.workloads; }
  bool interrupted() const { return r_.interrupted; }
  bool stop_requested() const { return opts_.stop && opts_.stop->load(); }

  // The estimator's factors: the config's, then for each GPU type and kind the config leaves
  // open, the fit of the DB's results of this tune's source (never the other source's: an
  // emulated device's timing model says nothing about the real GPU).
  std::string calibrate() {
    r_.calibration = opts_.plan.calibration;
    if (!opts_.calibration_from_db) return "factors from the DB: off (config factors only)";
    const Source source = source_of(opts_.emulated);
    int fitted = 0;
    for (GpuTuneResult& gr : r_.gpus) {
      const std::string& gpu = gr.gpu->name;
      gr.calibration_fit = fit_calibration(db_.estimator_ratios(gpu, source));
      fitted += apply_fit(gpu, gr.calibration_fit, opts_.plan.calibration, r_.calibration);
      int results = 0;
      for (const FittedFactor& f : gr.calibration_fit) results += f.samples;
      const std::string config = describe_factors(opts_.plan.calibration, gpu);
      notice(opts_, fmt::format("calibration {} from {} {} DB results: {}{}", gpu, results,
                                source_name(source), describe_fit(gr.calibration_fit),
                                config.empty() ? "" : "; the config sets " + config));
    }
    return fmt::format("{} factor(s) fitted from {} DB results", fitted, source_name(source));
  }

  // What a result stores as its estimate: the model's figure without calibration, so that
  // measured / estimated fits the factor itself (see calibrate).
  double uncalibrated_us(size_t gi, size_t wi, double calibrated_us) const {
    return calibrated_us / r_.calibration.factor(r_.gpus[gi].gpu->name, workloads()[wi].kind);
  }

  // The run's options as given, plus the calibration factors its estimates used.
  std::string options_json() const {
    std::ostringstream os;
    JsonWriter j(os);
    j.begin_object();
    for (const GpuSpec* gpu : opts_.gpus) {
      j.key(gpu->name).begin_object();
      for (const auto& [key, factor] : r_.calibration.factors)
        if (key.first == gpu->name) j.field(cluster_kind_name(key.second), factor);
      j.end_object();
    }
    j.end_object();
    std::string options = opts_.options_json;
    const size_t close = options.find_last_of('}');
    DC_INTERNAL_CHECK(!options.empty() && options.front() == '{' && close != std::string::npos,
                      "tune options must be a JSON object, got '", options, "'");
    const bool empty = options.find_first_not_of(" \t\n", 1) == close;
    options.insert(close, fmt::format("{}\"calibration\":{}", empty ? "" : ",", os.str()));
    return options;
  }

  void record_model() {
    for (const GpuSpec* gpu : opts_.gpus) db_.commit_gpu_type(*gpu);
    const int64_t model_id = db_.commit_model(r_.model_name, opts_.model_sha256);
    std::map<size_t, int> counts;
    for (size_t w : r_.plan.workload_set.candidate_workload) ++counts[w];
    std::vector<std::pair<WorkloadRecord, int>> records;
    for (const auto& [w, n] : counts) records.emplace_back(workload_record(workloads()[w]), n);
    db_.commit_model_workloads(model_id, records);
    RunInfo info;
    info.model_id = model_id;
    for (const GpuSpec* gpu : opts_.gpus) info.gpu_types.push_back(gpu->name);
    info.options_json = options_json();
    info.host = opts_.host;
    info.precision = std::string(precision_name(opts_.plan.precision));
    r_.run_id = db_.begin_run(info);
  }

  // Waits (up to worker_wait) for a worker of every requested type; decides each type's
  // source. Types without a worker keep their jobs back (and their results, if any, come
  // from the DB alone).
  std::string wait_for_workers() {
    const auto deadline = Clock::now() + opts_.worker_wait;
    FarmStatus s = farm_.status();
    std::string last_line;
    auto line = [&] {
      std::string text;
      for (const auto& gr : r_.gpus) {
        const auto it = s.workers_per_gpu_type.find(gr.gpu->name);
        const int n = it == s.workers_per_gpu_type.end() ? 0 : it->second;
        const auto e = s.emulated_workers_per_gpu_type.find(gr.gpu->name);
        const int ne = e == s.emulated_workers_per_gpu_type.end() ? 0 : e->second;
        text += fmt::format("{}{} {}{}", text.empty() ? "" : ", ", gr.gpu->name, n,
                            ne ? fmt::format(" ({} emulated)", ne) : "");
      }
      return "workers: " + text;
    };
    auto all_present = [&] {
      for (const auto& gr : r_.gpus)
        if (s.workers_per_gpu_type[gr.gpu->name] <= 0) return false;
      return true;
    };
    while (!all_present() && Clock::now() < deadline && !stop_requested()) {
      if (const std::string l = line(); l != last_line) {
        notice(opts_, l + " (waiting)");
        last_line = l;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      s = farm_.status();
    }
    for (auto& gr : r_.gpus) {
      gr.workers = s.workers_per_gpu_type[gr.gpu->name];
      const int emulated = s.emulated_workers_per_gpu_type[gr.gpu->name];
      if (!opts_.emulated && gr.workers > 0 && emulated == gr.workers) {
        gr.source = Source::emulated;
        notice(opts_, fmt::format("every {} worker is emulated: its times are modelled, not measured",
                                  gr.gpu->name));
      }
      if (gr.workers == 0)
        spdlog::warn("no worker of GPU type {} after {:.0f} s: nothing will be measured on it",
                     gr.gpu->name, std::chrono::duration<double>(opts_.worker_wait).count());
    }
    return line();
  }

  // The DB lookup: what each GPU type still needs, plus seeds from other GPU types.
  std::vector<PlannedJob> lookup() {
    std::vector<PlannedJob> jobs;
    for (size_t gi = 0; gi < r_.gpus.size(); ++gi) {
      GpuTuneResult& gr = r_.gpus[gi];
      const GpuPlan& gp = r_.plan.gpus[gi];
      for (size_t wi = 0; wi < workloads().size(); ++wi) {
        const Workload& w = workloads()[wi];
        std::vector<std::pair<Variant, double>> planned;
        for (const auto& sv : gp.workloads[wi].kept) planned.emplace_back(sv.variant, sv.estimate.seconds * 1e6);
        add_seeds(w, gi, planned);
        std::set<std::string> measured;
        if (!opts_.retune) measured = db_.measured_variants(w.signature, gr.gpu->name, gr.source, nvrtc_major_);
        for (auto& [v, est] : planned) {
          const std::string key = v.key();
          ++gr.variants_planned;
          if (measured.count(key)) {
            ++gr.variants_reused;
            continue;
          }
          if (gr.workers == 0) {
            ++gr.abandoned;
            continue;
          }
          jobs.push_back({gi, wi, std::move(v), uncalibrated_us(gi, wi, est), false});
        }
        // The baseline: the reference kernel, once per workload and GPU type (no estimate,
        // so the estimator's calibration never sees it; selection never chooses it).
        const Variant ref = reference_variant();
        if (opts_.measure_reference && gr.workers > 0 && !measured.count(ref.key()))
          jobs.push_back({gi, wi, ref, 0.0, false});
      }
    }
    return jobs;
  }

  // A workload this GPU type has no result for also tries the best variants of the nearest
  // GPU type that has some (those that fit this GPU and are not already planned).
  void add_seeds(const Workload& w, size_t gi, std::vector<std::pair<Variant, double>>& planned) {
    GpuTuneResult& gr = r_.gpus[gi];
    if (opts_.seed_k <= 0) return;
    const Seeds seeds = seed_variants(db_, w.signature, *gr.gpu, gr.source, opts_.seed_k);
    ++gr.seed_levels[seeds.level];
    if (seeds.level == SeedLevel::exact || seeds.level == SeedLevel::estimator_only) return;
    std::set<std::string> have;
    for (const auto& p : planned) have.insert(p.first.key());
    std::set<std::string> wanted;
    for (const auto& m : seeds.best)
      if (!have.count(m.variant_key)) wanted.insert(m.variant_key);
    if (wanted.empty()) return;
    // Variants are data: rebuild them from this GPU's own space, which keeps only those
    // that fit it.
    for (const Variant& v : enumerate_variants(w, *gr.gpu)) {
      if (!wanted.count(v.key()) ||
          std::find(opts_.plan.space.precisions.begin(), opts_.plan.space.precisions.end(),
                    v.precision) == opts_.plan.space.precisions.end())
        continue;
      const Estimate e = estimate(w, v, *gr.gpu, r_.calibration);
      if (!std::isfinite(e.seconds)) continue;
      planned.emplace_back(v, e.seconds * 1e6);
      ++gr.variants_seeded;
    }
  }

  // generate -> dispatch -> collect for a list of jobs.
  void measure(std::vector<PlannedJob> jobs, const char* generate_name, const char* dispatch_name,
               const char* collect_name) {
    auto t = Clock::now();
    std::vector<FarmJob> farm_jobs = generate(jobs);
    end_stage(r_, opts_, generate_name, t, fmt::format("{} kernels generated", farm_jobs.size()));

    t = Clock::now();
    Outstanding out;
    Progress progress(opts_.progress);
    for (size_t i = 0; i < farm_jobs.size(); ++i) {
      const PlannedJob& pj = jobs[i];
      const Workload& w = workloads()[pj.workload];
      const auto variant_id = std::make_pair(w.signature, pj.variant.key());
      if (!committed_variants_.count(variant_id)) {
        db_.commit_variant(w.signature, pj.variant, fnv1a_hex(farm_jobs[i].variant.source));
        committed_variants_.insert(variant_id);
      }
      const std::string key = job_key(w.signature, pj.variant.key(), r_.gpus[pj.gpu].gpu->name);
      DC_INTERNAL_CHECK(out.gpu_of.emplace(key, pj.gpu).second, "job ", key, " planned twice");
      ++out.per_gpu[pj.gpu];
      progress.add_jobs(r_.gpus[pj.gpu].gpu->name, 1);
      ++r_.gpus[pj.gpu].jobs;
      if (pj.check) ++r_.gpus[pj.gpu].checks;
      ++r_.jobs;
      farm_.submit(std::move(farm_jobs[i]));
    }
    end_stage(r_, opts_, dispatch_name, t, fmt::format("{} jobs sent", jobs.size()));

    t = Clock::now();
    const int64_t before = r_.results;
    collect(out, progress);
    for (GpuTuneResult& g : r_.gpus) g.measure_seconds += std::chrono::duration<double>(Clock::now() - t).count();
    progress.finish();
    end_stage(r_, opts_, collect_name, t,
              fmt::format("{} results committed{}", r_.results - before,
                          r_.interrupted ? fmt::format(" (interrupted: {} outstanding)", out.gpu_of.size())
                                         : ""));
  }

  std::vector<FarmJob> generate(const std::vector<PlannedJob>& jobs) {
    // Kernels do not depend on the GPU type: generate each (workload, variant) once, and
    // one reference per workload.
    std::map<std::pair<size_t, std::string>, size_t> kernel_index;
    std::vector<std::pair<size_t, const Variant*>> todo;
    std::map<size_t, size_t> ref_index;
    for (const auto& j : jobs) {
      if (kernel_index.emplace(std::make_pair(j.workload, j.variant.key()), todo.size()).second)
        todo.emplace_back(j.workload, &j.variant);
      ref_index.emplace(j.workload, 0);
    }
    for (auto& [w, idx] : ref_index) {
      idx = todo.size();
      todo.emplace_back(w, nullptr);
    }
    std::vector<GeneratedKernel> kernels(todo.size());
    parallel_for(static_cast<int64_t>(todo.size()), 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const auto& [w, v] = todo[static_cast<size_t>(i)];
        kernels[static_cast<size_t>(i)] = v ? generate_kernel(workloads()[w], *v) : generate_reference(workloads()[w]);
      }
    });
    std::vector<FarmJob> out;
    out.reserve(jobs.size());
    for (const auto& j : jobs) {
      const Workload& w = workloads()[j.workload];
      FarmJob f;
      f.gpu_type = r_.gpus[j.gpu].gpu->name;
      f.workload = w.signature;
      f.precision = j.variant.precision;
      f.variant = kernels[kernel_index.at({j.workload, j.variant.key()})];
      DC_INTERNAL_CHECK(f.variant.variant_key == j.variant.key(), "generated kernel of ",
                        j.variant.key(), " says it is ", f.variant.variant_key);
      f.reference = kernels[ref_index.at(j.workload)];
      f.job_id = job_key(w.signature, j.variant.key(), f.gpu_type);
      // The same inputs for every variant of a workload; the signature is 16 hex digits.
      f.seed = opts_.input_seed ^ std::stoull(w.signature, nullptr, 16);
      f.rtol = variant_tolerance(j.variant.precision, w).rtol;  // docs/precision.md
      f.check_on_emulator = j.check;
      f.estimate_us = j.estimate_us;
      f.flops = w.flops;
      f.bytes = w.bytes;
      f.index_bounds = gather_index_bounds(w);
      f.compile_deadline = opts_.compile_deadline;
      f.run_deadline = opts_.run_deadline;
      out.push_back(std::move(f));
    }
    return out;
  }

  // Until every outstanding job has its result, the stop flag is set, or a GPU type has
  // been without any worker for worker_wait (its jobs are given up).
  void collect(Outstanding& out, Progress& progress) {
    auto last_status = Clock::now();
    while (!out.gpu_of.empty()) {
      if (stop_requested()) {
        r_.interrupted = true;
        notice(opts_, fmt::format("interrupted: stopping the farm; {} results outstanding are not "
                                  "waited for (a rerun measures them)", out.gpu_of.size()));
        farm_.shutdown();
        for (auto& m : farm_.collect(std::chrono::milliseconds(0))) accept(m, out, progress);
        return;
      }
      for (auto& m : farm_.collect(kCollectPoll)) accept(m, out, progress);
      progress.tick();
      if (Clock::now() - last_status >= std::chrono::seconds(1)) {
        last_status = Clock::now();
        give_up_workerless(out);
      }
    }
  }

  void give_up_workerless(Outstanding& out) {
    const FarmStatus s = farm_.status();
    for (auto& [gi, n] : out.per_gpu) {
      if (n == 0) continue;
      const std::string& type = r_.gpus[gi].gpu->name;
      const auto it = s.workers_per_gpu_type.find(type);
      if (it != s.workers_per_gpu_type.end() && it->second > 0) {
        out.workerless_since.erase(gi);
        continue;
      }
      const auto since = out.workerless_since.emplace(gi, Clock::now()).first->second;
      if (Clock::now() - since < opts_.worker_wait) continue;
      spdlog::warn("no {} worker for {:.0f} s: giving up its {} outstanding jobs (a rerun "
                   "measures them)", type, std::chrono::duration<double>(opts_.worker_wait).count(), n);
      for (auto j = out.gpu_of.begin(); j != out.gpu_of.end();) {
        if (j->second == gi) j = out.gpu_of.erase(j);
        else ++j;
      }
      r_.gpus[gi].abandoned += n;
      n = 0;
    }
  }

  // One result: committed at once, in its own transaction.
  void accept(const Measurement& m, Outstanding& out, Progress& progress) {
    const std::string key = job_key(m.workload, m.variant_key, m.gpu_type);
    const auto it = out.gpu_of.find(key);
    if (!committed_variants_.count({m.workload, m.variant_key})) {
      spdlog::warn("result for a job this tune did not send ({}): ignored", key);
      return;
    }
    if (!committed_workers_.count(m.worker)) {
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
      db_.commit_worker(w);
      committed_workers_.insert(m.worker);
    }
    // internal_error is a dc bug, not a verdict on the variant: counted and logged, never
    // recorded (a later tune measures the variant again).
    if (m.status == JobStatus::internal_error)
      spdlog::error("{}: INTERNAL ERROR (a dc bug; not recorded): {}", key, m.error);
    else
      db_.commit_measurement(m);
    ++r_.results;
    if (it == out.gpu_of.end()) return;  // a late result of a job given up: kept, not counted
    const size_t gi = it->second;
    out.gpu_of.erase(it);
    --out.per_gpu[gi];
    GpuTuneResult& gr = r_.gpus[gi];
    ++gr.results;
    ++gr.by_status[m.status];
    gr.busy_seconds += m.run_seconds;
    gr.devices.insert(m.worker);
    if (m.emulated != (gr.source == Source::emulated) && !warned_source_.count(gi)) {
      warned_source_.insert(gi);
      spdlog::warn("{} results from {} devices arrive in a {} tune: they are kept but not used",
                   m.gpu_type, m.emulated ? "emulated" : "real", source_name(gr.source));
    }
    if (m.status != JobStatus::ok)
      spdlog::debug("{}: {} ({})", key, job_status_name(m.status), m.error);
    progress.job_done(m.gpu_type, m.status == JobStatus::ok);
  }

  // Selects, then sends a host-emulator check for every chosen winner that has not had one;
  // a winner that fails is excluded by the next selection. A few rounds at most.
  std::string check_winners() {
    int64_t sent = 0, failed = 0;
    for (int round = 0; round < kMaxCheckRounds && !interrupted(); ++round) {
      std::vector<PlannedJob> jobs;
      for (size_t gi = 0; gi < r_.gpus.size(); ++gi) {
        GpuTuneResult& gr = r_.gpus[gi];
        if (gr.source != Source::emulated || gr.workers == 0) continue;
        select_measured(r_.plan, db_, nvrtc_major_, gr, opts_.plan.space.precisions);
        std::set<std::pair<size_t, std::string>> seen;
        for (const auto& c : gr.choices) {
          if (c.reference || !seen.insert({c.workload, c.variant_key}).second) continue;
          if (is_checked(gi, c)) continue;
          const Variant* v = find_variant(gi, c.workload, c.variant_key);
          if (!v) continue;  // measured by an earlier run with another space: trust it
          jobs.push_back({gi, c.workload, *v, uncalibrated_us(gi, c.workload, c.estimated_us), true});
        }
      }
      if (jobs.empty()) break;
      for (const auto& j : jobs)
        checked_.insert({j.gpu, workloads()[j.workload].signature, j.variant.key()});
      std::map<size_t, std::map<JobStatus, int64_t>> before;
      for (size_t gi = 0; gi < r_.gpus.size(); ++gi) before[gi] = r_.gpus[gi].by_status;
      sent += static_cast<int64_t>(jobs.size());
      measure(std::move(jobs), "generate", "dispatch", "collect");
      for (size_t gi = 0; gi < r_.gpus.size(); ++gi)
        for (const auto& [st, n] : r_.gpus[gi].by_status)
          if (st != JobStatus::ok) {
            const int64_t d = n - before[gi][st];
            failed += d;
            r_.gpus[gi].checks_failed += static_cast<int>(d);
          }
    }
    return fmt::format("{} winners checked on the host emulator, {} failed", sent, failed);
  }

  // A winner counts as checked when this run checked it or, without --retune, when it has
  // a second final result in the DB (its check job's) from an earlier run.
  bool is_checked(size_t gi, const ClusterChoice& c) const {
    if (checked_.count({gi, workloads()[c.workload].signature, c.variant_key})) return true;
    return !opts_.retune && c.results >= 2;
  }

  void mark_checked() {
    if (!opts_.check_winners) return;
    for (size_t gi = 0; gi < r_.gpus.size(); ++gi) {
      if (r_.gpus[gi].source != Source::emulated) continue;
      for (auto& c : r_.gpus[gi].choices) c.checked = !c.reference && is_checked(gi, c);
    }
  }

  const Variant* find_variant(size_t gi, size_t wi, const std::string& key) {
    for (const auto& sv : r_.plan.gpus[gi].workloads[wi].kept)
      if (sv.variant.key() == key) return &sv.variant;
    auto& cache = enumerated_[{gi, wi}];
    if (cache.empty()) cache = enumerate_variants(workloads()[wi], *r_.gpus[gi].gpu);
    for (const auto& v : cache)
      if (v.key() == key) return &v;
    return nullptr;
  }

  std::string selection_detail() const {
    std::string s;
    for (const auto& gr : r_.gpus) {
      s += s.empty() ? "" : "; ";
      if (!gr.has_results()) {
        s += gr.gpu->name + ": no results";
        continue;
      }
      s += fmt::format("{}: {:.1f} us over {} kernels{}", gr.gpu->name, gr.measured_total_us,
                       gr.choices.size(),
                       gr.reference_fallbacks ? fmt::format(" ({} reference kernels)", gr.reference_fallbacks) : "");
    }
    return s;
  }

  void record_plans() {
    for (const auto& gr : r_.gpus) {
      if (!gr.has_results()) continue;
      PlanRecord p;
      p.precision = std::string(precision_name(opts_.plan.precision));
      p.run_id = r_.run_id;
      p.gpu_type = gr.gpu->name;
      p.source = gr.source;
      for (const auto& c : gr.choices) {
        PlanChoice pc;
        pc.cluster = fmt::format("{}#{}", r_.plan.candidates[c.candidate].pattern, c.candidate);
        pc.workload = workloads()[c.workload].signature;
        pc.variant_key = c.reference ? "reference" : c.variant_key;
        pc.estimated_us = c.estimated_us;
        pc.measured_us = c.measured_us;
        p.choices.push_back(std::move(pc));
      }
      p.estimated_total_us = gr.estimated_total_us;
      p.measured_total_us = gr.measured_total_us;
      db_.commit_plan(p);
    }
    db_.end_run(r_.run_id, r_.interrupted ? RunStatus::interrupted
                                          : (r_.complete() ? RunStatus::ok : RunStatus::failed));
    run_ended_ = true;
  }

  Farm& farm_;
  TuningDb& db_;
  const TuneOptions& opts_;
  TuneResult& r_;
  std::string nvrtc_major_;
  bool run_ended_ = false;
  std::set<std::pair<std::string, std::string>> committed_variants_;
  std::set<std::string> committed_workers_;
  std::set<size_t> warned_source_;
  std::set<std::tuple<size_t, std::string, std::string>> checked_;
  std::map<std::pair<size_t, size_t>, std::vector<Variant>> enumerated_;
};

}  // namespace

bool TuneResult::complete() const {
  for (const auto& g : gpus)
    if (!g.has_results()) return false;
  return !gpus.empty();
}

std::string variant_key_precision(const std::string& variant_key) {
  const size_t a = variant_key.find('/');
  if (a == std::string::npos) return "";
  const size_t b = variant_key.find('/', a + 1);
  return b == std::string::npos ? "" : variant_key.substr(a + 1, b - a - 1);
}

void select_measured(const ModelPlan& plan, const TuningDb& db, const std::string& nvrtc_major,
                     GpuTuneResult& gr, const std::vector<std::string>& math_paths) {
  const auto& ws = plan.workload_set.workloads;
  const std::string& gpu = gr.gpu->name;
  const size_t gi = static_cast<size_t>(
      std::find_if(plan.gpus.begin(), plan.gpus.end(), [&](const GpuPlan& p) { return p.gpu->name == gpu; }) -
      plan.gpus.begin());
  DC_INTERNAL_CHECK(gi < plan.gpus.size(), "GPU type ", gpu, " is not in the plan");
  const GpuPlan& gp = plan.gpus[gi];

  gr.best_us.assign(ws.size(), 0);
  gr.best_key.assign(ws.size(), "");
  gr.failed_variants.clear();
  gr.ok_variants = 0;
  std::vector<int> best_results(ws.size(), 0);
  for (size_t wi = 0; wi < ws.size(); ++wi) {
    MeasurementQuery q;
    q.workload = ws[wi].signature;
    q.gpu_type = gpu;
    q.source = gr.source;
    struct Stats {
      double best = std::numeric_limits<double>::infinity();
      int results = 0;
      std::optional<JobStatus> failure;
    };
    std::map<std::string, Stats> variants;
    for (const Measurement& m : db.query(q)) {
      if (m.status == JobStatus::worker_lost) continue;  // says nothing about the variant
      if (is_reference_key(m.variant_key)) continue;      // the baseline, never a candidate
      // Another precision's math path (a tf32 tune of the same f32 workload): not this plan's.
      if (std::find(math_paths.begin(), math_paths.end(), variant_key_precision(m.variant_key)) ==
          math_paths.end())
        continue;
      if (!nvrtc_major.empty() && toolchain_major(m.nvrtc_version) != nvrtc_major) continue;
      Stats& s = variants[m.variant_key];
      ++s.results;
      if (m.status == JobStatus::ok) s.best = std::min(s.best, m.median_us);
      else if (!s.failure) s.failure = m.status;
    }
    for (const auto& [key, s] : variants) {
      if (s.failure) {
        ++gr.failed_variants[*s.failure];
        continue;
      }
      if (!std::isfinite(s.best)) continue;
      ++gr.ok_variants;
      // Ties by key (the map's order): the first key of the least time wins.
      if (gr.best_key[wi].empty() || s.best < gr.best_us[wi]) {
        gr.best_us[wi] = s.best;
        gr.best_key[wi] = key;
        best_results[wi] = s.results;
      }
    }
  }

  // The cover search runs over the candidates that have a time: measured ones, and every
  // singleton (the reference kernel at a prohibitive cost when it has none).
  std::vector<std::vector<size_t>> cand_nodes;
  std::vector<double> cost;
  std::vector<size_t> original;
  gr.unmeasured_clusters = 0;
  for (size_t c = 0; c < plan.candidates.size(); ++c) {
    const size_t wi = plan.workload_set.candidate_workload[c];
    const bool measured = !gr.best_key[wi].empty();
    if (!measured && plan.candidates[c].nodes.size() > 1) {
      ++gr.unmeasured_clusters;
      continue;
    }
    cand_nodes.push_back(plan.candidates[c].nodes);
    cost.push_back(measured ? gr.best_us[wi] : kReferenceCostUs);
    original.push_back(c);
  }
  size_t num_nodes = 0;
  for (const auto& c : plan.candidates)
    for (size_t n : c.nodes) num_nodes = std::max(num_nodes, n + 1);
  CoverResult cover = select_cover(num_nodes, cand_nodes, cost);

  gr.cover = CoverResult{};
  gr.cover.exact = cover.exact;
  gr.choices.clear();
  gr.measured_total_us = gr.estimated_total_us = 0;
  gr.reference_fallbacks = 0;
  gr.estimate_cover_us = gp.cover.total_cost * 1e6;
  for (size_t k : cover.chosen) {
    const size_t c = original[k];
    gr.cover.chosen.push_back(c);
    ClusterChoice ch;
    ch.candidate = c;
    ch.workload = plan.workload_set.candidate_workload[c];
    const WorkloadEstimate& we = gp.workloads[ch.workload];
    ch.estimated_us = we.best_seconds() * 1e6;
    if (gr.best_key[ch.workload].empty()) {
      ch.reference = true;
      ++gr.reference_fallbacks;
    } else {
      ch.variant_key = gr.best_key[ch.workload];
      ch.measured_us = gr.best_us[ch.workload];
      ch.results = best_results[ch.workload];
      for (const auto& sv : we.kept)
        if (sv.variant.key() == ch.variant_key) ch.estimated_us = sv.estimate.seconds * 1e6;
      gr.measured_total_us += ch.measured_us;
    }
    gr.estimated_total_us += ch.estimated_us;
    gr.choices.push_back(std::move(ch));
  }
  gr.cover.total_cost = gr.measured_total_us * 1e-6;
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
  Pipeline p(farm, db, opts, result);
  try {
    p.run(result.graph);
  } catch (...) {
    p.abandon_run();
    throw;
  }
  result.seconds += seconds_since(t0);
  return result;
}

TuneResult tune(const std::string& model_path, Farm& farm, TuningDb& db, const TuneOptions& opts) {
  const auto t0 = Clock::now();
  TuneResult r;
  auto t = Clock::now();
  OnnxModel onnx = load_onnx(model_path);
  Graph imported = import_onnx(std::move(onnx), opts.import);
  end_stage(r, opts, "import", t, fmt::format("{}: {} nodes", model_path, imported.nodes.size()));

  t = Clock::now();
  Graph g = simplify(imported);
  end_stage(r, opts, "simplify", t, fmt::format("{} nodes", g.nodes.size()));
  r.weight_transforms = describe_weight_transforms(imported, g);
  if (opts.plan.precision != Precision::fp32) {
    t = Clock::now();
    std::vector<std::string> notes;
    g = apply_precision(std::move(g), opts.plan.precision, &notes);
    end_stage(r, opts, "precision", t, std::string(precision_name(opts.plan.precision)));
    if (storage_dtype(opts.plan.precision) != DType::f32)
      r.weight_transforms.push_back(fmt::format(
          "weights stored in {} (converted once, after BatchNorm folding in fp32)",
          dtype_name(storage_dtype(opts.plan.precision))));
    for (auto& n : notes) r.weight_transforms.push_back(std::move(n));
  }

  TuneOptions o = opts;
  if (o.model_name.empty()) o.model_name = model_name_from_path(model_path);
  if (o.model_sha256.empty()) o.model_sha256 = sha256_file_hex(model_path);
  r = tune_graph(g, farm, db, o, std::move(r));
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace dc
