#include "train_recompute.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/error.h"
#include "passes/gradients/grad_builder.h"
#include "plan/memory_plan.h"

namespace dc::cli {

namespace {

// Ops recomputed for one tensor, at most (views not counted): a residual block's output is
// two BatchNorm normalisations of four elementwise ops each, an Add and a ReLU.
constexpr int kMaxChain = 24;
constexpr int64_t kAlignment = 256;  // the plan's arena alignment (plan/plan.h)

// Cheap to compute again: elementwise ops, and Transpose (a weight's, read by a MatMul's
// gradient, is a weight-sized copy otherwise kept through the whole backward pass).
const std::set<std::string> kCheap = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Gelu", "Neg",
                                      "Add", "Sub", "Mul", "Div", "Transpose"};

// Backward ops that choose positions by comparing the values they read (MaxPool's gradient
// goes to each window's first maximum): a copy that differs from the forward tensor in the
// last bit (BatchNorm's apply recomputed in f32 from the saved f32 statistics, where the
// forward kernel works in double) could move a gradient to another pixel of a window
// whose two largest values lie within that bit. Their inputs are kept.
const std::set<std::string> kPicksByValue = {"dc.MaxPoolGrad"};

int64_t tensor_bytes(const Graph& g, const std::string& t) {
  const TensorInfo& i = g.info(t);
  return std::max<int64_t>(1, shape_numel(i.shape) * static_cast<int64_t>(dtype_size(i.dtype)));
}

// Live ranges over node positions (node i at 2i; a recomputed chain before node i at 2i-1).
struct Span {
  int64_t bytes = 0;
  int first = 0, last = 0;
};
using Liveness = std::map<std::string, Span>;

int64_t peak(const Liveness& live) {
  std::vector<MemoryRequest> requests;
  for (const auto& [name, s] : live) requests.push_back({s.bytes, s.first, s.last});
  return peak_live_bytes(requests, kAlignment);
}

class Recomputer {
 public:
  explicit Recomputer(Graph& g) : g_(g), consumers_(g.consumers()) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (first_backward_ < 0 && g.nodes[i].name.starts_with("grad/")) first_backward_ = static_cast<int>(i);
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer_[o] = i;
    }
    for (const auto& [t, p] : producer_) live_[t] = {tensor_bytes(g, t), 2 * static_cast<int>(p), 2 * static_cast<int>(p)};
    for (const auto& [t, cs] : consumers_)
      if (auto it = live_.find(t); it != live_.end())
        for (size_t c : cs) it->second.last = std::max(it->second.last, 2 * static_cast<int>(c));
    for (const auto& o : g.outputs) {  // own buffers, not the arena's: never recomputed, not counted
      live_.erase(o);
      outputs_.insert(o);
    }
  }

  RecomputeResult run() {
    RecomputeResult r;
    r.peak_before = r.peak_after = peak(live_);
    if (first_backward_ < 0) return r;
    const Liveness start = live_;
    for (size_t i = 0; i < static_cast<size_t>(first_backward_); ++i)
      for (const auto& t : g_.nodes[i].outputs) try_tensor(t, r);
    if (r.tensors.empty() || r.peak_after >= r.peak_before) {
      live_ = start;
      r.tensors.clear();
      r.peak_after = r.peak_before;
      return r;
    }
    rewrite(r);
    return r;
  }

 private:
  std::vector<size_t> backward_readers(const std::string& t) const {
    std::vector<size_t> out;
    if (auto it = consumers_.find(t); it != consumers_.end())
      for (size_t c : it->second)
        if (static_cast<int>(c) >= first_backward_) out.push_back(c);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  bool alive_at(const std::string& t, int pos) const {
    const auto it = live_.find(t);
    if (it == live_.end()) return true;  // a weight, an input or an output: its own buffer
    return it->second.first < pos && it->second.last >= pos;
  }

  // What recomputing t reads: the node's inputs; for BatchNorm's Y, X, scale, B and the
  // saved batch mean and inverse std.
  std::optional<std::vector<std::string>> recompute_inputs(const std::string& t) const {
    const auto p = producer_.find(t);
    if (p == producer_.end() || static_cast<int>(p->second) >= first_backward_) return std::nullopt;
    const Node& n = g_.nodes[p->second];
    if (n.op == "dc.BatchNormTrain") {
      if (n.outputs[0] != t || g_.info(t).shape.size() < 2) return std::nullopt;
      return std::vector<std::string>{n.inputs[0], n.inputs[1], n.inputs[2], n.outputs[3], n.outputs[4]};
    }
    // A Reshape to a constant shape is a view (lower_batch_norm.h's per-channel operands).
    if (n.op == "Reshape" && n.inputs.size() == 2 && g_.is_constant(n.inputs[1]) && is_float(g_.info(t).dtype))
      return n.inputs;
    if (!kCheap.count(n.op) || n.outputs.size() != 1) return std::nullopt;
    for (const auto& in : n.inputs)
      if (in.empty() || !is_float(g_.info(in).dtype)) return std::nullopt;
    return n.inputs;
  }

  // Appends to `chain` (producers first) what recomputing t at `pos` needs; false if some
  // input is neither live there nor cheap to recompute.
  bool plan_chain(const std::string& t, int pos, std::vector<std::string>& chain) const {
    if (std::find(chain.begin(), chain.end(), t) != chain.end()) return true;
    const auto inputs = recompute_inputs(t);
    const auto ops = std::count_if(chain.begin(), chain.end(), [&](const std::string& c) {
      return g_.nodes[producer_.at(c)].op != "Reshape";  // a view costs no kernel
    });
    if (!inputs || ops >= kMaxChain) return false;
    for (const auto& in : *inputs)
      if (!alive_at(in, pos) && !plan_chain(in, pos, chain)) return false;
    chain.push_back(t);
    return true;
  }

  void try_tensor(const std::string& t, RecomputeResult& r) {
    if (t.empty() || !live_.count(t) || outputs_.count(t)) return;
    const std::vector<size_t> readers = backward_readers(t);
    if (readers.empty() || !is_float(g_.info(t).dtype)) return;
    for (size_t c : readers)
      if (kPicksByValue.count(g_.nodes[c].op)) return;
    const int pos = 2 * static_cast<int>(readers.front()) - 1;
    std::vector<std::string> chain;
    if (!plan_chain(t, pos, chain)) return;
    Liveness next = live_;
    int forward_last = next[t].first;
    for (size_t c : consumers_.at(t))
      if (static_cast<int>(c) < first_backward_) forward_last = std::max(forward_last, 2 * static_cast<int>(c));
    if (auto it = chain_readers_.find(t); it != chain_readers_.end()) forward_last = std::max(forward_last, it->second);
    next[t].last = forward_last;
    // The chain's elementwise ops fuse into one pass, so its intermediates are not stored,
    // but where two branches join (a residual Add) one of them is: the largest one is kept.
    const auto largest = std::max_element(chain.begin(), chain.end() - 1, [&](const auto& a, const auto& b) {
      return tensor_bytes(g_, a) < tensor_bytes(g_, b);
    });  // chain.back() is t itself
    for (auto c = chain.begin(); c != chain.end(); ++c) {
      const bool stored = *c == t || c == largest;
      next["recompute/" + *c] = {stored ? tensor_bytes(g_, *c) : 0, pos,
                                 *c == t ? 2 * static_cast<int>(readers.back()) : pos};
    }
    const int64_t after = peak(next);
    if (after > r.peak_after) return;
    live_ = std::move(next);
    r.peak_after = after;
    for (const auto& c : chain) {  // the chain reads its live inputs at pos: they stay live until then
      const std::vector<std::string> inputs = recompute_inputs(c).value();
      for (const auto& in : inputs)
        if (std::find(chain.begin(), chain.end(), in) == chain.end()) chain_readers_[in] = std::max(chain_readers_[in], pos);
    }
    RecomputedTensor rt{t, tensor_bytes(g_, t), {}};
    for (const auto& c : chain) rt.ops.push_back(g_.nodes[producer_.at(c)].op);
    r.tensors.push_back(std::move(rt));
    chains_.push_back({readers.front(), chain});
  }

  // BatchNorm's apply: (X - mean) * invstd * scale + B, one fused elementwise kernel. The
  // per-channel vectors are shaped [C, 1, ...] by Reshapes, which the plan makes views: the
  // weights' once per BatchNorm node, right after it (shared by its chains).
  std::string batch_norm_apply(grad::GradBuilder& b, size_t bn, const std::map<std::string, std::string>& as) {
    const Node n = g_.nodes[bn];
    auto arg = [&](const std::string& t) { return as.count(t) ? as.at(t) : t; };
    const Shape& xs = b.shape(n.outputs[0]);
    Shape per_channel(xs.size() - 1, 1);
    per_channel[0] = xs[1];
    if (!channel_weights_.count(bn)) {
      const size_t first = g_.nodes.size();
      channel_weights_[bn] = {b.reshape(n.inputs[1], per_channel), b.reshape(n.inputs[2], per_channel)};
      for (size_t i = first; i < g_.nodes.size(); ++i) after_[bn].push_back(g_.nodes[i]);
      g_.nodes.resize(first);
    }
    const auto& [scale, bias] = channel_weights_.at(bn);
    const std::string centered = b.sub(arg(n.inputs[0]), b.reshape(n.outputs[3], per_channel));
    const std::string normed = b.mul(centered, b.reshape(n.outputs[4], per_channel));
    return b.add(b.mul(normed, scale), bias);
  }

  // Appends every chain's nodes, points the backward readers at the recomputed tensors, then
  // moves each chain before its first reader.
  void rewrite(const RecomputeResult& r) {
    const size_t original = g_.nodes.size();
    std::map<size_t, std::vector<Node>> before;  // node index -> chain nodes to run first
    grad::GradBuilder b(g_);
    for (size_t k = 0; k < chains_.size(); ++k) {
      const auto& [reader, chain] = chains_[k];
      b.set_context("recompute/" + r.tensors[k].tensor);
      std::map<std::string, std::string> as;  // tensor -> its recomputed name
      for (const auto& c : chain) {
        const size_t at = g_.nodes.size();
        const Node n = g_.nodes[producer_.at(c)];
        if (n.op == "dc.BatchNormTrain") {
          as[c] = batch_norm_apply(b, producer_.at(c), as);
        } else {
          std::vector<std::string> ins;
          for (const auto& in : n.inputs) ins.push_back(as.count(in) ? as.at(in) : in);
          as[c] = b.node1(n.op, ins, g_.info(c), n.attrs);
        }
        for (size_t i = at; i < g_.nodes.size(); ++i) before[reader].push_back(g_.nodes[i]);
        g_.nodes.resize(at);
      }
      const std::string& t = r.tensors[k].tensor;
      for (size_t c : backward_readers(t))
        for (auto& in : g_.nodes[c].inputs)
          if (in == t) in = as.at(t);
    }
    DC_INTERNAL_CHECK(g_.nodes.size() == original, "recompute: nodes left behind");
    std::vector<Node> nodes;
    for (size_t i = 0; i < original; ++i) {
      if (auto it = before.find(i); it != before.end())
        for (auto& n : it->second) nodes.push_back(std::move(n));
      nodes.push_back(std::move(g_.nodes[i]));
      if (auto it = after_.find(i); it != after_.end())
        for (auto& n : it->second) nodes.push_back(std::move(n));
    }
    g_.nodes = std::move(nodes);
  }

  Graph& g_;
  const std::map<std::string, std::vector<size_t>> consumers_;
  std::map<std::string, size_t> producer_;
  int first_backward_ = -1;
  Liveness live_;
  std::set<std::string> outputs_;  // the step's outputs
  std::map<std::string, int> chain_readers_;
  std::map<size_t, std::pair<std::string, std::string>> channel_weights_;  // BatchNorm -> scale, B as [C, 1, ...]
  std::map<size_t, std::vector<Node>> after_;                              // node index -> nodes run after it  // tensor -> last position an accepted chain reads it
  std::vector<std::pair<size_t, std::vector<std::string>>> chains_;  // first reader, chain
};

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

RecomputeResult recompute_cheap_chains(Graph& g) { return Recomputer(g).run(); }

std::string describe_recompute(const RecomputeResult& r) {
  if (r.tensors.empty())
    return fmt::format("recompute: none (no cheap chain lowers the step's peak of {} live)", mib(r.peak_before));
  std::string list;
  for (const auto& t : r.tensors)
    list += fmt::format("{}{} ({}: {})", list.empty() ? "" : ", ", t.tensor, mib(t.bytes), fmt::join(t.ops, "+"));
  return fmt::format("recompute: {} tensor(s) computed again in the backward pass instead of kept, peak of live "
                     "bytes {} -> {} (saves {}): {}", r.tensors.size(), mib(r.peak_before), mib(r.peak_after),
                     mib(r.peak_before - r.peak_after), list);
}

}  // namespace dc::cli
