#include "passes/apply_precision.h"

#include <map>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ir/converted_bytes.h"
#include "ir/error.h"
#include "ir/multi_cast.h"
#include "ir/op_traits.h"
#include "passes/training/mixed_precision.h"
#include "passes/training_state.h"

namespace dc {

namespace {

// Ops that compute a reduction or normalisation: their inputs stay f32 when an elementwise
// chain only feeds them (the fused kernel keeps those values in registers).
bool is_sensitive(const std::string& op) { return op_traits(op).fp32_compute; }

bool is_elementwise(const std::string& op) {
  static const std::set<std::string> ops = {
      "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
      "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
      "Erf", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid",
      "HardSwish", "Tanh", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Gelu", "Clip", "Add", "Sub", "Mul",
      "Div", "Pow", "Max", "Min", "Sum", "Mean", "Mod", "Where", "Cast"};
  return ops.count(op) != 0;
}

// Index/view ops: each output element is an input element. Their outputs take their data
// inputs' dtype; Concat's data inputs are all of them, the others' only input 0.
bool is_view(const std::string& op) {
  static const std::set<std::string> ops = {
      "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Concat", "Slice",
      "Gather", "GatherElements", "GatherND", "Split", "Tile", "Identity", "Pad",
      "DepthToSpace", "SpaceToDepth", "MaxPool", "GlobalMaxPool"};
  return ops.count(op) != 0;
}

std::vector<std::string> data_inputs(const Node& n) {
  if (n.op == "Concat") return n.inputs;
  return {n.input(0)};
}

// Ops whose output dtype an attribute or another input fixes: left as the model has them.
bool dtype_from_attribute(const std::string& op) {
  return op == "ConstantOfShape" || op == "EyeLike" || op == "CastLike" || op == "Range" ||
         op.rfind("Random", 0) == 0 || op == "Constant";
}

class Policy {
 public:
  Policy(const Graph& g, DType storage) : g_(g), storage_(storage), uses_(g.consumers()) {}

  bool is_f32(const std::string& t) const {
    auto it = g_.tensors.find(t);
    return !t.empty() && it != g_.tensors.end() && it->second.dtype == DType::f32;
  }

  // Tensors that stay f32.
  std::set<std::string> keep_f32() {
    mark_sensitive_chains();
    for (const auto& t : g_.inputs) forced_.insert(t);
    for (const auto& t : g_.outputs) forced_.insert(t);
    if (is_training_graph(g_))
      for (const auto& t : training_fp32_tensors(g_)) forced_.insert(t);
    for (const auto& n : g_.nodes)
      if (dtype_from_attribute(n.op))
        for (const auto& o : n.outputs) forced_.insert(o);
    for (const auto& [name, t] : g_.initializers)
      if (t.numel() == 1 && !consumed_by_view(name)) forced_.insert(name);
    propagate_through_views();
    std::set<std::string> keep = forced_;
    keep.insert(chain_.begin(), chain_.end());
    return keep;
  }

 private:
  bool consumed_by_view(const std::string& t) const {
    auto it = uses_.find(t);
    if (it == uses_.end()) return false;
    for (size_t c : it->second)
      if (is_view(g_.nodes[c].op)) return true;
    return false;
  }

  // Reverse topological sweep: a float tensor is on a sensitive chain when it has consumers
  // and each is a sensitive op, or an elementwise/view op all of whose float outputs are.
  void mark_sensitive_chains() {
    auto leads_in = [&](const Node& c) {
      if (is_sensitive(c.op)) return true;
      if (!is_elementwise(c.op) && !is_view(c.op)) return false;
      bool any = false;
      for (const auto& o : c.outputs) {
        if (o.empty() || !is_f32(o)) continue;
        if (!chain_.count(o)) return false;
        any = true;
      }
      return any;
    };
    auto consider = [&](const std::string& t) {
      if (!is_f32(t) || chain_.count(t)) return;
      auto it = uses_.find(t);
      if (it == uses_.end() || it->second.empty()) return;
      for (size_t c : it->second)
        if (!leads_in(g_.nodes[c])) return;
      chain_.insert(t);
    };
    // Computed tensors only: weights (an embedding table gathered into a LayerNorm, an
    // additive mask, LayerNorm's gamma) are stored in the reduced type like every weight,
    // clamped where needed; the ops reading them still compute in fp32.
    for (size_t i = g_.nodes.size(); i-- > 0;)
      for (const auto& o : g_.nodes[i].outputs) consider(o);
  }

  // Forced-f32 tensors pull the data inputs of the view producing them along, and a Concat
  // whose data inputs would differ in dtype takes f32 for all of them; to a fixed point.
  void propagate_through_views() {
    auto keeps = [&](const std::string& t) { return forced_.count(t) || chain_.count(t); };
    for (bool changed = true; changed;) {
      changed = false;
      auto force = [&](const std::string& t) {
        if (!t.empty() && is_f32(t) && forced_.insert(t).second) changed = true;
      };
      for (size_t i = g_.nodes.size(); i-- > 0;) {
        const Node& n = g_.nodes[i];
        if (!is_view(n.op)) continue;
        bool out_forced = false;
        for (const auto& o : n.outputs) out_forced |= forced_.count(o) != 0;
        const auto data = data_inputs(n);
        if (out_forced)
          for (const auto& d : data) force(d);
        if (n.op == "Concat") {
          bool some_f32 = false, some_reduced = false;
          for (const auto& d : data) {
            if (!is_f32(d)) continue;
            (keeps(d) ? some_f32 : some_reduced) = true;
          }
          if (some_f32 && some_reduced) {
            for (const auto& d : data) force(d);
            for (const auto& o : n.outputs) force(o);
          }
        }
      }
    }
  }

  const Graph& g_;
  DType storage_;
  std::map<std::string, std::vector<size_t>> uses_;
  std::set<std::string> chain_, forced_;
};

// The f32 tensor `t` in the storage dtype, clamped to its finite range; a note per clamp.
// A weight still on disk (not resident) is converted lazily: its values are scanned for
// clamps in chunks now and converted again, chunk by chunk, when the plan is written.
Tensor convert_constant(const std::string& name, const Tensor& t, DType to,
                        std::vector<std::string>* notes) {
  ClampStats stats;
  Tensor out;
  if (t.resident()) {
    out = Tensor(to, t.shape());
    convert_to_storage(t.data<float>(), static_cast<size_t>(t.numel()), to,
                       reinterpret_cast<uint16_t*>(out.raw_mutable()), &stats);
  } else {
    stats = scan_clamps(t, to);
    out = convert_lazily(t, to);
  }
  if (stats.clamped > 0) {
    auto note = fmt::format(
        "constant '{}': {} of {} values outside the {} range (seen {:g} .. {:g}) clamped to "
        "+-{:g}",
        name, stats.clamped, t.numel(), dtype_name(to), stats.lo, stats.hi, storage_finite_max(to));
    spdlog::warn("{}", note);
    if (notes) notes->push_back(std::move(note));
  }
  return out;
}

}  // namespace

Graph apply_precision(Graph g, Precision p, std::vector<std::string>* notes) {
  const DType storage = storage_dtype(p);
  if (storage == DType::f32) return g;
  const std::set<std::string> keep = Policy(g, storage).keep_f32();
  auto reduce = [&](const std::string& t) {
    auto it = g.tensors.find(t);
    return it != g.tensors.end() && it->second.dtype == DType::f32 && !keep.count(t);
  };
  for (auto& [name, t] : g.initializers) {
    if (!reduce(name)) continue;
    t = convert_constant(name, t, storage, notes);
    g.tensors[name].dtype = storage;
  }
  // Forward: computed outputs take the storage dtype unless kept; views copy their input's.
  for (auto& n : g.nodes) {
    for (const auto& o : n.outputs) {
      auto it = g.tensors.find(o);
      if (o.empty() || it == g.tensors.end() || it->second.dtype != DType::f32) continue;
      if (is_view(n.op)) {
        const auto in = g.tensors.find(n.input(0));
        if (in != g.tensors.end() && is_float(in->second.dtype)) it->second.dtype = in->second.dtype;
      } else if (reduce(o)) {
        it->second.dtype = storage;
      }
    }
    if ((n.op == "Cast" || n.op == kMultiCast) && !n.outputs.empty())  // a dc.MultiCast's outputs: one dtype
      n.attrs.set("to", static_cast<int64_t>(g.tensors.at(n.outputs[0]).dtype));
  }
  int64_t reduced = 0;
  for (const auto& [name, info] : g.tensors) reduced += info.dtype == storage;
  spdlog::info("apply_precision {}: {} of {} tensors stored in {}", precision_name(p), reduced,
               g.tensors.size(), dtype_name(storage));
  return g;
}

}  // namespace dc
