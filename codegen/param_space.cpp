// Workload analysis, the dispatch of enumerate_variants by family, the resource formulas
// and fits_gpu. The spaces themselves are in param_space_{gemm,reduction,elementwise}.cpp.
#include "param_space.h"
#include "param_space_point.h"
#include "param_space_mma.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <set>

#include "ir/error.h"
#include "ir/op_traits.h"
#include "ir/multi_cast.h"
#include "ir/nonfinite_check.h"
#include "ir/optimizer_update.h"
#include "ir/reduced_axes.h"
#include "ref/conv_transpose.h"
#include "training_attention.h"

namespace dc {

namespace {

const Shape& shape_of(const Graph& g, const std::string& t) { return g.info(t).shape; }

int64_t numel_of(const Graph& g, const std::string& t) { return shape_numel(shape_of(g, t)); }

int elem_size_of(const Graph& g, const std::string& t) {
  const size_t n = dtype_size(g.info(t).dtype);
  return n == 0 ? 4 : static_cast<int>(n);
}

// Largest of 4, 2, 1 dividing every extent.
int align_of(std::initializer_list<int64_t> extents) {
  for (int v : {4, 2}) {
    bool ok = true;
    for (int64_t e : extents) ok = ok && e % v == 0;
    if (ok) return v;
  }
  return 1;
}

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

const Node* first_of(const Graph& g, std::initializer_list<const char*> ops) {
  for (const auto& n : g.nodes)
    for (const char* op : ops)
      if (n.op == op) return &n;
  return nullptr;
}

// The first node of the op-traits pattern.
const Node* first_with(const Graph& g, OpPattern pattern) {
  for (const auto& n : g.nodes)
    if (op_traits(n.op).pattern == pattern) return &n;
  return nullptr;
}

bool is_window_pool(const std::string& op) { return op_traits(op).pattern == OpPattern::window; }

// Ops after which the output index no longer maps to the same inner index of every input,
// so vector loads of the inputs are not aligned with vector stores of the output.
bool remaps_index(const std::string& op) { return op_traits(op).index == IndexMap::remap; }

void analyze_matmul(const Graph& g, const Node& n, WorkloadShape& s) {
  Shape a = shape_of(g, n.input(0));
  Shape b = shape_of(g, n.input(1));
  s.elem_bytes = elem_size_of(g, n.input(0));
  s.a_bytes = static_cast<double>(shape_numel(a)) * s.elem_bytes;
  s.b_bytes = static_cast<double>(shape_numel(b)) * elem_size_of(g, n.input(1));
  if (n.op == "Gemm") {
    DC_INTERNAL_CHECK(a.size() == 2 && b.size() == 2, "Gemm operands of rank ", a.size(), ", ",
                      b.size());
    const bool ta = n.attrs.get_int("transA", 0) != 0;
    const bool tb = n.attrs.get_int("transB", 0) != 0;
    s.m = ta ? a[1] : a[0];
    s.k = ta ? a[0] : a[1];
    s.n = tb ? b[0] : b[1];
    s.batch = 1;
    s.vec_align = align_of({ta ? s.m : s.k, tb ? s.k : s.n, s.n});
    return;
  }
  if (a.size() == 1) a.insert(a.begin(), 1);  // [K] -> [1, K]
  if (b.size() == 1) b.push_back(1);          // [K] -> [K, 1]
  s.m = a[a.size() - 2];
  s.k = a.back();
  s.n = b.back();
  if (b.size() == 2) {
    // Weights without batch dimensions: the batch of A folds into M.
    s.m = product(a, 0, a.size() - 1);
    s.batch = 1;
  } else {
    const Shape out =
        broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
    s.batch = shape_numel(out);
  }
  s.vec_align = align_of({s.k, s.n});
}

// The estimator's 2-D window figures of a convolution: a 3-D window folds its depth into the
// height.
void window_figures(const ref::Window& win, WorkloadShape& s) {
  s.in_h = win.in[0] * win.in[1];
  s.in_w = win.in[2];
  s.out_h = win.out[0] * win.out[1];
  s.out_w = win.out[2];
  s.kernel_h = win.kernel[0] * win.kernel[1];
  s.kernel_w = win.kernel[2];
  s.stride_h = win.stride[1];
  s.stride_w = win.stride[2];
  s.dilation_h = win.dilation[1];
  s.dilation_w = win.dilation[2];
}

void analyze_conv(const Graph& g, const Node& n, WorkloadShape& s) {
  const Shape& x = shape_of(g, n.input(0));
  const Shape& w = shape_of(g, n.input(1));
  const Shape& y = shape_of(g, n.outputs.at(0));
  const bool transposed = n.op == "ConvTranspose";
  // The window of either op (ConvTranspose: input extents in `in`, output extents in `out`).
  const ref::Window win =
      transposed ? ref::conv_transpose_geometry(n, x, w, nullptr).window
                 : ref::make_window(n, {"Conv", false}, Shape(x.begin() + 2, x.end()),
                                    Shape(w.begin() + 2, w.end()));
  s.elem_bytes = elem_size_of(g, n.input(0));
  s.images = x[0];
  s.in_channels = x[1];
  s.out_channels = y[1];
  window_figures(win, s);
  s.groups = n.attrs.get_int("group", 1);
  s.a_bytes = static_cast<double>(shape_numel(x)) * s.elem_bytes;
  s.b_bytes = static_cast<double>(shape_numel(w)) * elem_size_of(g, n.input(1));
  const int64_t cin_per_group = s.in_channels / s.groups;
  if (!transposed && s.groups > 1 && cin_per_group == 1 && win.rank <= 2) {
    s.family = Family::depthwise;
    s.vec_align = 1;
    return;
  }
  s.family = Family::conv;
  s.m = s.images * win.out_size();
  s.n = s.out_channels / s.groups;
  s.k = cin_per_group * win.kernel_size();
  s.batch = s.groups;
  s.gather_a = transposed || !win.is_pointwise();
  s.vec_align = s.gather_a ? 1 : align_of({win.out_size(), s.k});
}

// dc.ConvGradWeight(X, dY): per group g, dW[g] [M / group, C / group * taps] = dY[:, g]
// [M / group, N*P] . im2col(X[:, g]) [N*P, C / group * taps], the groups as the batch; the
// geometry figures are the forward Conv's.
void analyze_conv_weight_grad(const Graph& g, const Node& n, WorkloadShape& s) {
  const Shape& x = shape_of(g, n.input(0));
  const Shape& w = shape_of(g, n.outputs.at(0));
  const int64_t group = n.attrs.get_int("group", 1);
  DC_INTERNAL_CHECK(x.size() >= 3 && w.size() == x.size() && group >= 1 && w[1] * group == x[1] &&
                        w[0] % group == 0,
                    "dc.ConvGradWeight of a malformed convolution");
  const ref::Window win = ref::make_window(n, {"Conv", false}, Shape(x.begin() + 2, x.end()),
                                           Shape(w.begin() + 2, w.end()));
  s.family = Family::conv;
  s.weight_grad = true;
  s.elem_bytes = elem_size_of(g, n.input(1));
  s.images = x[0];
  s.in_channels = x[1];
  s.out_channels = w[0];
  s.groups = group;
  window_figures(win, s);
  s.m = w[0] / group;
  s.n = w[1] * win.kernel_size();
  s.k = x[0] * win.out_size();
  s.batch = group;
  s.a_bytes = static_cast<double>(numel_of(g, n.input(1))) * s.elem_bytes;
  s.b_bytes = static_cast<double>(shape_numel(x)) * elem_size_of(g, n.input(0));
  s.vec_align = align_of({win.out_size()});
}

}  // namespace

std::string matmul_swapped_source(const Graph& g, const Node& matmul, size_t operand) {
  if (matmul.op != "MatMul" && matmul.op != "Gemm") return "";
  const std::string& t = matmul.input(operand);
  const auto p = g.producer(t);
  if (!p) return "";
  const Node& tr = g.nodes[*p];
  const auto& inputs = g.inputs;
  if (tr.op != "Transpose" || std::find(inputs.begin(), inputs.end(), tr.input(0)) == inputs.end())
    return "";
  const Shape& s = g.info(t).shape;
  const bool folded = g.info(matmul.input(1)).shape.size() <= 2;  // M folds A's batch dims
  if (s.size() < 2 || (operand == 0 && folded && s.size() > 2)) return "";
  std::vector<int64_t> swap_last(s.size());
  for (size_t d = 0; d < s.size(); ++d) swap_last[d] = static_cast<int64_t>(d);
  std::swap(swap_last[s.size() - 1], swap_last[s.size() - 2]);
  const bool reversed_pair = s.size() == 2 && !tr.attrs.has("perm");  // no perm: dims reversed
  if (!reversed_pair && tr.attrs.get_ints("perm", {}) != swap_last) return "";
  return tr.input(0);
}

namespace {

// Operand layouts of the GEMM template, mirroring GemmEmitter::analyze_matmul/_gemm/_conv,
// has_address and the 32-bit index choice of GemmEmitter::analyze (template_gemm.cpp).
void analyze_operand_layouts(const Graph& g, const Node& heavy, WorkloadShape& s) {
  auto is_input = [&](const std::string& t) {
    return std::find(g.inputs.begin(), g.inputs.end(), t) != g.inputs.end();
  };
  GemmOperandLayout& a = s.a_layout;
  GemmOperandLayout& b = s.b_layout;
  a.direct = is_input(heavy.input(0));
  b.direct = is_input(heavy.input(1));
  if (heavy.op == "Conv" || heavy.op == "ConvTranspose") {
    a.along_rows = true;  // x along the output plane (or row, for a gather)
    b.along_rows = false;  // W[oc][k]
  } else if (s.weight_grad) {
    std::swap(a.direct, b.direct);  // A is dY (input 1), B the gather of X (input 0)
    a.along_rows = false;  // dY[n][m][p]: along k = (n, p)
    b.along_rows = false;  // X under the window: along the output positions
  } else if (heavy.op == "Gemm") {
    // A stored [K, M] when transposed, B [K, N] unless transposed; an operand's swapped
    // Transpose read in place flips its flag.
    const bool swap_a = !matmul_swapped_source(g, heavy, 0).empty();
    const bool swap_b = !matmul_swapped_source(g, heavy, 1).empty();
    a.along_rows = (heavy.attrs.get_int("transA", 0) != 0) != swap_a;
    b.along_rows = (heavy.attrs.get_int("transB", 0) == 0) != swap_b;
    a.direct = a.direct || swap_a;
    b.direct = b.direct || swap_b;
  } else {
    // A(m, k) at m*K + k, B(k, n) at k*N + n; a swapped Transpose's input read in place has
    // the other layout.
    const bool swap_a = !matmul_swapped_source(g, heavy, 0).empty();
    const bool swap_b = !matmul_swapped_source(g, heavy, 1).empty();
    a.along_rows = swap_a;
    b.along_rows = !swap_b;
    a.direct = a.direct || swap_a;
    b.direct = b.direct || swap_b;
  }
  a.dtype = g.info(heavy.input(s.weight_grad ? 1 : 0)).dtype;
  b.dtype = g.info(heavy.input(s.weight_grad ? 0 : 1)).dtype;
  a.addressable = a.direct && !s.gather_a;
  // ConvTranspose's W[C][M/g][taps] and the weight gradient's X: gathered.
  b.addressable = b.direct && heavy.op != "ConvTranspose" && !s.weight_grad;
  a.plain = a.addressable && a.dtype == DType::f32;
  b.plain = b.addressable && b.dtype == DType::f32;
  for (const auto& [name, info] : g.tensors)
    if (shape_numel(info.shape) >= (int64_t{1} << 31) - 1) s.wide_index = true;
}

void analyze_attention(const Graph& g, WorkloadShape& s) {
  std::vector<const Node*> matmuls;
  for (const auto& n : g.nodes)
    if (n.op == "MatMul") matmuls.push_back(&n);
  DC_INTERNAL_CHECK(matmuls.size() >= 2, "attention cluster with ", matmuls.size(),
                    " MatMul nodes");
  const Node& qk = *matmuls.front();
  const Node& pv = *matmuls.back();
  const Shape& q = shape_of(g, qk.input(0));
  const Shape& k = shape_of(g, qk.input(1));
  const Shape& v = shape_of(g, pv.input(1));
  const Shape& scores = shape_of(g, qk.outputs.at(0));
  DC_INTERNAL_CHECK(q.size() >= 2 && k.size() >= 2 && v.size() >= 2 && scores.size() >= 2,
                    "attention operands of rank < 2");
  s.elem_bytes = elem_size_of(g, qk.input(0));
  s.m = q[q.size() - 2];
  s.k = q.back();
  s.n = k.back();
  s.dv = v.back();
  s.batch = product(scores, 0, scores.size() - 2);
  s.a_bytes = static_cast<double>(shape_numel(q)) * s.elem_bytes;
  s.b_bytes = static_cast<double>(shape_numel(k)) * s.elem_bytes;
  s.v_bytes = static_cast<double>(shape_numel(v)) * s.elem_bytes;
  s.vec_align = align_of({s.k, s.dv});
}

// One dc.AttentionGrad(Q, Kt, V, O, dO, LSE[, mask]): m = Sq, n = Sk, k = D, dv, batch.
void analyze_attention_backward(const Graph& g, const Node& n, WorkloadShape& s) {
  const Shape& q = shape_of(g, n.input(0));
  const Shape& kt = shape_of(g, n.input(1));
  const Shape& v = shape_of(g, n.input(2));
  DC_INTERNAL_CHECK(q.size() >= 2 && kt.size() == q.size() && v.size() == q.size(),
                    "dc.AttentionGrad operands of ranks ", q.size(), ", ", kt.size(), ", ", v.size());
  s.family = Family::attention;
  s.attention_backward = true;
  s.elem_bytes = elem_size_of(g, n.input(0));
  s.m = q[q.size() - 2];
  s.k = q.back();
  s.n = kt.back();
  s.dv = v.back();
  s.batch = product(q, 0, q.size() - 2);
  s.a_bytes = static_cast<double>(shape_numel(q)) * s.elem_bytes;
  s.b_bytes = static_cast<double>(shape_numel(kt)) * s.elem_bytes;
  s.v_bytes = static_cast<double>(shape_numel(v)) * s.elem_bytes;
  s.vec_align = 1;
}

void analyze_reduction(const Graph& g, const Node& n, WorkloadShape& s) {
  const Shape& x = shape_of(g, n.input(0));
  const int64_t rank = static_cast<int64_t>(x.size());
  s.elem_bytes = elem_size_of(g, n.input(0));
  s.in_bytes = static_cast<double>(shape_numel(x)) * s.elem_bytes;
  const OpTraits& t = op_traits(n.op);
  s.reductions_per_row = t.reductions_per_row;
  s.stream_reads = t.stream_reads;
  const std::vector<int64_t> axes = reduced_axes(g, n).axes;  // sorted
  s.row_len = 1;
  for (int64_t a : axes) s.row_len *= x[static_cast<size_t>(a)];
  s.row_len = std::max<int64_t>(s.row_len, 1);
  s.rows = shape_numel(x) / s.row_len;
  s.elements = s.rows * s.row_len;
  // Contiguous if every axis after the first reduced one is reduced or of extent 1.
  s.row_contiguous = true;
  if (!axes.empty()) {
    for (int64_t i = axes.front(); i < rank; ++i) {
      const bool reduced = std::binary_search(axes.begin(), axes.end(), i);
      if (!reduced && x[static_cast<size_t>(i)] != 1) s.row_contiguous = false;
    }
  }
  s.vec_align = s.row_contiguous ? align_of({s.row_len}) : 1;
}

int64_t max_output_numel(const Graph& g) {
  int64_t best = 0;
  for (const auto& o : g.outputs) best = std::max(best, numel_of(g, o));
  if (best == 0)
    for (const auto& n : g.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty()) best = std::max(best, numel_of(g, o));
  return best;
}

// The loops of a training op's naive kernel (template_reference_training.cpp).
struct NaiveLoops {
  int64_t per_output = 1;    // steps of the loop every output element runs
  int64_t serial_threads = 0, serial_loop = 0;  // a few outputs' long loops
};

NaiveLoops naive_loops(const Graph& g, const Node& n) {
  NaiveLoops l;
  if (n.op == "dc.ConvGradData") {  // filters of a group x taps (taps off the stride included)
    const Shape& w = shape_of(g, n.input(1));
    l.per_output = w.size() < 3 ? 1 : shape_numel(w) / std::max<int64_t>(1, w[1] * n.attrs.get_int("group", 1));
  } else if (n.op == "dc.ConvGradWeight") {  // images x output positions
    const Shape& dy = shape_of(g, n.input(1));
    l.per_output = dy.size() < 3 ? 1 : shape_numel(dy) / std::max<int64_t>(1, dy[1]);
  } else if (n.op == "dc.SoftmaxCrossEntropy") {  // log-probabilities: their row's max and sum
    const Shape& x = shape_of(g, n.input(0));
    const int64_t classes = x.empty() ? 1 : x.back();
    l.per_output = 2 * classes;
    l.serial_threads = 1;  // the loss: one thread over every row
    l.serial_loop = 2 * shape_numel(x);
  } else if (n.op == "dc.GatherGrad") {  // every index, for each element of the table
    l.per_output = shape_numel(shape_of(g, n.input(1)));
  } else if (n.op == "dc.Attention" || n.op == "dc.AttentionGrad") {  // each element's key or query loop
    const Shape& q = shape_of(g, n.input(0));
    const int64_t sq = q.size() < 2 ? 1 : q[q.size() - 2], d = q.empty() ? 1 : q.back();
    const int64_t sk = shape_of(g, n.input(1)).back(), dv = shape_of(g, n.input(2)).back();
    l.per_output = n.op == "dc.Attention" ? 3 * sk * d : std::max(sq, sk) * (d + 2 * dv);
  }
  return l;
}

void analyze_output_parallel(const Graph& g, WorkloadShape& s) {
  s.elements = std::max<int64_t>(max_output_numel(g), 1);
  s.inputs = std::max(1, static_cast<int>(g.inputs.size()));
  if (!g.inputs.empty()) s.elem_bytes = elem_size_of(g, g.inputs.front());
  int64_t inner = 1;
  for (const auto& o : g.outputs) {
    const Shape& sh = shape_of(g, o);
    if (shape_numel(sh) == s.elements && !sh.empty()) inner = sh.back();
  }
  bool vectorisable = true;
  for (const auto& n : g.nodes) {
    if (remaps_index(n.op)) vectorisable = false;
    const NaiveLoops l = naive_loops(g, n);
    s.window = std::max(s.window, l.per_output);
    if (l.serial_threads > 0 && l.serial_loop > s.serial_loop) {
      s.serial_threads = l.serial_threads;
      s.serial_loop = l.serial_loop;
    }
    if (is_window_pool(n.op)) {
      int64_t w = 1;
      for (int64_t k : n.attrs.get_ints("kernel_shape", {})) w *= k;
      s.window = std::max(s.window, w);
    }
  }
  // Every input is either read whole along the inner dimension or broadcast across it.
  for (const auto& in : g.inputs) {
    const Shape& sh = shape_of(g, in);
    if (!sh.empty() && sh.back() != 1 && sh.back() != inner) vectorisable = false;
  }
  // The elementwise template's vectors may cross rows (template_elementwise.cpp); a window
  // pool's stay inside one.
  s.vec_align = !vectorisable ? 1 : s.family == Family::elementwise ? align_of({s.elements}) : align_of({inner});
}

}  // namespace

const char* family_template_name(Family f) {
  switch (f) {
    case Family::gemm:
      return "gemm_tiled";
    case Family::conv:
      return "conv_implicit_gemm";
    case Family::depthwise:
      return "depthwise_direct";
    case Family::attention:
      return "attention_fused";
    case Family::reduction:
      return "row_reduce";
    case Family::pool_window:
      return "pool_window";
    case Family::elementwise:
      return "elementwise";
    case Family::opaque:
      return "opaque_generic";
  }
  return "?";
}

WorkloadShape analyze_workload(const Workload& w) {
  WorkloadShape s;
  s.kind = w.kind;
  s.flops = static_cast<double>(w.flops);
  s.bytes = static_cast<double>(w.bytes);
  const Graph& g = w.graph;
  switch (w.kind) {
    case ClusterKind::gemm:
    case ClusterKind::conv:
    case ClusterKind::depthwise: {
      const Node* heavy = first_with(g, OpPattern::heavy);
      DC_INTERNAL_CHECK(heavy != nullptr, cluster_kind_name(w.kind),
                        " workload without a Conv, MatMul or Gemm node");
      if (heavy->op == "Conv" || heavy->op == "ConvTranspose") {
        analyze_conv(g, *heavy, s);
      } else if (heavy->op == "dc.ConvGradWeight") {
        analyze_conv_weight_grad(g, *heavy, s);
      } else {
        s.family = Family::gemm;
        analyze_matmul(g, *heavy, s);
        s.glu = gemm_glu_epilogue(g).has_value();
        // A Transpose prologue swaps which extent of its operand is contiguous.
        if (first_of(g, {"Transpose"})) s.vec_align = align_of({s.m, s.k, s.n});
      }
      if (s.family == Family::gemm || s.family == Family::conv)
        analyze_operand_layouts(g, *heavy, s);
      break;
    }
    case ClusterKind::attention:
      s.family = Family::attention;
      analyze_attention(g, s);
      break;
    case ClusterKind::reduction: {
      if (const Node* red = first_with(g, OpPattern::reduce)) {
        s.family = Family::reduction;
        analyze_reduction(g, *red, s);
        // Sibling sums (template_reduction.cpp): one tree reduction per reduction node.
        s.reductions_per_row *= static_cast<int>(std::count_if(
            g.nodes.begin(), g.nodes.end(), [](const Node& n) { return op_traits(n.op).pattern == OpPattern::reduce; }));
        break;
      }
      DC_INTERNAL_CHECK(first_with(g, OpPattern::window) != nullptr, "reduction workload without a reduction node");
      s.family = Family::pool_window;
      analyze_output_parallel(g, s);
      break;
    }
    case ClusterKind::elementwise:
      s.family = Family::elementwise;
      analyze_output_parallel(g, s);
      break;
    case ClusterKind::opaque:
      if (is_attention_grad_on_template(w)) {
        analyze_attention_backward(g, g.nodes[0], s);
        break;
      }
      if (is_training_attention(w)) {  // its forward: the fused template, which also writes the LSE
        s.family = Family::attention;
        analyze_attention(expand_training_attention(w).graph, s);
        break;
      }
      s.family = Family::opaque;
      analyze_output_parallel(g, s);
      break;
  }
  if (s.family == Family::opaque && s.elements == 0) analyze_output_parallel(g, s);
  // A multi-tensor optimizer update's loop covers every tensor of its bucket.
  for (const Node& n : g.nodes)
    if (is_optimizer_update(n.op)) {
      s.elements = std::max(s.elements, updated_elements(g, n));
      s.optimizer_update = true;
      // An element reads its own tensor's group (W, G and the state), not the bucket.
      s.inputs = static_cast<int>(optimizer_update_layout(n).inputs_per_tensor);
    } else if (n.op == kNonFiniteCheck) {  // a lane reads one tensor after another
      int64_t checked = 0;
      for (const auto& in : n.inputs) checked += shape_numel(g.info(in).shape);
      s.inputs = 1;
      s.window = ceil_div(checked, std::max<int64_t>(s.elements, 1));
    } else if (n.op == kMultiCast) {  // the optimizer's loops over a bucket: each output element reads one
      s.elements = 0;
      for (const auto& out : n.outputs) s.elements += shape_numel(g.info(out).shape);
      s.inputs = 1;
      s.optimizer_update = true;  // its float4 variant (vec 4: per-tensor loops, scalar tails)
    }
  return s;
}

std::optional<GluSplit> gemm_glu_epilogue(const Graph& g) {
  std::optional<size_t> mm;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == "MatMul") {
      if (mm) return std::nullopt;
      mm = i;
    }
  if (!mm || g.nodes[*mm].inputs.size() != 2 || g.info(g.nodes[*mm].input(1)).shape.size() < 2)
    return std::nullopt;
  const auto split = glu_split(g, *mm);
  if (!split) return std::nullopt;
  // The nodes after the MatMul (reading its output, directly or not); those before it are
  // its operands' prologues.
  const Shape half = g.info(g.nodes[split->even].outputs.at(0)).shape;
  std::set<std::string> after = {split->y};
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (i == *mm || std::none_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& t) { return after.count(t) != 0; }))
      continue;
    for (const auto& o : n.outputs)
      if (!o.empty()) after.insert(o);
    if (i == split->even || i == split->odd) continue;
    if (!is_pointwise_op(n.op)) return std::nullopt;
    for (const auto& o : n.outputs)
      if (!o.empty() && g.info(o).shape != half) return std::nullopt;
  }
  for (const auto& o : g.outputs)
    if (g.info(o).shape != half) return std::nullopt;
  return split;
}

bool gpu_has_precision(const GpuSpec& gpu, const std::string& precision) {
  const int cc = gpu.cc_major * 10 + gpu.cc_minor;
  if (precision == "fp32") return true;
  // fp16 from Volta on (sm_70: mma.sync m8n8k4); bf16 and tf32 from Ampere.
  if (precision == "fp16") return cc >= 70 && gpu.tc_fp16_flops_per_sm_clk > 0;
  if (precision == "bf16") return cc >= 80 && gpu.tc_bf16_flops_per_sm_clk > 0;
  if (precision == "tf32") return cc >= 80 && gpu.tc_tf32_flops_per_sm_clk > 0;
  return false;
}

namespace {

const std::vector<std::string> kPrecisionPaths = {"fp32", "tf32", "fp16", "bf16"};

}  // namespace

bool is_precision_path(const std::string& precision) {
  return std::find(kPrecisionPaths.begin(), kPrecisionPaths.end(), precision) != kPrecisionPaths.end();
}

std::vector<Variant> enumerate_variants(const WorkloadShape& s, const GpuSpec& gpu,
                                        const SpaceOptions& options) {
  std::vector<std::string> precisions;
  for (const auto& p : options.precisions.empty() ? kPrecisionPaths : options.precisions) {
    DC_USER_CHECK(is_precision_path(p), "unknown precision '", p, "' (allowed: fp32, tf32, fp16, bf16)");
    if (gpu_has_precision(gpu, p)) precisions.push_back(p);
  }
  const bool fp32 = std::find(precisions.begin(), precisions.end(), "fp32") != precisions.end();
  switch (s.family) {
    case Family::gemm:
    case Family::conv:
      return enumerate_gemm_family(s, gpu, precisions);
    case Family::depthwise:
      return fp32 ? enumerate_depthwise(s, gpu) : std::vector<Variant>{};
    case Family::attention:
      return enumerate_attention(s, gpu, precisions);
    case Family::reduction:
      return fp32 ? enumerate_reduction(s, gpu) : std::vector<Variant>{};
    case Family::pool_window:
    case Family::elementwise:
    case Family::opaque:
      return fp32 ? enumerate_output_parallel(s, gpu) : std::vector<Variant>{};
  }
  return {};
}

std::vector<Variant> enumerate_variants(const Workload& w, const GpuSpec& gpu,
                                        const SpaceOptions& options) {
  return enumerate_variants(analyze_workload(w), gpu, options);
}

std::vector<Variant> enumerate_variants(const Workload& w, const GpuSpec& gpu) {
  return enumerate_variants(analyze_workload(w), gpu, SpaceOptions{});
}

bool offered(const std::vector<int64_t>& choices, int64_t value, const char* name, std::string* why) {
  if (contains(choices, value)) return true;
  if (why) {
    std::string list;
    for (int64_t c : choices) list += (list.empty() ? "" : ", ") + std::to_string(c);
    *why = str_cat(name, "=", value, " is not one of this workload's choices (", list, ")");
  }
  return false;
}

int64_t gemm_smem_bytes(int64_t block_m, int64_t block_n, int64_t block_k, int64_t stages,
                        int smem_elem_bytes) {
  return stages * block_k * ((block_m + block_n) * smem_elem_bytes + 2 * kSmemPadBytes);
}

int launch_bounds_regs(int64_t threads) {
  static const GpuSpec rules = [] {
    GpuSpec g;  // the register-file defaults of GpuSpec, which every table entry has
    g.regs_per_thread = 255;
    return g;
  }();
  if (threads <= 0) return 255;
  return max_regs_per_thread_for_block(threads, rules);
}

bool gemm_async_ok(const WorkloadShape& s, int64_t block_m, int64_t threads) {
  const bool hoisted_gather = s.family == Family::conv && s.gather_a && s.a_layout.direct &&
                              s.a_layout.dtype == DType::f32 && !s.wide_index && block_m > 0 && threads > 0 &&
                              (threads % block_m == 0 || block_m % threads == 0);
  return (s.a_layout.plain || hoisted_gather) && s.b_layout.plain;
}

int64_t gemm_operand_vec(const WorkloadShape& s, bool operand_a, int64_t vec, int64_t tile,
                         int64_t block_k) {
  const GemmOperandLayout& o = operand_a ? s.a_layout : s.b_layout;
  if (!o.plain) return 1;
  const int64_t extent = o.along_rows ? (operand_a ? s.m : s.n) : s.k;
  const int64_t along = o.along_rows ? tile : block_k;
  // Conv's A: a vector of m stays inside one image plane.
  const int64_t plane = operand_a && s.family == Family::conv ? s.out_h * s.out_w : 0;
  vec = std::max<int64_t>(vec, 1);
  while (vec > 1 && (extent % vec != 0 || along % vec != 0 || plane % vec != 0)) vec /= 2;
  return vec;
}

GemmThreadLoads gemm_thread_loads(const WorkloadShape& s, int64_t block_m, int64_t block_n,
                                  int64_t block_k, int64_t vec, int64_t threads) {
  const double per_thread =
      static_cast<double>(block_k) / static_cast<double>(std::max<int64_t>(threads, 1));
  const double a = static_cast<double>(block_m) * per_thread;
  const double b = static_cast<double>(block_n) * per_thread;
  GemmThreadLoads t;
  t.elems = a + b;
  t.loads = a / static_cast<double>(gemm_operand_vec(s, true, vec, block_m, block_k)) +
            b / static_cast<double>(gemm_operand_vec(s, false, vec, block_n, block_k));
  // The weight gradient's B, the im2col gather of X, goes through ValueEmitter like a prologue.
  t.prologue_elems = (s.a_layout.direct ? 0 : a) + (s.b_layout.direct && !s.weight_grad ? 0 : b);
  return t;
}

int gemm_fp32_regs(int64_t thread_m, int64_t thread_n, const GemmThreadLoads& loads,
                   int64_t stages, int64_t threads) {
  // Coefficients fitted to ptxas on about 4,500 compiled variants (docs/bench/registers.md).
  const double staged = stages == 2 ? loads.elems : 0.0;
  const double demand = 23.5 + static_cast<double>(thread_m * thread_n) + 1.1 * loads.elems +
                        3.4 * loads.loads + 0.4 * loads.prologue_elems + 0.5 * staged;
  const int regs = static_cast<int>(std::lround(demand));
  // Under __launch_bounds__ ptxas spills rather than exceed the block's share; a demand
  // above 255 is left as it is, so that fits_gpu drops the variant.
  const int bound = launch_bounds_regs(threads);
  return bound < 255 ? std::min(regs, bound) : regs;
}

int64_t gemm_mma_pad_elems(const std::string& precision, bool k_rows) {
  const bool tf32 = precision == "tf32";
  if (tf32) return k_rows ? 4 : 8;
  return 8;
}

int64_t gemm_mma_stage_elems(const std::string& precision, bool k_rows, int64_t tile,
                             int64_t block_k) {
  const int64_t pad = gemm_mma_pad_elems(precision, k_rows);
  return k_rows ? tile * (block_k + pad) : block_k * (tile + pad);
}

int64_t gemm_mma_smem_bytes(const WorkloadShape& s, const std::string& precision, int64_t block_m,
                            int64_t block_n, int64_t block_k, int64_t stages) {
  const int64_t elem = precision == "tf32" ? 4 : 2;
  return stages * elem *
         (gemm_mma_stage_elems(precision, !s.a_layout.along_rows, block_m, block_k) +
          gemm_mma_stage_elems(precision, !s.b_layout.along_rows, block_n, block_k));
}

int gemm_mma_copy_bytes(const WorkloadShape& s, bool operand_a, const std::string& precision,
                        int64_t tile, int64_t block_k, int64_t threads) {
  const GemmOperandLayout& o = operand_a ? s.a_layout : s.b_layout;
  const bool tf32 = precision == "tf32";
  const DType math = tf32 ? DType::f32 : precision == "fp16" ? DType::f16 : DType::bf16;
  if (o.addressable && o.dtype == math) {
    const int elem = tf32 ? 4 : 2;
    int64_t vec = 16 / elem;
    const int64_t extent = o.along_rows ? (operand_a ? s.m : s.n) : s.k;
    const int64_t along = o.along_rows ? tile : block_k;
    const int64_t plane = operand_a && s.family == Family::conv ? s.out_h * s.out_w : vec;
    while (vec > 1 && (extent % vec != 0 || along % vec != 0 || plane % vec != 0)) vec /= 2;
    return vec * elem >= 4 ? static_cast<int>(vec * elem) : 0;
  }
  const bool hoisted_gather = operand_a && tf32 && s.family == Family::conv && s.gather_a &&
                              o.direct && o.dtype == DType::f32 && !s.wide_index &&
                              (threads % tile == 0 || tile % threads == 0);
  return hoisted_gather ? 4 : 0;
}

MmaThreadLoad gemm_mma_thread_load(const WorkloadShape& s, const std::string& precision, int64_t block_m,
                                   int64_t block_n, int64_t block_k, int64_t split_k, int64_t threads) {
  MmaThreadLoad t;
  const bool tf32 = precision == "tf32";
  const auto th = static_cast<double>(threads);
  t.a_copy = gemm_mma_copy_bytes(s, true, precision, block_m, block_k, threads);
  t.b_copy = gemm_mma_copy_bytes(s, false, precision, block_n, block_k, threads);
  // Operands through registers hold their share of the next K tile across the mma: f32
  // storage (and the gathered conv input) in vector loads, f16/bf16 storage (a prologue
  // operand, an unaligned one, a non-gathered conv input) element by element.
  auto through_registers = [&](bool is_a, int64_t tile, int copy) {
    if (copy != 0) return;
    const double elems = static_cast<double>(tile * block_k) / th;
    const GemmOperandLayout& o = is_a ? s.a_layout : s.b_layout;
    (o.dtype == DType::f32 || (is_a && s.gather_a) ? t.staged : t.scalar) += elems;
  };
  through_registers(true, block_m, t.a_copy);
  through_registers(false, block_n, t.b_copy);
  const double a_elems = static_cast<double>(block_m * block_k) / th;
  // im2col index math per element gathered, far more through registers (values, bounds and
  // addresses live across the tile's mma: 32 f16 elements a thread took 255 and spilled)
  // than as 4-byte cp.async copies.
  t.gathered = !s.gather_a ? 0 : t.a_copy > 0 ? 2 * a_elems : 4 * a_elems;
  if (s.weight_grad) t.gathered += 4 * static_cast<double>(block_n * block_k) / th;  // X's gather
  t.moved = static_cast<double>((block_m + block_n) * block_k) / th;
  t.conv = s.family == Family::conv;
  t.plane_copies = t.conv && !s.gather_a && t.a_copy == 4
                       ? static_cast<double>(block_m * block_k * (tf32 ? 4 : 2)) / (4.0 * th)
                       : 0;
  t.narrow_copies = (!s.gather_a && t.a_copy == 4 ? static_cast<double>(block_m * block_k) : 0.0) / th +
                    (t.b_copy == 4 ? static_cast<double>(block_n * block_k) : 0.0) / th;
  t.k_tiles = ceil_div(ceil_div(s.k, block_k), std::max<int64_t>(1, split_k));
  if (t.a_copy > 0) t.copies += static_cast<double>(block_m * block_k * (tf32 ? 4 : 2)) / (t.a_copy * th);
  if (t.b_copy > 0) t.copies += static_cast<double>(block_n * block_k * (tf32 ? 4 : 2)) / (t.b_copy * th);
  return t;
}

int gemm_m8n8k4_regs(int64_t warp_m, int64_t warp_n, const MmaThreadLoad& t, int64_t threads) {
  // Least squares over the sm_70 kept matrix's compiles below 250 registers (registers.md),
  // the a²/256 term fixed as in the other tensor-core fits. A copy costs 7.2 where a next K
  // tile is loaded across the mma; with one K tile the code is straight-line and it is not.
  const double accum = static_cast<double>(warp_m * warp_n) / 32;
  const double prefetched = t.k_tiles > 1 ? t.copies : 0;
  const double live_scalar = t.scalar * static_cast<double>(std::min<int64_t>(2, t.k_tiles));
  const int regs = static_cast<int>(std::lround(accum * (0.8 + accum / 256) + 7.2 * prefetched +
                                                2.86 * live_scalar + 1.0 * t.gathered +
                                                (t.conv ? 12 : 0) + 14));
  const int bound = launch_bounds_regs(threads);
  return bound < 255 ? std::min(regs, bound) : regs;
}

int gemm_mma_regs(int64_t warp_m, int64_t warp_n, double staged, double live_scalar,
                  double gathered, int64_t threads) {
  // Coefficients fitted to ptxas (sm_80, docs/bench/registers.md): the accumulators count
  // 1.2 + accum/256 each (ptxas keeps the next k step's fragments and addresses live beside
  // them, more so for large warp tiles: 64x64 needs all 255 and spills), an element staged
  // through registers in vector loads 1.7 (its float, the converted value, addressing), a
  // live element-by-element one 1.8 (its value and its own index math; session 6, the
  // fp16 first choices of the three models); `gathered` is the im2col cost the enumerator
  // computes (2 or 4 per element).
  const double accum = static_cast<double>(warp_m * warp_n) / 32;
  const double fragments = static_cast<double>((warp_m / 16) * 4 + (warp_n / 8) * 2);
  const int regs = static_cast<int>(std::lround(1.2 * accum + accum * accum / 256 + fragments +
                                                1.7 * staged + 1.8 * live_scalar + gathered +
                                                25));
  const int bound = launch_bounds_regs(threads);
  return bound < 255 ? std::min(regs, bound) : regs;
}

int gemm_tf32_regs(const Tf32ThreadLoad& t, int64_t threads) {
  // Least squares over the compiles below 250 registers, with those at 254-255 counted as
  // at least 255 (registers.md): rmse 22 registers, bias 0 on each architecture.
  const double accum = static_cast<double>(t.warp_m * t.warp_n) / 32;
  const int regs = static_cast<int>(
      std::lround(accum * (0.8 + accum / 256) + 1.85 * t.moved + 5 * t.staged + 0.9 * t.gathered +
                  5.2 * t.narrow_copies + 5 * static_cast<double>(t.stages) + (t.conv ? 16.8 : 0)));
  const int bound = launch_bounds_regs(threads);
  return bound < 255 ? std::min(regs, bound) : regs;
}

bool fits_gpu(const Variant& v, const GpuSpec& gpu, std::string* why) {
  auto fail = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  if (const std::string refusal =
          launch_refusal(v.threads_per_block, v.smem_bytes, v.regs_per_thread, gpu);
      !refusal.empty())
    return fail(refusal);
  if (!gpu_has_precision(gpu, v.precision))
    return fail(str_cat("no ", v.precision, " path on ", gpu.sm_arch()));
  // Any family's: not every family has these parameters.
  if (v.param_or("stages", 1) >= 3 && gpu.cc_major < 8)
    return fail(str_cat(v.param_or("stages", 1), " pipeline stages need cp.async (sm_80+)"));
  if (v.param_or("m8n8k4", 0) != 0 && !(gpu.cc_major == 7 && gpu.cc_minor < 5))
    return fail(str_cat("mma.sync m8n8k4 is for sm_70 and sm_72, not ", gpu.sm_arch()));
  if (v.grid_blocks <= 0 || v.grid_blocks > INT_MAX)
    return fail(str_cat(v.grid_blocks, " blocks is outside [1, 2^31)"));
  if (blocks_per_sm(v.threads_per_block, v.smem_bytes, v.regs_per_thread, gpu) < 1)
    return fail("not even one block resident per SM");
  return true;
}

}  // namespace dc
