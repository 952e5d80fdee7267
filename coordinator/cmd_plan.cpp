// dc-coordinator plan MODEL.onnx --gpus LIST [--json]: the estimate-only plan per GPU type
// (candidates, workloads, variants before/after pruning, best estimate and binding
// resource, the least-time cover). The JSON form is documented in docs/plan-json.md.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "gpu/gpu_catalog.h"
#include "ir/op_traits.h"
#include "ir/json_writer.h"
#include "model_loader.h"
#include "plan/memory_report.h"
#include "plan/plan_io.h"
#include "plan_build.h"
#include "plan_estimate.h"
#include "train_options.h"
#include "tune_config.h"

namespace dc::cli {

namespace po = boost::program_options;

namespace {

constexpr const char* kPlanJsonFormat = "dc-plan-estimate/1";

std::string node_span(const Graph& g, const std::vector<size_t>& nodes) {
  if (nodes.size() == 1) return g.nodes[nodes[0]].name;
  return fmt::format("{} .. {} ({} nodes)", g.nodes[nodes.front()].name,
                     g.nodes[nodes.back()].name, nodes.size());
}

// A chosen kernel that only moves data (every node a view op whose values pass through:
// Transpose, Reshape, Slice, Expand, Concat, ...), and why it could not be a view or fuse
// into its neighbours.
std::optional<std::string> copy_only_reason(const Graph& g, const Candidate& c) {
  if (c.free_view) return std::nullopt;
  for (size_t n : c.nodes)
    if (!op_traits(g.nodes[n].op).passes_value) return std::nullopt;
  const Node& last = g.nodes[c.nodes.back()];
  const std::string& out = last.outputs.at(0);
  const auto consumers = g.consumers();
  std::string why;
  if (std::find(g.outputs.begin(), g.outputs.end(), out) != g.outputs.end()) why = "its output is a model output";
  else if (auto it = consumers.find(out); it != consumers.end() && it->second.size() > 1)
    why = fmt::format("its output is read by {} nodes, so no single consumer can read it as a view",
                      it->second.size());
  else if (it != consumers.end() && !it->second.empty())
    why = fmt::format("its reader '{}' ({}) cannot take it as a strided view or fuse it",
                      g.nodes[it->second.front()].name, g.nodes[it->second.front()].op);
  else why = "nothing reads its output";
  return fmt::format("copy-only step {} ({}): {}", last.name, c.pattern, why);
}

void print_explain(const Graph& g, const ModelPlan& p) {
  std::cout << "\nexplain:\n";
  for (const auto& n : p.fusion_notes) std::cout << "  " << n << "\n";
  for (const auto& gp : p.gpus)
    for (size_t c : gp.cover.chosen)
      if (const auto why = copy_only_reason(g, p.candidates[c])) std::cout << "  " << gp.gpu->name << ": " << *why << "\n";
  if (p.fusion_notes.empty()) std::cout << "  every attention site matched\n";
}

void print_text(const std::string& path, const Graph& g, const ModelPlan& p, bool all,
                const PlanOptions& opts, const std::vector<std::string>& notes) {
  const auto& ws = p.workload_set;
  std::cout << fmt::format("model     {}\nnodes     {} after simplification\n"
                           "precision {} (tensors {}; math paths {})\n"
                           "clusters  {} candidates, {} distinct workloads\n",
                           path, g.nodes.size(), precision_name(opts.precision),
                           dtype_name(storage_dtype(opts.precision)),
                           fmt::join(opts.space.precisions, ", "), p.candidates.size(),
                           ws.workloads.size());
  for (const auto& n : notes) std::cout << "note      " << n << "\n";
  for (const auto& gp : p.gpus) {
    const GpuSpec& gpu = *gp.gpu;
    size_t total = 0, kept = 0;
    for (const auto& w : gp.workloads) {
      total += w.variants_total;
      kept += w.kept.size();
    }
    // A free view (plan_views.h) is a step without a kernel: it costs nothing in the cover.
    const size_t views = static_cast<size_t>(std::count_if(
        gp.cover.chosen.begin(), gp.cover.chosen.end(), [&](size_t c) { return p.candidates[c].free_view; }));
    std::cout << fmt::format(
        "\n== {} ({}, {}, {} SMs): estimated {:.1f} us over {} kernels{}{}\n"
        "   variants: {} enumerated, {} kept after pruning; planned in {:.3f} s\n\n",
        gpu.name, gpu.full_name, gpu.sm_arch(), gpu.sm_count, gp.cover.total_cost * 1e6,
        gp.cover.chosen.size() - views, views ? fmt::format(" and {} view{} (no kernel)", views, views == 1 ? "" : "s") : "",
        gp.cover.exact ? "" : " (greedy cover: search budget exceeded)", total, kept, gp.seconds);
    std::cout << fmt::format("  {:<28} {:<11} {:<16} {:>9} {:>9} {:>8}  {:<8} {}\n", "cluster", "kind",
                             "signature", "variants", "est us", "floor", "bound", "nodes");
    auto row = [&](size_t c) {
      const auto& cand = p.candidates[c];
      const size_t wi = ws.candidate_workload[c];
      const auto& we = gp.workloads[wi];
      const std::string bound = cand.free_view ? "view" : we.kept.empty() ? "-" : we.kept.front().estimate.bound;
      const std::string est = cand.free_view ? "0" : fmt::format("{:.2f}", we.best_seconds() * 1e6);
      std::cout << fmt::format("  {:<28} {:<11} {:<16} {:>4}/{:<4} {:>9} {:>8.2f}  {:<8} {}\n",
                               cand.pattern.size() > 28 ? cand.pattern.substr(0, 25) + "..." : cand.pattern,
                               cluster_kind_name(cand.kind), ws.workloads[wi].signature,
                               we.kept.size(), we.variants_total, est,
                               we.floor_seconds * 1e6, bound, node_span(g, cand.nodes));
    };
    if (all) {
      for (size_t c = 0; c < p.candidates.size(); ++c) row(c);
    } else {
      for (size_t c : gp.cover.chosen) row(c);
    }
  }
  if (!all) std::cout << "\n(chosen clusters only; --all lists every candidate, --json everything)\n";
}

void write_estimate(JsonWriter& j, const Estimate& e) {
  j.begin_object();
  j.field("seconds", e.seconds).field("bound", e.bound).field("compute_s", e.compute_s);
  j.field("dram_s", e.dram_s).field("smem_s", e.smem_s).field("launch_s", e.launch_s);
  j.field("occupancy", e.occupancy).field("waves", e.waves).field("dram_bytes", e.dram_bytes);
  j.end_object();
}

void print_json(const std::string& path, const Graph& g, const ModelPlan& p,
                const PlanOptions& opts, const std::vector<std::string>& notes) {
  const auto& ws = p.workload_set;
  JsonWriter j(std::cout);
  j.begin_object();
  j.field("format", kPlanJsonFormat).field("model", path).field("nodes", g.nodes.size());
  j.field("precision", precision_name(opts.precision));
  j.key("precision_notes").begin_array();
  for (const auto& n : notes) j.value(n);
  j.end_array();
  j.key("workloads").begin_array();
  for (const auto& w : ws.workloads) {
    j.begin_object().field("signature", w.signature).field("kind", cluster_kind_name(w.kind));
    j.field("flops", w.flops).field("bytes", w.bytes).field("canonical", w.canonical).end_object();
  }
  j.end_array();
  j.key("candidates").begin_array();
  for (size_t c = 0; c < p.candidates.size(); ++c) {
    const auto& cand = p.candidates[c];
    j.begin_object().field("id", c).field("pattern", cand.pattern);
    j.field("kind", cluster_kind_name(cand.kind)).field("workload", ws.workloads[ws.candidate_workload[c]].signature);
    j.key("nodes").begin_array();
    for (size_t n : cand.nodes) j.value(g.nodes[n].name);
    j.end_array();
    if (cand.free_view) j.field("free_view", true);
    j.end_object();
  }
  j.end_array();
  j.key("gpus").begin_array();
  for (const auto& gp : p.gpus) {
    j.begin_object().field("gpu", gp.gpu->name).field("full_name", gp.gpu->full_name);
    j.field("arch", gp.gpu->sm_arch()).field("estimated_seconds", gp.cover.total_cost);
    j.field("exact_cover", gp.cover.exact).field("planning_seconds", gp.seconds);
    j.key("chosen").begin_array();
    for (size_t c : gp.cover.chosen) j.value(c);
    j.end_array();
    j.key("workloads").begin_array();
    for (size_t w = 0; w < gp.workloads.size(); ++w) {
      const auto& we = gp.workloads[w];
      j.begin_object().field("signature", ws.workloads[w].signature);
      j.field("variants_total", we.variants_total).field("variants_kept", we.kept.size());
      j.field("floor_seconds", we.floor_seconds);
      j.key("kept").begin_array();
      for (const auto& sv : we.kept) {
        j.begin_object().field("variant", sv.variant.key()).key("estimate");
        write_estimate(j, sv.estimate);
        j.end_object();
      }
      j.end_array().end_object();
    }
    j.end_array().end_object();
  }
  j.end_array().end_object();
  std::cout << "\n";
}

// `plan --out DIR`: the least-estimate cover as a runnable plan, timed (weights.bin is
// streamed from the model's files: docs/bench/scale.md).
void write_estimated_plan(const ExecPlan& exec, const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  write_plan(exec, dir);
  spdlog::info("wrote the estimate-only plan ({} steps) to {} in {:.3f} s", exec.steps.size(), dir,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// A training step's device memory by part, per GPU type, from the plan it would run
// (plan/memory_report.h).
void print_training_memory(const Graph& g, const ModelPlan& plan, const PlanOptions& opts,
                           const PlanTraining& training) {
  for (size_t i = 0; i < plan.gpus.size(); ++i) {
    const ExecPlan exec = build_estimated_plan(g, plan, i, opts, &training);
    std::cout << "\nmemory (" << plan.gpus[i].gpu->name << "):\n";
    for (const auto& line : memory_report_lines(memory_report(exec))) std::cout << "  " << line << "\n";
  }
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  std::string model, gpu_list, config, out_dir;
  std::vector<std::string> shapes;
  bool json = false, all = false, explain = false;
  PlanOptions opts;
  po::options_description desc(
      "usage: dc-coordinator plan MODEL.onnx --gpus LIST [options]\n\n"
      "Splits the simplified model into candidate fusion clusters, enumerates each distinct\n"
      "workload's kernel variants for every GPU type, estimates and prunes them, and prints\n"
      "the cover of the graph with the least estimated time. Nothing is compiled or run.\n\noptions");
  desc.add_options()
      ("help,h", "this text")
      ("gpus", po::value(&gpu_list), "comma-separated GPU types, e.g. h100,a100 (see --list-gpus)")
      ("json", po::bool_switch(&json), "print the whole plan as JSON (docs/plan-json.md)")
      ("out", po::value(&out_dir), "also write the estimate-only plan directory (plan.json, kernels.cu, "
       "weights.bin; docs/plan-format.md) for dc-run; one GPU type")
      ("all", po::bool_switch(&all), "text form: list every candidate, not only the chosen ones")
      ("explain", po::bool_switch(&explain), "text form: say why each attention site that did not "
       "fuse failed (the node that broke the match) and why each copy-only step remains")
      ("config", po::value(&config), "tuning configuration YAML (examples/tune.yaml); flags override it")
      ("within", po::value<double>(), "pruning: keep variants within this factor of the best "
       "estimate (default 1.5)")
      ("top-k", po::value<int>(), "pruning: keep at most this many variants per workload (default 32)")
      ("shape", po::value(&shapes)->composing(), "NAME=DIMS: fix an input's shape (repeatable)")
      ("list-gpus", "print the known GPU types and exit");
  add_precision_options(desc);
  add_training_options(desc);
  const auto parsed = parse_command(args, desc, &model);
  if (!parsed) return kExitOk;
  const po::variables_map& vm = *parsed;
  const GpuCatalog catalog = GpuCatalog::builtin();
  if (vm.count("list-gpus")) {
    std::cout << gpu_table_markdown(catalog);
    return kExitOk;
  }
  DC_USER_CHECK(!model.empty(), "plan needs a model: dc-coordinator plan MODEL.onnx --gpus h100");
  DC_USER_CHECK(!gpu_list.empty(), "plan needs --gpus LIST (known: ",
                fmt::format("{}", fmt::join(catalog.names(), ", ")), ")");
  const auto gpus = parse_gpu_list(catalog, gpu_list);
  if (!config.empty()) load_tune_config(config, &opts);
  if (vm.count("within")) opts.prune.within_factor = vm["within"].as<double>();
  if (vm.count("top-k")) opts.prune.top_k = vm["top-k"].as<int>();
  read_precision_options(vm, &opts, gpus);
  const auto train = read_training_options(vm);
  DC_USER_CHECK(opts.prune.within_factor >= 1, "--within must be >= 1");
  DC_USER_CHECK(opts.prune.top_k >= 1, "--top-k must be >= 1");

  ImportOptions import_opts;
  import_opts.input_shapes = parse_shape_flags(shapes);
  const LoadedModel m =
      train ? load_training_model(load_onnx(model), import_opts, *train, opts.precision,
                                  step_estimate(gpus.at(0), opts))
            : load_model(load_onnx(model), import_opts, /*simplify=*/true, opts.precision);
  std::vector<std::string> notes = m.precision_notes;
  notes.insert(notes.end(), m.training_notes.begin(), m.training_notes.end());
  DC_USER_CHECK(out_dir.empty() || gpus.size() == 1, "--out writes the plan of one GPU type; got ",
                gpus.size(), " in --gpus");
  const ModelPlan plan = plan_by_estimate(m.simplified, gpus, opts);
  const std::optional<PlanTraining> training =
      train ? std::optional<PlanTraining>(plan_training(*train, model, opts.precision)) : std::nullopt;
  if (!out_dir.empty()) {
    ExecPlan exec = build_estimated_plan(m.simplified, plan, 0, opts, training ? &*training : nullptr);
    exec.weight_transforms = m.training_notes;  // as tune's plans: the step's ops, what is recomputed
    write_estimated_plan(exec, out_dir);
  }
  if (json) print_json(model, m.simplified, plan, opts, notes);
  else print_text(model, m.simplified, plan, all, opts, notes);
  if (training && !json) print_training_memory(m.simplified, plan, opts, *training);
  if (explain && !json) print_explain(m.simplified, plan);
  return kExitOk;
}

}  // namespace dc::cli
