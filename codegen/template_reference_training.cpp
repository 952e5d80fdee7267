#include "template_reference_training.h"

#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "ir/error.h"
#include "ir/multi_cast.h"
#include "ir/nonfinite_check.h"
#include "ref/im2col.h"
#include "template_util.h"
#include "value_emitter.h"

namespace dc {

namespace {

// The op split_training_ops introduces; it exists only inside naive kernels.
constexpr const char* kBatchNormApply = "dc.BatchNormTrainApply";


std::string for_loop(const std::string& var, int64_t count) {
  return fmt::format("  for (dc_i64 {0} = 0; {0} < {1}; ++{0}) {{\n", var, count);
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<std::string> slice(const std::vector<std::string>& v, size_t begin, size_t end) {
  return {v.begin() + static_cast<long>(begin), v.begin() + static_cast<long>(end)};
}

// Row-major linear index of `o` in `shape`.
std::string linear(const std::vector<std::string>& o, const Shape& shape) {
  std::string s = "(dc_i64)0";
  for (size_t d = 0; d < o.size(); ++d) s = fmt::format("({}) * {} + {}", s, shape[d], o[d]);
  return s;
}

class TrainingEmitter {
 public:
  explicit TrainingEmitter(NaiveNodeContext& c) : c_(c), n_(c.n) {}

  std::string element(size_t out, const std::vector<std::string>& o, std::string& code) {
    const std::string& op = n_.op;
    if (op == "dc.Dropout") return dropout(out, o, code);
    if (op == "dc.BatchNormTrain") return batch_norm_train_stats(out, o, code);
    if (op == "dc.BatchNormStats") return batch_norm_stats(out, o, code);
    if (op == kBatchNormApply) return batch_norm_apply(o, code);
    if (op == "dc.GeluGrad") return gelu_grad(o, code);
    if (op == "dc.GatherGrad") return gather_grad(o, code);
    if (op == "dc.SoftmaxCrossEntropy") return out == 0 ? cross_entropy_loss(code) : log_softmax(o, code);
    if (op == "dc.SoftmaxCrossEntropyGrad") return cross_entropy_grad(o, code);
    if (op == "dc.ConvGradData") return conv_grad_data(o, code);
    if (op == "dc.ConvGradWeight") return conv_grad_weight(o, code);
    if (op == "dc.MaxPoolGrad" || op == "dc.AveragePoolGrad") return pool_grad(o, code);
    if (op == "dc.Attention") return out == 0 ? attention_output(o, code) : row_attention_lse(o, code);
    if (op == "dc.AttentionGrad") return attention_grad(out, o, code);
    throw_internal_error("reference kernel cannot emit training op ", op);
  }

 private:
  const Shape& shape(const std::string& t) const { return c_.g.info(t).shape; }
  std::string in(size_t i) const { return n_.input(i); }
  std::string read(size_t input, const std::vector<std::string>& coords, std::string& code) {
    return c_.read(in(input), coords, code);
  }
  // Prefixed: the value emitter's own locals are v<k>, k<k>, ...
  std::string fresh(const char* p) { return "tr_" + c_.fresh(p); }
  // Input `input`'s only element (a scalar of any rank).
  std::string scalar(size_t input, std::string& code) {
    return read(input, std::vector<std::string>(shape(in(input)).size(), "0"), code);
  }
  double attr(const char* name, float dflt) const { return n_.attrs.get_float(name, dflt); }

  int64_t channel_count(const std::string& x) const {
    const Shape& xs = shape(x);
    return shape_numel(xs) / std::max<int64_t>(1, xs[1]);
  }

  // ---- dc.Dropout(X, step) -> (Y, mask) ----
  std::string dropout(size_t out, const std::vector<std::string>& o, std::string& code) {
    const float ratio = n_.attrs.get_float("ratio", 0.5f);
    const auto seed = static_cast<uint64_t>(n_.attrs.get_int("seed", 0));
    const std::string step = scalar(1, code);
    const std::string mask = fresh("mask");
    code += fmt::format("  const float {} = dc_philox_uniform({}ULL, (unsigned long long)({}), "
                        "(unsigned long long)({})) >= {} ? {} : 0.f;\n",
                        mask, seed, step, linear(o, shape(in(0))), float_literal(ratio),
                        float_literal(1.f / (1.f - ratio)));
    if (out == 1) return mask;
    return fmt::format("{} * {}", read(0, o, code), mask);
  }

  // ---- dc.BatchNormTrain(X, scale, B, running mean, running var, batch mean, batch var) ->
  // (-, mean@next, var@next, saved mean, saved inverse std), per channel o[0], from the batch
  // statistics its inputs carry; Y by kBatchNormApply ----
  std::string batch_norm_train_stats(size_t out, const std::vector<std::string>& o, std::string& code) {
    DC_INTERNAL_CHECK(out >= 1, "dc.BatchNormTrain's Y is emitted by ", kBatchNormApply);
    return channel_stats(static_cast<int>(out) - 1, 3, channel_count(in(0)), o, code);
  }

  // ---- dc.BatchNormStats(running mean, running var, batch mean, batch var) -> (mean@next,
  // var@next, inverse std); attr count ----
  std::string batch_norm_stats(size_t out, const std::vector<std::string>& o, std::string& code) {
    return channel_stats(out == 2 ? 3 : static_cast<int>(out), 0, n_.attrs.get_int("count", 1), o, code);
  }

  // A BatchNorm's per-channel output `kind` (0 running mean's update, 1 running variance's
  // with the unbiased batch variance over `count` values, 2 the batch mean, 3 the inverse
  // std) for channel o[0], from the running statistics at inputs `first` and `first` + 1 and
  // the batch mean and biased variance after them; in double, as the reference.
  std::string channel_stats(int kind, size_t first, int64_t count, const std::vector<std::string>& o,
                            std::string& code) {
    const std::vector<std::string> ch = {o[0]};
    const std::string mu = fresh("mu"), var = fresh("var");
    code += fmt::format("  const double {} = {};\n  const double {} = {};\n", mu, read(first + 2, ch, code), var,
                        read(first + 3, ch, code));
    const double eps = attr("epsilon", 1e-5f), momentum = attr("momentum", 0.9f);
    switch (kind) {
      case 0:
        return fmt::format("(float)({} * {} + {} * {})", read(first, ch, code), double_literal(momentum), mu,
                           double_literal(1 - momentum));
      case 1: {
        const std::string unbiased =
            count > 1 ? fmt::format("({} * {})", var, double_literal(static_cast<double>(count) / (count - 1))) : var;
        return fmt::format("(float)({} * {} + {} * {})", read(first + 1, ch, code), double_literal(momentum),
                           unbiased, double_literal(1 - momentum));
      }
      case 2: return fmt::format("(float){}", mu);
      default: return fmt::format("(float)(1.0 / sqrt({} + {}))", var, double_literal(eps));
    }
  }

  // kBatchNormApply(X, scale, B, saved mean, saved inverse std) -> Y
  std::string batch_norm_apply(const std::vector<std::string>& o, std::string& code) {
    const std::vector<std::string> ch = {o[1]};
    const std::string x = read(0, o, code), sc = read(1, ch, code), b = read(2, ch, code);
    const std::string mu = read(3, ch, code), inv = read(4, ch, code);
    return fmt::format("(float)(((double){} - {}) * {} * {} + {})", x, mu, inv, sc, b);
  }

  // ---- dc.GeluGrad(dY, X) -> dX ----
  std::string gelu_grad(const std::vector<std::string>& o, std::string& code) {
    const bool tanh_form = n_.attrs.get_string("approximate", "none") == "tanh";
    const std::string v = fresh("v"), g = fresh("g");
    code += fmt::format("  const double {} = {};\n  double {};\n", v, read(1, o, code), g);
    if (tanh_form) {
      const std::string t = fresh("t");
      const std::string k = double_literal(std::sqrt(2.0 / std::numbers::pi));
      code += fmt::format("  const double {0} = tanh({1} * ({2} + 0.044715 * {2} * {2} * {2}));\n"
                          "  {3} = 0.5 * (1.0 + {0}) + 0.5 * {2} * (1.0 - {0} * {0}) * {1} * "
                          "(1.0 + 3.0 * 0.044715 * {2} * {2});\n", t, k, v, g);
    } else {
      code += fmt::format("  {0} = 0.5 * (1.0 + erf({1} / {2})) + {1} * exp(-0.5 * {1} * {1}) / {3};\n", g, v,
                          double_literal(std::numbers::sqrt2), double_literal(std::sqrt(2 * std::numbers::pi)));
    }
    return fmt::format("(float)({} * {})", read(0, o, code), g);
  }

  // ---- dc.GatherGrad(dY, indices) -> dData: the dY rows whose index names this row ----
  std::string gather_grad(const std::vector<std::string>& o, std::string& code) {
    const Shape data = n_.attrs.get_ints("data_shape");
    int64_t axis = n_.attrs.get_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(data.size());
    const auto ax = static_cast<size_t>(axis);
    const Shape& is = shape(in(1));
    const std::string acc = fresh("acc"), j = fresh("j"), idx = fresh("idx");
    code += fmt::format("  float {} = 0.f;\n", acc) + for_loop(j, shape_numel(is));
    const auto jc = emit_unravel(is, j, fresh("q"), code);
    code += fmt::format("  dc_i64 {} = (dc_i64){};\n  if ({} < 0) {} += {};\n", idx, read(1, jc, code), idx,
                        idx, data[ax]);
    code += fmt::format("  if ({} == {}) {{\n", idx, o[ax]);
    const auto yc = concat(concat(slice(o, 0, ax), jc), slice(o, ax + 1, o.size()));
    code += fmt::format("  {} += {};\n  }}\n  }}\n", acc, read(0, yc, code));
    return acc;
  }

  // ---- dc.SoftmaxCrossEntropy(logits, labels) -> (loss, log-probabilities) ----
  // Statements computing the log-sum-exp of row `row` (coordinates) of the logits.
  std::string row_lse(const std::vector<std::string>& row, std::string& code) {
    const int64_t classes = shape(in(0)).back();
    const std::string m = fresh("mx"), z = fresh("z"), k1 = fresh("k"), k2 = fresh("k");
    code += fmt::format("  double {} = (double){};\n", m, float_literal(-INFINITY)) + for_loop(k1, classes);
    code += fmt::format("  {0} = fmax({0}, (double){1});\n  }}\n", m, read(0, concat(row, {k1}), code));
    code += fmt::format("  double {} = 0.0;\n", z) + for_loop(k2, classes);
    code += fmt::format("  {} += exp((double){} - {});\n  }}\n", z, read(0, concat(row, {k2}), code), m);
    const std::string lse = fresh("lse");
    code += fmt::format("  const double {} = {} + log({});\n", lse, m, z);
    return lse;
  }

  std::string log_softmax(const std::vector<std::string>& o, std::string& code) {
    const std::string lse = row_lse(slice(o, 0, o.size() - 1), code);
    return fmt::format("(float)((double){} - {})", read(0, o, code), lse);
  }

  // The mean over rows of -log p[label]; a label outside [0, classes) makes it NaN (the CPU
  // reference refuses it; dc-run checks labels before a step).
  std::string cross_entropy_loss(std::string& code) {
    const Shape& xs = shape(in(0));
    const Shape rows(xs.begin(), xs.end() - 1);
    const int64_t classes = xs.back(), nrows = shape_numel(rows);
    const std::string total = fresh("total"), r = fresh("r"), l = fresh("l");
    code += fmt::format("  double {} = 0.0;\n", total) + for_loop(r, nrows);
    const auto rc = emit_unravel(rows, r, fresh("w"), code);
    const std::string lse = row_lse(rc, code);
    code += fmt::format("  const dc_i64 {} = (dc_i64){};\n", l, read(1, rc, code));
    code += fmt::format("  if ({0} < 0 || {0} >= {1}) {{ {2} = (double){3}; }} else {{\n", l, classes, total,
                        float_literal(NAN));
    code += fmt::format("  {} -= (double)(float)((double){} - {});\n  }}\n  }}\n", total,
                        read(0, concat(rc, {l}), code), lse);
    return nrows > 0 ? fmt::format("(float)({} / {}.0)", total, nrows) : "0.f";
  }

  // ---- dc.SoftmaxCrossEntropyGrad(dloss, log-probabilities, labels) -> dlogits ----
  std::string cross_entropy_grad(const std::vector<std::string>& o, std::string& code) {
    const Shape& ls = shape(in(1));
    const int64_t rows = shape_numel(ls) / std::max<int64_t>(1, ls.back());
    const std::string dloss = scalar(0, code);
    const std::string lp = read(1, o, code), label = read(2, slice(o, 0, o.size() - 1), code);
    return fmt::format("({} / {}) * (float)({} == (dc_i64){} ? expm1((double){}) : exp((double){}))", dloss,
                       float_literal(static_cast<float>(std::max<int64_t>(1, rows))), o.back(), label, lp, lp);
  }

  // ---- convolution gradients: the Conv geometry of the grad node ----
  struct ConvGeometry {
    Shape x, w;
    ref::Window win;
    int64_t cg = 0, mg = 0;  // input channels and filters per group
    int rank = 0;
  };
  ConvGeometry conv_geometry(const Shape& x, const Shape& w) const {
    ConvGeometry c{x, w, {}, 0, 0, static_cast<int>(x.size()) - 2};
    c.win = ref::make_window(n_, {"Conv", false}, Shape(x.begin() + 2, x.end()), Shape(w.begin() + 2, w.end()));
    const int64_t group = n_.attrs.get_int("group", 1);
    c.cg = x[1] / group;
    c.mg = w[0] / group;
    return c;
  }
  static int dim(const ref::Window&, int rank, int d) { return ref::Window::kMaxRank - rank + d; }

  // Loops over the kernel taps k<d> of every output position p<d> whose window reads input
  // position `pos[d]` (p * stride - pad + k * dilation == pos), opened into `code`.
  struct Covering {
    std::vector<std::string> out, tap;
  };
  Covering open_covering(const ref::Window& w, int rank, const std::vector<std::string>& pos, std::string& code) {
    Covering c;
    for (int d = 0; d < rank; ++d) {
      const int s = dim(w, rank, d);
      const std::string k = fresh("k"), q = fresh("q"), p = fresh("p");
      code += for_loop(k, w.kernel[s]);
      code += fmt::format("  const dc_i64 {} = {} + {} - {} * {};\n", q, pos[static_cast<size_t>(d)], w.pad_begin[s],
                          k, w.dilation[s]);
      code += fmt::format("  if ({0} < 0 || {0} % {1} != 0) continue;\n  const dc_i64 {2} = {0} / {1};\n"
                          "  if ({2} >= {3}) continue;\n", q, w.stride[s], p, w.out[s]);
      c.out.push_back(p);
      c.tap.push_back(k);
    }
    return c;
  }

  // dc.ConvGradData(dY, W) -> dX at o = (n, c, positions...)
  std::string conv_grad_data(const std::vector<std::string>& o, std::string& code) {
    const ConvGeometry c = conv_geometry(n_.attrs.get_ints("input_shape"), shape(in(1)));
    const std::string acc = fresh("acc"), m = fresh("m");
    code += fmt::format("  float {} = 0.f;\n", acc);
    code += fmt::format("  for (dc_i64 {0} = ({1}) / {2} * {3}; {0} < ({1}) / {2} * {3} + {3}; ++{0}) {{\n", m,
                        o[1], c.cg, c.mg);
    const Covering cov = open_covering(c.win, c.rank, slice(o, 2, o.size()), code);
    const std::string dy = read(0, concat({o[0], m}, cov.out), code);
    const std::string w = read(1, concat({m, fmt::format("({}) % {}", o[1], c.cg)}, cov.tap), code);
    code += fmt::format("  {} += {} * {};\n", acc, dy, w);
    for (int d = 0; d <= c.rank; ++d) code += "  }\n";
    return acc;
  }

  // dc.ConvGradWeight(X, dY) -> dW at o = (m, c in group, taps...)
  std::string conv_grad_weight(const std::vector<std::string>& o, std::string& code) {
    const ConvGeometry c = conv_geometry(shape(in(0)), n_.attrs.get_ints("weight_shape"));
    const Shape& ys = shape(in(1));
    const Shape rest(ys.begin() + 2, ys.end());
    const std::string acc = fresh("acc"), b = fresh("b"), i = fresh("i");
    code += fmt::format("  float {} = 0.f;\n", acc) + for_loop(b, c.x[0]) + for_loop(i, shape_numel(rest));
    const auto p = emit_unravel(rest, i, fresh("u"), code);
    std::vector<std::string> xc = {b, fmt::format("({}) / {} * {} + ({})", o[0], c.mg, c.cg, o[1])};
    std::vector<std::string> inside;
    for (int d = 0; d < c.rank; ++d) {
      const int s = dim(c.win, c.rank, d);
      const std::string q = fresh("q");
      code += fmt::format("  const dc_i64 {} = {};\n", q,
                          tap_position(p[static_cast<size_t>(d)], c.win.stride[s], c.win.pad_begin[s],
                                       o[static_cast<size_t>(2 + d)], c.win.dilation[s]));
      inside.push_back(fmt::format("{0} >= 0 && {0} < {1}", q, c.win.in[s]));
      xc.push_back(q);
    }
    std::string cond;
    for (const auto& s : inside) cond += (cond.empty() ? "" : " && ") + s;
    code += fmt::format("  if ({}) {{\n", cond.empty() ? "true" : cond);
    const std::string dy = read(1, concat({b, o[0]}, p), code);
    code += fmt::format("  {} += {} * {};\n  }}\n  }}\n  }}\n", acc, dy, c_.read(in(0), xc, code));
    return acc;
  }

  // ---- dc.MaxPoolGrad(dY, X) / dc.AveragePoolGrad(dY) -> dX at o = (n, c, positions...) ----
  std::string pool_grad(const std::vector<std::string>& o, std::string& code) {
    const bool is_max = n_.op == "dc.MaxPoolGrad";
    const Shape xs = is_max ? shape(in(1)) : Shape(n_.attrs.get_ints("input_shape"));
    const int rank = static_cast<int>(xs.size()) - 2;
    const ref::Window w = ref::make_window(n_, {n_.op, true}, Shape(xs.begin() + 2, xs.end()),
                                           n_.attrs.get_ints("kernel_shape"));
    const std::string acc = fresh("acc");
    code += fmt::format("  float {} = 0.f;\n", acc);
    const Covering cov = open_covering(w, rank, slice(o, 2, o.size()), code);
    const std::string dy = read(0, concat({o[0], o[1]}, cov.out), code);
    if (is_max) {
      // The window's first maximum, in the reference's tap order; this element's gradient
      // if it is that maximum.
      const std::string best = fresh("best"), bv = fresh("bv"), here = fresh("here");
      code += fmt::format("  dc_i64 {} = -1;\n  float {} = {};\n", best, bv, float_literal(-INFINITY));
      std::vector<std::string> pos;
      std::string mine = "(dc_i64)0", cand = "(dc_i64)0";
      for (int d = 0; d < rank; ++d) {
        const int s = dim(w, rank, d);
        const std::string k = fresh("t"), ip = fresh("ip");
        code += for_loop(k, w.kernel[s]);
        code += fmt::format("  const dc_i64 {} = {} * {} - {} + {} * {};\n  if ({} < 0 || {} >= {}) continue;\n", ip,
                            cov.out[static_cast<size_t>(d)], w.stride[s], w.pad_begin[s], k, w.dilation[s], ip, ip, w.in[s]);
        pos.push_back(ip);
        cand = fmt::format("({}) * {} + {}", cand, w.in[s], ip);
        mine = fmt::format("({}) * {} + {}", mine, w.in[s], o[static_cast<size_t>(2 + d)]);
      }
      const std::string xv = read(1, concat({o[0], o[1]}, pos), code);
      code += fmt::format("  if ({0} < 0 || {1} > {2}) {{ {0} = {3}; {2} = {1}; }}\n", best, xv, bv, cand);
      for (int d = 0; d < rank; ++d) code += "  }\n";
      code += fmt::format("  const bool {} = {} == {};\n", here, best, mine);
      code += fmt::format("  if ({}) {} += {};\n", here, acc, dy);
    } else {
      const bool include_pad = n_.attrs.get_int("count_include_pad", 0) == 1;
      std::string count = "(dc_i64)1";
      for (int d = 0; d < rank; ++d) {
        const int s = dim(w, rank, d);
        const std::string k = fresh("t"), ip = fresh("ip"), padded = fresh("np"), inside = fresh("ni");
        code += fmt::format("  dc_i64 {} = 0, {} = 0;\n", padded, inside) + for_loop(k, w.kernel[s]);
        code += fmt::format("  const dc_i64 {} = {} * {} - {} + {} * {};\n", ip, cov.out[static_cast<size_t>(d)],
                            w.stride[s], w.pad_begin[s], k, w.dilation[s]);
        code += fmt::format("  if ({} < {}) {} = {} + 1;\n  if ({} >= 0 && {} < {}) ++{};\n  }}\n", ip,
                            w.in[s] + w.pad_end[s], padded, k, ip, ip, w.in[s], inside);
        count = fmt::format("{} * {}", count, include_pad ? padded : inside);
      }
      code += fmt::format("  {} += {} / (float)({});\n", acc, dy, count);
    }
    for (int d = 0; d < rank; ++d) code += "  }\n";
    return acc;
  }

  // ---- dc.Attention(Q, Kt, V[, mask]) -> (O, LSE); dc.AttentionGrad(Q, Kt, V, O, dO, LSE[, mask])
  // -> (dQ, dKt, dV), as ref/ops_attention.cpp: scores recomputed per use, sums in double ----
  // A double holding the scaled, masked score of query `i`, key `j` in batch `bc`.
  std::string attention_score(const std::vector<std::string>& bc, const std::string& i, const std::string& j,
                              size_t mask_input, std::string& code) {
    const int64_t d = shape(in(0)).back();
    const std::string s = fresh("s"), k = fresh("k");
    code += fmt::format("  double {} = 0.0;\n", s) + for_loop(k, d);
    code += fmt::format("  {} += (double){} * (double){};\n  }}\n", s, read(0, concat(bc, {i, k}), code),
                        read(1, concat(bc, {k, j}), code));
    code += fmt::format("  {} *= {};\n", s, double_literal(n_.attrs.get_float("scale", 1.f)));
    if (n_.has_input(mask_input)) {  // broadcast: extent-1 dims read at 0, missing leading dims dropped
      const Shape& ms = shape(in(mask_input));
      const std::vector<std::string> sc = concat(bc, {i, j});
      std::vector<std::string> mc;
      for (size_t k2 = 0; k2 < ms.size(); ++k2) mc.push_back(ms[k2] == 1 ? "0" : sc[sc.size() - ms.size() + k2]);
      code += fmt::format("  {} += (double){};\n", s, read(mask_input, mc, code));
    }
    return s;
  }
  // The probability exp(score - lse), 0 in a row masked entirely (lse = -inf).
  std::string attention_probability(const std::string& score, const std::string& lse) {
    return fmt::format("({1} < -1e300 ? 0.0 : exp({0} - {1}))", score, lse);
  }
  std::string row_lse_of_scores(const std::vector<std::string>& bc, const std::string& i, std::string& code) {
    const int64_t sk = shape(in(1)).back();
    const std::string m = fresh("mx"), z = fresh("z"), j1 = fresh("j"), j2 = fresh("j"), lse = fresh("lse");
    code += fmt::format("  double {} = (double){};\n", m, float_literal(-INFINITY)) + for_loop(j1, sk);
    code += fmt::format("  {0} = fmax({0}, {1});\n  }}\n", m, attention_score(bc, i, j1, 3, code));
    code += fmt::format("  double {} = 0.0;\n", z) + for_loop(j2, sk);
    code += fmt::format("  {} += exp({} - {});\n  }}\n", z, attention_score(bc, i, j2, 3, code), m);
    code += fmt::format("  const double {} = {} < -1e300 ? {} : {} + log({});\n", lse, m, m, m, z);
    return lse;
  }
  std::string row_attention_lse(const std::vector<std::string>& o, std::string& code) {
    return fmt::format("(float){}", row_lse_of_scores(slice(o, 0, o.size() - 1), o.back(), code));
  }
  std::string attention_output(const std::vector<std::string>& o, std::string& code) {
    const std::vector<std::string> bc = slice(o, 0, o.size() - 2);
    const std::string& i = o[o.size() - 2];
    const std::string lse = row_lse_of_scores(bc, i, code);
    const std::string acc = fresh("acc"), j = fresh("j");
    code += fmt::format("  double {} = 0.0;\n", acc) + for_loop(j, shape(in(1)).back());
    const std::string p = attention_probability(attention_score(bc, i, j, 3, code), lse);
    code += fmt::format("  {} += {} * (double){};\n  }}\n", acc, p, read(2, concat(bc, {j, o.back()}), code));
    return fmt::format("(float){}", acc);
  }
  // dS of (i, j) = P (dO_i . V_j - D_i), D_i = dO_i . O_i: statements, returns the double.
  std::string attention_ds(const std::vector<std::string>& bc, const std::string& i, const std::string& j,
                           const std::string& lse, std::string& code) {
    const int64_t dv = shape(in(2)).back();
    const std::string drow = fresh("drow"), dp = fresh("dp"), e1 = fresh("e"), e2 = fresh("e"), ds = fresh("ds");
    code += fmt::format("  double {} = 0.0, {} = 0.0;\n", drow, dp) + for_loop(e1, dv);
    code += fmt::format("  {} += (double){} * (double){};\n  }}\n", drow, read(4, concat(bc, {i, e1}), code),
                        read(3, concat(bc, {i, e1}), code));
    code += for_loop(e2, dv);
    code += fmt::format("  {} += (double){} * (double){};\n  }}\n", dp, read(4, concat(bc, {i, e2}), code),
                        read(2, concat(bc, {j, e2}), code));
    const std::string p = attention_probability(attention_score(bc, i, j, 6, code), lse);
    code += fmt::format("  const double {} = {} * ({} - {});\n", ds, p, dp, drow);
    return ds;
  }
  std::string attention_grad(size_t out, const std::vector<std::string>& o, std::string& code) {
    const std::vector<std::string> bc = slice(o, 0, o.size() - 2);
    const std::string &r = o[o.size() - 2], &c = o.back();
    const int64_t sq = shape(in(0))[shape(in(0)).size() - 2], sk = shape(in(1)).back();
    const std::string acc = fresh("acc"), t = fresh("t"), lse = fresh("lse");
    const double scale = n_.attrs.get_float("scale", 1.f);
    code += fmt::format("  double {} = 0.0;\n", acc);
    if (out == 0) {  // dQ at (i = r, k = c): scale sum_j dS_ij Kt[k, j]
      code += fmt::format("  const double {} = (double){};\n", lse, read(5, concat(bc, {r}), code)) + for_loop(t, sk);
      const std::string ds = attention_ds(bc, r, t, lse, code);
      code += fmt::format("  {} += {} * (double){};\n  }}\n", acc, ds, read(1, concat(bc, {c, t}), code));
    } else if (out == 1) {  // dKt at (k = r, j = c): scale sum_i dS_ij Q[i, k]
      code += for_loop(t, sq);
      code += fmt::format("  const double {} = (double){};\n", lse, read(5, concat(bc, {t}), code));
      const std::string ds = attention_ds(bc, t, c, lse, code);
      code += fmt::format("  {} += {} * (double){};\n  }}\n", acc, ds, read(0, concat(bc, {t, r}), code));
    } else {  // dV at (j = r, e = c): sum_i P_ij dO[i, e]
      code += for_loop(t, sq);
      code += fmt::format("  const double {} = (double){};\n", lse, read(5, concat(bc, {t}), code));
      const std::string p = attention_probability(attention_score(bc, t, r, 6, code), lse);
      code += fmt::format("  {} += {} * (double){};\n  }}\n", acc, p, read(4, concat(bc, {t, c}), code));
      return fmt::format("(float){}", acc);
    }
    return fmt::format("(float)({} * {})", acc, double_literal(scale));
  }

  NaiveNodeContext& c_;
  const Node& n_;
};

// A new f32 intermediate "<node>.<what>" of `shape` in `g`, or `name` when it is already set.
std::string intermediate(Graph& g, const Node& n, std::string name, const char* what, const Shape& shape) {
  if (!name.empty()) return name;
  name = fmt::format("{}.{}", n.name.empty() ? n.op : n.name, what);
  g.tensors[name] = TensorInfo{DType::f32, shape};
  return name;
}

}  // namespace

bool naive_training_supports(const Node& n) {
  static const char* const kOps[] = {
      "dc.Dropout",     "dc.BatchNormTrain",  "dc.BatchNormStats", "dc.GeluGrad",       "dc.GatherGrad",
      "dc.SoftmaxCrossEntropy", "dc.SoftmaxCrossEntropyGrad", "dc.SgdUpdate", "dc.AdamWUpdate",
      "dc.ConvGradData", "dc.ConvGradWeight", "dc.MaxPoolGrad",  "dc.AveragePoolGrad", kBatchNormApply,
      "dc.Attention",   "dc.AttentionGrad", kNonFiniteCheck, kMultiCast};
  for (const char* op : kOps)
    if (n.op == op) return true;
  return false;
}

std::string emit_training_element(NaiveNodeContext& c, size_t out, const std::vector<std::string>& o,
                                  std::string& code) {
  return TrainingEmitter(c).element(out, o, code);
}

Graph split_training_ops(Graph g) {
  std::vector<Node> nodes;
  for (Node& n : g.nodes) {
    if (n.op == "dc.BatchNormTrain") {
      const Shape ch = {g.info(n.input(0)).shape.at(1)};
      n.outputs.resize(5);
      const std::string y = n.outputs[0];
      n.outputs[3] = intermediate(g, n, n.outputs[3], "saved_mean", ch);
      n.outputs[4] = intermediate(g, n, n.outputs[4], "saved_invstd", ch);
      n.outputs[0].clear();
      Node apply{n.name + ".apply", kBatchNormApply, {}, {n.input(0), n.input(1), n.input(2), n.outputs[3], n.outputs[4]}, {y}};
      nodes.push_back(std::move(n));
      if (!y.empty()) nodes.push_back(std::move(apply));
    } else {
      nodes.push_back(std::move(n));
    }
  }
  g.nodes = std::move(nodes);
  return g;
}

}  // namespace dc
