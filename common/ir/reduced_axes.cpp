#include "ir/reduced_axes.h"

#include <algorithm>

#include "ir/error.h"
#include "ir/op_traits.h"
#include "ir/shape.h"

namespace dc {

namespace {

// Reduce*: the attribute, else the constant second input; empty when neither.
std::vector<int64_t> listed_axes(const Graph& g, const Node& n, ReducedAxes& r) {
  if (n.attrs.has("axes")) return n.attrs.get_ints("axes");
  if (!n.has_input(1)) return {};
  if (!g.is_constant(n.input(1))) {
    r.runtime_axes = true;
    return {};
  }
  return g.initializers.at(n.input(1)).to_int64_vector();
}

}  // namespace

ReducedAxes reduced_axes(const Graph& g, const Node& n) {
  const int64_t rank = static_cast<int64_t>(g.info(n.input(0)).shape.size());
  const OpTraits& t = op_traits(n.op);
  ReducedAxes r;
  auto from_axis_to_end = [&](int64_t axis) {
    for (int64_t i = axis; i < rank; ++i) r.axes.push_back(i);
  };
  auto attr_axis = [&](int64_t dflt) { return normalize_axis(n.attrs.get_int("axis", dflt), rank, "axis"); };
  switch (t.reduce_axes) {
    case ReduceAxes::softmax: {
      if (rank == 0) break;
      const bool legacy = n.attrs.get_int("dc_legacy_flatten", 0) != 0;
      const int64_t axis = attr_axis(legacy ? 1 : -1);
      if (legacy) from_axis_to_end(axis);
      else r.axes.push_back(axis);
      break;
    }
    case ReduceAxes::trailing: from_axis_to_end(attr_axis(-1)); break;
    case ReduceAxes::spatial: from_axis_to_end(2); break;
    case ReduceAxes::one: r.axes.push_back(attr_axis(-1)); break;
    case ReduceAxes::listed: {
      std::vector<int64_t> axes = listed_axes(g, n, r);
      if (axes.empty() && !r.runtime_axes && n.attrs.get_int("noop_with_empty_axes", 0) == 1) {
        r.noop = true;
        return r;
      }
      if (axes.empty()) from_axis_to_end(0);
      for (int64_t a : axes) r.axes.push_back(normalize_axis(a, rank, "axes"));
      break;
    }
    case ReduceAxes::none: throw_internal_error("reduced_axes: ", n.op, " is no reduction");
  }
  std::sort(r.axes.begin(), r.axes.end());
  r.axes.erase(std::unique(r.axes.begin(), r.axes.end()), r.axes.end());
  return r;
}

bool are_sibling_sums(const Graph& g, const Node& a, const Node& b) {
  const auto is_sum = [](const std::string& op) { return op == "ReduceSum" || op == "ReduceMean"; };
  if (!is_sum(a.op) || !is_sum(b.op)) return false;
  const ReducedAxes ra = reduced_axes(g, a), rb = reduced_axes(g, b);
  return !ra.noop && !rb.noop && !ra.runtime_axes && !rb.runtime_axes && ra.axes == rb.axes &&
         g.info(a.input(0)).shape == g.info(b.input(0)).shape &&
         a.attrs.get_int("keepdims", 1) == b.attrs.get_int("keepdims", 1);
}

}  // namespace dc
