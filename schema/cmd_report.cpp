// dc-db report: one self-contained HTML page (inline SVG, no scripts, no network) with the
// plots the issue asks for: time per cluster per GPU type (from the latest plans), measured
// vs estimated, speedup of the best variant over the reference kernel, per-GPU comparison.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "dc_db.h"
#include "ir/error.h"
#include "variant.h"

namespace dc::dcdb {

namespace po = boost::program_options;

namespace {

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

const char* color(size_t i) {
  static const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  return kPalette[i % std::size(kPalette)];
}

struct Bar {
  std::string label;
  double value;
  std::string tip;  // hover text
};

// Horizontal bars, largest first, at most `limit` of them.
std::string bar_chart(std::vector<Bar> bars, const std::string& unit, const char* fill,
                      size_t limit = 40) {
  std::stable_sort(bars.begin(), bars.end(),
                   [](const Bar& a, const Bar& b) { return a.value > b.value; });
  const size_t hidden = bars.size() > limit ? bars.size() - limit : 0;
  bars.resize(std::min(bars.size(), limit));
  const double max = bars.empty() ? 1 : std::max(bars.front().value, 1e-12);
  const int label_w = 230, bar_w = 480, row = 18;
  const int h = static_cast<int>(bars.size()) * row + 10;
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' class='chart'>\n",
      label_w + bar_w + 110, h);
  for (size_t i = 0; i < bars.size(); ++i) {
    const int y = static_cast<int>(i) * row + 4;
    const double w = std::max(1.0, bar_w * bars[i].value / max);
    svg += fmt::format(
        "<text x='{}' y='{}' text-anchor='end' class='label'>{}</text>"
        "<rect x='{}' y='{}' width='{:.1f}' height='{}' fill='{}'><title>{}</title></rect>"
        "<text x='{:.1f}' y='{}' class='value'>{} {}</text>\n",
        label_w - 6, y + 12, esc(bars[i].label.substr(0, 36)), label_w, y, w, row - 4, fill,
        esc(bars[i].tip), label_w + w + 4, y + 12, fmt::format("{:.3g}", bars[i].value), unit);
  }
  svg += "</svg>\n";
  if (hidden) svg += fmt::format("<p class='note'>{} smaller ones not shown</p>\n", hidden);
  return svg;
}

struct Point {
  double x, y;
  size_t series;
  bool hollow;
  std::string tip;
};

// Log-log scatter with the y = x diagonal.
std::string scatter(const std::vector<Point>& pts, const std::vector<std::string>& series,
                    const std::string& xlabel, const std::string& ylabel) {
  double lo = 1e300, hi = 0;
  for (const Point& p : pts) {
    lo = std::min({lo, p.x, p.y});
    hi = std::max({hi, p.x, p.y});
  }
  const double l0 = std::floor(std::log10(lo)), l1 = std::ceil(std::log10(hi)) + (lo == hi);
  const int size = 420, pad = 50;
  auto pos = [&](double v) { return (std::log10(v) - l0) / (l1 - l0) * size; };
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' class='chart'>\n"
      "<rect x='{}' y='10' width='{}' height='{}' fill='none' stroke='#999'/>\n"
      "<line x1='{}' y1='{}' x2='{}' y2='10' stroke='#bbb' stroke-dasharray='4'/>\n",
      size + pad + 160, size + pad + 20, pad, size, size, pad, size + 10, pad + size);
  for (double e = l0; e <= l1; ++e) {
    const double p = (e - l0) / (l1 - l0) * size;
    svg += fmt::format(
        "<text x='{:.1f}' y='{}' text-anchor='middle' class='value'>1e{}</text>"
        "<text x='{}' y='{:.1f}' text-anchor='end' class='value'>1e{}</text>\n",
        pad + p, size + 26, e, pad - 4, size + 10 - p + 4, e);
  }
  svg += fmt::format(
      "<text x='{}' y='{}' text-anchor='middle' class='label'>{}</text>"
      "<text x='12' y='{}' transform='rotate(-90 12 {})' text-anchor='middle' "
      "class='label'>{}</text>\n",
      pad + size / 2, size + 44, esc(xlabel), 10 + size / 2, 10 + size / 2, esc(ylabel));
  for (const Point& p : pts)
    svg += fmt::format(
        "<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}' stroke='{}'><title>{}</title></circle>\n",
        pad + pos(p.x), size + 10 - pos(p.y), p.hollow ? "none" : color(p.series),
        color(p.series), esc(p.tip));
  for (size_t i = 0; i < series.size(); ++i)
    svg += fmt::format(
        "<circle cx='{}' cy='{}' r='4' fill='{}'/><text x='{}' y='{}' class='label'>{}</text>\n",
        pad + size + 14, 20 + 18 * i, color(i), pad + size + 22, 24 + 18 * i, esc(series[i]));
  return svg + "</svg>\n";
}

}  // namespace

int cmd_report(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc(
      "dc-db report: one self-contained HTML page with plots (open it in any browser, offline)");
  desc.add_options()("help,h", "this text")("out", po::value<std::string>()->required(),
                                            "the HTML file to write, e.g. report.html");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  const std::string out_path = (*vm)["out"].as<std::string>();
  sqlite::Connection conn = open_for_reading(db);
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>dc tuning report</title>\n"
          "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
          "h2{border-bottom:1px solid #ccc}.label{font-size:12px}.value{font-size:11px;"
          "fill:#444}.note{color:#666;font-size:13px}table{border-collapse:collapse}"
          "td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}"
          "td:first-child,th:first-child{text-align:left}</style></head><body>\n";
  html << fmt::format("<h1>dc tuning report</h1>\n<p class='note'>{} &middot; {} measurements "
                      "&middot; generated {} UTC. Emulated times are modelled, not measured, and "
                      "are always shown apart from real ones.</p>\n",
                      esc(db), conn.scalar_int("SELECT count(*) FROM measurements"),
                      format_time(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count()));

  // 1. Time per cluster for each GPU type: the latest plan per model and GPU type.
  html << "<h2>Time per cluster</h2>\n";
  {
    sqlite::Query plans = conn.query(
        "SELECT mo.name, p.gpu_type, p.emulated, p.measured_total_us, p.estimated_total_us, "
        "json_extract(c.value, '$.cluster'), json_extract(c.value, '$.variant'), "
        "json_extract(c.value, '$.measured_us'), json_extract(c.value, '$.estimated_us'), "
        "p.precision "
        "FROM plans p JOIN tuning_runs r ON r.id = p.run_id JOIN models mo ON mo.id = r.model_id "
        "JOIN json_each(p.choices_json) c "
        "WHERE p.id IN (SELECT max(p2.id) FROM plans p2 JOIN tuning_runs r2 ON r2.id = p2.run_id "
        "GROUP BY r2.model_id, p2.gpu_type, p2.emulated, p2.precision) "
        "ORDER BY mo.name, p.gpu_type, p.emulated, p.precision");
    std::map<std::string, std::pair<std::string, std::vector<Bar>>> charts;  // title -> bars
    while (plans.step()) {
      const std::string title =
          fmt::format("{} on {} ({}, precision {})", plans.text(0), plans.text(1),
                      plans.int64(2) ? "emulated" : "real", plans.text(9));
      auto& [caption, bars] = charts[title];
      caption = fmt::format("total measured {}, estimated {}", format_us(plans.real(3)),
                            format_us(plans.real(4)));
      bars.push_back({plans.text(5), plans.real(7),
                      fmt::format("{}: {} (estimated {})", plans.text(6),
                                  format_us(plans.real(7)), format_us(plans.real(8)))});
    }
    if (charts.empty()) html << "<p class='note'>no plans yet (a tune writes one per GPU type)</p>\n";
    for (const auto& [title, chart] : charts)
      html << fmt::format("<h3>{}</h3><p class='note'>{}</p>\n", esc(title), chart.first)
           << bar_chart(chart.second, "us", "#1f77b4");
  }

  // 2. Measured vs estimated.
  html << "<h2>Measured vs estimated</h2>\n";
  {
    std::vector<Point> pts;
    std::vector<std::string> series;
    std::map<std::string, size_t> index;
    sqlite::Query q = conn.query(
        "SELECT gpu_type, source, estimate_us, median_us, workload, variant_key "
        "FROM estimator_error ORDER BY random() LIMIT 5000");
    while (q.step()) {
      auto [it, fresh] = index.emplace(q.text(0), series.size());
      if (fresh) series.push_back(q.text(0));
      pts.push_back({q.real(2), q.real(3), it->second, q.text(1) == "emulated",
                     fmt::format("{} {} on {} ({}): estimated {}, measured {}", q.text(4),
                                 q.text(5), q.text(0), q.text(1), format_us(q.real(2)),
                                 format_us(q.real(3)))});
    }
    if (pts.empty()) html << "<p class='note'>no ok results with an estimate yet</p>\n";
    else
      html << "<p class='note'>one point per ok result; hollow points are emulated; above the "
              "diagonal ran slower than estimated</p>\n"
           << scatter(pts, series, "estimated (us)", "measured median (us)");
  }

  // 3. Speedup of the best variant (TuningDb::best_variants) over the reference kernel.
  const auto tdb = open_db_for_reading(db);
  const auto gpu_types = tdb->gpu_types();
  html << "<h2>Speedup over the reference kernel</h2>\n";
  {
    std::map<std::string, std::vector<Bar>> charts;
    for (const GpuTypeRecord& g : gpu_types)
      for (bool emulated : {false, true}) {
        MeasurementQuery q;
        q.gpu_type = g.name;
        q.source = source_of(emulated);
        q.status = JobStatus::ok;
        std::map<std::string, double> reference;  // workload -> least median
        for (const Measurement& m : tdb->query(q))
          if (is_reference_key(m.variant_key)) {
            const auto [it, fresh] = reference.emplace(m.workload, m.median_us);
            if (!fresh) it->second = std::min(it->second, m.median_us);
          }
        for (const auto& [sig, b] : best_by_workload(*tdb, g.name, emulated))
          if (reference.count(sig))
            charts[fmt::format("{} ({})", g.name, source_arg(emulated))].push_back(
                {sig, reference.at(sig) / b.median_us, b.variant_key});
      }
    if (charts.empty())
      html << "<p class='note'>no workload has both a reference-kernel result and a best "
              "variant yet</p>\n";
    size_t i = 0;
    for (const auto& [title, bars] : charts)
      html << fmt::format("<h3>{}</h3>\n", esc(title)) << bar_chart(bars, "x", color(i++));
  }

  // 4. Per-GPU comparison over the workloads every GPU type of a source has measured.
  html << "<h2>GPU types compared</h2>\n";
  for (const char* source : {"real", "emulated"}) {
    std::map<std::string, std::map<std::string, double>> best;  // workload -> gpu -> us
    std::set<std::string> gpus;
    for (const GpuTypeRecord& g : gpu_types)
      for (const auto& [sig, b] : best_by_workload(*tdb, g.name, source[0] == 'e')) {
        best[sig][g.name] = b.median_us;
        gpus.insert(g.name);
      }
    if (gpus.empty()) continue;
    std::map<std::string, double> total;
    size_t common = 0;
    for (const auto& [w, times] : best) {
      if (times.size() != gpus.size()) continue;
      ++common;
      for (const auto& [g, us] : times) total[g] += us;
    }
    html << fmt::format("<h3>{} results: {} GPU types, {} workloads measured on all</h3>\n",
                        source, gpus.size(), common);
    std::vector<Bar> bars;
    for (const auto& [g, us] : total) bars.push_back({g, us, format_us(us)});
    html << (bars.empty() ? "<p class='note'>no workload measured on every GPU type</p>\n"
                          : bar_chart(bars, "us", source[0] == 'r' ? "#2ca02c" : "#9467bd"));
    html << "<table><tr><th>GPU type</th><th>workloads</th><th>sum of best times</th></tr>\n";
    for (const auto& g : gpus) {
      double sum = 0;
      size_t n = 0;
      for (const auto& [w, times] : best)
        if (times.count(g)) {
          sum += times.at(g);
          ++n;
        }
      html << fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>\n", esc(g), n,
                          format_us(sum));
    }
    html << "</table>\n";
  }
  html << "</body></html>\n";

  std::ofstream out(out_path, std::ios::binary);
  DC_USER_CHECK(out, "cannot write '", out_path, "'");
  out << html.str();
  out.close();
  DC_USER_CHECK(out, "error writing '", out_path, "' (disk full?)");
  std::cout << "wrote " << out_path << "\n";
  return kExitOk;
}

}  // namespace dc::dcdb
