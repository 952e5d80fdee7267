// The ValueEmitter op table's index maps (value_emitter_ops.cpp): each computes the input
// coordinates of the output element at o.oc and reads the input there; ArgMax/ArgMin and
// CumSum loop over their axis. Formulas as in the CPU reference (common/ref/ops_index.cpp).
#include <algorithm>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/join.h"
#include "value_emitter_op.h"

namespace dc::op_rows {

using Op = ValueEmitter::Op;

namespace {

size_t axis_of(int64_t axis, size_t rank, const char* op) {
  return static_cast<size_t>(normalize_axis(axis, static_cast<int64_t>(rank), op));
}

// Slice's starts and steps per input dim, with ONNX's clamping; they must be constants.
void slice_window(const Op& o, const Shape& is, std::vector<int64_t>& start, std::vector<int64_t>& step) {
  const Node& n = o.n;
  auto ints = [&](size_t i, const char* attr) -> std::vector<int64_t> {
    if (n.has_input(i)) {
      DC_INTERNAL_CHECK(o.g().is_constant(n.input(i)), "Slice input ", i,
                        " is not a constant: cannot emit it as an index map");
      return o.g().initializers.at(n.input(i)).to_int64_vector();
    }
    return n.attrs.get_ints(attr, {});
  };
  const auto starts = ints(1, "starts");
  auto axes = ints(3, "axes");
  const auto steps = ints(4, "steps");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t ax = axes[i] < 0 ? axes[i] + static_cast<int64_t>(is.size()) : axes[i];
    const int64_t dim = is[static_cast<size_t>(ax)];
    const int64_t st = steps.empty() ? 1 : steps[i];
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    s = st > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    start[static_cast<size_t>(ax)] = s;
    step[static_cast<size_t>(ax)] = st;
  }
}

// An index read from `raw`, negative values counting from the end of a dim of `extent`.
std::string wrapped_index(Op& o, const std::string& raw, int64_t extent) {
  const std::string idx = o.fresh("gi");
  o.code += fmt::format("  const dc_i64 {0} = (dc_i64)({1}) < 0 ? (dc_i64)({1}) + {2} : (dc_i64)({1});\n", idx, raw,
                        extent);
  return idx;
}

}  // namespace

std::string transpose(Op& o) {
  const size_t r = o.info(o.n.outputs[o.out_index]).shape.size();
  std::vector<int64_t> perm = o.n.attrs.get_ints("perm", {});
  if (perm.empty())
    for (size_t d = 0; d < r; ++d) perm.push_back(static_cast<int64_t>(r - 1 - d));
  std::vector<std::string> ic(r);
  for (size_t d = 0; d < r; ++d) ic[static_cast<size_t>(perm[d])] = o.oc[d];
  return o.in(0, ic);
}

// Reshape, Flatten, Squeeze, Unsqueeze: through the row-major linear index.
std::string reshape(Op& o) {
  const Shape& os = o.info(o.n.outputs[o.out_index]).shape;
  const Shape& is = o.info(o.n.input(0)).shape;
  const auto ostr = shape_strides(os);
  std::vector<std::string> terms;
  for (size_t d = 0; d < os.size(); ++d)
    if (os[d] != 1) terms.push_back(fmt::format("(dc_i64)({}) * {}", o.oc[d], ostr[d]));
  const std::string lin = o.fresh("lin");
  o.code += fmt::format("  const dc_i64 {} = {};\n", lin, terms.empty() ? "0" : join(terms, " + "));
  const auto istr = shape_strides(is);
  std::vector<std::string> ic;
  for (size_t d = 0; d < is.size(); ++d)
    ic.push_back(is[d] == 1 ? "0" : fmt::format("({} / {}) % {}", lin, istr[d], is[d]));
  return o.in(0, ic);
}

std::string expand(Op& o) { return o.in(0, o.oc); }  // numpy broadcasting of the input

std::string tile(Op& o) {
  const Shape& os = o.info(o.n.outputs[o.out_index]).shape;
  const Shape& is = o.info(o.n.input(0)).shape;
  std::vector<std::string> ic;
  for (size_t d = 0; d < is.size(); ++d)
    ic.push_back(is[d] == 1 ? "0" : is[d] == os[d] ? o.oc[d] : fmt::format("({}) % {}", o.oc[d], is[d]));
  return o.in(0, ic);
}

std::string slice_or_split(Op& o) {
  const Node& n = o.n;
  const Shape& is = o.info(n.input(0)).shape;
  std::vector<int64_t> start(is.size(), 0), step(is.size(), 1);
  if (n.op == "Slice") {
    slice_window(o, is, start, step);
  } else {
    const size_t axis = axis_of(n.attrs.get_int("axis", 0), is.size(), "Split");
    int64_t before = 0;
    for (size_t k = 0; k < o.out_index; ++k) before += o.info(n.outputs[k]).shape[axis];
    start[axis] = before;
  }
  std::vector<std::string> ic;
  for (size_t d = 0; d < is.size(); ++d) {
    if (is[d] == 1) ic.push_back("0");
    else if (start[d] == 0 && step[d] == 1) ic.push_back(o.oc[d]);
    else ic.push_back(fmt::format("({} + ({}) * {})", start[d], o.oc[d], step[d]));
  }
  return o.in(0, ic);
}

// One branch per input along the axis; locals made inside a branch are not visible after
// it, nor in the next branch.
std::string concat(Op& o) {
  const Node& n = o.n;
  const Shape& os = o.info(n.outputs[o.out_index]).shape;
  const size_t axis = axis_of(n.attrs.get_int("axis"), os.size(), "Concat");
  const std::string v = o.fresh("cat");
  o.code += fmt::format("  {} {};\n", o.ctype, v);
  int64_t begin = 0;
  bool first = true;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const int64_t extent = o.info(n.input(i)).shape[axis];
    if (extent == 0) continue;  // an empty input contributes nothing
    std::vector<std::string> ic = o.oc;
    ic[axis] = fmt::format("(({}) - {})", o.oc[axis], begin);
    std::string branch;
    const std::string x = o.loop_value(n.input(i), ic, branch);
    const bool last = begin + extent >= os[axis];
    o.code += fmt::format("  {}{} {{\n{}  {} = {};\n  }}", first ? "" : " else ",
                          last ? "" : fmt::format("if (({}) < {})", o.oc[axis], begin + extent), branch, v, x);
    first = false;
    begin += extent;
    if (last) break;
  }
  o.code += "\n";
  return v;
}

std::string gather(Op& o) {
  const Shape& ds = o.info(o.n.input(0)).shape;
  const Shape& xs = o.info(o.n.input(1)).shape;
  const size_t axis = axis_of(o.n.attrs.get_int("axis", 0), ds.size(), "Gather");
  const std::vector<std::string>& oc = o.oc;
  std::vector<std::string> idx_coords(oc.begin() + static_cast<long>(axis), oc.begin() + static_cast<long>(axis + xs.size()));
  const std::string raw = o.in(1, idx_coords);
  const std::string idx = wrapped_index(o, raw, ds[axis]);
  std::vector<std::string> ic(oc.begin(), oc.begin() + static_cast<long>(axis));
  ic.push_back(idx);
  ic.insert(ic.end(), oc.begin() + static_cast<long>(axis + xs.size()), oc.end());
  return o.in(0, ic);
}

// A loop over the axis at this output element: the first (or last) extreme's index.
std::string arg_extreme(Op& o) {
  const Node& n = o.n;
  const Shape& xs = o.info(n.input(0)).shape;
  const size_t axis = axis_of(n.attrs.get_int("axis", 0), xs.size(), n.op.c_str());
  const bool keep = n.attrs.get_int("keepdims", 1) == 1, last = n.attrs.get_int("select_last_index", 0) == 1;
  const std::string k = o.fresh("ak"), best = o.fresh("best"), arg = o.fresh("arg");
  std::vector<std::string> ic;
  for (size_t d = 0, i = 0; d < xs.size(); ++d) {
    if (d == axis) {
      ic.push_back(k);
      if (keep) ++i;
    } else {
      ic.push_back(o.oc[i++]);
    }
  }
  std::string body;
  const std::string v = o.loop_value(n.input(0), ic, body);
  const char* cmp = n.op == "ArgMax" ? (last ? ">=" : ">") : (last ? "<=" : "<");
  o.code += fmt::format("  {0} {1} = 0;\n  dc_i64 {2} = 0;\n  for (dc_i64 {3} = 0; {3} < {4}; ++{3}) {{\n{5}"
                        "  if ({3} == 0 || {6} {7} {1}) {{ {1} = {6}; {2} = {3}; }}\n  }}\n",
                        value_type(o.info(n.input(0)).dtype), best, arg, k, xs[axis], body,
                        v, cmp);
  return arg;
}

// A loop over the axis at this output element, summing in increasing order as the
// reference does.
std::string cum_sum(Op& o) {
  const Node& n = o.n;
  const Shape& os = o.info(n.outputs[o.out_index]).shape;
  DC_USER_CHECK(o.g().is_constant(n.input(1)), "CumSum node '", n.name,
                "': the axis must be a constant to generate code");
  const size_t axis = axis_of(o.g().initializers.at(n.input(1)).to_int64_vector().at(0), os.size(), "CumSum");
  const bool ex = n.attrs.get_int("exclusive", 0) != 0, rev = n.attrs.get_int("reverse", 0) != 0;
  const std::string k = o.fresh("ck"), acc = o.fresh("cum");
  std::vector<std::string> ic = o.oc;
  ic[axis] = k;
  std::string body;
  const std::string v = o.loop_value(n.input(0), ic, body);
  const std::string cond = fmt::format("{} {} (dc_i64)({})", k, rev ? (ex ? ">" : ">=") : (ex ? "<" : "<="), o.oc[axis]);
  o.code += fmt::format("  {0} {1} = 0;\n  for (dc_i64 {2} = 0; {2} < {3}; ++{2}) {{\n  if ({4}) {{\n{5}  {1} = {1} + {6};\n  }}\n  }}\n",
                        o.ctype, acc, k, os[axis], cond, body, v);
  return acc;
}

std::string gather_elements(Op& o) {
  const Shape& ds = o.info(o.n.input(0)).shape;
  const size_t axis = axis_of(o.n.attrs.get_int("axis", 0), ds.size(), "GatherElements");
  const std::string raw = o.in(1, o.oc);
  const std::string idx = wrapped_index(o, raw, ds[axis]);
  std::vector<std::string> ic = o.oc;
  ic[axis] = idx;
  return o.in(0, ic);
}

// Input coordinates of output (n, c, h, w) (the reference's formulas, ops_index.cpp).
std::string depth_space(Op& o) {
  const std::vector<std::string>& oc = o.oc;
  const int64_t b = o.n.attrs.get_int("blocksize");
  const int64_t ic = o.info(o.n.input(0)).shape[1];
  std::string c, h, w;
  if (o.n.op == "DepthToSpace") {
    const std::string i = fmt::format("(({}) % {})", oc[2], b), j = fmt::format("(({}) % {})", oc[3], b);
    c = o.n.attrs.get_string("mode", "DCR") == "CRD" ? fmt::format("(({}) * {} + {}) * {} + {}", oc[1], b, i, b, j)
                                                     : fmt::format("({} * {} + {}) * {} + ({})", i, b, j, ic / (b * b), oc[1]);
    h = fmt::format("({}) / {}", oc[2], b);
    w = fmt::format("({}) / {}", oc[3], b);
  } else {
    c = fmt::format("({}) % {}", oc[1], ic);
    h = fmt::format("({}) * {} + ({}) / {} / {}", oc[2], b, oc[1], ic, b);
    w = fmt::format("({}) * {} + ({}) / {} % {}", oc[3], b, oc[1], ic, b);
  }
  return o.in(0, {oc[0], c, h, w});
}

std::string trilu(Op& o) {
  const size_t r = o.oc.size();
  std::string k = "0LL";
  if (o.n.has_input(1)) {
    const std::vector<std::string> k0(o.info(o.n.input(1)).shape.size(), "0");  // [] or [1]
    k = fmt::format("(dc_i64)({})", o.in(1, k0));
  }
  const std::string diag = fmt::format("(dc_i64)({}) - (dc_i64)({})", o.oc[r - 1], o.oc[r - 2]);
  const bool upper = o.n.attrs.get_int("upper", 1) == 1;
  const std::string x = o.in(0, o.oc);
  return o.define(fmt::format("({} {} {}) ? {} : ({})0", diag, upper ? ">=" : "<=", k, x, o.ctype));
}

}  // namespace dc::op_rows
