#include "dc_run_train.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <numeric>

#include "ir/error.h"
#include "onnx/save_weights.h"
#include "ref/compare.h"

namespace dc {

namespace {

// Class labels outside [0, classes) make the loss undefined: refused before any step (the
// device kernel would only produce NaN).
void check_labels(const rt::Runtime& r, const std::vector<Tensor>& inputs) {
  const PlanTraining& t = *r.plan().training;
  if (t.loss != "cross_entropy" || r.num_outputs() < 2) return;
  const int64_t classes = r.output_info(1).shape.empty() ? 0 : r.output_info(1).shape.back();
  for (size_t i = 0; i < r.num_inputs(); ++i) {
    if (r.input_info(i).name != t.labels) continue;
    const auto labels = inputs.at(i).to_int64_vector();
    for (size_t k = 0; k < labels.size(); ++k)
      DC_USER_CHECK(labels[k] >= 0 && labels[k] < classes, "label ", labels[k], " at position ", k, " of input '",
                    t.labels, "' is outside [0, ", classes, ") (the logits' last axis)");
  }
}

double loss_of(const rt::Runtime& r) {
  const Tensor loss = r.output(0);
  DC_INTERNAL_CHECK(loss.numel() == 1, "the training plan's first output is not the scalar loss");
  return loss.to_float_vector()[0];
}

// fp16 mixed precision: the dynamic loss scale (state), 0 for other plans. It only falls
// when a step overflowed and was skipped (GradScaler's backoff).
double loss_scale(const rt::Runtime& r) {
  const auto& mixed = r.plan().training->mixed_precision;
  if (!mixed || mixed->loss_scale.empty()) return 0;
  return r.weight(mixed->loss_scale).to_float_vector().at(0);
}

Tensor difference(const Tensor& a, const Tensor& b) {
  DC_USER_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32 && a.shape() == b.shape(),
                "expected a state tensor of dtype f32 and shape ", shape_str(b.shape()), ", got ",
                dtype_name(a.dtype()), " ", shape_str(a.shape()));
  Tensor d(DType::f32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) d.mutable_data<float>()[i] = a.data<float>()[i] - b.data<float>()[i];
  return d;
}

// The loss against output_0.pb, each further output_K.pb (named after a state tensor) by
// its update since `initial`. True when all pass.
bool compare_with_data(const rt::Runtime& r, const TestData& data, const std::map<std::string, Tensor>& initial,
                       const TrainRunOptions& o) {
  std::cout << fmt::format("\n  {:<32} {:<16} {:>12} {:>12}  {}\n", "output", "shape", "max_abs_err",
                           "rel_l2_err", "result");
  size_t passed = 0;
  for (size_t i = 0; i < data.outputs.size(); ++i) {
    const NamedTensor& want = data.outputs[i];
    std::string label = r.output_info(0).name;
    Tensor got = r.output(0), expected = want.value;
    if (i == 0 && expected.numel() == 1 && got.numel() == 1) expected = expected.reshaped(got.shape());
    if (i > 0) {
      label = "update of " + want.name;
      got = difference(r.weight(want.name), initial.at(want.name));
      expected = difference(want.value, initial.at(want.name));
    }
    const auto c = ref::compare_tensors(got, expected, o.rtol, o.atol);
    passed += c.pass;
    std::cout << fmt::format("  {:<32} {:<16} {:>12.3e} {:>12.3e}  {}{}\n", label, shape_str(got.shape()),
                             c.max_abs_error, c.rel_l2_error, c.pass ? "PASS" : "FAIL",
                             c.problem.empty() ? "" : " (" + c.problem + ")");
  }
  const bool ok = passed == data.outputs.size();
  std::cout << fmt::format("\ndc-run --train: {} ({}/{} within rtol {:g}, atol {:g})\n", ok ? "PASS" : "FAIL",
                           passed, data.outputs.size(), o.rtol, o.atol);
  return ok;
}

void save_weights(const rt::Runtime& r, const TrainRunOptions& o) {
  const ExecPlan& p = r.plan();
  const std::string source = o.model.empty() ? p.training->source_model : o.model;
  DC_USER_CHECK(!source.empty(), "--save-weights: the plan records no source model; give it with --model");
  std::map<std::string, Tensor> values;
  for (const PlanStateUpdate& u : p.training->state) {
    const std::string& name = p.tensors[static_cast<size_t>(u.state)].name;
    values[name] = r.weight(name);
  }
  const int replaced = save_model_with_weights(source, o.save_weights, values);
  DC_USER_CHECK(replaced > 0, "--save-weights: no initializer of '", source, "' is a trained weight of the plan "
                "(is it the model the plan was made from? --model names another)");
  std::cout << fmt::format("{:<9}{} ({} of {}'s initializers replaced by their trained values)\n", "saved",
                           o.save_weights, replaced, source);
}

void bench_steps(rt::Runtime& r, const TrainRunOptions& o) {
  for (int i = 0; i < o.warmup; ++i) r.train_step();
  std::vector<double> us;
  for (int i = 0; i < o.bench; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    r.train_step();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  const double mean = std::accumulate(us.begin(), us.end(), 0.0) / static_cast<double>(us.size());
  std::cout << fmt::format("\nstep     median {:.4f} ms, min {:.4f} ms, mean {:.4f} ms ({} steps after {} "
                           "warm-up; host clock around each whole step, state copies included)\n",
                           us[us.size() / 2] / 1000, us.front() / 1000, mean / 1000, us.size(), o.warmup);
}

}  // namespace

int run_training(rt::Runtime& r, const std::vector<Tensor>& inputs, const TestData* data,
                 const TrainRunOptions& o) {
  const ExecPlan& p = r.plan();
  DC_USER_CHECK(p.training, "--train needs a training plan (`dc-coordinator plan|tune MODEL --train --out DIR`); "
                "this one computes inference");
  DC_USER_CHECK(o.steps >= 1, "--steps must be >= 1, got ", o.steps);
  check_labels(r, inputs);
  std::string hyper;
  for (const auto& [name, value] : p.training->hyperparameters) hyper += fmt::format(" {} {:g}", name, value);
  std::cout << fmt::format("{:<9}{} loss, {} optimizer ({}), {} state tensors, {} step(s)\n", "train",
                           p.training->loss, p.training->optimizer, hyper.empty() ? "" : hyper.substr(1),
                           p.training->state.size(), o.steps);
  std::map<std::string, Tensor> initial;
  if (data)
    for (size_t i = 1; i < data->outputs.size(); ++i) {
      // A state tensor, or a frozen weight (its update must be zero).
      const std::string& name = data->outputs[i].name;
      const bool weight = std::any_of(p.tensors.begin(), p.tensors.end(), [&](const PlanTensor& t) {
        return t.kind == PlanTensorKind::weight && t.name == name;
      });
      DC_USER_CHECK(weight, "output_", i, ".pb is named '", name, "', which is not a weight of the training plan "
                    "(a weight, its optimizer state or a running statistic)");
      initial[name] = r.weight(name);
    }
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 1; k <= o.steps; ++k) {
    const double scale = loss_scale(r);
    r.train_step();
    const double next = loss_scale(r);
    std::cout << fmt::format("step {} loss {:.7g}{}\n", k, loss_of(r),
                             next < scale ? fmt::format(" (skipped: overflow, scale {:g})", next) : "");
  }
  std::cout << fmt::format("{:<9}{:.3f} s wall for {} step(s)\n", "run",
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), o.steps);
  bool ok = true;
  if (data && !data->outputs.empty()) ok = compare_with_data(r, *data, initial, o);
  if (!o.save_weights.empty()) save_weights(r, o);
  if (o.bench > 0) bench_steps(r, o);
  return ok ? 0 : 1;
}

}  // namespace dc
