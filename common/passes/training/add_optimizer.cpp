#include "passes/training/add_optimizer.h"

#include <algorithm>

#include "ir/error.h"
#include "passes/training_state.h"

namespace dc {

namespace {

// A zero-filled initializer shaped like `like`, named `name`.
std::string zero_state(Graph& g, const std::string& like, const std::string& name) {
  DC_USER_CHECK(!g.tensors.count(name), "the model has a tensor named '", name,
                "', which training reserves for optimizer state");
  const TensorInfo t = g.info(like);
  g.initializers[name] = Tensor(t.dtype, t.shape);
  g.tensors[name] = t;
  return name;
}

// Declares the next-value outputs of an update node and makes them graph outputs.
std::vector<std::string> next_outputs(Graph& g, const std::vector<std::string>& states) {
  std::vector<std::string> outs;
  for (const auto& s : states) {
    outs.push_back(next_name(s));
    g.tensors[outs.back()] = g.info(s);
    g.outputs.push_back(outs.back());
  }
  return outs;
}

// The update of one tensor: its inputs and outputs (one group of optimizer_update.h's
// layout), its state created as zero initializers.
struct TensorUpdate {
  std::string weight;
  std::vector<std::string> inputs, outputs;
  int64_t bytes = 0;
  size_t after = 0;  // the node that finishes its gradient
};

TensorUpdate tensor_update(Graph& g, const TrainingSpec& spec, const std::string& w, const std::string& grad) {
  TensorUpdate u;
  u.weight = w;
  u.bytes = shape_numel(g.info(w).shape) * static_cast<int64_t>(dtype_size(g.info(w).dtype));
  u.inputs = {w, grad};
  std::vector<std::string> states{w};
  if (spec.optimizer == OptimizerKind::sgd) {
    if (spec.momentum != 0) states.push_back(zero_state(g, w, w + "@momentum"));
  } else {
    states.push_back(zero_state(g, w, w + "@adam_m"));
    states.push_back(zero_state(g, w, w + "@adam_v"));
  }
  u.inputs.insert(u.inputs.end(), states.begin() + 1, states.end());
  u.outputs = next_outputs(g, states);
  return u;
}

Node update_node(const TrainingSpec& spec, const std::vector<TensorUpdate>& bucket, size_t index) {
  Node n;
  n.name = "optimizer/" + (bucket.size() == 1 ? bucket[0].weight : "bucket" + std::to_string(index));
  n.attrs.set("lr", static_cast<float>(spec.lr));
  n.attrs.set("weight_decay", static_cast<float>(spec.weight_decay));
  if (spec.optimizer == OptimizerKind::sgd) {
    n.op = "dc.SgdUpdate";
    n.attrs.set("momentum", static_cast<float>(spec.momentum));
  } else {
    n.op = "dc.AdamWUpdate";
    n.attrs.set("beta1", static_cast<float>(spec.beta1));
    n.attrs.set("beta2", static_cast<float>(spec.beta2));
    n.attrs.set("epsilon", static_cast<float>(spec.eps));
  }
  for (const TensorUpdate& u : bucket) {
    n.inputs.insert(n.inputs.end(), u.inputs.begin(), u.inputs.end());
    n.outputs.insert(n.outputs.end(), u.outputs.begin(), u.outputs.end());
  }
  if (spec.optimizer == OptimizerKind::adamw) n.inputs.emplace_back(kStepTensor);
  return n;
}

// The buffers one update kernel may take: 1 KiB of pointer arguments, OpenCL's smallest
// CL_DEVICE_MAX_PARAMETER_SIZE (CUDA allows 4 KiB).
constexpr size_t kMaxUpdateBuffers = 128;

}  // namespace

void add_optimizer(Graph& g, const TrainingSpec& spec,
                   const std::map<std::string, std::string>& gradients) {
  // Updates run as soon as their gradients are done, so that a gradient dies early instead of
  // living until the last one is done (an update writes W@next, never W, so the backward
  // nodes after it still read the old W). Consecutive updates share one node, a bucket
  // updated by one multi-tensor kernel, while the bucket's weights stay within
  // spec.optimizer_bucket_bytes and its kernel within kMaxUpdateBuffers arguments; the bucket
  // runs after the node that finishes its last gradient, and after the last node that reads
  // one of its weights (a data gradient after its weight gradient, BatchNorm's dX after its
  // scale's gradient), so that the plan can update each weight in place (docs/training.md,
  // "State between steps"; before, ResNet-50 copied 7 weights a step).
  std::map<std::string, size_t> producer, last_reader;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
    for (const auto& in : g.nodes[i].inputs) last_reader[in] = i;
  }
  std::vector<TensorUpdate> updates;
  for (const auto& [w, grad] : gradients) {
    DC_USER_CHECK(g.info(w).dtype == DType::f32, "weight '", w, "' has dtype ",
                  dtype_name(g.info(w).dtype), "; dc trains f32 weights");
    updates.push_back(tensor_update(g, spec, w, grad));
    const auto p = producer.find(grad);
    size_t& after = updates.back().after;
    after = p == producer.end() ? g.nodes.size() - 1 : p->second;
    if (const auto r = last_reader.find(w); r != last_reader.end()) after = std::max(after, r->second);
  }
  std::stable_sort(updates.begin(), updates.end(),
                   [](const TensorUpdate& a, const TensorUpdate& b) { return a.after < b.after; });
  std::map<size_t, std::vector<Node>> after;  // node index -> update nodes placed after it
  std::vector<TensorUpdate> bucket;
  int64_t bucket_bytes = 0;
  size_t buckets = 0;
  auto close_bucket = [&] {
    if (bucket.empty()) return;
    after[bucket.back().after].push_back(update_node(spec, bucket, buckets++));
    bucket.clear();
    bucket_bytes = 0;
  };
  for (TensorUpdate& u : updates) {
    const size_t per_tensor = u.inputs.size() + u.outputs.size();
    const size_t buffers = (bucket.size() + 1) * per_tensor + (spec.optimizer == OptimizerKind::adamw ? 1 : 0);
    if (!bucket.empty() && (bucket_bytes + u.bytes > spec.optimizer_bucket_bytes || buffers > kMaxUpdateBuffers))
      close_bucket();
    bucket_bytes += u.bytes;
    bucket.push_back(std::move(u));
  }
  close_bucket();
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    nodes.push_back(std::move(g.nodes[i]));
    if (auto it = after.find(i); it != after.end())
      for (auto& n : it->second) nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  const std::string step(kStepTensor), one = step + "/one";
  g.initializers[one] = Tensor::scalar<int64_t>(1);
  g.tensors[one] = TensorInfo{DType::i64, {}};
  Node inc;
  inc.name = "optimizer/step";
  inc.op = "Add";
  inc.inputs = {step, one};
  inc.outputs = next_outputs(g, {step});
  g.nodes.push_back(inc);
}

}  // namespace dc
