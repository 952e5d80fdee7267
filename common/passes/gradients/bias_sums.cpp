#include "passes/gradients/bias_sums.h"

#include <map>
#include <string>
#include <vector>

#include "ir/gemm_operand_sum.h"
#include "ir/reduced_axes.h"
#include "passes/gradients/grad_builder.h"

namespace dc::grad {

namespace {

// ReduceSum `r` sums its input over every axis but the last, which is of rank >= 3.
bool sums_leading_axes(const Graph& g, const Node& r) {
  if (r.op != "ReduceSum") return false;
  const size_t rank = g.info(r.input(0)).shape.size();
  const ReducedAxes ra = reduced_axes(g, r);
  if (rank < 3 || ra.noop || ra.runtime_axes || ra.axes.size() != rank - 1) return false;
  for (size_t d = 0; d + 1 < rank; ++d)
    if (ra.axes[d] != static_cast<int64_t>(d)) return false;
  return true;
}

// The 2-D view [rows, N] of `t` (a Reshape keeping its last axis) that a GEMM reads and
// sums over its k (gemm_operand_sum of that view over axis 0): "" if none.
std::string gemm_view(const Graph& g, const std::map<std::string, std::vector<size_t>>& readers,
                      const std::string& t) {
  const auto it = readers.find(t);
  if (it == readers.end()) return "";
  const Shape& s = g.info(t).shape;
  for (size_t v : it->second) {
    const Node& view = g.nodes[v];
    if (view.op != "Reshape" || view.input(0) != t) continue;
    const std::string& out = view.outputs.at(0);
    const Shape& vs = g.info(out).shape;
    if (vs.size() != 2 || vs[1] != s.back()) continue;
    Attributes axis0;
    axis0.set("axes", std::vector<int64_t>{0});
    Node sum;
    sum.op = "ReduceSum";
    sum.inputs = {out};
    sum.attrs = axis0;
    const auto gemms = readers.find(out);
    if (gemms == readers.end()) continue;
    for (size_t h : gemms->second) {
      const Node& n = g.nodes[h];
      if ((n.op == "MatMul" || n.op == "Gemm") && gemm_operand_sum(g, n, sum)) return out;
      // Through the 2-D Transpose that the GEMM reads in place.
      if (n.op != "Transpose") continue;
      if (const auto tr = readers.find(n.outputs.at(0)); tr != readers.end())
        for (size_t h2 : tr->second)
          if ((g.nodes[h2].op == "MatMul" || g.nodes[h2].op == "Gemm") && gemm_operand_sum(g, g.nodes[h2], sum))
            return out;
    }
  }
  return "";
}

}  // namespace

// The new sum goes right after the view it reads (its readers follow it there): the cover's
// search runs in node order, and a cluster of the GEMM and a sum at the end of the step
// would span the whole backward pass.
void sum_biases_over_gemm_views(Graph& g, size_t first) {
  const auto readers = g.consumers();
  GradBuilder b(g);
  std::vector<bool> replaced(g.nodes.size(), false);
  std::map<size_t, std::vector<Node>> after;  // the sums, by the index of the view they read
  const size_t end = g.nodes.size();
  for (size_t k = first; k < end; ++k) {
    if (!sums_leading_axes(g, g.nodes[k])) continue;
    const std::string view = gemm_view(g, readers, g.nodes[k].input(0));
    if (view.empty()) continue;
    const std::string name = g.nodes[k].name, out = g.nodes[k].outputs.at(0);
    const Shape shape = g.info(out).shape;
    b.set_context(name);
    const std::string sum = b.reshape(b.reduce_sum(view, {0}, false), shape);
    // The last node added computes `sum`: it takes the old output's name, so readers stay.
    g.nodes.back().outputs.at(0) = out;
    g.tensors.erase(sum);
    replaced[k] = true;
    auto& moved = after[*g.producer(view)];
    for (size_t i = end; i < g.nodes.size(); ++i) moved.push_back(std::move(g.nodes[i]));
    g.nodes.resize(end);
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (!replaced[k]) kept.push_back(std::move(g.nodes[k]));
    if (const auto it = after.find(k); it != after.end())
      for (Node& n : it->second) kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  g = topo_sort(std::move(g));
}

}  // namespace dc::grad
