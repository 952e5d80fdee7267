// The drift check (docs/tune.md, "Drift over a tune"). The cross-check compares workers with
// each other on the finalists; a worker that slows down (or speeds up) as the tune goes on
// is out of line with itself, which only a fixed probe timed twice shows. The probe, the
// sentinel, is the naive reference kernel of a cheap workload, long enough to be timed (see
// sentinel_workload): every worker can run it, it costs little, and it never changes
// between the two timings. Each
// worker times it before the measure stage and again after it; two medians that disagree by
// the cross-check's noise model (medians_agree) and by more than the timer's resolution
// (sentinels_agree), also when timed again, mean the worker drifted. A drifting worker is
// quarantined (tune_quarantine.cpp) while a steady worker of its type is left to measure
// again what only it measured; the only worker of a type (or when all drifted) cannot be
// replaced: its results of this run are marked implausible and the tune does not say ok.
// Sentinels are probes of the worker, not of the variant: their results are not recorded.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "plausibility.h"
#include "tune_stages.h"

namespace dc::tune_stage {

namespace {

constexpr int kMaxFirstRounds = 64;  // workers found per GPU type, at most

PlannedJob sentinel_job(size_t gi, size_t wi, std::set<std::string> avoid) {
  PlannedJob j;
  j.gpu = gi;
  j.workload = wi;
  j.variant = reference_variant();
  j.sentinel = true;
  j.avoid_workers = std::move(avoid);
  return j;
}

std::string figure(const Measurement& m) {
  return fmt::format("{:.4g} us (MAD {:.2g} us)", m.median_us, m.mad_us);
}

// Rounds of one sentinel per open GPU type, `next` saying what to send (nullopt: the type is
// done) and `got` taking each new result; at most `rounds` rounds.
void rounds(Sentinels& s, Ledger& ledger, int max_rounds,
            const std::function<std::optional<PlannedJob>(size_t gi)>& next,
            const std::function<void(size_t gi, const Measurement& m)>& got,
            const std::function<Collected(std::vector<PlannedJob>)>& probe) {
  for (int round = 0; round < max_rounds; ++round) {
    std::vector<PlannedJob> jobs;
    for (size_t gi = 0; gi < s.per_gpu.size(); ++gi)
      if (s.per_gpu[gi].workload)
        if (auto j = next(gi)) {
          jobs.push_back(std::move(*j));
          ++s.per_gpu[gi].jobs;
        }
    if (jobs.empty()) return;
    const bool interrupted = probe(std::move(jobs)).interrupted;
    for (size_t gi = 0; gi < s.per_gpu.size(); ++gi) {
      const std::vector<Measurement>& arrived = ledger.sentinels[gi];
      for (size_t& i = s.per_gpu[gi].taken; i < arrived.size(); ++i) got(gi, arrived[i]);
    }
    if (interrupted) return;
  }
}

}  // namespace

size_t sentinel_workload(const ModelPlan& plan, const GpuSpec& gpu) {
  const auto& ws = plan.workload_set.workloads;
  const std::string precision = reference_variant().precision;
  std::optional<size_t> least_timed, greatest;
  double least_timed_us = 0, greatest_us = 0;
  for (size_t wi = 0; wi < ws.size(); ++wi) {
    const double f = plausibility_floor_us(ws[wi], gpu, precision);
    if (f >= kSentinelFloorUs && (!least_timed || f < least_timed_us)) {
      least_timed = wi;
      least_timed_us = f;
    }
    if (!greatest || f > greatest_us) {
      greatest = wi;
      greatest_us = f;
    }
  }
  return least_timed ? *least_timed : greatest.value_or(0);
}

Sentinels first_sentinels(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus,
                          const std::vector<PlannedJob>& planned, Ledger& ledger,
                          const std::function<Collected(std::vector<PlannedJob>)>& probe) {
  Sentinels s;
  s.per_gpu.resize(gpus.size());
  for (size_t gi = 0; gi < gpus.size(); ++gi) {
    const bool measures = std::any_of(planned.begin(), planned.end(), [&](const PlannedJob& j) { return j.gpu == gi; });
    if (!measures || gpus[gi].workers < 1 || plan.workload_set.workloads.empty()) continue;
    s.per_gpu[gi].workload = sentinel_workload(plan, *gpus[gi].gpu);
  }
  // Until a round's sentinel comes back from a worker that has one (nobody else was there to
  // take it), not until the farm stage's count: a worker may join just after it was taken.
  std::vector<bool> closed(gpus.size(), false);
  rounds(s, ledger, kMaxFirstRounds,
         [&](size_t gi) -> std::optional<PlannedJob> {
           const Sentinels::PerGpu& g = s.per_gpu[gi];
           if (closed[gi]) return std::nullopt;
           return sentinel_job(gi, *g.workload, {g.workers.begin(), g.workers.end()});
         },
         [&](size_t gi, const Measurement& m) {
           Sentinels::PerGpu& g = s.per_gpu[gi];
           // A failure, or a worker that already has one (nobody else was free): no one new to find.
           if (m.status != JobStatus::ok || g.first.count(m.worker)) {
             if (m.status != JobStatus::ok)
               spdlog::warn("drift check: {}'s sentinel failed on worker {} ({}: {}): its drift is not checked",
                            gpus[gi].gpu->name, m.worker, job_status_name(m.status), m.error);
             closed[gi] = true;
             return;
           }
           g.first.emplace(m.worker, m);
           g.workers.push_back(m.worker);
         },
         probe);
  return s;
}

namespace {

// The verdicts of one GPU type, and their consequences.
GpuTuneResult::Drift judge(size_t gi, const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus,
                           const Sentinels::PerGpu& g, TuningDb& db, Ledger& ledger, const StageLog& log) {
  GpuTuneResult::Drift d;
  d.sentinel = plan.workload_set.workloads[*g.workload].signature;
  d.jobs = g.jobs;
  const std::string& type = gpus[gi].gpu->name;
  std::vector<std::string> steady;
  for (const std::string& w : g.workers) {
    const auto first = g.first.find(w), last = g.last.find(w);
    if (last == g.last.end()) {
      d.unchecked.push_back(w);
      continue;
    }
    d.medians[w] = {first->second.median_us, last->second.median_us};
    if (sentinels_agree(first->second, last->second)) {
      steady.push_back(w);
      continue;
    }
    const auto again = g.again.find(w);
    const std::vector<Measurement> none;
    const std::vector<Measurement>& later = again == g.again.end() ? none : again->second;
    if (const auto ok = std::find_if(later.begin(), later.end(),
                                     [&](const Measurement& m) { return sentinels_agree(first->second, m); });
        ok != later.end()) {
      // A passing disturbance at the moment of the last timing (another process on the
      // host, a clock step), not a lasting change: the worker is steady.
      spdlog::info("drift check: worker {} ({}): its sentinel took {} after the measure stage, but {} when "
                   "timed again, as before it ({}): steady", w, type, figure(last->second), figure(*ok),
                   figure(first->second));
      d.medians[w].second = ok->median_us;
      steady.push_back(w);
      continue;
    }
    const double ratio = first->second.median_us > 0 ? last->second.median_us / first->second.median_us : 0;
    std::string retimed;
    for (const Measurement& m : later) retimed += (retimed.empty() ? "" : ", ") + figure(m);
    d.drifted[w] = fmt::format("its sentinel (the reference kernel of {}) took {} before the measure stage and {} "
                               "after it (x{:.2f}: beyond the noise model, max({:.0f}%, {} MADs, {} us)){}",
                               d.sentinel, figure(first->second), figure(last->second), ratio,
                               kCrossCheckNoise * 100, kCrossCheckMads, kDriftTimerUs,
                               later.empty() ? std::string()
                                             : fmt::format(", and {} when timed again", retimed));
    spdlog::error("tune: *** WORKER {} ({}) DRIFTED over the tune ***: {}", w, type, d.drifted[w]);
  }
  // Workers that measured in this run without a first sentinel (joined later) are not checked either.
  for (const auto& [k, rows] : ledger.ok_results)
    if (std::get<0>(k) == gi)
      for (const Measurement& m : rows)
        if (!g.first.count(m.worker) &&
            std::find(d.unchecked.begin(), d.unchecked.end(), m.worker) == d.unchecked.end())
          d.unchecked.push_back(m.worker);
  for (const std::string& w : d.unchecked)
    spdlog::warn("drift check: worker {} ({}) did not time its sentinel twice: its drift is not checked", w, type);
  // Another worker not known to drift is left to measure again: the drifting ones are quarantined.
  const bool left = !steady.empty() || !d.unchecked.empty();
  for (const auto& [w, why] : d.drifted) {
    if (left) {
      d.marked += quarantine(gi, w, "drift check", "drifted over the tune: " + why, gpus, db, ledger, log);
      continue;
    }
    // Nowhere else to measure: its figures of this run are not trusted, and a later tune
    // measures those variants again (implausible is not final).
    d.untrusted = true;
    const int64_t marked = mark_run_results(
        gi, w, fmt::format("worker {} drifted over the tune and no steady {} worker was left to measure again: {}",
                           w, type, why), db, ledger);
    d.marked += marked;
    spdlog::error("tune: *** NOT TRUSTED: worker {} ({}) drifted and no steady worker of the type is left to "
                  "measure again on; its {} results of this run are marked implausible (a later tune measures "
                  "them again), and this tune does not say ok ***", w, type, marked);
    log.notice(fmt::format("DRIFT: worker {} ({}), no steady worker left: its {} results of this run are not "
                           "trusted (marked implausible); the tune is not ok", w, type, marked));
  }
  return d;
}

// Drift is a lasting change: a worker whose last sentinel disagrees with its first times it
// again, up to kDriftConfirmations times after a pause, and one agreeing re-timing clears it.
// A momentary disturbance (on a host CPU device, another process taking the cores just as
// the last sentinel ran) then does not condemn a whole run's results.
void confirm(Sentinels& s, Ledger& ledger, const std::vector<GpuTuneResult>& gpus,
             const std::function<Collected(std::vector<PlannedJob>)>& probe) {
  constexpr auto kPause = std::chrono::milliseconds(500);
  for (int round = 0; round < kDriftConfirmations; ++round) {
    std::vector<PlannedJob> jobs;
    for (size_t gi = 0; gi < s.per_gpu.size(); ++gi) {
      Sentinels::PerGpu& g = s.per_gpu[gi];
      if (!g.workload) continue;
      for (const std::string& w : g.workers) {
        const auto first = g.first.find(w), last = g.last.find(w);
        if (last == g.last.end() || sentinels_agree(first->second, last->second)) continue;
        const std::vector<Measurement>& again = g.again[w];
        if (std::any_of(again.begin(), again.end(), [&](const Measurement& m) { return sentinels_agree(first->second, m); }))
          continue;
        std::set<std::string> avoid(g.workers.begin(), g.workers.end());
        avoid.erase(w);
        jobs.push_back(sentinel_job(gi, *g.workload, std::move(avoid)));
        ++g.jobs;
      }
    }
    if (jobs.empty()) return;
    std::this_thread::sleep_for(kPause);
    const bool interrupted = probe(std::move(jobs)).interrupted;
    for (size_t gi = 0; gi < s.per_gpu.size(); ++gi) {
      Sentinels::PerGpu& g = s.per_gpu[gi];
      const std::vector<Measurement>& arrived = ledger.sentinels[gi];
      for (size_t& i = g.taken; i < arrived.size(); ++i) {
        const Measurement& m = arrived[i];
        if (m.status != JobStatus::ok)
          spdlog::warn("drift check: {}'s sentinel, timed again, failed on worker {} ({}: {})", gpus[gi].gpu->name,
                       m.worker, job_status_name(m.status), m.error);
        else if (g.first.count(m.worker))
          g.again[m.worker].push_back(m);
      }
    }
    if (interrupted) return;
  }
}

}  // namespace

bool sentinels_agree(const Measurement& a, const Measurement& b) {
  return medians_agree(a, b) || std::abs(a.median_us - b.median_us) <= kDriftTimerUs;
}

Drifted drift_check(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, Sentinels& s, TuningDb& db,
                    Ledger& ledger, const StageLog& log,
                    const std::function<Collected(std::vector<PlannedJob>)>& probe,
                    const std::function<Collected(std::vector<PlannedJob>)>& measure) {
  Drifted out;
  out.per_gpu.resize(gpus.size());
  // The last sentinels: each worker's in turn, avoiding the type's other workers.
  std::vector<size_t> turn(gpus.size(), 0);
  int most = 0;
  for (const auto& g : s.per_gpu) most = std::max(most, static_cast<int>(g.workers.size()));
  rounds(s, ledger, most,
         [&](size_t gi) -> std::optional<PlannedJob> {
           const Sentinels::PerGpu& g = s.per_gpu[gi];
           if (turn[gi] >= g.workers.size()) return std::nullopt;
           std::set<std::string> avoid(g.workers.begin(), g.workers.end());
           avoid.erase(g.workers[turn[gi]++]);
           return sentinel_job(gi, *g.workload, std::move(avoid));
         },
         [&](size_t gi, const Measurement& m) {
           Sentinels::PerGpu& g = s.per_gpu[gi];
           if (m.status != JobStatus::ok)
             spdlog::warn("drift check: {}'s second sentinel failed on worker {} ({}: {})", gpus[gi].gpu->name,
                          m.worker, job_status_name(m.status), m.error);
           else if (g.first.count(m.worker))
             g.last.emplace(m.worker, m);  // the first that came back from it
         },
         probe);
  confirm(s, ledger, gpus, probe);
  for (size_t gi = 0; gi < gpus.size(); ++gi)
    if (s.per_gpu[gi].workload) out.per_gpu[gi] = judge(gi, plan, gpus, s.per_gpu[gi], db, ledger, log);
  VariantFinder variants(plan, gpus);
  std::vector<PlannedJob> moved = moved_jobs(plan, variants, ledger);
  for (const PlannedJob& j : moved) ++out.per_gpu[j.gpu].moved;
  out.sent = static_cast<int64_t>(moved.size());
  if (!moved.empty()) measure(std::move(moved));
  return out;
}

std::string describe(const Drifted& d) {
  int64_t workers = 0, steady = 0, sentinels = 0;
  std::string drifted;
  bool checked = false;
  for (const auto& g : d.per_gpu) {
    checked = checked || !g.sentinel.empty();
    sentinels += g.jobs;
    workers += static_cast<int64_t>(g.medians.size());
    steady += static_cast<int64_t>(g.medians.size() - g.drifted.size());
    for (const auto& [w, why] : g.drifted) drifted += (drifted.empty() ? "" : ", ") + w;
  }
  if (!checked) return "nothing measured: no sentinel timed";
  std::string s = fmt::format("{} sentinel jobs; {} workers timed theirs twice: {} steady", sentinels, workers, steady);
  if (!drifted.empty()) s += fmt::format(", DRIFTED: {}; {} of their results measured again elsewhere", drifted, d.sent);
  return s;
}

}  // namespace dc::tune_stage
