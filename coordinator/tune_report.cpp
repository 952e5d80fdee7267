#include "tune_report.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/json_writer.h"
#include "plan/memory_report.h"
#include "plan/plan_io.h"
#include "plan/staged_dir.h"
#include "plan_build.h"

namespace dc {

namespace {

constexpr const char* kSelectionFormat = "dc-tune-selection/1";

std::string statuses(const std::map<JobStatus, int64_t>& by_status, bool failures_only) {
  std::string s;
  for (const auto& [st, n] : by_status) {
    if (n == 0 || (failures_only && st == JobStatus::ok)) continue;
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, job_status_name(st));
  }
  return s.empty() ? "none" : s;
}

std::string shorten(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p);
  DC_USER_CHECK(out.good(), "cannot write '", p.string(), "'");
  out << text;
  out.flush();
  DC_USER_CHECK(out.good(), "failed writing '", p.string(), "' (disk full?)");
}

}  // namespace

std::string tune_gpu_summary(const TuneResult& r, const GpuTuneResult& g) {
  const auto& ws = r.plan.workload_set;
  std::string s = fmt::format("== {} ({}, {}){}\n", g.gpu->name, g.gpu->full_name, g.gpu->sm_arch(),
                              g.source == TimingSource::emulated ? ": EMULATED, times are modelled, not measured" : "");
  s += fmt::format("precision  {} (tensors {})\n", precision_name(r.precision),
                   dtype_name(storage_dtype(r.precision)));
  s += fmt::format("clusters   {} candidates, {} distinct workloads\n", r.plan.candidates.size(),
                   ws.workloads.size());
  s += fmt::format("variants   {} planned ({} seeded from other GPU types), {} already in the DB{}{}\n",
                   g.variants_planned, g.variants_seeded, g.variants_reused,
                   g.variants_settled ? fmt::format(", {} newly kept of workloads tuned before (not measured)",
                                                    g.variants_settled)
                                      : "",
                   g.abandoned ? fmt::format(", {} not measured (no worker)", g.abandoned) : "");
  s += fmt::format("this run   {} jobs sent{}, {} results: {}\n", g.jobs,
                   g.checks ? fmt::format(" ({} winner checks)", g.checks) : "", g.results,
                   statuses(g.by_status, false));
  if (g.internal_error_jobs() > 0)
    s += fmt::format("INTERNAL ERRORS  {} jobs of {} workloads ended in internal_error (a dc bug, not the "
                     "variants' fault; not recorded): these workloads are not fully measured\n",
                     g.internal_error_jobs(), g.internal_error_workloads.size());
  for (const auto& [worker, n] : g.implausible_by_worker)
    s += fmt::format("IMPLAUSIBLE  worker {} reported {} times more than 20% below their variants' floor: "
                     "recorded as implausible, never selected (check that worker)\n", worker, n);
  const GpuTuneResult::CrossCheck& x = g.cross_check;
  if (x.done)
    s += fmt::format("cross-check  {} finalists compared on two workers ({} measured again for it): {} agree, "
                     "{} disagreed (a third measurement each){}{}\n", x.agreed + x.disagreed, x.remeasured, x.agreed,
                     x.disagreed,
                     x.unpaired ? fmt::format(", {} without a second worker's result", x.unpaired) : "",
                     x.moved ? fmt::format(", {} results of quarantined workers measured again", x.moved) : "");
  else if (g.workers == 1 && g.jobs > 0)
    s += "cross-check  one worker: finalists measured once, by it alone\n";
  const GpuTuneResult::Drift& dr = g.drift;
  if (!dr.sentinel.empty())
    s += fmt::format("drift      sentinel (the reference kernel of {}) timed before and after the measure stage by {} "
                     "worker(s): {} steady{}{}\n", dr.sentinel, dr.medians.size(), dr.medians.size() - dr.drifted.size(),
                     dr.unchecked.empty() ? "" : fmt::format(", {} not timed twice (not checked)", dr.unchecked.size()),
                     dr.moved ? fmt::format(", {} results of drifting workers measured again", dr.moved) : "");
  for (const auto& [worker, why] : dr.drifted)
    s += fmt::format("DRIFT      worker {}: {}{}\n", worker, why,
                     dr.untrusted ? "; no steady worker of this type is left to measure again: its results of this "
                                    "run are marked implausible, NOT TRUSTED, and the tune is not ok"
                                  : "; quarantined");
  for (const auto& [worker, why] : g.quarantined)
    s += fmt::format("QUARANTINED  worker {}: {}; no new jobs, its results of this run marked implausible ({} of the "
                     "quarantined workers' in all), never selected\n", worker, why,
                     x.marked + (dr.untrusted ? 0 : dr.marked));
  if (g.gpu_busy_fraction() > 0)
    s += fmt::format("GPU busy   {:.1f}% of the measure stage ({:.1f} s), over {} device(s)\n",
                     100 * g.gpu_busy_fraction(), g.measure_seconds, g.device_busy_seconds.size());
  s += fmt::format("in the DB  {} variants ok; failed, excluded: {}\n", g.ok_variants,
                   statuses(g.failed_variants, true));
  if (!g.seed_levels.empty()) {
    std::string lv;
    for (const auto& [level, n] : g.seed_levels) lv += fmt::format("{}{} {}", lv.empty() ? "" : ", ", n, seed_level_name(level));
    s += fmt::format("seeds      workloads by reuse level: {}\n", lv);
  }
  if (!g.has_results()) {
    s += "NO RESULTS: no variant of this model has a successful measurement on this GPU type\n";
    return s;
  }
  s += fmt::format("\n  {:<26} {:<11} {:<16} {:>9} {:>9} {:>6}  {}\n", "cluster", "kind", "workload",
                   "est us", "meas us", "ratio", "kernel");
  for (const auto& c : g.choices) {
    const auto& cand = r.plan.candidates[c.candidate];
    const std::string kernel = c.reference ? "reference kernel (no successful measurement)"
                                           : c.variant_key + (c.checked ? " [checked]" : "");
    s += fmt::format("  {:<26} {:<11} {:<16} {:>9.2f} {:>9} {:>6}  {}\n", shorten(cand.pattern, 26),
                     cluster_kind_name(cand.kind), ws.workloads[c.workload].signature, c.estimated_us,
                     c.reference ? "-" : fmt::format("{:.2f}", c.measured_us),
                     c.reference || c.estimated_us <= 0 ? "-" : fmt::format("{:.2f}", c.measured_us / c.estimated_us),
                     kernel);
  }
  s += fmt::format("  {:<26} {:<11} {:<16} {:>9.2f} {:>9.2f} {:>6}  {} kernels{}\n", "total", "", "",
                   g.estimated_total_us, g.measured_total_us,
                   g.estimated_total_us > 0 ? fmt::format("{:.2f}", g.measured_total_us / g.estimated_total_us) : "-",
                   g.choices.size(), g.cover.exact ? "" : " (greedy cover)");
  s += fmt::format("\nleast-estimate cover (plan): {:.2f} us; the measured selection above: {:.2f} us\n",
                   g.estimate_cover_us, g.measured_total_us);
  if (g.unmeasured_clusters)
    s += fmt::format("{} candidate clusters have no successful measurement: their sub-clusters and "
                     "singletons cover them\n", g.unmeasured_clusters);
  if (g.reference_fallbacks)
    s += fmt::format("{} chosen clusters fall back to the reference kernel (not measured; not in the "
                     "total)\n", g.reference_fallbacks);
  if (g.checks_failed)
    s += fmt::format("{} winners failed the host-emulator check and were replaced\n", g.checks_failed);
  return s;
}

std::string tune_totals(const TuneResult& r) {
  std::string s = fmt::format("\n{:<8} {:<9} {:>8} {:>8} {:>8} {:>12} {:>12}  {}\n", "gpu", "source",
                              "jobs", "results", "kernels", "est us", "measured us", "status");
  for (const auto& g : r.gpus) {
    s += fmt::format("{:<8} {:<9} {:>8} {:>8} {:>8} {:>12.2f} {:>12.2f}  {}\n", g.gpu->name,
                     source_name(g.source), g.jobs, g.results, g.choices.size(), g.estimated_total_us,
                     g.measured_total_us,
                     !g.has_results() ? "NO RESULTS"
                     : g.drift.untrusted ? "DRIFT: its only worker drifted, its results not trusted"
                     : g.internal_error_jobs() > 0
                         ? fmt::format("INTERNAL ERRORS: {} jobs, {} workloads", g.internal_error_jobs(),
                                       g.internal_error_workloads.size())
                         : "ok");
  }
  s += fmt::format("{} jobs, {} results committed, {:.1f} s{}\n", r.jobs, r.results, r.seconds,
                   r.interrupted ? " (interrupted: rerun the same command to measure the rest)" : "");
  return s;
}

std::string tune_selection_json(const TuneResult& r, const GpuTuneResult& g) {
  const auto& ws = r.plan.workload_set;
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_object().field("format", kSelectionFormat).field("model", r.model_name);
  j.field("gpu", g.gpu->name).field("arch", g.gpu->sm_arch());
  j.field("precision", precision_name(r.precision));
  j.field("source", std::string(source_name(g.source))).field("run", r.run_id);
  j.field("measured_total_us", g.measured_total_us).field("estimated_total_us", g.estimated_total_us);
  j.field("estimate_cover_us", g.estimate_cover_us).field("exact_cover", g.cover.exact);
  j.field("reference_fallbacks", g.reference_fallbacks);
  j.key("clusters").begin_array();
  for (const auto& c : g.choices) {
    const auto& cand = r.plan.candidates[c.candidate];
    j.begin_object().field("candidate", c.candidate).field("pattern", cand.pattern);
    j.field("kind", cluster_kind_name(cand.kind)).field("workload", ws.workloads[c.workload].signature);
    j.key("nodes").begin_array();
    for (size_t n : cand.nodes) j.value(r.graph.nodes[n].name);
    j.end_array();
    j.field("kernel", c.reference ? std::string("reference") : c.variant_key);
    j.field("measured", !c.reference).field("checked_on_emulator", c.checked);
    j.field("estimated_us", c.estimated_us).field("measured_us", c.measured_us);
    j.end_object();
  }
  j.end_array();
  j.key("workloads").begin_array();
  for (size_t w = 0; w < ws.workloads.size(); ++w) {
    j.begin_object().field("signature", ws.workloads[w].signature);
    j.field("kind", cluster_kind_name(ws.workloads[w].kind));
    j.field("best_variant", g.best_key[w]).field("best_us", g.best_us[w]).end_object();
  }
  j.end_array().end_object();
  os << "\n";
  return os.str();
}

std::string plan_summary(const ExecPlan& p, const std::string& dir) {
  int64_t weight_bytes = 0;
  for (const auto& t : p.tensors)
    if (t.kind == PlanTensorKind::weight) weight_bytes += t.bytes();
  const double mib = 1024.0 * 1024.0;
  std::string s = fmt::format(
      "\nplan ({}, precision {}): {} steps, {} kernel modules{}; device arena {:.1f} MiB (one buffer per tensor: {:.1f} MiB); "
      "weights {:.1f} MiB\n",
      kPlanFormat, precision_name(p.precision), p.steps.size(), p.modules.size(),
      p.reference_steps ? fmt::format(" ({} steps on the reference kernel)", p.reference_steps) : "",
      p.arena_bytes / mib, p.unshared_bytes / mib, weight_bytes / mib);
  for (const auto& t : p.weight_transforms) s += "  weights: " + t + "\n";
  if (p.training)
    for (const auto& line : memory_report_lines(memory_report(p))) s += "  " + line + "\n";
  s += fmt::format("run it: dc-run {}{}{}\n", dir, p.training ? " --train --data BATCH_DIR --steps N" : "",
                   p.emulated ? " --emulate   (times are emulated: check correctness only)" : " [--bench 100]");
  return s;
}

std::vector<TuneOutput> write_tune_outputs(const TuneResult& r, const std::string& dir) {
  std::vector<TuneOutput> written;
  for (const auto& g : r.gpus) {
    // DIR/<gpu> whole or not at all (staged_dir.h): a full disk leaves the earlier folder.
    const std::string final_dir = (std::filesystem::path(dir) / g.gpu->name).string();
    StagedDir staged(final_dir, kPlanFolderFiles);
    const std::filesystem::path& d = staged.path();
    TuneOutput out;
    out.summary = tune_gpu_summary(r, g);
    if (g.has_results() && !g.choices.empty()) {
      const ExecPlan plan = build_tuned_plan(r, g);
      write_plan(plan, d.string());
      out.summary += plan_summary(plan, final_dir);
      out.plan_dir = final_dir;
    }
    write_file(d / "summary.txt", out.summary);
    write_file(d / "selection.json", tune_selection_json(r, g));
    staged.commit();
    written.push_back(std::move(out));
  }
  return written;
}

}  // namespace dc
