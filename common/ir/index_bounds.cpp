#include "ir/index_bounds.h"

#include <algorithm>

#include "ir/shape.h"

namespace dc {
namespace {

int64_t extent(const Shape& s, int64_t axis, const char* op) {
  return s.empty() ? 0 : s[static_cast<size_t>(normalize_axis(axis, static_cast<int64_t>(s.size()), op))];
}

// GatherND / ScatterND: the last index dimension q addresses data dims batch..batch+q-1.
int64_t nd_bound(const Graph& g, const Node& n, int64_t batch_dims) {
  const Shape& data = g.info(n.input(0)).shape;
  const Shape& idx = g.info(n.input(1)).shape;
  if (idx.empty()) return 0;
  int64_t bound = 0;
  for (int64_t j = 0; j < idx.back() && batch_dims + j < static_cast<int64_t>(data.size()); ++j) {
    const int64_t d = data[static_cast<size_t>(batch_dims + j)];
    bound = bound == 0 ? d : std::min(bound, d);
  }
  return bound;
}

int64_t one_hot_depth(const Graph& g, const Node& n) {
  if (!n.has_input(1) || !g.is_constant(n.input(1))) return 0;
  const std::vector<int64_t> d = g.initializers.at(n.input(1)).to_int64_vector();
  return d.size() == 1 ? d[0] : 0;
}

// The input a node reads as indices and its bound; {"", 0} for other nodes.
std::pair<std::string, int64_t> index_use(const Graph& g, const Node& n) {
  if (!n.has_input(1)) return {"", 0};
  const int64_t axis = n.attrs.get_int("axis", 0);
  if (n.op == "Gather" || n.op == "GatherElements" || n.op == "Scatter" || n.op == "ScatterElements")
    return {n.input(1), extent(g.info(n.input(0)).shape, axis, n.op.c_str())};
  if (n.op == "GatherND") return {n.input(1), nd_bound(g, n, n.attrs.get_int("batch_dims", 0))};
  if (n.op == "ScatterND") return {n.input(1), nd_bound(g, n, 0)};
  if (n.op == "OneHot") return {n.input(0), one_hot_depth(g, n)};
  // Training ops (docs/training.md): class labels over the logits' last axis, an
  // embedding's indices over the gathered axis.
  if (n.op == "dc.SoftmaxCrossEntropy") return {n.input(1), extent(g.info(n.input(0)).shape, -1, n.op.c_str())};
  if (n.op == "dc.SoftmaxCrossEntropyGrad" && n.has_input(2))
    return {n.input(2), extent(g.info(n.input(1)).shape, -1, n.op.c_str())};
  if (n.op == "dc.GatherGrad") {
    const Shape data = n.attrs.get_ints("data_shape");
    return {n.input(1), extent(data, axis, n.op.c_str())};
  }
  return {"", 0};
}

// The tensor whose values `t` holds through reshapes (the cross-entropy's labels as a column
// for its GatherElements): indices reshaped before their use bound the input they came from.
std::string reshaped_from(const Graph& g, std::string t) {
  while (const auto p = g.producer(t)) {
    const Node& n = g.nodes[*p];
    if (n.op != "Reshape" && n.op != "Unsqueeze" && n.op != "Squeeze" && n.op != "Flatten" && n.op != "Identity")
      break;
    t = n.input(0);
  }
  return t;
}

}  // namespace

std::vector<int64_t> input_index_bounds(const Graph& g) {
  std::vector<int64_t> bounds(g.inputs.size(), 0);
  for (const Node& n : g.nodes) {
    const auto [name, bound] = index_use(g, n);
    if (name.empty() || bound <= 0) continue;
    const std::string source = reshaped_from(g, name);
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.inputs[i] == source) bounds[i] = bounds[i] == 0 ? bound : std::min(bounds[i], bound);
  }
  return bounds;
}

}  // namespace dc
