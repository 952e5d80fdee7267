// GatherND, ScatterND, ScatterElements, OneHot and TopK as ValueEmitter index maps: each
// output element computes its own value, so no kernel writes an element another thread
// writes, and no atomics are needed. The formulas are the CPU reference's
// (common/ref/ops_scatter.cpp, ops_search.cpp):
// - GatherND reads data at its index tuple. An index outside [-d, d) (refused by the
//   reference) is clamped into [0, d) on the device, so no read leaves the buffer.
// - Scatters in gather form: the output element starts from data and loops over the updates
//   that could land on it (ScatterND: every index tuple; ScatterElements: the indices along
//   the axis), in the reference's row-major order, applying those whose index matches. So
//   duplicates are deterministic (reduction none: the last wins; add/mul/max/min in order).
//   An out-of-range index matches no element: its update is dropped.
// - OneHot compares the (truncated, wrapped) index with the output's coordinate on the axis.
// - TopK: output j on the axis is the element whose rank (the count of elements before it
//   in the reference's order: larger first, NaN largest, ties by lower index) is j; the
//   values output reads the input at the indices output's index. O(n^2) per output element.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/error.h"
#include "value_emitter.h"

namespace dc {

namespace {

// a (index ia) comes before b (index ib) in TopK's order, as a C expression.
std::string topk_before(const std::string& a, const std::string& ia, const std::string& b,
                        const std::string& ib, bool largest, bool floating) {
  auto gt = [&](const std::string& x, const std::string& y) {
    return floating ? fmt::format("({0} > {1} || ({0} != {0} && {1} == {1}))", x, y)
                    : fmt::format("({} > {})", x, y);
  };
  const std::string ab = largest ? gt(a, b) : gt(b, a), ba = largest ? gt(b, a) : gt(a, b);
  return fmt::format("({} || (!{} && {} < {}))", ab, ba, ia, ib);
}

std::string wrapped(const std::string& raw, int64_t dim) {
  return fmt::format("((dc_i64)({0}) < 0 ? (dc_i64)({0}) + {1} : (dc_i64)({0}))", raw, dim);
}

}  // namespace

bool ValueEmitter::is_index_search_op(const std::string& op) {
  return op == "GatherND" || op == "ScatterND" || op == "ScatterElements" || op == "Scatter" ||
         op == "OneHot" || op == "TopK";
}

std::string ValueEmitter::loop_value(const std::string& tensor, const std::vector<std::string>& coords,
                                     std::string& body) {
  const auto outer = memo_;  // locals made inside a loop body stay in it
  const std::string v = value(tensor, coords, body);
  memo_ = outer;
  return v;
}

std::string ValueEmitter::emit_index_search(const Node& n, size_t out_index,
                                            const std::vector<std::string>& oc, std::string& code) {
  const Shape& os = g_.info(n.outputs[out_index]).shape;
  if (n.op == "GatherND") {
    const Shape &ds = g_.info(n.input(0)).shape, &is = g_.info(n.input(1)).shape;
    const auto b = static_cast<size_t>(n.attrs.get_int("batch_dims", 0));
    const size_t q = is.size() - 1, m = static_cast<size_t>(is.back());
    std::vector<std::string> ic(oc.begin(), oc.begin() + static_cast<long>(b));
    std::vector<std::string> tc(oc.begin(), oc.begin() + static_cast<long>(q));
    for (size_t j = 0; j < m; ++j) {
      tc.push_back(std::to_string(j));
      const std::string raw = value(n.input(1), tc, code), idx = fresh("gn");
      tc.pop_back();
      const int64_t d = ds[b + j];
      code += fmt::format("  dc_i64 {0} = {1};\n  {0} = {0} < 0 ? 0 : ({0} >= {2} ? {2} - 1 : {0});\n",
                          idx, wrapped(raw, d), d);
      ic.push_back(idx);
    }
    ic.insert(ic.end(), oc.begin() + static_cast<long>(q), oc.end());
    return value(n.input(0), ic, code);
  }
  if (n.op == "ScatterND" || n.op == "ScatterElements" || n.op == "Scatter") {
    const Shape &ds = g_.info(n.input(0)).shape, &is = g_.info(n.input(1)).shape;
    const DType dt = g_.info(n.input(0)).dtype;
    const std::string r = n.attrs.get_string("reduction", "none");
    const std::string acc = fresh("sc"), t = fresh("st");
    const std::string x = value(n.input(0), oc, code);
    code += fmt::format("  {} {} = {};\n", value_type(dt), acc, x);
    auto combine = [&](const std::string& u) {
      if (r == "add") return fmt::format("{0} = {0} + {1};", acc, u);
      if (r == "mul") return fmt::format("{0} = {0} * {1};", acc, u);
      if (r == "max") return fmt::format("{0} = {1} > {0} ? {1} : {0};", acc, u);
      if (r == "min") return fmt::format("{0} = {1} < {0} ? {1} : {0};", acc, u);
      return fmt::format("{} = {};", acc, u);
    };
    std::string body, match, upd;
    std::vector<std::string> uc;  // coordinates of the update (and, for Scatter*, of the index)
    std::string guard = "1", count;
    if (n.op == "ScatterND") {
      const size_t q = is.size() - 1, m = static_cast<size_t>(is.back());
      const auto strides = shape_strides(Shape(is.begin(), is.end() - 1));
      std::vector<std::string> tc;
      for (size_t k = 0; k < q; ++k) tc.push_back(fmt::format("({} / {}) % {}", t, strides[k], is[k]));
      std::vector<std::string> conds;
      for (size_t j = 0; j < m; ++j) {
        tc.push_back(std::to_string(j));
        const std::string raw = loop_value(n.input(1), tc, body);
        tc.pop_back();
        conds.push_back(fmt::format("{} == (dc_i64)({})", wrapped(raw, ds[j]), oc[j]));
      }
      match = fmt::format("{}", fmt::join(conds, " && "));
      uc = tc;
      uc.insert(uc.end(), oc.begin() + static_cast<long>(m), oc.end());
      count = std::to_string(shape_numel(is) / static_cast<int64_t>(m));
    } else {
      const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", 0), static_cast<int64_t>(ds.size()), "ScatterElements"));
      uc = oc;
      uc[axis] = t;
      std::vector<std::string> inside;
      for (size_t k = 0; k < ds.size(); ++k)
        if (k != axis && is[k] < ds[k]) inside.push_back(fmt::format("(dc_i64)({}) < {}", oc[k], is[k]));
      if (!inside.empty()) guard = fmt::format("{}", fmt::join(inside, " && "));
      const std::string raw = loop_value(n.input(1), uc, body);
      match = fmt::format("{} == (dc_i64)({})", wrapped(raw, ds[axis]), oc[axis]);
      count = std::to_string(is[axis]);
    }
    const std::string u = loop_value(n.input(2), uc, upd);
    code += fmt::format("  if ({0}) {{\n  for (dc_i64 {1} = 0; {1} < {2}; ++{1}) {{\n{3}  if ({4}) {{\n{5}  {6}\n  }}\n  }}\n  }}\n",
                        guard, t, count, body, match, upd, combine(u));
    return acc;
  }
  if (n.op == "OneHot") {
    const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(os.size()), "OneHot"));
    std::vector<std::string> ic = oc;
    ic.erase(ic.begin() + static_cast<long>(axis));
    const std::string raw = value(n.input(0), ic, code);
    const std::string off = value(n.input(2), {"0"}, code), on = value(n.input(2), {"1"}, code);
    const std::string v = fresh("oh");
    code += fmt::format("  const {} {} = {} == (dc_i64)({}) ? {} : {};\n", value_type(g_.info(n.input(2)).dtype), v,
                        wrapped(fmt::format("(dc_i64)({})", raw), os[axis]), oc[axis], on, off);
    return v;
  }
  if (n.op == "TopK") {
    const Shape& xs = g_.info(n.input(0)).shape;
    const auto axis = static_cast<size_t>(normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(xs.size()), "TopK"));
    if (out_index == 0) {  // the value at the selected index
      std::vector<std::string> ic = oc;
      ic[axis] = value(n.outputs[1], oc, code);
      return value(n.input(0), ic, code);
    }
    const bool largest = n.attrs.get_int("largest", 1) == 1;
    const DType xt = g_.info(n.input(0)).dtype;
    const std::string sel = fresh("sel"), i = fresh("ti"), m = fresh("tm"), rank = fresh("rank");
    std::vector<std::string> ci = oc, cm = oc;
    ci[axis] = i;
    cm[axis] = m;
    std::string body_i, body_m;
    const std::string xi = loop_value(n.input(0), ci, body_i);
    const std::string xm = loop_value(n.input(0), cm, body_m);
    const std::string before = topk_before(xm, m, xi, i, largest, is_float(xt));
    code += fmt::format(
        "  dc_i64 {0} = 0;\n  for (dc_i64 {1} = 0; {1} < {2}; ++{1}) {{\n{3}  dc_i64 {4} = 0;\n"
        "  for (dc_i64 {5} = 0; {5} < {2}; ++{5}) {{\n{6}  if {7} ++{4};\n  }}\n"
        "  if ({4} == (dc_i64)({8})) {0} = {1};\n  }}\n",
        sel, i, xs[axis], body_i, rank, m, body_m, before, oc[axis]);
    return sel;
  }
  throw_internal_error("ValueEmitter cannot emit op ", n.op);
}

}  // namespace dc
