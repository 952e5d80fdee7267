#include "metrics_text.h"
#include "ir/join.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

namespace dc {
namespace {

std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// A number as Prometheus reads it: integers without a fraction, +Inf, NaN.
std::string number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  if (x == std::floor(x) && std::fabs(x) < 1e15) return fmt::format("{}", static_cast<int64_t>(x));
  return fmt::format("{:.6g}", x);
}

class Exposition {
 public:
  void family(const std::string& name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // labels: name="value" pairs, values escaped here.
  void sample(const std::string& name, std::initializer_list<std::pair<const char*, std::string>> labels, double x) {
    out_ += name;
    if (labels.size() > 0) {
      out_ += '{';
      bool first = true;
      for (const auto& [k, val] : labels) {
        out_ += fmt::format("{}{}=\"{}\"", first ? "" : ",", k, label_value(val));
        first = false;
      }
      out_ += '}';
    }
    out_ += ' ' + number(x) + '\n';
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string prometheus_text(const ServiceView& v) {
  Exposition e;
  e.family("dc_farm_up", "gauge", "1 while the farm service runs");
  e.sample("dc_farm_up", {{"service", v.service_id}}, 1);
  e.family("dc_farm_uptime_seconds", "gauge", "seconds since the service started");
  e.sample("dc_farm_uptime_seconds", {}, v.uptime_seconds);

  // Workers by GPU type and state: a worker counts once per GPU type it has devices of.
  std::map<std::pair<std::string, std::string>, int64_t> workers;
  std::set<std::string> types;
  for (const ServiceView::Queue& q : v.queues) types.insert(q.gpu_type);
  for (const ServiceView::Worker& w : v.workers) {
    std::set<std::string> mine(w.gpu_types.begin(), w.gpu_types.end());
    for (const std::string& t : mine) {
      ++workers[{t, w.state}];
      types.insert(t);
    }
  }
  e.family("dc_farm_workers", "gauge", "connected workers by GPU type and state (idle, busy)");
  for (const std::string& t : types)
    for (const char* state : {"idle", "busy"}) {
      const auto it = workers.find({t, state});
      e.sample("dc_farm_workers", {{"gpu_type", t}, {"state", state}}, it == workers.end() ? 0 : it->second);
    }
  e.family("dc_farm_devices", "gauge", "connected devices by GPU type");
  for (const ServiceView::Queue& q : v.queues) e.sample("dc_farm_devices", {{"gpu_type", q.gpu_type}}, q.devices);
  e.family("dc_farm_queue_depth", "gauge", "jobs waiting in the service's fair-share queues, by GPU type");
  for (const ServiceView::Queue& q : v.queues)
    e.sample("dc_farm_queue_depth", {{"gpu_type", q.gpu_type}}, static_cast<double>(q.queued));
  e.family("dc_farm_in_flight", "gauge", "jobs handed to the broker (queued there or on a device), by GPU type");
  for (const ServiceView::Queue& q : v.queues)
    e.sample("dc_farm_in_flight", {{"gpu_type", q.gpu_type}}, static_cast<double>(q.in_flight));
  std::string out = e.take();

  Exposition r;
  r.family("dc_farm_results_total", "counter", "results from workers, by final status");
  for (const auto& [status, n] : v.results_by_status) r.sample("dc_farm_results_total", {{"status", status}}, n);
  r.family("dc_farm_recorded_total", "counter", "measurement rows this service added to its DB, by status");
  for (const auto& [status, n] : v.recorded_by_status) r.sample("dc_farm_recorded_total", {{"status", status}}, n);
  r.family("dc_farm_jobs_answered_total", "counter",
           "jobs answered to tunes, by origin: measured for the tune, joined another tune's, from the DB");
  r.sample("dc_farm_jobs_answered_total", {{"origin", "measured"}}, static_cast<double>(v.answered_measured));
  r.sample("dc_farm_jobs_answered_total", {{"origin", "joined"}}, static_cast<double>(v.joined));
  r.sample("dc_farm_jobs_answered_total", {{"origin", "database"}}, static_cast<double>(v.answered_from_db));
  r.family("dc_farm_jobs_cancelled_total", "counter", "queued jobs cancelled because their tune left");
  r.sample("dc_farm_jobs_cancelled_total", {}, static_cast<double>(v.cancelled));
  r.family("dc_farm_tunes_total", "counter", "tunes that joined the service (resumed: reconnected within the grace)");
  r.sample("dc_farm_tunes_total", {{"how", "new"}}, static_cast<double>(v.tunes_started));
  r.sample("dc_farm_tunes_total", {{"how", "resumed"}}, static_cast<double>(v.tunes_resumed));

  r.family("dc_farm_job_latency_seconds", "histogram",
           "seconds from a job's hand-over to the broker to its result");
  int64_t cumulative = 0;
  for (size_t i = 0; i < v.latency.bounds.size(); ++i) {
    cumulative += i < v.latency.counts.size() ? v.latency.counts[i] : 0;
    r.sample("dc_farm_job_latency_seconds_bucket", {{"le", number(v.latency.bounds[i])}}, static_cast<double>(cumulative));
  }
  r.sample("dc_farm_job_latency_seconds_bucket", {{"le", "+Inf"}}, static_cast<double>(v.latency.count));
  r.sample("dc_farm_job_latency_seconds_sum", {}, v.latency.sum);
  r.sample("dc_farm_job_latency_seconds_count", {}, static_cast<double>(v.latency.count));

  r.family("dc_farm_tune_jobs", "gauge", "a connected tune's jobs: submitted, done (answered), queued");
  for (const ServiceView::Tune& t : v.tunes) {
    const std::string id = std::to_string(t.id);
    r.sample("dc_farm_tune_jobs", {{"tune", id}, {"model", t.model}, {"state", "submitted"}}, static_cast<double>(t.submitted));
    r.sample("dc_farm_tune_jobs", {{"tune", id}, {"model", t.model}, {"state", "done"}}, static_cast<double>(t.done));
    r.sample("dc_farm_tune_jobs", {{"tune", id}, {"model", t.model}, {"state", "queued"}}, static_cast<double>(t.queued));
  }
  r.family("dc_farm_tune_progress_ratio", "gauge", "a tune's answered jobs over its submitted jobs");
  for (const ServiceView::Tune& t : v.tunes)
    r.sample("dc_farm_tune_progress_ratio", {{"tune", std::to_string(t.id)}, {"model", t.model}},
             t.submitted > 0 ? static_cast<double>(t.done) / static_cast<double>(t.submitted) : 0.0);
  r.family("dc_farm_tune_eta_seconds", "gauge",
           "seconds until a tune's submitted jobs are answered at its rate so far (-1: not known yet)");
  for (const ServiceView::Tune& t : v.tunes)
    r.sample("dc_farm_tune_eta_seconds", {{"tune", std::to_string(t.id)}, {"model", t.model}}, t.eta_seconds);
  r.family("dc_farm_tune_priority", "gauge", "a tune's fair-share weight");
  for (const ServiceView::Tune& t : v.tunes)
    r.sample("dc_farm_tune_priority", {{"tune", std::to_string(t.id)}, {"model", t.model}}, t.priority);

  r.family("dc_farm_device_busy_ratio", "gauge",
           "fraction of its time with the service that a device spent running jobs (check + timing)");
  for (const ServiceView::Device& d : v.devices)
    r.sample("dc_farm_device_busy_ratio",
             {{"worker", d.worker_id}, {"device", std::to_string(d.index)}, {"gpu_type", d.gpu_type}}, d.busy_fraction);
  r.family("dc_farm_device_leases", "gauge", "jobs a device holds now");
  for (const ServiceView::Device& d : v.devices)
    r.sample("dc_farm_device_leases",
             {{"worker", d.worker_id}, {"device", std::to_string(d.index)}, {"gpu_type", d.gpu_type}}, d.leases);
  return out + r.take();
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// The items joined by commas; "-" for none.
std::string comma_list(const std::vector<std::string>& v) {
  const std::string out = join(v, ",");
  return out.empty() ? "-" : out;
}

std::string duration(double s) {
  if (s < 0) return "-";
  if (s < 90) return fmt::format("{:.0f} s", s);
  if (s < 5400) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

std::string bar(double fraction) {
  const double f = std::isfinite(fraction) ? std::min(1.0, std::max(0.0, fraction)) : 0.0;
  return fmt::format("<span class=bar><span style=\"width:{:.0f}%\"></span></span> {:.{}f}%", 100 * f, 100 * f, f < 0.1 ? 1 : 0);
}

}  // namespace

std::string status_page_html(const ServiceView& v, int refresh_seconds) {
  const auto h = html_escape;
  std::string o;
  o += fmt::format(
      "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>\n<meta http-equiv=refresh content=\"{}\">\n"
      "<title>dc farm service {}</title>\n<style>\n"
      "body{{font:14px system-ui,sans-serif;margin:1.5em;color:#222}}\n"
      "table{{border-collapse:collapse;margin-bottom:1.5em}}\n"
      "th,td{{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left}}\n"
      "td.n,th.n{{text-align:right}}\n"
      ".bar{{display:inline-block;width:120px;height:10px;background:#eee;vertical-align:middle}}\n"
      ".bar span{{display:block;height:10px;background:#3a7}}\n"
      ".busy{{color:#a50}} .idle{{color:#777}} .gone{{color:#b00}}\n"
      "</style></head><body>\n",
      refresh_seconds, h(v.service_id));
  o += fmt::format("<h1>dc farm service</h1>\n<p id=summary>{} &middot; up {} &middot; {} jobs measured, {} answered from "
                   "the DB, {} joined, {} cancelled &middot; refreshes every {} s &middot; "
                   "<a href=\"/metrics\">/metrics</a></p>\n",
                   h(v.service_id), duration(v.uptime_seconds), v.measured, v.answered_from_db, v.joined, v.cancelled,
                   refresh_seconds);
  o += fmt::format("<h2>Tunes ({})</h2>\n<table id=tunes><tr><th class=n>id</th><th>model</th><th>client</th>"
                   "<th>GPU types</th><th class=n>priority</th><th>progress</th><th class=n>done/submitted</th>"
                   "<th class=n>queued</th><th class=n>measured</th><th class=n>from DB</th><th>ETA</th></tr>\n",
                   v.tunes.size());
  for (const ServiceView::Tune& t : v.tunes)
    o += fmt::format("<tr><td class=n>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td>{}</td>"
                     "<td class=n>{}/{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>\n",
                     t.id, h(t.model), h(t.client_host) + (t.connected ? "" : " <span class=gone>(reconnecting)</span>"),
                     h(comma_list(t.gpu_types)), t.priority,
                     bar(t.submitted > 0 ? static_cast<double>(t.done) / static_cast<double>(t.submitted) : 0.0),
                     t.done, t.submitted, t.queued, t.measured, t.from_db, duration(t.eta_seconds));
  o += "</table>\n";
  o += fmt::format("<h2>Workers ({})</h2>\n<table id=workers><tr><th>id</th><th>host</th><th>GPU types</th>"
                   "<th>state</th><th class=n>leases</th><th class=n>done</th><th class=n>failed</th><th>busy</th></tr>\n",
                   v.workers.size());
  for (const ServiceView::Worker& w : v.workers)
    o += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td class={}>{}</td><td class=n>{}</td><td class=n>{}</td>"
                     "<td class=n>{}</td><td>{}</td></tr>\n",
                     h(w.worker_id), h(w.host), h(comma_list(w.gpu_types)), w.state == "busy" ? "busy" : "idle", h(w.state),
                     w.leases, w.jobs_done, w.jobs_failed, bar(w.busy_fraction));
  o += "</table>\n";
  o += "<h2>Queues</h2>\n<table id=queues><tr><th>GPU type</th><th class=n>queued</th><th class=n>in flight</th>"
       "<th class=n>devices</th></tr>\n";
  for (const ServiceView::Queue& q : v.queues)
    o += fmt::format("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>\n", h(q.gpu_type),
                     q.queued, q.in_flight, q.devices);
  o += "</table>\n<h2>Results by status</h2>\n<table id=results><tr><th>status</th><th class=n>results</th></tr>\n";
  for (const auto& [status, n] : v.results_by_status)
    o += fmt::format("<tr><td>{}</td><td class=n>{}</td></tr>\n", h(status), n);
  o += "</table>\n</body></html>\n";
  return o;
}

}  // namespace dc
