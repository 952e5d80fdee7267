#include <iostream>

#include <fmt/format.h>

#include "cli.h"
#include "onnx/test_data.h"
#include "passes/training_state.h"
#include "ref/compare.h"
#include "ref/train_step.h"
#include "train_options.h"
#include "verify_train.h"

namespace dc::cli {

namespace {

// Test tensors bound to the training graph's inputs: by name when every test tensor is
// named after an input, else by position.
ref::TensorMap bind_train_inputs(const Graph& g, const std::vector<NamedTensor>& data) {
  DC_USER_CHECK(data.size() == g.inputs.size(), "the training step has ", g.inputs.size(),
                " input(s) (the model's runtime inputs, then the labels) but the test data has ",
                data.size(), " input_N.pb file(s)");
  std::map<std::string, const Tensor*> by_name;
  for (const auto& d : data) by_name[d.name] = &d.value;
  bool named = true;
  for (const auto& in : g.inputs) named = named && by_name.count(in);
  ref::TensorMap out;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    out[g.inputs[i]] = named ? *by_name[g.inputs[i]] : data[i].value;
  return out;
}

// a - b, elementwise (f32).
Tensor difference(const Tensor& a, const Tensor& b) {
  DC_USER_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32 && a.shape() == b.shape(),
                "expected a state tensor of dtype f32 and shape ", shape_str(b.shape()), ", got ",
                dtype_name(a.dtype()), " ", shape_str(a.shape()));
  Tensor d(DType::f32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    d.mutable_data<float>()[i] = a.data<float>()[i] - b.data<float>()[i];
  return d;
}

}  // namespace

int verify_train(const TrainVerifyOptions& o) {
  DC_USER_CHECK(o.steps >= 1, "--steps must be >= 1, got ", o.steps);
  const TestData data = read_test_data(o.data);
  ImportOptions opts;
  opts.input_shapes = parse_shape_flags(o.shapes);
  LoadedModel m = load_training_model(load_onnx(o.model), opts, o.spec, o.precision);
  Graph& g = m.simplified;
  std::cout << fmt::format("{:<8}{}\n{:<8}{} ({} input(s), {} output(s))\n{:<8}{} loss, {} "
                           "optimizer, {} step(s){}; {} -> {} nodes\n", "model", o.model, "data",
                           o.data, data.inputs.size(), data.outputs.size(), "train",
                           loss_name(o.spec.loss), optimizer_name(o.spec.optimizer), o.steps,
                           o.precision == Precision::fp32 ? ""
                                                          : fmt::format(", {} mixed precision", precision_name(o.precision)),
                           m.imported.nodes.size(), g.nodes.size());
  const ref::TensorMap inputs = bind_train_inputs(g, data.inputs);
  const std::map<std::string, Tensor> initial = g.initializers;
  ref::TensorMap out;
  for (int k = 1; k <= o.steps; ++k) {
    out = ref::run_training_step(g, inputs);
    std::cout << fmt::format("step {} loss {:.7g}\n", k, ref::loss_value(g, out));
  }
  DC_USER_CHECK(!data.outputs.empty(), "the test data has no output_0.pb (the expected loss)");
  std::cout << fmt::format("\n  {:<32} {:<16} {:>12} {:>12}  {}\n", "output", "shape",
                           "max_abs_err", "rel_l2_err", "result");
  int passed = 0;
  for (size_t i = 0; i < data.outputs.size(); ++i) {
    const NamedTensor& want = data.outputs[i];
    std::string label = g.outputs[0];
    Tensor got = out.at(g.outputs[0]), expected = want.value;
    if (i == 0 && expected.numel() == 1 && got.numel() == 1)
      expected = expected.reshaped(got.shape());  // a scalar loss, stored as [] or [1]
    if (i > 0) {  // state: compared by its change over the steps
      DC_USER_CHECK(g.initializers.count(want.name) && initial.count(want.name), "output_", i,
                    ".pb is named '", want.name, "', which is not an initializer of the training "
                    "step (a weight, its optimizer state or a running statistic)");
      label = "update of " + want.name;
      got = difference(g.initializers.at(want.name), initial.at(want.name));
      expected = difference(want.value, initial.at(want.name));
    }
    const auto c = ref::compare_tensors(got, expected, o.rtol, o.atol);
    passed += c.pass;
    std::cout << fmt::format("  {:<32} {:<16} {:>12.3e} {:>12.3e}  {}{}\n", label,
                             shape_str(got.shape()), c.max_abs_error, c.rel_l2_error,
                             c.pass ? "PASS" : "FAIL", c.problem.empty() ? "" : " (" + c.problem + ")");
  }
  const bool ok = passed == static_cast<int>(data.outputs.size());
  std::cout << fmt::format("\nverify --train: {} ({}/{} within rtol {:g}, atol {:g})\n",
                           ok ? "PASS" : "FAIL", passed, data.outputs.size(), o.rtol, o.atol);
  return ok ? kExitOk : kExitCheckFailed;
}

}  // namespace dc::cli
