// dc-coordinator inspect MODEL.onnx [--json]: what the model is, before and after simplification.
#include <iomanip>
#include <iostream>
#include <set>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "cli.h"
#include "ir/flops.h"
#include "ir/json_writer.h"
#include "model_loader.h"

namespace dc::cli {

namespace po = boost::program_options;

namespace {

struct InspectOptions {
  std::string model;
  bool json = false;
  bool simplify = true;
  std::vector<std::string> shapes;
};

std::string human_count(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T"};
  int p = 0;
  while (v >= 1000 && p < 4) {
    v /= 1000;
    ++p;
  }
  return fmt::format("{:.{}f} {}{}", v, p == 0 ? 0 : 2, prefixes[p], unit);
}

int64_t weight_bytes(const Graph& g) {
  int64_t b = 0;
  for (const auto& [name, t] : g.initializers) b += static_cast<int64_t>(t.nbytes());
  return b;
}

void write_value_list(JsonWriter& j, const Graph& g, const std::vector<std::string>& names) {
  j.begin_array();
  for (const auto& n : names) {
    const auto& info = g.info(n);
    j.begin_object().field("name", n).field("dtype", dtype_name(info.dtype));
    j.key("shape").value(info.shape);
    j.end_object();
  }
  j.end_array();
}

void print_json(const std::string& path, const LoadedModel& m) {
  const Graph& a = m.imported;
  const Graph& b = m.simplified;
  JsonWriter j(std::cout);
  j.begin_object();
  j.field("model", path).field("graph", a.name).field("opset", a.opset);
  j.key("inputs");
  write_value_list(j, b, b.inputs);
  j.key("outputs");
  write_value_list(j, b, b.outputs);
  j.key("nodes").begin_object().field("imported", a.nodes.size()).field("simplified", b.nodes.size()).end_object();
  const auto ca = a.op_counts(), cb = b.op_counts();
  std::set<std::string> ops;
  for (const auto& [op, n] : ca) ops.insert(op);
  for (const auto& [op, n] : cb) ops.insert(op);
  j.key("op_counts").begin_object();
  for (const auto& op : ops) {
    j.key(op).begin_object();
    j.field("imported", ca.count(op) ? ca.at(op) : int64_t{0});
    j.field("simplified", cb.count(op) ? cb.at(op) : int64_t{0});
    j.end_object();
  }
  j.end_object();
  j.field("parameters", b.parameter_count()).field("weight_bytes", weight_bytes(b));
  j.field("flops", graph_flops(b)).field("flops_imported", graph_flops(a));
  j.field("import_seconds", m.import_seconds).field("simplify_seconds", m.simplify_seconds);
  j.end_object();
  std::cout << "\n";
}

void print_values(const char* title, const Graph& g, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& info = g.info(names[i]);
    std::cout << fmt::format("{:<12}{:<24} {:<5} {}\n", i == 0 ? title : "", names[i],
                             dtype_name(info.dtype), shape_str(info.shape));
  }
}

void print_text(const std::string& path, const LoadedModel& m) {
  const Graph& a = m.imported;
  const Graph& b = m.simplified;
  std::cout << fmt::format("{:<12}{} (opset {})\n", "model", path, a.opset);
  print_values("inputs", b, b.inputs);
  print_values("outputs", b, b.outputs);
  std::cout << fmt::format("{:<12}{} ({})\n", "parameters", human_count(double(b.parameter_count()), ""),
                           human_count(double(weight_bytes(b)), "B"));
  std::cout << fmt::format("{:<12}{} per run (before simplification {})\n", "FLOPs",
                           human_count(double(graph_flops(b)), "FLOP"),
                           human_count(double(graph_flops(a)), "FLOP"));
  std::cout << fmt::format("{:<12}{} imported, {} after simplification\n", "nodes",
                           a.nodes.size(), b.nodes.size());
  const auto ca = a.op_counts(), cb = b.op_counts();
  std::set<std::string> ops;
  for (const auto& [op, n] : ca) ops.insert(op);
  for (const auto& [op, n] : cb) ops.insert(op);
  std::cout << fmt::format("\n  {:<22}{:>9}{:>12}\n", "op", "imported", "simplified");
  for (const auto& op : ops)
    std::cout << fmt::format("  {:<22}{:>9}{:>12}\n", op, ca.count(op) ? ca.at(op) : 0,
                             cb.count(op) ? cb.at(op) : 0);
  std::cout << fmt::format("\n{:<12}import {:.3f} s, simplify {:.3f} s\n", "time",
                           m.import_seconds, m.simplify_seconds);
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& args) {
  InspectOptions o;
  po::options_description desc(
      "usage: dc-coordinator inspect MODEL.onnx [options]\n\n"
      "Imports and simplifies the model and prints its inputs and outputs, op counts\n"
      "before and after simplification, parameter count and FLOPs.\n\noptions");
  desc.add_options()
      ("help,h", "this text")
      ("json", po::bool_switch(&o.json), "print machine-readable JSON instead of text")
      ("shape", po::value(&o.shapes)->composing(),
       "NAME=DIMS: fix an input's shape (repeatable), e.g. --shape input=1x3x224x224")
      ("no-simplify", "skip the simplification passes");
  const auto parsed = parse_command(args, desc, &o.model);
  if (!parsed) return kExitOk;
  const po::variables_map& vm = *parsed;
  DC_USER_CHECK(!o.model.empty(), "inspect needs a model: dc-coordinator inspect MODEL.onnx");
  o.simplify = !vm.count("no-simplify");

  ImportOptions opts;
  opts.input_shapes = parse_shape_flags(o.shapes);
  const LoadedModel m = load_model(load_onnx(o.model), opts, o.simplify);
  if (o.json) print_json(o.model, m);
  else print_text(o.model, m);
  return kExitOk;
}

}  // namespace dc::cli
