// dc-coordinator verify MODEL.onnx --data DIR: runs the CPU reference executor on an ONNX
// test-data folder and compares every output. Exit 0 iff all outputs pass.
#include <chrono>
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "cli.h"
#include "ir/tolerance.h"
#include "model_loader.h"
#include "onnx/test_data.h"
#include "ref/compare.h"
#include "ref/executor.h"
#include "train_options.h"
#include "verify_train.h"

namespace dc::cli {

namespace po = boost::program_options;

namespace {

struct VerifyOptions {
  std::string model;
  std::string data;
  double rtol = 1e-4;
  double atol = 1e-6;
  bool simplify = true;
  std::string precision = "fp32";
  std::vector<std::string> shapes;
};

// Which test-data tensor feeds which model input: by name when every test tensor is named
// after an input, else by position (the model-zoo convention).
std::vector<std::pair<std::string, Tensor>> bind_inputs(const std::vector<ModelInput>& model_inputs,
                                                        const std::vector<NamedTensor>& data) {
  DC_USER_CHECK(data.size() == model_inputs.size(), "the model has ", model_inputs.size(),
                " runtime input(s) but the test data has ", data.size(), " input_N.pb file(s)");
  std::map<std::string, const Tensor*> by_name;
  for (const auto& d : data) by_name[d.name] = &d.value;
  bool named = true;
  for (const auto& in : model_inputs) named = named && by_name.count(in.name);
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < model_inputs.size(); ++i)
    out.emplace_back(model_inputs[i].name, named ? *by_name[model_inputs[i].name] : data[i].value);
  return out;
}

// The first values of a shape operand: integers, or Resize's float roi/scales.
std::string int_values(const Tensor& t) {
  const auto v = t.to_float_vector();
  const auto iv = is_float(t.dtype()) ? std::vector<int64_t>{} : t.to_int64_vector();
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < 8; ++i)
    s += (i ? ", " : "") + (iv.empty() ? fmt::format("{}", v[i]) : std::to_string(iv[i]));
  if (v.size() > 8) s += ", ...";
  return s + "]";
}

}  // namespace

int cmd_verify(const std::vector<std::string>& args) {
  VerifyOptions o;
  po::options_description desc(
      "usage: dc-coordinator verify MODEL.onnx --data DIR [options]\n\n"
      "Runs the CPU reference executor on DIR's input_N.pb and compares each output with\n"
      "output_N.pb. An output passes when ||out-ref||_2 <= rtol*||ref||_2 + atol*sqrt(n)\n"
      "(integer and bool outputs: exactly equal). Exit 0 iff every output passes.\n\noptions");
  desc.add_options()
      ("help,h", "this text")
      ("data", po::value(&o.data), "ONNX test-data folder (input_N.pb, output_N.pb)")
      ("rtol", po::value(&o.rtol)->default_value(o.rtol), "relative L2 tolerance")
      ("atol", po::value(&o.atol)->default_value(o.atol), "absolute (RMS) tolerance")
      ("shape", po::value(&o.shapes)->composing(), "NAME=DIMS: fix an input's shape (repeatable)")
      ("no-simplify", "run the imported graph without the simplification passes")
      ("precision", po::value(&o.precision)->default_value(o.precision), "run the graph as a "
       "plan of this precision stores it (apply_precision: fp16/bf16 storage, rounded at every "
       "store); fp32, tf32, fp16 or bf16. Default tolerances then: that precision's "
       "whole-model tolerance (docs/precision.md); with --train: the mixed-precision step "
       "(fp16/bf16 AMP, docs/training.md), verify --train's default tolerances")
      ("steps", po::value<int>()->default_value(1), "with --train: training steps to run before "
       "comparing (docs/training.md)");
  add_training_options(desc);
  const auto parsed = parse_command(args, desc, &o.model);
  if (!parsed) return kExitOk;
  const po::variables_map& vm = *parsed;
  DC_USER_CHECK(!o.model.empty(), "verify needs a model: dc-coordinator verify MODEL.onnx --data DIR");
  DC_USER_CHECK(!o.data.empty(), "verify needs --data DIR (an ONNX test-data folder)");
  DC_USER_CHECK(o.rtol >= 0 && o.atol >= 0, "--rtol and --atol must be non-negative");
  o.simplify = !vm.count("no-simplify");
  if (const auto spec = read_training_options(vm)) {
    DC_USER_CHECK(o.simplify, "verify --train runs the simplified training graph (no --no-simplify)");
    TrainVerifyOptions t{o.model, o.data, o.shapes, *spec, vm["steps"].as<int>()};
    t.precision = parse_precision(o.precision);
    if (!vm["rtol"].defaulted()) t.rtol = o.rtol;
    if (!vm["atol"].defaulted()) t.atol = o.atol;
    return verify_train(t);
  }
  DC_USER_CHECK(vm["steps"].defaulted(), "--steps is a training option: add --train");

  OnnxModel onnx_model = load_onnx(o.model);
  const TestData data = read_test_data(o.data);
  const auto model_inputs = onnx_model.inputs();
  const auto bound = bind_inputs(model_inputs, data.inputs);

  ImportOptions opts;
  opts.input_shapes = parse_shape_flags(o.shapes);
  std::cout << fmt::format("{:<8}{}\n{:<8}{} ({} input(s), {} output(s))\n", "model", o.model,
                           "data", o.data, data.inputs.size(), data.outputs.size());
  // dc compiles for static shapes: inputs that determine shapes become constants.
  const auto shape_inputs = onnx_model.shape_inputs();
  for (const auto& [name, value] : bound) {
    const bool is_shape = std::find(shape_inputs.begin(), shape_inputs.end(), name) != shape_inputs.end();
    if (is_shape) {
      opts.bind_constants[name] = value;
      std::cout << fmt::format("{:<8}bound shape input '{}' = {} from the test data as a constant\n",
                               "note", name, int_values(value));
      continue;
    }
    // Dynamic dimensions take the test data's shape.
    for (const auto& in : model_inputs)
      if (in.name == name && !opts.input_shapes.count(name) &&
          std::find(in.dims.begin(), in.dims.end(), -1) != in.dims.end()) {
        opts.input_shapes[name] = value.shape();
        std::cout << fmt::format("{:<8}input '{}' has dynamic dimensions: using the test data's "
                                 "shape {}\n", "note", name, shape_str(value.shape()));
      }
  }
  const Precision precision = parse_precision(o.precision);
  // A reduced-precision graph against fp32 test data: that precision's whole-model tolerance
  // unless given (docs/precision.md).
  if (precision != Precision::fp32) {
    const Tolerance tol = whole_model_tolerance(precision);
    if (vm["rtol"].defaulted()) o.rtol = tol.rtol;
    if (vm["atol"].defaulted()) o.atol = tol.atol;
  }
  const LoadedModel m = load_model(std::move(onnx_model), opts, o.simplify, precision);
  for (const auto& n : m.precision_notes) std::cout << fmt::format("{:<8}{}\n", "note", n);
  const Graph& g = m.simplified;

  ref::TensorMap inputs;
  for (const auto& [name, value] : bound)
    if (!opts.bind_constants.count(name)) inputs[name] = value;
  const auto t0 = std::chrono::steady_clock::now();
  const auto outputs = ref::run_graph(g, inputs);
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << fmt::format("{:<8}import {:.3f} s, simplify {:.3f} s ({} -> {} nodes), reference run {:.4f} s\n",
                           "time", m.import_seconds, m.simplify_seconds, m.imported.nodes.size(),
                           g.nodes.size(), run_s);

  DC_USER_CHECK(data.outputs.size() <= g.outputs.size(), "the test data has ", data.outputs.size(),
                " output_N.pb file(s) but the model only ", g.outputs.size(), " output(s)");
  std::cout << fmt::format("\n  {:<24} {:<16} {:>12} {:>12}  {}\n", "output", "shape", "max_abs_err",
                           "rel_l2_err", "result");
  int passed = 0;
  for (size_t i = 0; i < data.outputs.size(); ++i) {
    const std::string& name = g.outputs[i];
    const Tensor& out = outputs.at(name);
    Tensor expected = data.outputs[i].value;
    double rtol = o.rtol;
    // ONNX's own test data (<= 1.12) stores bfloat16 outputs as their uint16 bit patterns,
    // made by truncating fp32; dc rounds to nearest even: the two differ by < 1 bf16 ulp
    // (2 unit roundoffs, docs/precision.md).
    if (out.dtype() == DType::bf16 && expected.dtype() == DType::u16 && out.shape() == expected.shape()) {
      Tensor bits(DType::bf16, expected.shape());
      std::copy(expected.raw(), expected.raw() + expected.nbytes(), bits.raw_mutable());
      expected = bits;
      rtol = std::max(rtol, 2 * unit_roundoff(DType::bf16));
    }
    const auto c = ref::compare_tensors(out, expected, rtol, o.atol);
    passed += c.pass;
    std::cout << fmt::format("  {:<24} {:<16} {:>12.3e} {:>12.3e}  {}{}\n", name,
                             shape_str(out.shape()), c.max_abs_error, c.rel_l2_error,
                             c.pass ? "PASS" : "FAIL", c.problem.empty() ? "" : " (" + c.problem + ")");
  }
  const bool ok = passed == static_cast<int>(data.outputs.size());
  std::cout << fmt::format("\nverify: {} ({}/{} outputs within rtol {:g}, atol {:g})\n",
                           ok ? "PASS" : "FAIL", passed, data.outputs.size(), o.rtol, o.atol);
  return ok ? kExitOk : kExitCheckFailed;
}

}  // namespace dc::cli
