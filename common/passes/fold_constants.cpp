#include "passes/fold_constants.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ref/executor.h"
#include "ref/kernel.h"

namespace dc {

namespace {

// Outputs larger than this, and larger than all inputs together, are left to run time.
constexpr int64_t kMaxMaterialisedElements = 1'000'000;

bool deterministic(const std::string& op) {
  static const std::set<std::string> kRandom = {
      "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
      "Multinomial",  "Bernoulli",        "Dropout"};
  return !kRandom.count(op);
}

bool static_shape_known(const Graph& g, const std::string& tensor) {
  auto it = g.tensors.find(tensor);
  if (it == g.tensors.end() || it->second.dtype == DType::undefined) return false;
  return std::all_of(it->second.shape.begin(), it->second.shape.end(),
                     [](int64_t d) { return d >= 0; });
}

// Shape (with opset 15's start/end, clamped like ONNX's shape inference) and Size of a
// tensor whose shape is static: only the type is needed, not the value.
std::optional<Tensor> fold_from_shape(const Graph& g, const Node& n) {
  if ((n.op != "Shape" && n.op != "Size") || !n.has_input(0) ||
      !static_shape_known(g, n.inputs[0]))
    return std::nullopt;
  const Shape& s = g.info(n.inputs[0]).shape;
  if (n.op == "Size") return Tensor::scalar<int64_t>(shape_numel(s));
  const int64_t rank = static_cast<int64_t>(s.size());
  auto clamp_axis = [&](int64_t a) {
    if (a < 0) a += rank;
    return std::clamp<int64_t>(a, 0, rank);
  };
  const int64_t start = clamp_axis(n.attrs.get_int("start", 0));
  const int64_t end = clamp_axis(n.attrs.get_int("end", rank));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(s[static_cast<size_t>(i)]);
  return Tensor::from_vector<int64_t>({static_cast<int64_t>(dims.size())}, dims);
}

bool all_inputs_constant(const Graph& g, const Node& n) {
  return std::all_of(n.inputs.begin(), n.inputs.end(),
                     [&](const std::string& in) { return in.empty() || g.is_constant(in); });
}

int64_t input_elements(const Graph& g, const Node& n) {
  int64_t total = 0;
  for (const auto& in : n.inputs)
    if (!in.empty()) total += g.initializers.at(in).numel();
  return total;
}

bool too_large(int64_t out_elements, int64_t in_elements) {
  return out_elements > kMaxMaterialisedElements && out_elements > in_elements;
}

// Refuses a blow-up before computing it when the output types are already known.
bool predicted_too_large(const Graph& g, const Node& n) {
  const int64_t in = input_elements(g, n);
  for (const auto& o : n.outputs) {
    if (o.empty()) continue;
    auto it = g.tensors.find(o);
    if (it != g.tensors.end() && too_large(shape_numel(it->second.shape), in)) return true;
  }
  return false;
}

std::optional<std::vector<Tensor>> evaluate(const Graph& g, const Node& n) {
  if (!deterministic(n.op) || !all_inputs_constant(g, n) || ref::find_op(n.op) == nullptr ||
      predicted_too_large(g, n))
    return std::nullopt;
  ref::Inputs values;
  values.reserve(n.inputs.size());
  for (const auto& in : n.inputs)
    values.push_back(in.empty() ? Tensor() : g.initializers.at(in));
  std::vector<Tensor> out = ref::run_node(n, values);
  const int64_t in_elements = input_elements(g, n);
  for (const auto& t : out)
    if (too_large(t.numel(), in_elements)) return std::nullopt;
  return out;
}

}  // namespace

Graph fold_constants(Graph g) {
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (auto& n : g.nodes) {
    std::optional<std::vector<Tensor>> values;
    if (auto t = fold_from_shape(g, n)) {
      values = std::vector<Tensor>{std::move(*t)};
    } else {
      values = evaluate(g, n);
    }
    if (!values) {
      kept.push_back(std::move(n));
      continue;
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string& name = n.outputs[k];
      if (name.empty()) continue;
      const Tensor& t = (*values)[k];
      DC_INTERNAL_CHECK(t.defined(), "folding node '", n.name, "' (", n.op,
                        ") gave no value for output '", name, "'");
      g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
      g.initializers[name] = t;
    }
  }
  g.nodes = std::move(kept);
  return g;
}

}  // namespace dc
