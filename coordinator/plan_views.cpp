#include "plan_views.h"

#include <algorithm>
#include <set>

#include "passes/training_state.h"
#include "plan/plan.h"

namespace dc {

namespace {

// Element offset of a box `starts` + `out` inside `in` when the box is one contiguous run
// of `in`'s row-major elements: unit extents before some axis p, full extents after it.
std::optional<int64_t> contiguous_offset(const Shape& in, const Shape& out, const std::vector<int64_t>& starts) {
  const size_t r = in.size();
  if (out.size() != r || starts.size() != r) return std::nullopt;
  size_t p = 0;
  while (p + 1 < r && out[p] == 1) ++p;
  for (size_t a = p + 1; a < r; ++a)
    if (out[a] != in[a] || starts[a] != 0) return std::nullopt;
  int64_t offset = 0, stride = 1;
  for (size_t a = r; a-- > 0;) {
    offset += starts[a] * stride;
    stride *= in[a];
  }
  return offset;
}

// Integer values of a constant operand (input `pos`), or of attribute `attr` before it
// became an input; nullopt if neither is known.
std::optional<std::vector<int64_t>> ints_of(const Graph& g, const Node& n, size_t pos, const char* attr) {
  if (n.has_input(pos)) {
    if (!g.is_constant(n.inputs[pos])) return std::nullopt;
    return g.initializers.at(n.inputs[pos]).to_int64_vector();
  }
  if (n.attrs.has(attr)) return n.attrs.get_ints(attr);
  return std::vector<int64_t>{};
}

std::optional<std::vector<int64_t>> slice_starts(const Graph& g, const Node& n, const Shape& in) {
  const auto starts = ints_of(g, n, 1, "starts");
  const auto axes = ints_of(g, n, 3, "axes");
  const auto steps = ints_of(g, n, 4, "steps");
  if (!starts || !axes || !steps) return std::nullopt;
  if (std::any_of(steps->begin(), steps->end(), [](int64_t s) { return s != 1; })) return std::nullopt;
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> out(in.size(), 0);
  for (size_t i = 0; i < starts->size(); ++i) {
    int64_t a = axes->empty() ? static_cast<int64_t>(i) : (*axes)[i];
    if (a < 0) a += r;
    if (a < 0 || a >= r) return std::nullopt;
    const int64_t d = in[static_cast<size_t>(a)];
    int64_t s = (*starts)[i];
    if (s < 0) s += d;
    out[static_cast<size_t>(a)] = std::clamp<int64_t>(s, 0, d);
  }
  return out;
}

}  // namespace

std::optional<std::vector<int64_t>> view_byte_offsets(const Graph& g, const Node& n, int64_t alignment) {
  static const std::set<std::string> whole = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
  if (n.inputs.empty() || n.inputs[0].empty() || n.outputs.empty()) return std::nullopt;
  const TensorInfo& in = g.info(n.inputs[0]);
  const int64_t elem = static_cast<int64_t>(dtype_size(in.dtype));
  for (const auto& o : n.outputs)
    if (o.empty() || g.info(o).dtype != in.dtype) return std::nullopt;
  if (whole.count(n.op)) {
    if (n.outputs.size() != 1 || shape_numel(g.info(n.outputs[0]).shape) != shape_numel(in.shape)) return std::nullopt;
    return std::vector<int64_t>{0};
  }
  std::vector<int64_t> offsets;
  if (n.op == "Slice" && n.outputs.size() == 1) {
    const auto starts = slice_starts(g, n, in.shape);
    if (!starts) return std::nullopt;
    const auto off = contiguous_offset(in.shape, g.info(n.outputs[0]).shape, *starts);
    if (!off) return std::nullopt;
    offsets.push_back(*off * elem);
  } else if (n.op == "Split") {
    int64_t axis = n.attrs.get_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(in.shape.size());
    if (axis < 0 || axis >= static_cast<int64_t>(in.shape.size())) return std::nullopt;
    std::vector<int64_t> starts(in.shape.size(), 0);
    for (const auto& o : n.outputs) {
      const Shape& out = g.info(o).shape;
      const auto off = contiguous_offset(in.shape, out, starts);
      if (!off) return std::nullopt;
      offsets.push_back(*off * elem);
      starts[static_cast<size_t>(axis)] += out[static_cast<size_t>(axis)];
    }
  } else {
    return std::nullopt;
  }
  for (int64_t o : offsets)
    if (o % alignment != 0) return std::nullopt;
  return offsets;
}

bool is_free_view(const Graph& g, const std::vector<size_t>& nodes) {
  if (nodes.size() != 1) return false;
  const Node& n = g.nodes.at(nodes.front());
  if (n.inputs.empty() || n.inputs[0].empty()) return false;
  // A weight's view: training plans make it (assemble_plan), inference folds it instead.
  if (g.is_constant(n.inputs[0]) && !is_training_graph(g)) return false;
  for (const auto& o : n.outputs)
    if (std::find(g.outputs.begin(), g.outputs.end(), o) != g.outputs.end()) return false;
  return view_byte_offsets(g, n, kPlanAlignment).has_value();
}

}  // namespace dc
