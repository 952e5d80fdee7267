// The naive reference kernel of any workload: the on-device correctness oracle. One launch
// per node of the workload graph in its (topological) order, one thread per output element
// in a grid-stride loop, intermediates in scratch buffers. Every op is written the plainest
// way that follows the CPU reference executor (common/ref/) step for step: injective ops
// through a ValueEmitter over a one-node graph, Conv/MatMul/Gemm as direct loops with a
// float accumulator, pooling windows tap by tap, reductions and normalisations per output
// element with double accumulators where the executor uses them.
//
// Storage dtypes follow the executor's rule too: f16/bf16 tensors (inputs, scratch
// intermediates, outputs) are read as float, every op computes in fp32 (double where the
// executor does), and each node's result is rounded once, when stored, to its tensor's
// dtype: so the oracle rounds exactly where the CPU reference does.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "generate.h"
#include "ir/error.h"
#include "ir/join.h"
#include "ir/op_traits.h"
#include "ir/multi_cast.h"
#include "ir/nonfinite_check.h"
#include "ir/optimizer_update.h"
#include "ir/reduced_axes.h"
#include "ref/conv_transpose.h"
#include "ref/im2col.h"
#include "template_multi_cast.h"
#include "template_nonfinite_check.h"
#include "template_optimizer.h"
#include "template_reference_training.h"
#include "template_util.h"
#include "value_emitter.h"

namespace dc {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride beyond this

// The node as a graph of its own: its non-constant inputs are the graph inputs (in0, ...),
// its constants stay initializers, its outputs are the graph outputs (out0, ...).
Graph node_graph(const Graph& g, const Node& n) {
  Graph s;
  s.opset = g.opset;
  s.nodes.push_back(n);
  for (const auto& in : n.inputs) {
    if (in.empty() || s.tensors.count(in)) continue;
    s.tensors[in] = g.info(in);
    if (g.is_constant(in)) s.initializers[in] = g.initializers.at(in);
    else s.inputs.push_back(in);
  }
  for (const auto& out : n.outputs) {
    if (out.empty()) continue;
    s.tensors[out] = g.info(out);
    s.outputs.push_back(out);
  }
  return s;
}

// Emission of one output element of one node; `o` are the output coordinate names.
class NodeEmitter {
 public:
  NodeEmitter(const Graph& sub, const Node& n) : g_(sub), n_(n), em_(sub) {}

  // Each output is emitted in a loop of its own: locals of the last one are out of scope.
  void new_scope() { em_.reset_locals(); }

  // Statements into `code`, returns the C expression of output `out` at `o`.
  std::string element(size_t out, const std::vector<std::string>& o, std::string& code) {
    const std::string& op = n_.op;
    if (ValueEmitter::supports(n_)) return em_.value(n_.outputs[out], o, code);
    if (op.starts_with("dc.")) {
      NaiveNodeContext c{g_, n_,
                         [this](const std::string& t, const std::vector<std::string>& coords,
                                std::string& body) { return read(t, coords, body); },
                         [this](const char* p) { return fresh(p); }};
      return emit_training_element(c, out, o, code);
    }
    const auto row = naive_kernels().find(op);
    DC_INTERNAL_CHECK(row != naive_kernels().end(), "reference kernel cannot emit op ", op);
    require_f32_except(is_listed_reduce(op));
    return row->second(*this, out, o, code);
  }

  // The ops with a naive kernel of their own here (beyond the ValueEmitter's and the
  // training ops'): one row each, the op's emitter. Reduce* (ReduceAxes::listed) share one.
  using Emit = std::string (*)(NodeEmitter&, size_t out, const std::vector<std::string>& o, std::string& code);
  static const std::map<std::string, Emit, std::less<>>& naive_kernels() {
    static const std::map<std::string, Emit, std::less<>> rows = [] {
      std::map<std::string, Emit, std::less<>> m = {
          {"Conv", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.conv(o, c); }},
          {"ConvTranspose", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.conv_transpose(o, c); }},
          {"MatMul", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.matmul(o, c); }},
          {"Gemm", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.gemm(o, c); }},
          {"MaxPool", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.pool(o, c); }},
          {"AveragePool", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.pool(o, c); }},
          {"GlobalAveragePool", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.global_pool(o, c); }},
          {"GlobalMaxPool", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.global_pool(o, c); }},
          {"Softmax", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.softmax(o, c); }},
          {"LogSoftmax", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.softmax(o, c); }},
          {"LayerNormalization", [](NodeEmitter& e, size_t out, const auto& o, std::string& c) { return e.layer_norm(out, o, c); }},
          {"RMSNormalization", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.rms_norm(o, c); }},
          {"BatchNormalization", [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.batch_norm(o, c); }},
      };
      for (const OpTraits& t : all_op_traits())
        if (t.reduce_axes == ReduceAxes::listed)
          m.emplace(std::string(t.op), [](NodeEmitter& e, size_t, const auto& o, std::string& c) { return e.reduce(o, c); });
      return m;
    }();
    return rows;
  }

 private:
  static bool is_listed_reduce(std::string_view op) { return op_traits(op).reduce_axes == ReduceAxes::listed; }

  const Shape& shape(const std::string& t) const { return g_.info(t).shape; }

  void require_f32_except(bool integers_ok) const {
    for (const auto& t : n_.inputs) {
      if (t.empty()) continue;
      const DType d = g_.info(t).dtype;
      if (t != n_.input(0) && n_.op.rfind("Reduce", 0) == 0) continue;  // the axes input
      const bool float_storage = d == DType::f32 || d == DType::f16 || d == DType::bf16;
      DC_INTERNAL_CHECK(float_storage || (integers_ok && (d == DType::i32 || d == DType::i64)),
                        "reference kernel: ", n_.op, " on ", dtype_name(d), " is not emitted");
    }
  }

  // A read of `t` at `coords` inside whatever loop the caller opened (no shared locals).
  std::string read(const std::string& t, const std::vector<std::string>& coords, std::string& code) {
    em_.reset_locals();
    return em_.value(t, coords, code);
  }

  std::string fresh(const char* p) { return fmt::format("{}{}", p, counter_++); }

  // Spatial loops of a sliding window over dims 2.. of `x_shape`: opens one loop per dim
  // with tap k<d> and input position p<d>; `skip_outside` continues at taps outside the
  // input. Returns the number of braces to close.
  struct WindowLoops {
    std::vector<std::string> pos;  // input position per spatial dim
    std::vector<std::string> tap;  // tap index per spatial dim
  };
  WindowLoops open_window(const ref::Window& w, const std::vector<std::string>& o, int rank,
                          bool skip_outside, std::string& code) {
    WindowLoops l;
    for (int d = 0; d < rank; ++d) {
      const int s = ref::Window::kMaxRank - rank + d;
      const std::string k = fresh("k"), p = fresh("p");
      code += fmt::format("  for (dc_i64 {0} = 0; {0} < {1}; ++{0}) {{\n", k, w.kernel[s]);
      code += fmt::format("  const dc_i64 {} = {};\n", p, tap_position(o[static_cast<size_t>(2 + d)], w.stride[s], w.pad_begin[s], k, w.dilation[s]));
      if (skip_outside) code += fmt::format("  if ({0} < 0 || {0} >= {1}) continue;\n", p, w.in[s]);
      l.pos.push_back(p);
      l.tap.push_back(k);
    }
    return l;
  }

  // The innermost statement of a convolution's loops (channel + `rank` taps, opened by the
  // caller): acc += x * w, the loops closed, then the bias of output channel o[1].
  std::string accumulate(const std::string& acc, const std::vector<std::string>& xc,
                         const std::vector<std::string>& wc, int rank,
                         const std::vector<std::string>& o, std::string& code) {
    std::string body;
    const std::string xv = read(n_.input(0), xc, body), wv = read(n_.input(1), wc, body);
    code += body + fmt::format("  {} += {} * {};\n", acc, xv, wv);
    for (int d = 0; d <= rank; ++d) code += "  }\n";
    if (n_.has_input(2)) {
      const std::string b = read(n_.input(2), {o[1]}, code);
      code += fmt::format("  {} += {};\n", acc, b);
    }
    return acc;
  }

  std::string conv(const std::vector<std::string>& o, std::string& code) {
    const std::string &x = n_.input(0), &w = n_.input(1);
    const Shape &xs = shape(x), &ws = shape(w);
    const int rank = static_cast<int>(xs.size()) - 2;
    DC_INTERNAL_CHECK(rank >= 1 && rank <= 3, "Conv of spatial rank ", rank);
    const ref::Window win = ref::make_window(n_, {"Conv", false}, Shape(xs.begin() + 2, xs.end()),
                                             Shape(ws.begin() + 2, ws.end()));
    const int64_t group = n_.attrs.get_int("group", 1);
    const int64_t cg = xs[1] / group, ocg = ws[0] / group;
    const std::string acc = fresh("acc"), ic = fresh("ic");
    code += fmt::format("  float {} = 0.f;\n", acc);
    code += fmt::format("  for (dc_i64 {0} = 0; {0} < {1}; ++{0}) {{\n", ic, cg);
    const WindowLoops l = open_window(win, o, rank, true, code);
    std::vector<std::string> xc = {o[0], fmt::format("({}) / {} * {} + {}", o[1], ocg, cg, ic)};
    std::vector<std::string> wc = {o[1], ic};
    xc.insert(xc.end(), l.pos.begin(), l.pos.end());
    wc.insert(wc.end(), l.tap.begin(), l.tap.end());
    return accumulate(acc, xc, wc, rank, o, code);
  }

  // Output position o takes tap k from input position (o + pad - k * dilation) / stride
  // when that is exact and inside (ref/conv_transpose.h).
  std::string conv_transpose(const std::vector<std::string>& o, std::string& code) {
    const std::string &x = n_.input(0), &w = n_.input(1);
    const Shape &xs = shape(x), &ws = shape(w);
    const int rank = static_cast<int>(xs.size()) - 2;
    const ref::ConvTransposeGeometry geo = ref::conv_transpose_geometry(n_, xs, ws, nullptr);
    const ref::Window& win = geo.window;
    const int64_t cg = geo.channels / geo.group, mg = geo.filters / geo.group;
    const std::string acc = fresh("acc"), ic = fresh("ic");
    code += fmt::format("  float {} = 0.f;\n", acc);
    code += fmt::format("  for (dc_i64 {0} = 0; {0} < {1}; ++{0}) {{\n", ic, cg);
    const std::string c = fmt::format("({}) / {} * {} + {}", o[1], mg, cg, ic);
    std::vector<std::string> xc = {o[0], c}, wc = {c, fmt::format("({}) % {}", o[1], mg)};
    for (int d = 0; d < rank; ++d) {
      const int s = ref::Window::kMaxRank - rank + d;
      const std::string k = fresh("k"), q = fresh("q"), p = fresh("p");
      code += fmt::format("  for (dc_i64 {0} = 0; {0} < {1}; ++{0}) {{\n", k, win.kernel[s]);
      code += fmt::format("  const dc_i64 {} = ({}) + {} - {} * {};\n", q, o[static_cast<size_t>(2 + d)],
                          win.pad_begin[s], k, win.dilation[s]);
      code += fmt::format("  if ({0} < 0 || {0} % {1} != 0) continue;\n", q, win.stride[s]);
      code += fmt::format("  const dc_i64 {} = {} / {};\n  if ({} >= {}) continue;\n", p, q,
                          win.stride[s], p, win.in[s]);
      xc.push_back(p);
      wc.push_back(k);
    }
    return accumulate(acc, xc, wc, rank, o, code);
  }

  std::string matmul(const std::vector<std::string>& o, std::string& code) {
    const std::string &a = n_.input(0), &b = n_.input(1);
    const Shape &as = shape(a), &bs = shape(b);
    const size_t ra = as.size(), rb = bs.size(), r = o.size();
    const size_t nb = std::max(ra >= 2 ? ra - 2 : 0, rb >= 2 ? rb - 2 : 0);  // batch rank
    const std::string k = fresh("kk"), acc = fresh("acc");
    std::vector<std::string> ac, bc;
    if (ra == 1) {
      ac = {k};
    } else {
      ac.assign(o.begin() + static_cast<long>(nb - (ra - 2)), o.begin() + static_cast<long>(nb));
      ac.push_back(o[nb]);
      ac.push_back(k);
    }
    if (rb == 1) {
      bc = {k};
    } else {
      bc.assign(o.begin() + static_cast<long>(nb - (rb - 2)), o.begin() + static_cast<long>(nb));
      bc.push_back(k);
      bc.push_back(o[r - 1]);
    }
    code += fmt::format("  float {0} = 0.f;\n  for (dc_i64 {1} = 0; {1} < {2}; ++{1}) {{\n", acc, k,
                        as.back());
    std::string body;
    const std::string av = read(a, ac, body), bv = read(b, bc, body);
    code += body + fmt::format("  {} += {} * {};\n  }}\n", acc, av, bv);
    return acc;
  }

  std::string gemm(const std::vector<std::string>& o, std::string& code) {
    const bool ta = n_.attrs.get_int("transA", 0) != 0, tb = n_.attrs.get_int("transB", 0) != 0;
    const float alpha = n_.attrs.get_float("alpha", 1.f), beta = n_.attrs.get_float("beta", 1.f);
    const Shape& as = shape(n_.input(0));
    const std::string k = fresh("kk"), acc = fresh("acc");
    code += fmt::format("  float {0} = 0.f;\n  for (dc_i64 {1} = 0; {1} < {2}; ++{1}) {{\n", acc, k,
                        ta ? as[0] : as[1]);
    std::string body;
    const std::string av = read(n_.input(0), ta ? std::vector<std::string>{k, o[0]} : std::vector<std::string>{o[0], k}, body);
    const std::string bv = read(n_.input(1), tb ? std::vector<std::string>{o[1], k} : std::vector<std::string>{k, o[1]}, body);
    code += body + fmt::format("  {} += {} * {};\n  }}\n", acc, av, bv);
    std::string y = fmt::format("{} * {}", float_literal(alpha), acc);
    if (n_.has_input(2) && beta != 0.f)
      y += fmt::format(" + {} * {}", float_literal(beta), read(n_.input(2), o, code));
    return y;
  }

  std::string pool(const std::vector<std::string>& o, std::string& code) {
    const bool is_max = n_.op == "MaxPool";
    DC_INTERNAL_CHECK(n_.outputs.size() < 2 || n_.outputs[1].empty(),
                      "reference kernel: MaxPool's Indices output is not emitted");
    DC_INTERNAL_CHECK(n_.attrs.get_int("storage_order", 0) == 0,
                      "reference kernel: MaxPool storage_order 1 is not emitted");
    const std::string& x = n_.input(0);
    const Shape& xs = shape(x);
    const int rank = static_cast<int>(xs.size()) - 2;
    DC_INTERNAL_CHECK(rank >= 1 && rank <= 3, n_.op, " of spatial rank ", rank);
    const ref::Window win = ref::make_window(n_, {n_.op, true}, Shape(xs.begin() + 2, xs.end()),
                                             n_.attrs.get_ints("kernel_shape"));
    const std::string acc = fresh("acc"), valid = fresh("nvalid"), padded = fresh("npad");
    code += fmt::format("  float {} = {};\n  dc_i64 {} = 0, {} = 0;\n", acc,
                        is_max ? float_literal(-INFINITY) : "0.f", valid, padded);
    const WindowLoops l = open_window(win, o, rank, false, code);
    // Taps beyond the end padding (ceil_mode windows) count nowhere; taps in the padding
    // count for count_include_pad only.
    std::vector<std::string> beyond, inside;
    for (int d = 0; d < rank; ++d) {
      const int s = ref::Window::kMaxRank - rank + d;
      beyond.push_back(fmt::format("{} >= {}", l.pos[static_cast<size_t>(d)], w_in_plus_pad(win, s)));
      inside.push_back(fmt::format("{0} >= 0 && {0} < {1}", l.pos[static_cast<size_t>(d)], win.in[s]));
    }
    code += fmt::format("  if ({}) continue;\n  ++{};\n  if ({}) {{\n", join(beyond, " || "), padded,
                        join(inside, " && "));
    std::vector<std::string> xc = {o[0], o[1]};
    xc.insert(xc.end(), l.pos.begin(), l.pos.end());
    std::string body;
    const std::string v = read(x, xc, body);
    code += body + fmt::format("  ++{};\n", valid);
    if (is_max) code += fmt::format("  if (({1} > {0} || {1} != {1}) && {0} == {0}) {0} = {1};\n", acc, v);
    else code += fmt::format("  {} += {};\n", acc, v);
    for (int d = 0; d <= rank; ++d) code += "  }\n";
    if (is_max) return acc;
    const std::string count = n_.attrs.get_int("count_include_pad", 0) == 1 ? padded : valid;
    return fmt::format("({1} > 0 ? {0} / (float){1} : 0.f)", acc, count);
  }

  static int64_t w_in_plus_pad(const ref::Window& w, int s) { return w.in[s] + w.pad_end[s]; }

  std::string global_pool(const std::vector<std::string>& o, std::string& code) {
    const std::string& x = n_.input(0);
    const Shape& xs = shape(x);
    const int64_t plane = shape_numel(Shape(xs.begin() + 2, xs.end()));
    const std::string i = fresh("i"), acc = fresh("acc");
    const bool is_max = n_.op == "GlobalMaxPool";
    code += is_max ? fmt::format("  float {} = {};\n", acc, float_literal(-INFINITY))
                   : fmt::format("  double {} = 0.0;\n", acc);
    code += fmt::format("  for (dc_i64 {0} = 0; {0} < {1}; ++{0}) {{\n", i, plane);
    std::string body;
    std::vector<std::string> xc = {o[0], o[1]};
    const auto sp = emit_unravel(Shape(xs.begin() + 2, xs.end()), i, fresh("s"), body);
    xc.insert(xc.end(), sp.begin(), sp.end());
    const std::string v = read(x, xc, body);
    code += body;
    if (is_max) code += fmt::format("  if (({1} > {0} || {1} != {1}) && {0} == {0}) {0} = {1};\n  }}\n", acc, v);
    else code += fmt::format("  {} += {};\n  }}\n", acc, v);
    return is_max ? acc : fmt::format("(float)({} / {}.0)", acc, plane);
  }

  // Softmax over `n` values spaced `inner` apart, as the executor's SoftmaxLayout.
  std::string softmax(const std::vector<std::string>& o, std::string& code) {
    const std::string& x = n_.input(0);
    const Shape& xs = shape(x);
    const auto rank = static_cast<int64_t>(xs.size());
    std::vector<std::string> xc = o;
    std::vector<size_t> axes;  // softmax axes, outermost first
    if (rank > 0) {
      const bool legacy = n_.attrs.get_int("dc_legacy_flatten", 0) == 1;
      const auto axis = static_cast<size_t>(normalize_axis(n_.attrs.get_int("axis", legacy ? 1 : -1), rank, "axis"));
      for (size_t d = axis; d < (legacy ? xs.size() : axis + 1); ++d) axes.push_back(d);
    }
    Shape ax_shape;
    for (size_t d : axes) ax_shape.push_back(xs[d]);
    const int64_t count = shape_numel(ax_shape);
    auto loop = [&](const std::string& j, std::string& body) {
      auto c = xc;
      const auto names = emit_unravel(ax_shape, j, fresh("a"), body);
      for (size_t i = 0; i < axes.size(); ++i) c[axes[i]] = names[i];
      return read(x, c, body);
    };
    const std::string m = fresh("mx"), s = fresh("sum"), j1 = fresh("j"), j2 = fresh("j");
    code += fmt::format("  float {0} = {1};\n  for (dc_i64 {2} = 0; {2} < {3}; ++{2}) {{\n", m,
                        float_literal(-INFINITY), j1, count);
    std::string b1;
    const std::string v1 = loop(j1, b1);
    code += b1 + fmt::format("  {0} = {0} < {1} ? {1} : {0};\n  }}\n", m, v1);  // std::max
    code += fmt::format("  double {0} = 0.0;\n  for (dc_i64 {1} = 0; {1} < {2}; ++{1}) {{\n", s, j2, count);
    std::string b2;
    const std::string v2 = loop(j2, b2);
    code += b2 + fmt::format("  {} += (double)expf({} - {});\n  }}\n", s, v2, m);
    const std::string xv = read(x, o, code);
    if (n_.op == "Softmax") return fmt::format("(float)((double)expf({} - {}) / {})", xv, m, s);
    return fmt::format("(float)((double)({} - {}) - log({}))", xv, m, s);
  }

  // Offset of a LayerNorm scale/bias for the element at `o`: leading 1s beyond the
  // normalised rank dropped, the rest broadcast over the normalised dims.
  std::string ln_param(size_t i, size_t axis, const std::vector<std::string>& o, std::string& code) {
    const std::string& p = n_.input(i);
    Shape ps = shape(p);
    const size_t norm_rank = o.size() - axis;
    size_t drop = 0;
    while (ps.size() - drop > norm_rank && ps[drop] == 1) ++drop;
    std::vector<std::string> c(drop, "0");
    c.insert(c.end(), o.end() - static_cast<long>(ps.size() - drop), o.end());
    return read(p, c, code);
  }

  std::string layer_norm(size_t out, const std::vector<std::string>& o, std::string& code) {
    const std::string& x = n_.input(0);
    const Shape& xs = shape(x);
    const auto axis = static_cast<size_t>(normalize_axis(n_.attrs.get_int("axis", -1), static_cast<int64_t>(xs.size()), "axis"));
    const double eps = n_.attrs.get_float("epsilon", 1e-5f);
    const Shape norm(xs.begin() + static_cast<long>(axis), xs.end());
    const int64_t cols = shape_numel(norm);
    // Coordinates of the row from the output element: Y has x's shape, Mean and InvStdDev
    // have 1s over the normalised dims, so their leading coordinates are the row's either way.
    std::vector<std::string> row(o.begin(), o.begin() + static_cast<long>(axis));
    auto loop = [&](const std::string& j, std::string& body) {
      auto c = row;
      const auto names = emit_unravel(norm, j, fresh("a"), body);
      c.insert(c.end(), names.begin(), names.end());
      return read(x, c, body);
    };
    const std::string sum = fresh("sum"), mean = fresh("mean"), sq = fresh("sq"), inv = fresh("inv");
    const std::string j1 = fresh("j"), j2 = fresh("j");
    code += fmt::format("  double {0} = 0.0;\n  for (dc_i64 {1} = 0; {1} < {2}; ++{1}) {{\n", sum, j1, cols);
    std::string b1;
    const std::string v1 = loop(j1, b1);
    code += b1 + fmt::format("  {} += {};\n  }}\n", sum, v1);
    code += fmt::format("  const double {} = {} / {}.0;\n", mean, sum, cols);
    code += fmt::format("  double {0} = 0.0;\n  for (dc_i64 {1} = 0; {1} < {2}; ++{1}) {{\n", sq, j2, cols);
    std::string b2;
    const std::string v2 = loop(j2, b2);
    code += b2 + fmt::format("  {0} += ({1} - {2}) * ({1} - {2});\n  }}\n", sq, v2, mean);
    code += fmt::format("  const double {} = 1.0 / sqrt({} / {}.0 + {});\n", inv, sq, cols,
                        fmt::format("{}", eps));
    if (out == 1) return fmt::format("(float){}", mean);
    if (out == 2) return fmt::format("(float){}", inv);
    const std::string xv = read(x, o, code);
    const std::string sc = ln_param(1, axis, o, code);
    const std::string b = n_.has_input(2) ? ln_param(2, axis, o, code) : "0.0";
    return fmt::format("(float)(({} - {}) * {} * {} + {})", xv, mean, inv, sc, b);
  }

  // Y = X / sqrt(mean of squares over [axis, rank) + eps) * Scale, in double per element.
  std::string rms_norm(const std::vector<std::string>& o, std::string& code) {
    const std::string& x = n_.input(0);
    const Shape& xs = shape(x);
    const auto axis = static_cast<size_t>(normalize_axis(n_.attrs.get_int("axis", -1), static_cast<int64_t>(xs.size()), "axis"));
    const double eps = n_.attrs.get_float("epsilon", 1e-5f);
    const Shape norm(xs.begin() + static_cast<long>(axis), xs.end());
    const int64_t cols = shape_numel(norm);
    std::vector<std::string> c(o.begin(), o.begin() + static_cast<long>(axis));
    const std::string sq = fresh("sq"), inv = fresh("inv"), j = fresh("j");
    code += fmt::format("  double {0} = 0.0;\n  for (dc_i64 {1} = 0; {1} < {2}; ++{1}) {{\n", sq, j, cols);
    std::string body;
    const auto names = emit_unravel(norm, j, fresh("a"), body);
    c.insert(c.end(), names.begin(), names.end());
    const std::string v = read(x, c, body);
    code += body + fmt::format("  {0} += (double){1} * {1};\n  }}\n", sq, v);
    code += fmt::format("  const double {} = 1.0 / sqrt({} / {}.0 + {});\n", inv, sq, cols, fmt::format("{}", eps));
    const std::string xv = read(x, o, code);
    return fmt::format("(float)({} * {} * {})", xv, inv, ln_param(1, axis, o, code));
  }

  std::string batch_norm(const std::vector<std::string>& o, std::string& code) {
    const double eps = n_.attrs.get_float("epsilon", 1e-5f);
    const std::vector<std::string> c = {o[1]};
    const std::string xv = read(n_.input(0), o, code);
    const std::string sc = read(n_.input(1), c, code), b = read(n_.input(2), c, code);
    const std::string mean = read(n_.input(3), c, code), var = read(n_.input(4), c, code);
    const std::string a = fresh("a");
    code += fmt::format("  const double {} = {} / sqrt((double){} + {});\n", a, sc, var, fmt::format("{}", eps));
    return fmt::format("{} * (float){} + (float)({} - {} * {})", xv, a, b, mean, a);
  }

  std::string reduce(const std::vector<std::string>& o, std::string& code) {
    const std::string& x = n_.input(0);
    const Shape& xs = shape(x);
    const DType dt = g_.info(x).dtype;
    const std::string ct = value_type(dt);
    const ReducedAxes ra = reduced_axes(g_, n_);
    DC_INTERNAL_CHECK(!ra.runtime_axes, "reference kernel: ", n_.op, " with axes computed at run time");
    const bool keep = n_.attrs.get_int("keepdims", 1) == 1;
    if (ra.noop) return read(x, o, code);
    std::vector<bool> reduced(xs.size(), false);
    for (int64_t a : ra.axes) reduced[static_cast<size_t>(a)] = true;
    Shape rshape;
    for (size_t d = 0; d < xs.size(); ++d)
      if (reduced[d]) rshape.push_back(xs[d]);
    const int64_t count = shape_numel(rshape);
    const std::string j = fresh("j"), acc = fresh("acc");
    auto loop_read = [&](const std::string& jj, std::string& body) {
      const auto names = emit_unravel(rshape, jj, fresh("a"), body);
      std::vector<std::string> c;
      size_t ri = 0, oi = 0;
      for (size_t d = 0; d < xs.size(); ++d) {
        if (reduced[d]) {
          c.push_back(names[ri++]);
          if (keep) ++oi;
        } else {
          c.push_back(o[oi++]);
        }
      }
      return read(x, c, body);
    };
    const std::string& op = n_.op;
    const bool fl = dt == DType::f32 || dt == DType::f16 || dt == DType::bf16;
    auto open = [&](const std::string& jj) {
      return fmt::format("  for (dc_i64 {0} = 0; {0} < {1}; ++{0}) {{\n", jj, count);
    };
    if (op == "ReduceMax" || op == "ReduceMin") {
      const bool mx = op == "ReduceMax";
      std::string init;
      if (fl) init = float_literal(mx ? -INFINITY : INFINITY);
      else if (dt == DType::i32) init = mx ? "(-2147483647 - 1)" : "2147483647";
      else init = mx ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL";
      code += fmt::format("  {} {} = {};\n", ct, acc, init) + open(j);
      std::string body;
      const std::string v = loop_read(j, body);
      code += body;
      if (fl) code += fmt::format("  if ({0} == {0} && ({1} != {1} || {1} {2} {0})) {0} = {1};\n  }}\n", acc, v, mx ? ">" : "<");
      else code += fmt::format("  if ({1} {2} {0}) {0} = {1};\n  }}\n", acc, v, mx ? ">" : "<");
      return acc;
    }
    if (op == "ReduceLogSumExp") {
      const std::string m = fresh("mx"), j2 = fresh("j");
      code += fmt::format("  float {} = {};\n", m, float_literal(-INFINITY)) + open(j);
      std::string b1;
      const std::string v1 = loop_read(j, b1);
      code += b1 + fmt::format("  {0} = {0} < {1} ? {1} : {0};\n  }}\n", m, v1);
      code += fmt::format("  double {} = 0.0;\n", acc) + open(j2);
      std::string b2;
      const std::string v2 = loop_read(j2, b2);
      code += b2 + fmt::format("  {} += exp((double){} - {});\n  }}\n", acc, v2, m);
      return fmt::format("(isinf({0}) ? {0} : (float)({0} + log({1})))", m, acc);
    }
    const bool prod = op == "ReduceProd";
    DC_INTERNAL_CHECK(fl || op == "ReduceSum" || prod, "reference kernel: ", op, " on ", dtype_name(dt));
    code += fl ? fmt::format("  double {} = {};\n", acc, prod ? "1.0" : "0.0")
               : fmt::format("  {} {} = {};\n", ct, acc, prod ? 1 : 0);
    code += open(j);
    std::string body;
    const std::string v = loop_read(j, body);
    code += body;
    if (prod) code += fmt::format("  {} *= {};\n  }}\n", acc, v);
    else if (op == "ReduceL1") code += fmt::format("  {} += fabs((double){});\n  }}\n", acc, v);
    else if (op == "ReduceL2" || op == "ReduceSumSquare")
      code += fmt::format("  {0} += (double){1} * (double){1};\n  }}\n", acc, v);
    else code += fmt::format("  {} += {};\n  }}\n", acc, v);
    if (!fl) return acc;
    if (op == "ReduceMean") return fmt::format("(float)({} / {}.0)", acc, count);
    if (op == "ReduceL2") return fmt::format("(float)sqrt({})", acc);
    if (op == "ReduceLogSum") return fmt::format("(float)log({})", acc);
    return fmt::format("(float){}", acc);
  }

  const Graph& g_;
  const Node& n_;
  ValueEmitter em_;
  int counter_ = 0;
};

bool reference_supports(const Node& n) {
  return ValueEmitter::supports(n) || NodeEmitter::naive_kernels().count(n.op) || naive_training_supports(n);
}

}  // namespace

// Shared with template_elementwise.cpp ("opaque_generic" is this kernel with the variant's
// block size, and an optimizer update's float4s with vec 4): the naive kernels of every node
// of `w`.
GeneratedKernel generate_naive(const Workload& w, const std::string& template_name,
                               const std::string& variant_key, int threads, int64_t vec) {
  const Graph g = split_training_ops(w.graph);
  DC_INTERNAL_CHECK(vec == 1 || (vec == 4 && std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
                                   return is_optimizer_update(n.op) || n.op == kMultiCast;
                                 })),
                    "naive kernel: vec ", vec, " (only an optimizer update and a dc.MultiCast read float4s)");
  std::vector<std::string> missing;
  for (const auto& n : g.nodes)
    if (!reference_supports(n) && std::find(missing.begin(), missing.end(), n.op) == missing.end())
      missing.push_back(n.op);
  if (!missing.empty())
    throw_internal_error("reference kernel: no naive code for op(s) ", join(missing, ", "),
                         " (workload ", w.signature, ")");

  GeneratedKernel k;
  k.template_name = template_name;
  k.variant_key = variant_key;
  k.buffers = workload_buffers(w);
  std::map<std::string, int> buffer_of;
  for (size_t i = 0; i < k.buffers.size(); ++i) buffer_of[k.buffers[i].name] = static_cast<int>(i);
  // Intermediates: scratch buffers named scratch<i>, in production order.
  std::string scratch_note;
  for (const auto& n : g.nodes)
    for (const auto& out : n.outputs) {
      if (out.empty() || buffer_of.count(out)) continue;
      const std::string name = fmt::format("scratch{}", k.buffers.size() - g.inputs.size() - g.outputs.size());
      const TensorInfo& info = g.info(out);
      scratch_note += fmt::format("//   {} holds {}\n", name, out);
      buffer_of[out] = static_cast<int>(k.buffers.size());
      k.buffers.push_back({name, BufferRole::scratch, info.dtype, info.shape, false});
    }

  std::string src = source_header(w, template_name, variant_key);
  if (!scratch_note.empty()) src += "// scratch buffers:\n" + scratch_note + "\n";
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    const Graph sub = node_graph(g, n);
    const std::string name = naive_kernel_name(template_name, ni, n.op);
    std::vector<std::string> params;
    Launch launch;
    launch.kernel = name;
    for (size_t i = 0; i < sub.inputs.size(); ++i) {
      params.push_back(fmt::format("const {}* DC_RESTRICT in{}", cuda_type(sub.info(sub.inputs[i]).dtype), i));
      launch.args.push_back(buffer_of.at(sub.inputs[i]));
    }
    int64_t most = 1;
    for (size_t i = 0; i < sub.outputs.size(); ++i) {
      params.push_back(fmt::format("{}* DC_RESTRICT out{}", cuda_type(sub.info(sub.outputs[i]).dtype), i));
      launch.args.push_back(buffer_of.at(sub.outputs[i]));
      most = std::max(most, shape_numel(sub.info(sub.outputs[i]).shape));
    }
    src += fmt::format(
        "// node n{}: {} -> {}\nextern \"C\" __global__ void DC_LAUNCH_BOUNDS({}) {}({}) {{\n", ni,
        n.op, join(sub.outputs, ", "), threads, name, join(params, ", "));
    const bool multi_tensor = is_optimizer_update(n.op) || n.op == kNonFiniteCheck || n.op == kMultiCast;
    if (is_optimizer_update(n.op)) {  // one fused loop over the bucket's tensors
      const bool vectorised = vec == 4;  // the reference's is 1: the plain loop
      most = optimizer_update_threads_wanted(sub, n, vectorised);
      src += optimizer_update_body(sub, n, vectorised);
    } else if (n.op == kNonFiniteCheck) {  // one loop over the lanes, each over every tensor
      most = nonfinite_check_threads_wanted(n);
      src += nonfinite_check_body(sub, n);
    } else if (n.op == kMultiCast) {  // one loop per weight, a float4 a thread with vec 4
      most = multi_cast_threads_wanted(sub, n, vec == 4);
      src += multi_cast_body(sub, n, vec == 4);
    }
    NodeEmitter ne(sub, sub.nodes[0]);
    for (size_t oi = 0; oi < sub.outputs.size() && !multi_tensor; ++oi) {
      const TensorInfo& info = sub.info(sub.outputs[oi]);
      size_t out_index = 0;
      while (n.outputs[out_index] != sub.outputs[oi]) ++out_index;
      std::string body;
      const auto o = emit_unravel(info.shape, "i", "o", body);
      ne.new_scope();
      const std::string v = ne.element(out_index, o, body);
      src += fmt::format(
          "  for (dc_i64 i = (dc_i64)blockIdx.x * blockDim.x + threadIdx.x; i < {}; "
          "i += (dc_i64)gridDim.x * blockDim.x) {{\n{}  out{}[i] = {};\n  }}\n",
          shape_numel(info.shape), body, oi, store_value(info.dtype, v));
    }
    src += fmt::format("}}\nDC_EXPORT_KERNEL({})\n\n", name);
    launch.grid = {std::clamp<int64_t>(ceil_div(most, threads), 1, kMaxBlocks), 1, 1};
    launch.block = {threads, 1, 1};
    k.launches.push_back(std::move(launch));
  }
  k.source = std::move(src);
  return k;
}

GeneratedKernel generate_reference(const Workload& w) {
  return generate_naive(w, "reference", "reference", kThreads, 1);
}

}  // namespace dc
