#include "passes/training/mixed_precision.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <vector>

#include "ir/error.h"
#include "ir/multi_cast.h"
#include "ir/nonfinite_check.h"
#include "ir/optimizer_update.h"
#include "ir/workload.h"
#include "passes/training/add_loss.h"
#include "passes/training/lower_batch_norm.h"
#include "passes/training_state.h"

namespace dc {

namespace {

bool is_gemm(const std::string& op) {
  return op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "MatMul";
}

bool is_weight_view(const std::string& op) {
  return op == "Reshape" || op == "Transpose" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze";
}

// True when `t` is read by a GEMM-family node, directly or through views of it (as data input).
bool reaches_gemm(const Graph& g, const std::map<std::string, std::vector<size_t>>& uses, const std::string& t) {
  auto it = uses.find(t);
  if (it == uses.end()) return false;
  for (size_t c : it->second) {
    const Node& n = g.nodes[c];
    if (is_gemm(n.op)) return true;
    if (is_weight_view(n.op) && n.input(0) == t && reaches_gemm(g, uses, n.outputs.at(0))) return true;
  }
  return false;
}

// Appends node `name` = op(inputs) with one output of the same name and type `info`.
std::string add(Graph& g, const std::string& name, const std::string& op, std::vector<std::string> inputs,
                TensorInfo info, Attributes attrs = {}) {
  DC_USER_CHECK(!g.tensors.count(name), "the model has a tensor named '", name,
                "', which mixed-precision training reserves");
  Node n;
  n.name = name;
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = {name};
  n.attrs = std::move(attrs);
  g.tensors[name] = std::move(info);
  g.nodes.push_back(std::move(n));
  return name;
}

std::string f32_constant(Graph& g, const std::string& name, float v) {
  DC_USER_CHECK(!g.tensors.count(name), "the model has a tensor named '", name, "'");
  g.initializers[name] = Tensor::scalar<float>(v);
  g.tensors[name] = TensorInfo{DType::f32, {}};
  return name;
}

std::string state(Graph& g, std::string_view name, Tensor init) {
  const std::string s(name);
  DC_USER_CHECK(!g.tensors.count(s), "the model has a tensor named '", s, "', which training reserves");
  g.tensors[s] = TensorInfo{init.dtype(), init.shape()};
  g.tensors[next_name(s)] = g.tensors[s];
  g.initializers[s] = std::move(init);
  g.outputs.push_back(next_name(s));
  return s;
}

// Name prefix of each weight's compute Cast (compute_cast/WEIGHT) and of their dc.MultiCast nodes.
constexpr std::string_view kComputeCast = "compute_cast/";
constexpr std::string_view kComputeCasts = "compute_casts/";

const TensorInfo kBool{DType::boolean, {}};
const TensorInfo kF32{DType::f32, {}};

}  // namespace

void cast_weights_for_compute(Graph& g, const std::set<std::string>& weights) {
  const auto uses = g.consumers();
  std::map<size_t, std::vector<Node>> before;  // first reader -> the casts it reads
  for (const auto& w : weights) {
    if (!reaches_gemm(g, uses, w)) continue;
    const std::string copy = w + std::string(kComputeSuffix);
    DC_USER_CHECK(!g.tensors.count(copy), "the model has a tensor named '", copy, "'");
    g.tensors[copy] = g.info(w);  // f32 until apply_precision stores it in the reduced type
    for (size_t c : uses.at(w))
      for (auto& in : g.nodes[c].inputs)
        if (in == w) in = copy;
    Node n;
    n.name = std::string(kComputeCast) + w;
    n.op = "Cast";
    n.inputs = {w};
    n.outputs = {copy};
    n.attrs.set("to", static_cast<int64_t>(DType::f32));
    before[*std::min_element(uses.at(w).begin(), uses.at(w).end())].push_back(std::move(n));
  }
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto it = before.find(i); it != before.end())
      nodes.insert(nodes.end(), std::make_move_iterator(it->second.begin()), std::make_move_iterator(it->second.end()));
    nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
}

void merge_compute_casts(Graph& g) {
  // A weight that a kernel may take as a baked-in constant (a frozen one-element weight:
  // ir/workload.h is_structural_constant) keeps its own Cast: the MultiCast kernel reads
  // every weight from a buffer.
  auto baked = [&](const std::string& w) {
    const auto it = g.initializers.find(w);
    return it != g.initializers.end() && is_structural_constant(it->second);
  };
  std::vector<size_t> casts;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == "Cast" && g.nodes[i].name.starts_with(kComputeCast) && !baked(g.nodes[i].input(0)))
      casts.push_back(i);
  std::map<size_t, Node> merged;  // a bucket's first Cast -> its dc.MultiCast
  for (size_t first = 0; first < casts.size(); first += kMultiCastMaxInputs) {
    Node m;
    m.name = std::string(kComputeCasts) + std::to_string(first / kMultiCastMaxInputs);
    m.op = kMultiCast;
    m.attrs.set("to", static_cast<int64_t>(DType::f32));  // apply_precision sets the reduced type
    for (size_t k = first; k < std::min(casts.size(), first + kMultiCastMaxInputs); ++k) {
      m.inputs.push_back(g.nodes[casts[k]].input(0));
      m.outputs.push_back(g.nodes[casts[k]].outputs.at(0));
    }
    merged.emplace(casts[first], std::move(m));
  }
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto it = merged.find(i); it != merged.end()) nodes.push_back(std::move(it->second));
    else if (!std::binary_search(casts.begin(), casts.end(), i)) nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
}

std::string add_loss_scale(Graph& g, const std::string& loss, const TrainingSpec& spec) {
  const TensorInfo lt = g.info(loss);
  DC_INTERNAL_CHECK(lt.dtype == DType::f32 && shape_numel(lt.shape) == 1, "the loss is not an f32 scalar");
  state(g, kLossScaleGrowth, Tensor::scalar<float>(0.f));
  return state(g, kLossScale, Tensor::from_vector<float>(lt.shape, {static_cast<float>(spec.loss_scale_init)}));
}

namespace {

// dc.NonFiniteCheck number k over `grads`, then the count of its lanes that saw an inf or NaN.
std::string add_nonfinite_count(Graph& g, const std::vector<std::string>& grads, size_t k) {
  const std::string p = std::string(kAmpPrefix), id = std::to_string(k);
  int64_t largest = 1;
  for (const auto& grad : grads) largest = std::max(largest, shape_numel(g.info(grad).shape));
  Attributes lanes;
  lanes.set("lanes", nonfinite_check_lanes(largest));
  const TensorInfo flags_info{DType::f32, {lanes.get_int("lanes")}};
  const std::string flags = add(g, p + "nonfinite_check" + id, kNonFiniteCheck, grads, flags_info, lanes);
  Attributes all;
  all.set("keepdims", int64_t{0});
  return add(g, p + "nonfinite_count" + id, "ReduceSum", {flags}, kF32, all);
}

}  // namespace

std::string check_gradients_finite(Graph& g, const std::map<std::string, std::string>& gradients) {
  const std::string p(kAmpPrefix);
  const std::string zero = f32_constant(g, p + "zero", 0.f);
  // A check per kNonFiniteCheckMaxInputs gradients (one for every model tested), their counts summed.
  std::vector<std::vector<std::string>> parts(1);
  for (const auto& [w, grad] : gradients) {
    if (parts.back().size() == kNonFiniteCheckMaxInputs) parts.emplace_back();
    parts.back().push_back(grad);
  }
  std::string nonfinite;
  for (size_t k = 0; k < parts.size(); ++k) {
    const std::string count = add_nonfinite_count(g, parts[k], k);
    nonfinite = k == 0 ? count : add(g, p + "nonfinite_total" + std::to_string(k), "Add", {nonfinite, count}, kF32);
  }
  return add(g, p + "all_finite", "Equal", {nonfinite, zero}, kBool);
}

void gate_updates_on_overflow(Graph& g, const std::string& all_finite, const TrainingSpec& spec) {
  const std::string p(kAmpPrefix);
  // The update nodes gate in their kernel (ir/optimizer_update.h): they read the flag, so
  // they run after every gradient, at the end of the step.
  std::vector<Node> updates, others;
  for (auto& n : g.nodes) {
    if (!is_optimizer_update(n.op)) {
      others.push_back(std::move(n));
      continue;
    }
    n.attrs.set("scaled", int64_t{1});  // G / S in the kernel: no unscaled copy of a gradient
    n.attrs.set("gated", int64_t{1});
    n.inputs.push_back(std::string(kLossScale));
    n.inputs.push_back(all_finite);
    updates.push_back(std::move(n));
  }
  g.nodes = std::move(others);
  g.nodes.insert(g.nodes.end(), std::make_move_iterator(updates.begin()), std::make_move_iterator(updates.end()));
  // Other optimizer outputs (the step counter) through Where.
  std::vector<std::pair<std::string, std::string>> gated;  // STATE, its ungated update
  for (auto& n : g.nodes) {
    if (!n.name.starts_with("optimizer/") || is_optimizer_update(n.op)) continue;
    for (auto& o : n.outputs) {
      const std::string s = o.substr(0, o.size() - kNextSuffix.size());
      const std::string update = p + "update/" + s;
      g.tensors[update] = g.info(o);
      gated.emplace_back(s, update);
      o = update;
    }
  }
  for (const auto& [s, update] : gated) {
    Node n;
    n.name = p + "gate/" + s;
    n.op = "Where";
    n.inputs = {all_finite, update, s};
    n.outputs = {next_name(s)};
    g.nodes.push_back(std::move(n));
  }
  // GradScaler: finite -> counter + 1, and at the interval S x2 and counter 0;
  // overflow -> S x0.5 and counter 0.
  const std::string scale(kLossScale), growth(kLossScaleGrowth);
  const TensorInfo st = g.info(scale);
  const std::string counted = add(g, p + "growth_count", "Add", {growth, f32_constant(g, p + "one", 1.f)}, kF32);
  const std::string interval = f32_constant(g, p + "growth_interval", static_cast<float>(spec.loss_scale_growth_interval));
  const std::string grow = add(g, p + "grow", "Equal", {counted, interval}, kBool);
  const std::string grown = add(g, p + "scale_grown", "Mul", {scale, f32_constant(g, p + "growth_factor", 2.f)}, st);
  const std::string backed = add(g, p + "scale_backed_off", "Mul", {scale, f32_constant(g, p + "backoff_factor", 0.5f)}, st);
  const std::string if_finite = add(g, p + "scale_if_finite", "Where", {grow, grown, scale}, st);
  const std::string zero = p + "zero";
  const std::string count_if_finite = add(g, p + "growth_if_finite", "Where", {grow, zero, counted}, kF32);
  Node scale_next{p + "scale_next", "Where", {}, {all_finite, if_finite, backed}, {next_name(scale)}};
  Node growth_next{p + "growth_next", "Where", {}, {all_finite, count_if_finite, zero}, {next_name(growth)}};
  g.nodes.push_back(std::move(scale_next));
  g.nodes.push_back(std::move(growth_next));
}

namespace {

// The batch statistics' chain of a BatchNorm (training_forward.h: ReduceMeans of X and of
// its centred squares, through a per-channel Reshape), as PyTorch's autocast runs batch_norm
// in fp32: every tensor between X and the batch mean and variance.
void keep_batch_statistics(const Graph& g, const std::string& x, std::vector<std::string> todo,
                           std::set<std::string>& keep) {
  while (!todo.empty()) {
    const std::string t = todo.back();
    todo.pop_back();
    if (t.empty() || t == x || g.is_constant(t) || !keep.insert(t).second) continue;
    if (const auto p = g.producer(t)) todo.insert(todo.end(), g.nodes[*p].inputs.begin(), g.nodes[*p].inputs.end());
  }
}

// The node named `name` (training_forward.cpp names the batch statistics' ReduceMeans).
const Node& node_named(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return n;
  DC_INTERNAL_CHECK(false, "no node '", name, "'");
  return g.nodes.front();
}

// BatchNorm `bn` once lowered (lower_batch_norm.h): its per-channel outputs, its statistics
// and the intermediates computing them, and those of its chain Y = ((X - mean) * invstd) *
// scale + B, which is fp32 from the reduced X to the store of Y (Y keeps the model's name;
// the intermediates carry the chain's prefix), so the fused kernel rounds once, as
// autocast's fp32 batch_norm.
void keep_lowered_batch_norm(const Graph& g, const std::string& bn, std::set<std::string>& keep) {
  const Node& mean = node_named(g, bn + "/batch_mean");
  keep_batch_statistics(g, mean.input(0), {mean.outputs.at(0), node_named(g, bn + "/batch_var").outputs.at(0)}, keep);
  const std::string stats = batch_norm_stats_prefix(bn), chain = batch_norm_apply_prefix(bn);
  for (const Node& n : g.nodes) {
    if (n.name.starts_with(stats)) keep.insert(n.outputs.begin(), n.outputs.end());
    if (n.name.starts_with(chain))
      for (const auto& o : n.outputs)
        if (o.starts_with(chain)) keep.insert(o);
  }
}

// The BatchNorm whose lowered inverse std node `n` writes, or "" if none.
std::string lowered_batch_norm(const Node& n) {
  const std::string suffix = batch_norm_invstd_node("");
  if (n.op != "Reciprocal" || !n.name.ends_with(suffix)) return "";
  return n.name.substr(0, n.name.size() - suffix.size());
}

}  // namespace

std::set<std::string> training_fp32_tensors(const Graph& g) {
  std::set<std::string> keep;
  for (const StateUpdate& u : training_state_updates(g)) keep.insert(u.state);
  for (const auto& [name, t] : g.initializers)
    if (t.dtype() == DType::f32 && t.rank() >= 1) keep.insert(name);
  for (const Node& n : g.nodes) {
    if (n.name.starts_with("optimizer/") || n.name.starts_with(kAmpPrefix)) {
      keep.insert(n.inputs.begin(), n.inputs.end());
      keep.insert(n.outputs.begin(), n.outputs.end());
    } else if (n.op == "dc.BatchNormTrain") {
      keep.insert(n.outputs.begin() + 1, n.outputs.end());
      keep_batch_statistics(g, n.inputs.at(0), {n.inputs.at(5), n.inputs.at(6)}, keep);
    } else if (const std::string bn = lowered_batch_norm(n); !bn.empty()) {
      keep_lowered_batch_norm(g, bn, keep);
    } else if (n.op == "dc.Attention") {
      keep.insert(n.outputs.at(1));  // the log-sum-exp, as autocast keeps softmax's statistics
    } else if (n.op == "dc.SoftmaxCrossEntropy" || n.name.starts_with(kCrossEntropyPrefix)) {
      keep.insert(n.outputs.begin(), n.outputs.end());  // the log-probabilities and the loss
    }
  }
  keep.erase("");
  return keep;
}

}  // namespace dc
