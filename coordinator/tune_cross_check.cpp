// The cross-check stage: finalists measured twice (docs/tune.md). On a GPU type with more
// than one worker, the two best variants of each workload (by measured time, as selection
// ranks them) are measured again on another worker. Two results that disagree beyond the
// noise model get a third measurement, on a third worker if there is one, else on the first
// worker again; the worker the three figures put out of line is named loudly, and the one
// found out of line most often is quarantined: every later job avoids it, its results are
// not selected, and what only it measured in this run is measured again elsewhere.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tune_stages.h"

namespace dc::tune_stage {

namespace {

constexpr int kMaxRounds = 4;
constexpr size_t kFinalists = 2;

using Key = std::tuple<size_t, std::string, std::string>;  // GPU index, workload, variant key

// What the stage did for one finalist, across rounds.
struct FinalistState {
  bool again_sent = false;  // the second measurement, avoiding the first worker
  bool compared = false;    // a pair of two workers was compared
  bool third_sent = false;
  bool decided = false;     // the third measurement was looked at
};

double rel_mad(const Measurement& m) { return m.median_us > 0 ? m.mad_us / m.median_us : 0; }

// The allowed relative disagreement of two results: the noise model.
double noise_bound(const Measurement& a, const Measurement& b) {
  return std::max(kCrossCheckNoise, kCrossCheckMads * std::max(rel_mad(a), rel_mad(b)));
}

std::string figure(const Measurement& m) {
  return fmt::format("{:.3g} us (MAD {:.2g} us, n {}) from {}", m.median_us, m.mad_us, m.n_samples, m.worker);
}

class Stage {
 public:
  Stage(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, TuningDb& db,
        const TuneOptions& opts, Ledger& ledger, const StageLog& log,
        const std::function<Collected(std::vector<PlannedJob>)>& measure)
      : plan_(plan), gpus_(gpus), db_(db), opts_(opts), ledger_(ledger), log_(log), measure_(measure),
        variants_(plan, gpus) {
    out_.per_gpu.resize(gpus.size());
  }

  CrossChecked run() {
    for (size_t gi = 0; gi < gpus_.size(); ++gi) {
      const GpuTuneResult& gr = gpus_[gi];
      if (gr.workers > 1) {
        out_.per_gpu[gi].done = true;
        continue;
      }
      if (gr.workers == 1)  // said once per GPU type, not per workload
        log_.notice(fmt::format("cross-check: {} has one worker: finalists are measured once, by it alone",
                                gr.gpu->name));
    }
    for (int round = 0; round < kMaxRounds; ++round) {
      const int64_t sent = out_.sent;
      send(moved());
      send(second_jobs());
      send(third_jobs());
      const bool quarantined = judge();
      if (out_.sent == sent && !quarantined) break;
      if (interrupted_) break;
    }
    return std::move(out_);
  }

 private:
  void send(std::vector<PlannedJob> jobs) {
    if (jobs.empty() || interrupted_) return;
    out_.sent += static_cast<int64_t>(jobs.size());
    interrupted_ = measure_(std::move(jobs)).interrupted;
  }

  const std::map<std::string, std::string>& quarantined(size_t gi) const {
    static const std::map<std::string, std::string> none;
    const auto it = ledger_.quarantined.find(gi);
    return it == ledger_.quarantined.end() ? none : it->second;
  }

  // Workers of the type that are not quarantined: a cross-check needs two.
  int live_workers(size_t gi) const {
    return gpus_[gi].workers - static_cast<int>(quarantined(gi).size());
  }

  // This run's ok results of a variant, quarantined workers' left out, in arrival order.
  std::vector<Measurement> results(const Key& k) const {
    std::vector<Measurement> out;
    const auto it = ledger_.ok_results.find(k);
    if (it == ledger_.ok_results.end()) return out;
    const auto& q = quarantined(std::get<0>(k));
    for (const Measurement& m : it->second)
      if (!q.count(m.worker)) out.push_back(m);
    return out;
  }

  std::optional<PlannedJob> job(const Key& k, const Measurement& first, std::set<std::string> avoid) {
    std::optional<PlannedJob> j = again_job(plan_, variants_, k, first, std::move(avoid));
    if (j) out_.again.insert(k);
    return j;
  }

  // The two best variants of each workload of a type that has two live workers, by the
  // selection's own ranking with the quarantined workers' results left out.
  std::vector<Key> finalists() {
    std::vector<Key> out;
    for (size_t gi = 0; gi < gpus_.size(); ++gi) {
      const GpuTuneResult& gr = gpus_[gi];
      if (!out_.per_gpu[gi].done || live_workers(gi) < 2) continue;
      BestVariantQuery q;
      q.gpu_type = gr.gpu->name;
      q.source = gr.source;
      q.nvrtc_major = gr.nvrtc_major;
      q.math_paths = opts_.plan.space.precisions;
      q.current_source_only = true;
      for (const auto& [worker, why] : quarantined(gi)) q.exclude_workers.insert(worker);
      for (const Workload& w : plan_.workload_set.workloads) {
        q.workload = w.signature;
        for (const WorkloadBest& b : db_.best_variants(q))
          for (size_t i = 0; i < b.ranked.size() && i < kFinalists; ++i) out.emplace_back(gi, w.signature, b.ranked[i]);
      }
    }
    return out;
  }

  // What only quarantined workers measured in this run is measured again elsewhere.
  std::vector<PlannedJob> moved() {
    std::vector<PlannedJob> jobs = moved_jobs(plan_, variants_, ledger_);
    for (const PlannedJob& j : jobs) {
      out_.again.insert({j.gpu, plan_.workload_set.workloads[j.workload].signature, j.variant.key()});
      ++out_.per_gpu[j.gpu].moved;
    }
    return jobs;
  }

  // A finalist measured in this run by one worker only: again, avoiding that worker.
  std::vector<PlannedJob> second_jobs() {
    std::vector<PlannedJob> jobs;
    for (const Key& k : finalists()) {
      FinalistState& s = state_[k];
      const std::vector<Measurement> rows = results(k);
      if (rows.empty() || s.again_sent) continue;  // an earlier run's figure: not measured again
      if (second_worker(rows)) continue;           // two workers already (a winner's check)
      s.again_sent = true;
      if (auto j = job(k, rows.front(), {rows.front().worker})) {
        jobs.push_back(std::move(*j));
        ++out_.per_gpu[std::get<0>(k)].remeasured;
      }
    }
    return jobs;
  }

  static const Measurement* second_worker(const std::vector<Measurement>& rows) {
    for (const Measurement& m : rows)
      if (m.worker != rows.front().worker) return &m;
    return nullptr;
  }

  // Pairs of two workers compared; those beyond the noise model get a third measurement.
  std::vector<PlannedJob> third_jobs() {
    std::vector<PlannedJob> jobs;
    for (auto& [k, s] : state_) {
      if (s.compared) continue;
      const std::vector<Measurement> rows = results(k);
      const size_t gi = std::get<0>(k);
      const Measurement* b = rows.empty() ? nullptr : second_worker(rows);
      if (!b) {
        if (s.again_sent) {
          s.compared = true;  // the second measurement failed or came from the same worker
          ++out_.per_gpu[gi].unpaired;
          spdlog::warn("{}/{}: cross-check: no second worker's result to compare", std::get<1>(k), std::get<2>(k));
        }
        continue;
      }
      s.compared = true;
      const Measurement& a = rows.front();
      if (medians_agree(a, *b)) {
        ++out_.per_gpu[gi].agreed;
        continue;
      }
      ++out_.per_gpu[gi].disagreed;
      spdlog::warn("{}/{} on {}: cross-check: {} and {} disagree beyond the noise model (max({:.0f}%, {} MADs)); "
                   "measuring a third time", std::get<1>(k), std::get<2>(k), gpus_[gi].gpu->name, figure(a), figure(*b),
                   kCrossCheckNoise * 100, kCrossCheckMads);
      // A third worker if the type has one, else the first worker again.
      std::set<std::string> avoid{b->worker};
      if (live_workers(gi) >= 3) avoid.insert(a.worker);
      if (auto j = job(k, a, std::move(avoid))) {
        s.third_sent = true;
        jobs.push_back(std::move(*j));
      }
    }
    return jobs;
  }

  // The calibrated estimate of a variant: the plan's figure for a kept variant, else the
  // result's own (uncalibrated) one.
  double estimate_us(const Key& k, const Measurement& m) const {
    const auto& [gi, signature, key] = k;
    const auto& ws = plan_.workload_set.workloads;
    for (size_t wi = 0; wi < ws.size(); ++wi) {
      if (ws[wi].signature != signature) continue;
      for (const auto& sv : plan_.gpus[gi].workloads[wi].kept)
        if (sv.variant.key() == key) return sv.estimate.seconds * 1e6;
    }
    return m.estimate_us;
  }

  // The worker out of line among a (first), b (second worker) and c (the third), with why;
  // "" when the three figures do not say.
  std::pair<std::string, std::string> verdict(const Key& k, const Measurement& a, const Measurement& b,
                                              const Measurement& c) const {
    if (c.worker != a.worker && c.worker != b.worker) {  // a third worker votes
      const bool ac = medians_agree(a, c), bc = medians_agree(b, c);
      if (ac && !bc) return {b.worker, fmt::format("{} against {} and {}", figure(b), figure(a), figure(c))};
      if (bc && !ac) return {a.worker, fmt::format("{} against {} and {}", figure(a), figure(b), figure(c))};
      return {"", ""};
    }
    // Two workers: the one measured twice either does not repeat its own figure, or the
    // disagreement is systematic and the estimate is the only third opinion.
    const Measurement& same = c.worker == a.worker ? a : b;
    const Measurement& other = c.worker == a.worker ? b : a;
    if (!medians_agree(same, c))
      return {same.worker, fmt::format("does not repeat its own figure: {} then {}, against {}", figure(same),
                                       figure(c), figure(other))};
    const double e = estimate_us(k, same);
    if (!(e > 0) || same.median_us <= 0 || other.median_us <= 0) return {"", ""};
    const double d_same = std::abs(std::log(same.median_us / e)), d_other = std::abs(std::log(other.median_us / e));
    const Measurement& out = d_same > d_other ? same : other;
    const Measurement& in = d_same > d_other ? other : same;
    return {out.worker, fmt::format("{} against {}, twice; with two workers the estimate ({:.3g} us) breaks the "
                                    "tie, and {} is the further from it", figure(out), figure(in), e, out.worker)};
  }

  // Verdicts on the third measurements; per GPU type, the worker found out of line most
  // often (strictly) is quarantined, while another worker of the type is left. True when
  // one was.
  bool judge() {
    std::map<size_t, std::map<std::string, int>> votes;
    std::map<size_t, std::map<std::string, std::string>> why;
    for (auto& [k, s] : state_) {
      if (!s.third_sent || s.decided) continue;
      s.decided = true;
      const std::vector<Measurement> rows = results(k);
      const Measurement* b = rows.empty() ? nullptr : second_worker(rows);
      if (!b) continue;
      const Measurement* c = nullptr;
      for (const Measurement& m : rows)
        if (&m != &rows.front() && &m != b) {
          c = &m;
          break;
        }
      if (!c) {
        spdlog::warn("{}/{}: cross-check: the third measurement gave no result", std::get<1>(k), std::get<2>(k));
        continue;
      }
      const auto [worker, reason] = verdict(k, rows.front(), *b, *c);
      if (worker.empty()) {
        spdlog::warn("{}/{}: cross-check: three results, no worker out of line: {}; {}; {}", std::get<1>(k),
                     std::get<2>(k), figure(rows.front()), figure(*b), figure(*c));
        continue;
      }
      spdlog::error("{}/{} on {}: cross-check: WORKER {} IS OUT OF LINE: {}", std::get<1>(k), std::get<2>(k),
                    gpus_[std::get<0>(k)].gpu->name, worker, reason);
      ++votes[std::get<0>(k)][worker];
      why[std::get<0>(k)].emplace(worker, reason);
    }
    bool any = false;
    for (const auto& [gi, by_worker] : votes) {
      std::string worst;
      int most = 0, second = 0, total = 0;
      for (const auto& [worker, n] : by_worker) {
        total += n;
        if (n > most) {
          second = most;
          most = n;
          worst = worker;
        } else {
          second = std::max(second, n);
        }
      }
      if (most == second || live_workers(gi) < 2) {
        log_.notice(fmt::format("cross-check: {}: workers out of line as often as each other, or none to spare: "
                                "nobody quarantined", gpus_[gi].gpu->name));
        continue;
      }
      const std::string reason = fmt::format("out of line in {} of {} third measurements, e.g. {}", most, total,
                                             why[gi][worst]);
      out_.quarantined.push_back(fmt::format("{} worker {}", gpus_[gi].gpu->name, worst));
      out_.per_gpu[gi].marked += quarantine(gi, worst, "cross-check", reason, gpus_, db_, ledger_, log_);
      any = true;
    }
    return any;
  }

  const ModelPlan& plan_;
  const std::vector<GpuTuneResult>& gpus_;
  TuningDb& db_;
  const TuneOptions& opts_;
  Ledger& ledger_;
  const StageLog& log_;
  const std::function<Collected(std::vector<PlannedJob>)>& measure_;
  VariantFinder variants_;
  std::map<Key, FinalistState> state_;
  CrossChecked out_;
  bool interrupted_ = false;
};

}  // namespace

bool medians_agree(const Measurement& a, const Measurement& b) {
  const double lo = std::min(a.median_us, b.median_us), hi = std::max(a.median_us, b.median_us);
  if (!(lo > 0)) return lo == hi;
  return hi / lo - 1 <= noise_bound(a, b);
}

CrossChecked cross_check(const ModelPlan& plan, const std::vector<GpuTuneResult>& gpus, TuningDb& db,
                         const TuneOptions& opts, Ledger& ledger, const StageLog& log,
                         const std::function<Collected(std::vector<PlannedJob>)>& measure) {
  return Stage(plan, gpus, db, opts, ledger, log, measure).run();
}

std::string describe(const CrossChecked& c) {
  int64_t again = 0, agreed = 0, disagreed = 0, moved = 0;
  bool done = false;
  for (const auto& g : c.per_gpu) {
    done = done || g.done;
    again += g.remeasured;
    agreed += g.agreed;
    disagreed += g.disagreed;
    moved += g.moved;
  }
  if (!done) return "no GPU type has two workers: finalists measured once";
  std::string s = fmt::format("{} finalists compared on two workers ({} measured again for it): {} agree, {} disagree",
                              agreed + disagreed, again, agreed, disagreed);
  if (!c.quarantined.empty()) {
    s += "; quarantined:";
    for (const auto& q : c.quarantined) s += " " + q;
    s += fmt::format("; {} of their results measured again elsewhere", moved);
  }
  return s;
}

}  // namespace dc::tune_stage
