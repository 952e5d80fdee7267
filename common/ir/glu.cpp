#include "ir/glu.h"

#include <algorithm>
#include <set>

#include "ir/op_traits.h"

namespace dc {

namespace {

constexpr size_t kMaxCombinerNodes = 24;

// Integer values of constant input `pos` of a Slice, or of attribute `attr` (opset < 10);
// nullopt when the input is not a constant. Empty when neither is given.
std::optional<std::vector<int64_t>> slice_ints(const Graph& g, const Node& n, size_t pos,
                                               const char* attr) {
  if (n.has_input(pos)) {
    if (!g.is_constant(n.inputs[pos])) return std::nullopt;
    return g.initializers.at(n.inputs[pos]).to_int64_vector();
  }
  if (n.attrs.has(attr)) return n.attrs.get_ints(attr);
  return std::vector<int64_t>{};
}

}  // namespace

std::optional<LastAxisSlice> last_axis_slice(const Graph& g, const Node& n) {
  if (n.op != "Slice" || n.inputs.empty() || n.outputs.size() != 1) return std::nullopt;
  const auto starts = slice_ints(g, n, 1, "starts");
  const auto ends = slice_ints(g, n, 2, "ends");
  const auto axes = slice_ints(g, n, 3, "axes");
  const auto steps = slice_ints(g, n, 4, "steps");
  if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1 ||
      axes->size() > 1 || steps->size() > 1)
    return std::nullopt;
  const Shape& in = g.info(n.input(0)).shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t axis = axes->empty() ? 0 : (*axes)[0];
  if (axis < 0) axis += rank;
  if (rank == 0 || axis != rank - 1) return std::nullopt;
  LastAxisSlice s;
  s.step = steps->empty() ? 1 : (*steps)[0];
  if (s.step <= 0) return std::nullopt;
  const int64_t dim = in.back();
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
  s.start = clamp((*starts)[0]);
  s.end = clamp((*ends)[0]);
  return s;
}

std::optional<GluSplit> glu_split(const Graph& g, size_t matmul) {
  const Node& mm = g.nodes[matmul];
  if (mm.op != "MatMul" || mm.outputs.size() != 1) return std::nullopt;
  GluSplit s;
  s.matmul = matmul;
  s.y = mm.outputs[0];
  if (std::find(g.outputs.begin(), g.outputs.end(), s.y) != g.outputs.end()) return std::nullopt;
  const Shape& ys = g.info(s.y).shape;
  if (ys.size() < 2 || ys.back() < 2 || ys.back() % 2 != 0) return std::nullopt;
  std::optional<size_t> even, odd;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (std::find(n.inputs.begin(), n.inputs.end(), s.y) == n.inputs.end()) continue;
    const auto sl = last_axis_slice(g, n);
    if (!sl || n.input(0) != s.y || std::count(n.inputs.begin(), n.inputs.end(), s.y) != 1 ||
        sl->step != 2 || sl->end != ys.back())
      return std::nullopt;
    if (sl->start > 1) return std::nullopt;
    auto& slot = sl->start == 0 ? even : odd;
    if (slot) return std::nullopt;
    slot = i;
  }
  if (!even || !odd) return std::nullopt;
  s.even = *even;
  s.odd = *odd;
  return s;
}

std::optional<GluCombiner> glu_combiner(const Graph& g, const std::string& a, const std::string& b) {
  const Shape& shape = g.info(a).shape;
  if (a == b || g.info(b).shape != shape) return std::nullopt;
  std::set<std::string> known = {a, b};  // a, b and the set's outputs
  std::set<size_t> in_set;
  // Nodes in graph order are topologically sorted: one sweep reaches the fixed point.
  for (size_t i = 0; i < g.nodes.size() && in_set.size() <= kMaxCombinerNodes; ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.size() != 1 || !is_elementwise_math(n.op) || !is_emittable(n.op)) continue;
    bool reads_known = false, ok = true;
    for (const auto& in : n.inputs) {
      if (in.empty() || g.is_constant(in)) continue;
      if (known.count(in)) reads_known = true;
      else ok = false;
    }
    if (!ok || !reads_known || g.info(n.outputs[0]).shape != shape) continue;
    in_set.insert(i);
    known.insert(n.outputs[0]);
  }
  if (in_set.empty() || in_set.size() > kMaxCombinerNodes) return std::nullopt;
  const auto consumers = g.consumers();
  auto read_outside = [&](const std::string& t) {
    if (std::find(g.outputs.begin(), g.outputs.end(), t) != g.outputs.end()) return true;
    auto it = consumers.find(t);
    if (it == consumers.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [&](size_t u) { return !in_set.count(u); });
  };
  if (read_outside(a) || read_outside(b)) return std::nullopt;
  GluCombiner c;
  bool reads_a = false, reads_b = false;
  for (size_t i : in_set) {
    const Node& n = g.nodes[i];
    reads_a = reads_a || std::find(n.inputs.begin(), n.inputs.end(), a) != n.inputs.end();
    reads_b = reads_b || std::find(n.inputs.begin(), n.inputs.end(), b) != n.inputs.end();
    c.nodes.push_back(i);
    if (read_outside(n.outputs[0])) {
      if (!c.out.empty()) return std::nullopt;
      c.out = n.outputs[0];
    }
  }
  if (!reads_a || !reads_b || c.out.empty()) return std::nullopt;
  return c;
}

}  // namespace dc
