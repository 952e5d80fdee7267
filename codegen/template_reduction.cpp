// "row_reduce": Softmax, LogSoftmax, LayerNormalization, RMSNormalization, Reduce{Sum,Mean,Max,Min,Prod,L1,
// L2,SumSquare,LogSum,LogSumExp}, GlobalAveragePool and GlobalMaxPool, with the cluster's
// elementwise prologue (read through the ValueEmitter wherever the row is read: residual
// Add before LayerNorm, scale + mask before Softmax) and epilogue (the reduction's result
// bound, the cluster outputs computed from it).
//
// A row is what one reduction result depends on: the reduced axes of the reduction's input
// X at fixed kept coordinates. `threads_per_row` threads share a row: 32 reduce with warp
// shuffles only; 64..1024 add a shared-memory stage across the row's warps. A block holds
// `rows_per_block` rows. Each thread walks the row in chunks of `vec` adjacent elements,
// `threads_per_row` chunks apart (coalesced); inputs read at the element's own position are
// loaded as float2/float4 when the rows allow it. Ops that read the row more than once keep
// it between passes according to `cache`: 0 recomputes the prologue from global memory,
// 1 keeps the thread's elements in registers (a constant-indexed array, loops unrolled),
// 2 keeps the row in dynamic shared memory. Statistics are exact two-pass forms: Softmax
// max then sum of exp(x - max); LayerNorm mean, then the mean of squared deviations; RMSNorm
// the mean of squares.
//
// Rows whose reduced axes are not the innermost (Softmax over axis 1 of NCHW, ReduceMean
// over a middle axis) work too: coordinates are unravelled per element and loads are
// scalar (the parameter space gives them vec 1). Storage may be f32, f16 or bf16: the row
// is read as float (f16/bf16 element by element), every statistic is fp32, and the
// reduction's outputs are rounded to their dtype before the epilogue reads them.
//
// Sibling sums: a workload of several ReduceSum/ReduceMean nodes over inputs of one shape
// and the same reduced axes (BatchNorm's backward: sum dY and sum dY x_hat; LayerNorm's: the
// means of dY scale and dY scale x_hat) is one kernel: one pass over the row with one
// accumulator per reduction, each from its own prologue value (the ValueEmitter loads a
// tensor that several prologues read once per element), each reduced and written to its
// own outputs.
#include <cmath>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "generate.h"
#include "ir/error.h"
#include "ir/op_traits.h"
#include "ir/reduced_axes.h"
#include "template_util.h"
#include "value_emitter.h"
#include "variant_params.h"

namespace dc {

namespace {

const char* kLane[] = {"x", "y", "z", "w"};

enum class Kind { sum, max, min, prod, log_sum_exp, softmax, log_softmax, layer_norm, rms_norm, identity };

struct ReductionInfo {
  const Node* node = nullptr;
  Kind kind = Kind::sum;
  std::vector<bool> reduced;  // per axis of X
  Shape kept_shape, reduced_shape;
  int64_t rows = 1, row_len = 1;
  bool contiguous = true;
};

ReductionInfo analyze(const Graph& g, const Node& n) {
  ReductionInfo r;
  r.node = &n;
  const Shape& xs = g.info(n.input(0)).shape;
  const std::string& op = n.op;
  const ReducedAxes ra = reduced_axes(g, n);
  DC_INTERNAL_CHECK(!ra.runtime_axes, "row_reduce: ", op, " with axes computed at run time");
  const std::vector<int64_t>& axes = ra.axes;
  if (op == "Softmax" || op == "LogSoftmax") {
    r.kind = op == "Softmax" ? Kind::softmax : Kind::log_softmax;
  } else if (op == "LayerNormalization" || op == "RMSNormalization") {
    r.kind = op == "LayerNormalization" ? Kind::layer_norm : Kind::rms_norm;
    DC_INTERNAL_CHECK(n.attrs.get_int("stash_type", 1) == 1, "row_reduce: ", op, " stash_type");
  } else if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    r.kind = op == "GlobalMaxPool" ? Kind::max : Kind::sum;
  } else if (ra.noop) {
    r.kind = Kind::identity;
  } else if (op == "ReduceMax") {
    r.kind = Kind::max;
  } else if (op == "ReduceMin") {
    r.kind = Kind::min;
  } else if (op == "ReduceProd") {
    r.kind = Kind::prod;
  } else if (op == "ReduceLogSumExp") {
    r.kind = Kind::log_sum_exp;
  } else {
    r.kind = Kind::sum;  // Sum, Mean, L1, L2, SumSquare, LogSum: a sum of f(x), finalised
  }
  r.reduced.assign(xs.size(), false);
  for (int64_t a : axes) r.reduced[static_cast<size_t>(a)] = true;
  bool seen = false;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (r.reduced[d]) {
      r.reduced_shape.push_back(xs[d]);
      seen = true;
    } else {
      r.kept_shape.push_back(xs[d]);
      if (seen && xs[d] != 1) r.contiguous = false;
    }
  }
  r.rows = shape_numel(r.kept_shape);
  r.row_len = shape_numel(r.reduced_shape);
  return r;
}


// Which output of the reduction node `tensor` is computed from (through the epilogue), or
// -1 if none.
int source_output(const Graph& g, const Node& red, const std::string& tensor) {
  for (size_t i = 0; i < red.outputs.size(); ++i)
    if (red.outputs[i] == tensor) return static_cast<int>(i);
  auto p = g.producer(tensor);
  if (!p) return -1;
  int found = -1;
  for (const auto& in : g.nodes[*p].inputs) {
    if (in.empty()) continue;
    const int s = source_output(g, red, in);
    if (s < 0) continue;
    DC_INTERNAL_CHECK(found < 0 || found == s, "row_reduce: output ", tensor,
                      " combines several outputs of ", red.op);
    found = s;
  }
  return found;
}

struct RowOutput {
  std::string tensor;
  int output = 0;    // of the reduction it is computed from
  size_t red = 0;    // that reduction, an index into the emitter's reductions
};

class RowReduceEmitter {
 public:
  // `reds`: the workload's reductions, r's node first (several only for sibling sums).
  RowReduceEmitter(const Workload& w, const Variant& v, const ReductionInfo& r, std::vector<const Node*> reds)
      : w_(w), g_(w.graph), r_(r), n_(*r.node), reds_(std::move(reds)), em_(g_) {
    const ReductionParams p = ReductionParams::of(v);
    tpr_ = p.threads_per_row;
    rpb_ = p.rows_per_block;
    vec_ = p.vec;
    cache_ = p.cache;
    DC_INTERNAL_CHECK(tpr_ >= 32 && tpr_ <= 1024 && tpr_ % 32 == 0, "row_reduce: threads_per_row ", tpr_);
    DC_INTERNAL_CHECK(rpb_ >= 1 && tpr_ * rpb_ <= 1024, "row_reduce: rows_per_block ", rpb_);
    DC_INTERNAL_CHECK(vec_ == 1 || vec_ == 2 || vec_ == 4, "row_reduce: vec ", vec_);
    // The space only offers vec > 1 for contiguous rows that divide by it; stay correct
    // whatever it offers.
    if (!r_.contiguous || r_.row_len % vec_ != 0) vec_ = 1;
    nch_ = r_.row_len / vec_;
    nit_ = ceil_div(nch_, tpr_);
    const Shape& xs = g_.info(x()).shape;
    lane_step_ = vec_ > 1 && !xs.empty() && r_.reduced.back() && xs.back() % vec_ == 0;
    if (passes() < 2) cache_ = 0;
    if (cache_ == 1 && nit_ * vec_ > 64) cache_ = 0;  // more than a register budget: re-read
  }

  GeneratedKernel emit(const Variant& v) {
    classify_outputs();
    std::string b;
    const int64_t wpr = tpr_ / 32;
    if (tpr_ > 32)
      b += fmt::format("  __shared__ float dcr_red0[{0}];\n  __shared__ float dcr_red1[{0}];\n", rpb_ * wpr);
    if (cache_ == 2) b += "  DC_DYNAMIC_SMEM(float, dcr_rows);\n";
    b += fmt::format("  const int lane = threadIdx.x % {0};\n  const int rloc = threadIdx.x / {0};\n", tpr_);
    b += fmt::format("  const dc_i64 row = (dc_i64)blockIdx.x * {} + rloc;\n  const bool active = row < {};\n",
                     rpb_, r_.rows);
    if (cache_ == 2) b += fmt::format("  float* const dcr_row = dcr_rows + rloc * {};\n", r_.row_len);
    kept_ = emit_unravel(r_.kept_shape, "row", "r", b);
    if (cache_ == 1) b += fmt::format("  float dcr_x[{}];\n", nit_ * vec_);
    if (reds_.size() > 1) {
      emit_sibling_sums(b);
    } else {
      switch (r_.kind) {
        case Kind::sum: case Kind::max: case Kind::min: case Kind::prod: case Kind::identity:
          emit_single_pass(b);
          break;
        case Kind::log_sum_exp:
          emit_log_sum_exp(b);
          break;
        case Kind::softmax: case Kind::log_softmax:
          emit_softmax(b);
          break;
        case Kind::layer_norm:
          emit_layer_norm(b);
          break;
        case Kind::rms_norm:
          emit_rms_norm(b);
          break;
      }
    }
    std::string source =
        source_header(w_, v.template_name, v.key()) +
        "#ifdef DC_HOST_EMULATION\n#define DCR_UNROLL\n#else\n#define DCR_UNROLL _Pragma(\"unroll\")\n#endif\n\n" +
        kernel_definition(w_, "row_reduce", tpr_ * rpb_, b);
    return one_launch_kernel(w_, v, std::move(source), "row_reduce", {grid_blocks(r_.rows, rpb_), 1, 1},
                             tpr_ * rpb_, cache_ == 2 ? rpb_ * r_.row_len * 4 : 0);
  }

 private:
  const std::string& x() const { return n_.input(0); }

  int passes() const {
    switch (r_.kind) {
      case Kind::softmax: case Kind::log_softmax: return 3;
      case Kind::layer_norm: return 3;
      case Kind::rms_norm: return 2;
      case Kind::log_sum_exp: return 2;
      default: return 1;
    }
  }

  void classify_outputs() {
    for (const auto& o : g_.outputs) {
      int s = -1;
      size_t red = 0;
      for (size_t i = 0; i < reds_.size() && s < 0; ++i) {
        s = source_output(g_, *reds_[i], o);
        red = i;
      }
      if (s < 0 && g_.info(o).shape == g_.info(x()).shape) {
        // Computed before the reduction (the residual sum entering a norm, also read
        // elsewhere): written during the first pass over the row.
        prologue_outputs_.push_back(o);
        continue;
      }
      DC_INTERNAL_CHECK(s >= 0, "row_reduce: output ", o, " does not depend on the ", n_.op,
                        " (workload ", w_.signature, ")");
      const int64_t numel = shape_numel(g_.info(o).shape);
      const bool row_space = !(s == 0 && (r_.kind == Kind::softmax || r_.kind == Kind::log_softmax ||
                                          r_.kind == Kind::layer_norm || r_.kind == Kind::rms_norm));
      if (row_space) {
        DC_INTERNAL_CHECK(numel == r_.rows, "row_reduce: output ", o, " has ", numel,
                          " elements, expected one per row (", r_.rows, ")");
        row_outputs_.push_back({o, s, red});
      } else {
        DC_INTERNAL_CHECK(g_.info(o).shape == g_.info(x()).shape, "row_reduce: output ", o,
                          " does not have the shape of the reduced input");
        elem_outputs_.push_back(o);
      }
    }
  }

  // Opens the loop over the thread's chunks of the row: defines `j` (first element of the
  // chunk) and the coordinates of each lane. Returns the lane coordinates.
  std::vector<std::vector<std::string>> open_chunks(std::string& b, bool unroll) {
    b += "  if (active) {\n";
    if (unroll) b += "  DCR_UNROLL\n";
    b += fmt::format("  for (int it = 0; it < {}; ++it) {{\n  const int ch = lane + it * {};\n", nit_, tpr_);
    if (nch_ % tpr_ != 0) b += fmt::format("  if (ch < {}) {{\n", nch_);
    else b += "  {\n";
    b += fmt::format("  const dc_i64 j = (dc_i64)ch * {};\n", vec_);
    std::vector<std::vector<std::string>> lanes;
    for (int64_t k = 0; k < vec_; ++k) {
      if (k == 0 || !lane_step_) {
        const std::string jj = k == 0 ? "j" : fmt::format("(j + {})", k);
        const auto red = emit_unravel(r_.reduced_shape, jj, fmt::format("e{}_", k), b);
        lanes.push_back(merge(red));
      } else {
        auto c = lanes[0];
        c.back() = fmt::format("({} + {})", c.back(), k);
        lanes.push_back(c);
      }
    }
    em_.reset_locals();
    return lanes;
  }
  static void close_chunks(std::string& b) { b += "  }\n  }\n  }\n"; }

  // X coordinates from the row's kept coordinates and a chunk's reduced ones.
  std::vector<std::string> merge(const std::vector<std::string>& red) const {
    std::vector<std::string> c;
    size_t ki = 0, ri = 0;
    for (bool r : r_.reduced) c.push_back(r ? red[ri++] : kept_[ki++]);
    return c;
  }

  // Vector loads of `inputs` at the chunk, bound lane by lane by `bind_lane`.
  std::map<std::string, std::string> vector_loads(const std::set<std::string>& inputs,
                                                  const std::vector<std::string>& c0, std::string& b) {
    std::map<std::string, std::string> loaded;
    if (vec_ == 1 || !lane_step_) return loaded;
    for (const auto& in : inputs) {
      const std::string v = fmt::format("vin{}", counter_++);
      b += fmt::format("  const {0} {1} = *reinterpret_cast<const {0}*>({2} + {3});\n",
                       float_vector_type(vec_), v, em_.param_name(in), em_.offset(in, c0));
      loaded[in] = v;
    }
    return loaded;
  }
  void bind_lane(const std::map<std::string, std::string>& loaded, int64_t k) {
    for (const auto& [in, v] : loaded) em_.bind(in, fmt::format("{}.{}", v, kLane[k]));
  }
  void unbind(const std::map<std::string, std::string>& loaded) {
    for (const auto& [in, v] : loaded) em_.unbind(in);
  }

  std::set<std::string> prologue_vector_inputs() const {
    const Shape& xs = g_.info(x()).shape;
    if (vec_ == 1 || !lane_step_) return {};
    std::vector<std::string> roots;
    for (const Node* r : reds_) roots.push_back(r->input(0));
    return vector_loadable_inputs(g_, roots, xs.back());
  }

  // Element-space outputs computed before the reduction, written in the first pass.
  void store_prologue_outputs(const std::vector<std::vector<std::string>>& lanes, std::string& b) {
    for (const auto& o : prologue_outputs_)
      for (int64_t k = 0; k < vec_; ++k) {
        const auto& c = lanes[static_cast<size_t>(k)];
        b += fmt::format("  {}[{}] = {};\n", em_.param_name(o), em_.offset(o, c),
                         store_value(g_.info(o).dtype, em_.value(o, c, b)));
      }
  }

  // The row's values for each lane of the current chunk: from the cache after the first
  // pass, else through the prologue (and, in the first pass, into the cache).
  std::vector<std::string> row_values(const std::vector<std::vector<std::string>>& lanes,
                                      bool first_pass, std::string& b) {
    std::vector<std::string> vals;
    if (!first_pass && cache_ == 1) {
      for (int64_t k = 0; k < vec_; ++k) vals.push_back(fmt::format("dcr_x[it * {} + {}]", vec_, k));
      return vals;
    }
    if (!first_pass && cache_ == 2) {
      for (int64_t k = 0; k < vec_; ++k) vals.push_back(fmt::format("dcr_row[j + {}]", k));
      return vals;
    }
    const auto loaded = vector_loads(prologue_vector_inputs(), lanes[0], b);
    for (int64_t k = 0; k < vec_; ++k) {
      bind_lane(loaded, k);
      vals.push_back(em_.value(x(), lanes[static_cast<size_t>(k)], b));
    }
    unbind(loaded);
    if (first_pass) store_prologue_outputs(lanes, b);
    if (first_pass && cache_ == 1)
      for (int64_t k = 0; k < vec_; ++k)
        b += fmt::format("  dcr_x[it * {} + {}] = {};\n", vec_, k, vals[static_cast<size_t>(k)]);
    if (first_pass && cache_ == 2)
      for (int64_t k = 0; k < vec_; ++k)
        b += fmt::format("  dcr_row[j + {}] = {};\n", k, vals[static_cast<size_t>(k)]);
    return vals;
  }

  // All threads of the row end with the row's combination of `var` (butterfly shuffles,
  // then the row's warps through shared memory array `slot`).
  void reduce(const std::string& var, const std::string& combine_fmt, int slot, std::string& b) {
    auto combine = [&](const std::string& a, const std::string& c) {
      return fmt::format(fmt::runtime(combine_fmt), a, c);
    };
    b += fmt::format("  for (int o = 16; o > 0; o >>= 1) {{ const float other = __shfl_xor_sync(0xffffffffu, {}, o); {} = {}; }}\n",
                     var, var, combine(var, "other"));
    if (tpr_ == 32) return;
    const int64_t wpr = tpr_ / 32;
    b += fmt::format("  if ((lane & 31) == 0) dcr_red{}[rloc * {} + (lane >> 5)] = {};\n  __syncthreads();\n", slot, wpr, var);
    b += fmt::format("  {} = dcr_red{}[rloc * {}];\n", var, slot, wpr);
    b += fmt::format("  for (int wi = 1; wi < {}; ++wi) {} = {};\n", wpr, var,
                     combine(var, fmt::format("dcr_red{}[rloc * {} + wi]", slot, wpr)));
  }

  // The element-space outputs at the current chunk, with the reduction output bound to
  // each lane's value (`lane_value(k, vals)`).
  void store_elements(const std::vector<std::vector<std::string>>& lanes,
                      const std::function<std::string(int64_t, const std::string&, std::string&)>& lane_value,
                      const std::vector<std::string>& vals, const std::set<std::string>& extra_vector_inputs,
                      std::string& b) {
    const auto loaded = vector_loads(extra_vector_inputs, lanes[0], b);
    std::vector<std::vector<std::string>> outs(elem_outputs_.size());
    for (int64_t k = 0; k < vec_; ++k) {
      bind_lane(loaded, k);
      const std::string y = rounded(n_.outputs[0], lane_value(k, vals[static_cast<size_t>(k)], b), b);
      em_.bind(n_.outputs[0], y);
      for (size_t o = 0; o < elem_outputs_.size(); ++o)
        outs[o].push_back(em_.value(elem_outputs_[o], lanes[static_cast<size_t>(k)], b));
      em_.unbind(n_.outputs[0]);
    }
    unbind(loaded);
    for (size_t o = 0; o < elem_outputs_.size(); ++o) {
      const std::string p = em_.param_name(elem_outputs_[o]);
      const std::string off = em_.offset(elem_outputs_[o], lanes[0]);
      const DType ot = g_.info(elem_outputs_[o]).dtype;
      if (vec_ > 1 && lane_step_ && ot == DType::f32) {
        std::string items;
        for (int64_t k = 0; k < vec_; ++k) items += (k ? ", " : "") + outs[o][static_cast<size_t>(k)];
        b += fmt::format("  *reinterpret_cast<{0}*>({1} + {2}) = make_{0}({3});\n",
                         float_vector_type(vec_), p, off, items);
      } else {
        for (int64_t k = 0; k < vec_; ++k)
          b += fmt::format("  {}[{}] = {};\n", p, em_.offset(elem_outputs_[o], lanes[static_cast<size_t>(k)]),
                           store_value(ot, outs[o][static_cast<size_t>(k)]));
      }
    }
  }

  // `v` as the reduction's output `tensor` holds it: rounded once to an f16/bf16 dtype.
  std::string rounded(const std::string& tensor, const std::string& v, std::string& b) {
    const DType t = g_.info(tensor).dtype;
    if (t != DType::f16 && t != DType::bf16) return v;
    const std::string r = fmt::format("rv{}", counter_++);
    b += fmt::format("  const float {} = {};\n", r, round_to_storage(t, v));
    return r;
  }

  // Row-space outputs of reduction `red`, written by the row's first thread: `values[i]` is
  // the value of the reduction's output i.
  void store_rows(const std::map<int, std::string>& values, std::string& b, size_t red = 0) {
    if (std::none_of(row_outputs_.begin(), row_outputs_.end(), [&](const RowOutput& o) { return o.red == red; }))
      return;
    b += "  if (active && lane == 0) {\n";
    em_.reset_locals();
    for (const auto& [o, s, from] : row_outputs_) {
      if (from != red) continue;
      const Node& rn = *reds_[red];
      const std::string& src = rn.outputs[static_cast<size_t>(s)];
      DC_INTERNAL_CHECK(values.count(s), "row_reduce: output ", s, " of ", rn.op, " is not computed");
      em_.bind(src, rounded(src, values.at(s), b));
      const auto c = emit_unravel(g_.info(o).shape, "row", fmt::format("q{}_", counter_++), b);
      const std::string v = em_.value(o, c, b);
      b += fmt::format("  {}[row] = {};\n", em_.param_name(o), store_value(g_.info(o).dtype, v));
      em_.unbind(src);
    }
    b += "  }\n";
  }

  void emit_single_pass(std::string& b) {
    const std::string& op = n_.op;
    std::string init = "0.f", combine = "{} + {}", per = "{}";
    switch (r_.kind) {
      case Kind::max: init = float_literal(-INFINITY); combine = "dc_max({}, {})"; break;
      case Kind::min: init = float_literal(INFINITY); combine = "dc_min({}, {})"; break;
      case Kind::prod: init = "1.f"; combine = "{} * {}"; break;
      case Kind::identity: break;
      default:
        if (op == "ReduceL1") per = "fabsf({})";
        if (op == "ReduceL2" || op == "ReduceSumSquare") per = "{0} * {0}";
    }
    b += fmt::format("  float acc = {};\n", init);
    const auto lanes = open_chunks(b, false);
    const auto vals = row_values(lanes, true, b);
    for (const auto& v : vals)
      b += fmt::format("  acc = {};\n", fmt::format(fmt::runtime(combine), "acc",
                                                    fmt::format(fmt::runtime(per), v)));
    close_chunks(b);
    reduce("acc", combine, 0, b);
    std::string result = "acc";
    if (op == "ReduceMean" || op == "GlobalAveragePool")
      result = fmt::format("acc / {}", float_literal(static_cast<double>(r_.row_len)));
    else if (op == "ReduceL2") result = "sqrtf(acc)";
    else if (op == "ReduceLogSum") result = "logf(acc)";
    b += fmt::format("  const float result = {};\n", result);
    store_rows({{0, "result"}}, b);
  }

  // Sibling sums: one pass, accumulator i from reduction i's input; each reduced (the
  // shared-memory stages alternate between the two scratch arrays: a stage's writes come
  // after every read of the stage two before it) and stored.
  void emit_sibling_sums(std::string& b) {
    const size_t n = reds_.size();
    for (size_t i = 0; i < n; ++i) b += fmt::format("  float acc{} = 0.f;\n", i);
    const auto lanes = open_chunks(b, false);
    const auto loaded = vector_loads(prologue_vector_inputs(), lanes[0], b);
    for (int64_t k = 0; k < vec_; ++k) {
      bind_lane(loaded, k);
      for (size_t i = 0; i < n; ++i)
        b += fmt::format("  acc{} += {};\n", i, em_.value(reds_[i]->input(0), lanes[static_cast<size_t>(k)], b));
    }
    unbind(loaded);
    store_prologue_outputs(lanes, b);
    close_chunks(b);
    const std::string len = float_literal(static_cast<double>(r_.row_len));
    for (size_t i = 0; i < n; ++i) {
      const std::string acc = fmt::format("acc{}", i);
      reduce(acc, "{} + {}", static_cast<int>(i % 2), b);
      const std::string result = reds_[i]->op == "ReduceMean" ? fmt::format("{} / {}", acc, len) : acc;
      store_rows({{0, result}}, b, i);
    }
  }

  // The row's max `mx`, then `sum` of exp(x - mx): the two passes that LogSumExp and
  // Softmax share.
  void emit_max_and_exp_sum(std::string& b) {
    b += fmt::format("  float mx = {};\n", float_literal(-INFINITY));
    auto lanes = open_chunks(b, cache_ == 1);
    for (const auto& v : row_values(lanes, true, b)) b += fmt::format("  mx = dc_max(mx, {});\n", v);
    close_chunks(b);
    reduce("mx", "dc_max({}, {})", 0, b);
    b += "  float sum = 0.f;\n";
    lanes = open_chunks(b, cache_ == 1);
    for (const auto& v : row_values(lanes, false, b)) b += fmt::format("  sum += expf({} - mx);\n", v);
    close_chunks(b);
    reduce("sum", "{} + {}", 1, b);
  }

  void emit_log_sum_exp(std::string& b) {
    emit_max_and_exp_sum(b);
    b += "  const float result = mx - mx != 0.f ? mx : mx + logf(sum);\n";  // +-inf max: as is
    store_rows({{0, "result"}}, b);
  }

  void emit_softmax(std::string& b) {
    emit_max_and_exp_sum(b);
    const bool log = r_.kind == Kind::log_softmax;
    if (log) b += "  const float log_sum = logf(sum);\n";
    const auto lanes = open_chunks(b, cache_ == 1);
    const auto vals = row_values(lanes, false, b);
    store_elements(lanes, [&](int64_t, const std::string& v, std::string& code) {
      const std::string y = fmt::format("y{}", counter_++);
      code += log ? fmt::format("  const float {} = {} - mx - log_sum;\n", y, v)
                  : fmt::format("  const float {} = expf({} - mx) / sum;\n", y, v);
      return y;
    }, vals, {}, b);
    close_chunks(b);
  }

  void emit_layer_norm(std::string& b) {
    const double eps = n_.attrs.get_float("epsilon", 1e-5f);
    b += "  float sum = 0.f;\n";
    auto lanes = open_chunks(b, cache_ == 1);
    for (const auto& v : row_values(lanes, true, b)) b += fmt::format("  sum += {};\n", v);
    close_chunks(b);
    reduce("sum", "{} + {}", 0, b);
    const std::string len = float_literal(static_cast<double>(r_.row_len));
    b += fmt::format("  const float mean = sum / {};\n  float sq = 0.f;\n", len);
    lanes = open_chunks(b, cache_ == 1);
    for (const auto& v : row_values(lanes, false, b))
      b += fmt::format("  {{ const float d = {} - mean; sq += d * d; }}\n", v);
    close_chunks(b);
    reduce("sq", "{} + {}", 1, b);
    b += fmt::format("  const float rstd = 1.f / sqrtf(sq / {} + {});\n", len, float_literal(eps));
    lanes = open_chunks(b, cache_ == 1);
    const auto vals = row_values(lanes, false, b);
    // Scale and bias broadcast over the normalised dims (leading 1s beyond them dropped).
    const std::set<std::string> params = vector_params(2);
    store_elements(lanes, [&](int64_t k, const std::string& v, std::string& code) {
      const auto& c = lanes[static_cast<size_t>(k)];
      const std::string sc = param(1, c, code);
      const std::string y = fmt::format("y{}", counter_++);
      std::string expr = fmt::format("({} - mean) * rstd * {}", v, sc);
      if (n_.has_input(2)) expr += " + " + param(2, c, code);
      code += fmt::format("  const float {} = {};\n", y, expr);
      return y;
    }, vals, params, b);
    close_chunks(b);
    store_rows({{1, "mean"}, {2, "rstd"}}, b);
  }

  // RMSNorm: the mean of squares, then x * rstd * scale (one statistic, two passes).
  void emit_rms_norm(std::string& b) {
    const double eps = n_.attrs.get_float("epsilon", 1e-5f);
    b += "  float sq = 0.f;\n";
    auto lanes = open_chunks(b, cache_ == 1);
    for (const auto& v : row_values(lanes, true, b)) b += fmt::format("  sq += {0} * {0};\n", v);
    close_chunks(b);
    reduce("sq", "{} + {}", 0, b);
    const std::string len = float_literal(static_cast<double>(r_.row_len));
    b += fmt::format("  const float rstd = 1.f / sqrtf(sq / {} + {});\n", len, float_literal(eps));
    lanes = open_chunks(b, cache_ == 1);
    const auto vals = row_values(lanes, false, b);
    store_elements(lanes, [&](int64_t k, const std::string& v, std::string& code) {
      const std::string y = fmt::format("y{}", counter_++);
      code += fmt::format("  const float {} = {} * rstd * {};\n", y, v, param(1, lanes[static_cast<size_t>(k)], code));
      return y;
    }, vals, vector_params(1), b);
    close_chunks(b);
  }

  // Scale/bias inputs (1 .. last) loaded as vectors: non-constant f32 of the row's last extent.
  std::set<std::string> vector_params(size_t last) const {
    std::set<std::string> params;
    const Shape& xs = g_.info(x()).shape;
    if (vec_ > 1 && lane_step_)
      for (size_t i = 1; i <= last; ++i)
        if (n_.has_input(i) && !g_.is_constant(n_.input(i)) && g_.info(n_.input(i)).dtype == DType::f32 &&
            !g_.info(n_.input(i)).shape.empty() && g_.info(n_.input(i)).shape.back() == xs.back())
          params.insert(n_.input(i));
    return params;
  }

  // LayerNorm scale (1) or bias (2) at element coordinates `c`.
  std::string param(size_t i, const std::vector<std::string>& c, std::string& code) {
    const std::string& p = n_.input(i);
    const Shape& ps = g_.info(p).shape;
    const size_t norm_rank = r_.reduced_shape.size();
    size_t drop = 0;
    while (ps.size() - drop > norm_rank && ps[drop] == 1) ++drop;
    std::vector<std::string> pc(drop, "0");
    pc.insert(pc.end(), c.end() - static_cast<long>(ps.size() - drop), c.end());
    return em_.value(p, pc, code);
  }

  const Workload& w_;
  const Graph& g_;
  const ReductionInfo& r_;
  const Node& n_;
  std::vector<const Node*> reds_;
  ValueEmitter em_;
  int64_t tpr_ = 32, rpb_ = 1, vec_ = 1, cache_ = 0, nch_ = 0, nit_ = 0;
  bool lane_step_ = false;  // lane k's coordinates: lane 0's with the last one + k
  std::vector<std::string> kept_;
  std::vector<std::string> elem_outputs_;
  std::vector<std::string> prologue_outputs_;  // element-space outputs computed before the reduction
  std::vector<RowOutput> row_outputs_;
  int counter_ = 0;
};


std::vector<const Node*> workload_reductions(const Workload& w) {
  std::vector<const Node*> reds;
  for (const auto& n : w.graph.nodes) {
    if (op_traits(n.op).row_template) reds.push_back(&n);
    else DC_INTERNAL_CHECK(ValueEmitter::supports(n), "row_reduce: op ", n.op, " is neither a supported reduction",
                           " nor injective (workload ", w.signature, ")");
  }
  return reds;
}

// Several reductions: sibling sums over one input shape and the same reduced axes, or an
// internal error (the candidate generator offers no other combination).
void check_siblings(const Workload& w, const std::vector<const Node*>& reds) {
  const Graph& g = w.graph;
  for (const Node* r : reds) {
    DC_INTERNAL_CHECK(are_sibling_sums(g, *reds[0], *r), "row_reduce: ", r->op, " beside ", reds[0]->op,
                      " (only ReduceSum/ReduceMean over the same rows), workload ", w.signature);
  }
}

}  // namespace

GeneratedKernel generate_reduction(const Workload& w, const Variant& v) {
  check_variant(v, "row_reduce");
  const Graph& g = w.graph;
  const std::vector<const Node*> reds = workload_reductions(w);
  DC_INTERNAL_CHECK(!reds.empty(), "row_reduce: no supported reduction in workload ", w.signature);
  if (reds.size() > 1) check_siblings(w, reds);
  const Node* red = reds[0];
  const DType xt = g.info(red->input(0)).dtype;
  DC_INTERNAL_CHECK(xt == DType::f32 || xt == DType::f16 || xt == DType::bf16, "row_reduce: ",
                    red->op, " on ", dtype_name(xt), " (f32, f16 and bf16 are emitted)");
  const ReductionInfo info = analyze(g, *red);
  RowReduceEmitter e(w, v, info, reds);
  return e.emit(v);
}

}  // namespace dc
