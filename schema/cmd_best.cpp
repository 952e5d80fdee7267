// dc-db workloads, best, compare, estimator-error: the fastest variants per GPU type (by
// TuningDb::best_variants, the definition tune's selection uses) and how the estimator did.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "dc_db.h"
#include "ir/error.h"
#include "ir/precision.h"

namespace dc::dcdb {

namespace po = boost::program_options;

namespace {

void require_gpu(sqlite::Connection& conn, const std::string& gpu) {
  {
    sqlite::Query q = conn.query("SELECT 1 FROM gpu_types WHERE name = ?");
    if (q.bind(1, gpu).step()) return;
  }
  std::string known;
  sqlite::Query q = conn.query("SELECT name FROM gpu_types ORDER BY name");
  while (q.step()) known += (known.empty() ? "" : ", ") + q.text(0);
  throw_user_error("no GPU type '", gpu, "' in the tuning DB (GPU types: ",
                   known.empty() ? "none" : known, ")");
}

std::string gflop(int64_t flops) { return fmt::format("{:.3f}", flops / 1e9); }
std::string mbytes(int64_t bytes) { return fmt::format("{:.2f}", bytes / 1e6); }

struct ModelFilter {
  std::optional<int64_t> id;
  std::map<std::string, int> counts;  // workload -> instances in the model
};

ModelFilter model_filter(sqlite::Connection& conn, const po::variables_map& vm) {
  ModelFilter f;
  if (!vm.count("model")) return f;
  f.id = find_model(conn, vm["model"].as<std::string>());
  sqlite::Query q = conn.query("SELECT workload, count FROM model_workloads WHERE model_id = ?");
  q.bind(1, *f.id);
  while (q.step()) f.counts[q.text(0)] = static_cast<int>(q.int64(1));
  return f;
}

// --model, --emulated and --nvrtc-major, after the GPU option(s) of best and compare.
void add_model_and_source_options(po::options_description& desc) {
  desc.add_options()("model", po::value<std::string>(), "only the workloads of this model")(
      "emulated", po::bool_switch(), "emulated results instead of real ones")(
      "nvrtc-major", po::value<std::string>()->default_value(""),
      "results of this NVRTC major version only, e.g. 12 (default: the newest in the DB), "
      "as a tune with that toolchain selects");
}

// The storage type (workload_storage.storage) of a plan's precision.
std::string storage_of(Precision p) { return std::string(dtype_name(storage_dtype(p))); }

// Per workload signature: kind and precision-free base signature; with `storage`, only the
// workloads a plan of that storage type holds.
struct WorkloadInfo {
  std::string kind, base;
};
std::map<std::string, WorkloadInfo> workload_info(sqlite::Connection& conn, const std::string& storage = "") {
  sqlite::Query q = conn.query(
      "SELECT w.signature, w.kind, s.base_signature FROM workloads w "
      "JOIN workload_storage s ON s.signature = w.signature WHERE ?1 = '' OR s.storage = ?1");
  q.bind(1, storage);
  std::map<std::string, WorkloadInfo> out;
  while (q.step()) out[q.text(0)] = {q.text(1), q.text(2)};
  return out;
}

std::optional<Precision> precision_option(const po::variables_map& vm) {
  if (!vm.count("precision")) return std::nullopt;
  return parse_precision(vm["precision"].as<std::string>());
}

}  // namespace

int cmd_workloads(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc("dc-db workloads: workloads with their variants and results");
  desc.add_options()("help,h", "this text")("model", po::value<std::string>(),
                                            "only the workloads of this model")(
      "gpu", po::value<std::string>(), "add the best result on this GPU type")(
      "emulated", po::bool_switch(), "with --gpu: emulated results instead of real ones")(
      "precision", po::value<std::string>(), "only workloads stored as a plan of this "
      "precision stores them (f32 for fp32/tf32, f16, bf16)");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  sqlite::Connection conn = open_for_reading(db);
  const ModelFilter model = model_filter(conn, *vm);
  const bool emulated = (*vm)["emulated"].as<bool>();
  std::string gpu;
  std::map<std::string, WorkloadBest> best;
  if (vm->count("gpu")) {
    gpu = (*vm)["gpu"].as<std::string>();
    require_gpu(conn, gpu);
    best = best_by_workload(*open_db_for_reading(db), gpu, emulated);
  }
  std::vector<std::string> header = {"signature", "kind", ">GFLOP", ">MB", ">variants",
                                     ">results", "models"};
  if (model.id) header.insert(header.begin() + 2, ">count");
  if (!gpu.empty()) {
    header.push_back(fmt::format(">best on {}", gpu));
    header.push_back("variant");
  }
  Table t(header);
  sqlite::Query q = conn.query(
      "SELECT w.signature, w.kind, w.flops, w.bytes, "
      "(SELECT count(*) FROM variants v WHERE v.workload = w.signature), "
      "(SELECT count(*) FROM measurements m JOIN variants v ON v.id = m.variant_id "
      " WHERE v.workload = w.signature), "
      "(SELECT group_concat(DISTINCT mo.name) FROM model_workloads mw "
      " JOIN models mo ON mo.id = mw.model_id WHERE mw.workload = w.signature) "
      "FROM workloads w "
      "WHERE (?1 IS NULL OR w.signature IN (SELECT workload FROM model_workloads WHERE model_id = ?1)) "
      "AND (?2 = '' OR w.signature IN (SELECT signature FROM workload_storage WHERE storage = ?2)) "
      "ORDER BY w.kind, w.signature");
  q.bind(1, model.id);
  const auto precision = precision_option(*vm);
  q.bind(2, precision ? storage_of(*precision) : "");
  while (q.step()) {
    const std::string sig = q.text(0);
    std::vector<std::string> row = {sig, q.text(1), gflop(q.int64(2)), mbytes(q.int64(3)),
                                    std::to_string(q.int64(4)), std::to_string(q.int64(5)),
                                    q.is_null(6) ? "-" : q.text(6)};
    if (model.id) row.insert(row.begin() + 2, std::to_string(model.counts.count(sig) ? model.counts.at(sig) : 0));
    if (!gpu.empty()) {
      const auto b = best.find(sig);
      row.push_back(b == best.end() ? "-" : format_us(b->second.median_us));
      row.push_back(b == best.end() ? "-" : b->second.variant_key);
    }
    t.add(row);
  }
  if (t.empty()) {
    std::cout << "no workloads in " << db << (model.id ? " for this model" : "") << "\n";
    return kExitOk;
  }
  t.print(std::cout);
  return kExitOk;
}

int cmd_best(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc("dc-db best: the fastest variant per workload on a GPU type\n"
                               "(TuningDb::best_variants: what tune selects from; a variant with "
                               "any final failure is excluded)");
  desc.add_options()("help,h", "this text")("gpu", po::value<std::string>()->required(),
                                            "GPU type, e.g. h100");
  add_model_and_source_options(desc);
  desc.add_options()("precision", po::value<std::string>(), "what a plan of this precision "
                     "would choose: its storage type's workloads, its math paths' variants");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  const auto precision = precision_option(*vm);
  sqlite::Connection conn = open_for_reading(db);
  const std::string gpu = (*vm)["gpu"].as<std::string>();
  const bool emulated = (*vm)["emulated"].as<bool>();
  require_gpu(conn, gpu);
  const ModelFilter model = model_filter(conn, *vm);
  const auto info = workload_info(conn, precision ? storage_of(*precision) : "");
  const auto best = best_by_workload(*open_db_for_reading(db), gpu, emulated,
                                     (*vm)["nvrtc-major"].as<std::string>(),
                                     precision ? math_paths(*precision) : std::vector<std::string>{});
  std::vector<const WorkloadBest*> shown;
  for (const auto& [sig, b] : best)
    if (info.count(sig) && (!model.id || model.counts.count(sig))) shown.push_back(&b);
  std::stable_sort(shown.begin(), shown.end(), [](const WorkloadBest* a, const WorkloadBest* b) {
    return a->median_us > b->median_us;  // slowest first; ties by signature
  });
  std::vector<std::string> header = {"signature", "kind", "variant", ">median", ">min",
                                     ">estimate", ">variants ok"};
  if (model.id) header.insert(header.begin() + 2, ">count");
  Table t(header);
  double weighted = 0;
  for (const WorkloadBest* b : shown) {
    std::vector<std::string> row = {b->workload, info.at(b->workload).kind, b->variant_key,
                                    format_us(b->median_us), format_us(b->min_us),
                                    b->estimate_us > 0 ? format_us(b->estimate_us) : "-",
                                    std::to_string(b->ok_variants)};
    if (model.id) {
      row.insert(row.begin() + 2, std::to_string(model.counts.at(b->workload)));
      weighted += model.counts.at(b->workload) * b->median_us;
    }
    t.add(row);
  }
  std::cout << fmt::format("best variants on {} ({}{}): {} workloads", gpu, source_arg(emulated),
                           precision ? fmt::format(", precision {}: {} workloads, math {}",
                                                   precision_name(*precision),
                                                   storage_of(*precision),
                                                   fmt::join(math_paths(*precision), "/"))
                                     : "",
                           shown.size());
  if (model.id)
    std::cout << fmt::format(" of {} in the model; sum of best times x count {}",
                             model.counts.size(), format_us(weighted));
  std::cout << "\n";
  if (t.empty()) {
    note_other_source(conn, gpu, emulated);
    return kExitOk;
  }
  t.print(std::cout);
  return kExitOk;
}

// compare --gpu G --precisions fp32,fp16: one cluster's workloads in several precisions
// (matched by their precision-free base signature), best time of each side by side.
int compare_precisions(const std::string& db, const po::variables_map& vm) {
  std::vector<Precision> precs;
  {
    std::stringstream ss(vm["precisions"].as<std::string>());
    for (std::string p; std::getline(ss, p, ',');) precs.push_back(parse_precision(p));
  }
  DC_USER_CHECK(precs.size() >= 2, "--precisions needs at least two, e.g. fp32,fp16");
  const std::string gpu = vm["gpu"].as<std::string>();
  const bool emulated = vm["emulated"].as<bool>();
  sqlite::Connection conn = open_for_reading(db);
  require_gpu(conn, gpu);
  const ModelFilter model = model_filter(conn, vm);
  const auto tdb = open_db_for_reading(db);
  // (kind, base signature) -> precision -> best us; a model filter matches either form.
  std::map<std::pair<std::string, std::string>, std::map<std::string, double>> best;
  std::set<std::string> bases_in_model;
  if (model.id) {
    sqlite::Query q = conn.query(
        "SELECT s.base_signature FROM model_workloads mw JOIN workload_storage s "
        "ON s.signature = mw.workload WHERE mw.model_id = ?");
    q.bind(1, *model.id);
    while (q.step()) bases_in_model.insert(q.text(0));
  }
  for (Precision p : precs) {
    const auto info = workload_info(conn, storage_of(p));
    for (const auto& [sig, b] : best_by_workload(*tdb, gpu, emulated, vm["nvrtc-major"].as<std::string>(),
                                                 math_paths(p))) {
      const auto i = info.find(sig);
      if (i == info.end() || (model.id && !bases_in_model.count(i->second.base))) continue;
      best[{i->second.kind, i->second.base}][std::string(precision_name(p))] = b.median_us;
    }
  }
  std::vector<std::string> names;
  for (Precision p : precs) names.emplace_back(precision_name(p));
  std::vector<std::string> header = {"base signature", "kind"};
  for (const auto& n : names) header.push_back(">" + n);
  for (size_t i = 1; i < names.size(); ++i) header.push_back(">" + names[i] + "/" + names[0]);
  Table t(header);
  std::map<std::string, double> totals;
  size_t complete = 0;
  for (const auto& [key, times] : best) {
    std::vector<std::string> row = {key.second, key.first};
    for (const auto& n : names) row.push_back(times.count(n) ? format_us(times.at(n)) : "-");
    for (size_t i = 1; i < names.size(); ++i)
      row.push_back(times.count(names[0]) && times.count(names[i])
                        ? fmt::format("{:.2f}", times.at(names[i]) / times.at(names[0]))
                        : "-");
    t.add(row);
    if (times.size() == names.size()) {
      ++complete;
      for (const auto& [n, us] : times) totals[n] += us;
    }
  }
  std::cout << fmt::format("best times on {} ({}) by precision, {} clusters\n", gpu,
                           source_arg(emulated), best.size());
  if (t.empty()) return kExitOk;
  t.print(std::cout);
  std::cout << fmt::format("\ntotal over the {} clusters measured in all:", complete);
  for (const auto& n : names)
    std::cout << fmt::format(" {} {}{}", n, format_us(totals[n]),
                             n == names[0] || totals[names[0]] <= 0
                                 ? ""
                                 : fmt::format(" ({:.2f}x)", totals[n] / totals[names[0]]));
  std::cout << "\n";
  return kExitOk;
}

int cmd_compare(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc(
      "dc-db compare: best time per workload on several GPU types (--gpus), or of one\n"
      "cluster in several precisions on one GPU type (--gpu G --precisions fp32,fp16)");
  desc.add_options()("help,h", "this text")("gpus", po::value<std::string>(),
                                            "GPU types, comma separated: a100,h100")(
      "gpu", po::value<std::string>(), "with --precisions: the GPU type")(
      "precisions", po::value<std::string>(), "precisions side by side, comma separated: "
      "fp32,fp16 (workloads matched by their precision-free base signature)");
  add_model_and_source_options(desc);
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  if (vm->count("precisions")) {
    DC_USER_CHECK(vm->count("gpu") && !vm->count("gpus"),
                  "compare --precisions takes one GPU type: --gpu G");
    return compare_precisions(db, *vm);
  }
  DC_USER_CHECK(vm->count("gpus"), "compare needs --gpus a100,h100 (or --gpu G --precisions fp32,fp16)");
  std::vector<std::string> gpus;
  {
    std::stringstream ss((*vm)["gpus"].as<std::string>());
    for (std::string g; std::getline(ss, g, ',');)
      if (!g.empty()) gpus.push_back(g);
  }
  DC_USER_CHECK(gpus.size() >= 2, "--gpus needs at least two GPU types, e.g. a100,h100");
  const bool emulated = (*vm)["emulated"].as<bool>();
  sqlite::Connection conn = open_for_reading(db);
  for (const auto& g : gpus) require_gpu(conn, g);
  const ModelFilter model = model_filter(conn, *vm);
  const auto info = workload_info(conn);
  const auto tdb = open_db_for_reading(db);

  std::map<std::pair<std::string, std::string>, std::map<std::string, double>> best;  // (kind, sig)
  for (const auto& g : gpus)
    for (const auto& [sig, b] : best_by_workload(*tdb, g, emulated, (*vm)["nvrtc-major"].as<std::string>()))
      if (!model.id || model.counts.count(sig)) best[{info.at(sig).kind, sig}][g] = b.median_us;
  std::vector<std::string> header = {"signature", "kind"};
  for (const auto& g : gpus) header.push_back(">" + g);
  for (size_t i = 1; i < gpus.size(); ++i) header.push_back(">" + gpus[i] + "/" + gpus[0]);
  Table t(header);
  std::map<std::string, double> totals;  // over workloads measured on every GPU type
  size_t complete = 0;
  for (const auto& [key, times] : best) {
    std::vector<std::string> row = {key.second, key.first};
    for (const auto& g : gpus) row.push_back(times.count(g) ? format_us(times.at(g)) : "-");
    for (size_t i = 1; i < gpus.size(); ++i)
      row.push_back(times.count(gpus[0]) && times.count(gpus[i])
                        ? fmt::format("{:.2f}", times.at(gpus[i]) / times.at(gpus[0]))
                        : "-");
    t.add(row);
    if (times.size() == gpus.size()) {
      ++complete;
      const int weight = model.id ? model.counts.at(key.second) : 1;
      for (const auto& [g, us] : times) totals[g] += weight * us;
    }
  }
  std::cout << fmt::format("best times ({}), {} workloads\n", source_arg(emulated), best.size());
  if (t.empty()) return kExitOk;
  t.print(std::cout);
  std::cout << fmt::format("\ntotal over the {} workloads measured on all{}:", complete,
                           model.id ? " (x count in the model)" : "");
  for (const auto& g : gpus)
    std::cout << fmt::format(" {} {}{}", g, format_us(totals[g]),
                             g == gpus[0] || totals[gpus[0]] <= 0
                                 ? ""
                                 : fmt::format(" ({:.2f}x)", totals[g] / totals[gpus[0]]));
  std::cout << "\n";
  return kExitOk;
}

int cmd_estimator_error(const std::string& db, const std::vector<std::string>& args) {
  po::options_description desc(
      "dc-db estimator-error: estimated vs measured time per cluster kind\n"
      "(ratio = measured / estimated; the geometric mean is the calibration factor a fit\n"
      "would choose, the typical error is the median of |log ratio| as a percentage)");
  desc.add_options()("help,h", "this text")("gpu", po::value<std::string>()->required(),
                                            "GPU type, e.g. h100")(
      "emulated", po::bool_switch(), "emulated results instead of real ones");
  const auto vm = parse_options(args, desc);
  if (!vm) return kExitOk;
  sqlite::Connection conn = open_for_reading(db);
  const std::string gpu = (*vm)["gpu"].as<std::string>();
  const bool emulated = (*vm)["emulated"].as<bool>();
  require_gpu(conn, gpu);
  std::map<std::string, std::vector<double>> logs;  // kind -> log(ratio)
  {
    sqlite::Query q = conn.query(
        "SELECT kind, ratio FROM estimator_error WHERE gpu_type = ? AND source = ?");
    q.bind_all(gpu, source_arg(emulated));
    while (q.step()) {
      const double r = std::log(q.real(1));
      logs[q.text(0)].push_back(r);
      logs["(all)"].push_back(r);
    }
  }
  std::cout << fmt::format("estimator error on {} ({})\n", gpu, source_arg(emulated));
  if (logs.empty()) {
    std::cout << "no ok results with an estimate\n";
    note_other_source(conn, gpu, emulated);
    return kExitOk;
  }
  Table t({"kind", ">results", ">geomean ratio", ">typical error", ">worst ratio"});
  for (auto& [kind, v] : logs) {
    double sum = 0, worst = 0;
    for (double x : v) {
      sum += x;
      if (std::fabs(x) > std::fabs(worst)) worst = x;
    }
    std::vector<double> mag(v.size());
    std::transform(v.begin(), v.end(), mag.begin(), [](double x) { return std::fabs(x); });
    std::sort(mag.begin(), mag.end());
    const size_t n = mag.size();
    const double med = n % 2 ? mag[n / 2] : 0.5 * (mag[n / 2 - 1] + mag[n / 2]);
    t.add({kind, std::to_string(n), fmt::format("{:.3f}", std::exp(sum / n)),
           fmt::format("{:.1f}%", (std::exp(med) - 1) * 100), fmt::format("{:.3f}", std::exp(worst))});
  }
  t.print(std::cout);
  return kExitOk;
}

}  // namespace dc::dcdb
