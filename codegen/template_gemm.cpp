// GEMM-family templates on CUDA cores (fp32):
//  - "gemm_tiled": MatMul (batched, numpy broadcasting of batch dims, 1-D operands) and
//    Gemm (transA/transB, alpha, beta, C broadcast to M x N);
//  - "conv_implicit_gemm": Conv 1-D/2-D over NCHW as an implicit GEMM (im2col gathered on the
//    fly; any stride, padding, auto_pad, dilation; groups as the GEMM batch; 1x1 stride-1
//    convolutions read as a plain GEMM with vector loads along the image plane), and its
//    weight-gradient mode (dc.ConvGradWeight: dY by address times the im2col gather of X,
//    dW written as [M, C / group, k...], groups as the batch).
// One kernel: shared-memory tiles of A (block_m x block_k) and B (block_k x block_n), both
// stored k-major with a 4-float row pad, a thread_m x thread_n register tile per thread,
// vector global loads where layout and alignment allow, register-staged double buffering
// (stages 2) or a cp.async pipeline (stages 3), split-K over blockIdx.z, and the cluster's
// prologues and epilogue fused through ValueEmitter. The inner product of a K tile is the device function
// dc_mma_tile_fp32, the piece a tensor-core (mma.sync) version replaces. The emitter class is
// in template_gemm_emitter.h; the tile loads in template_gemm_loads.cpp. docs/codegen.md.
#include <algorithm>

#include <fmt/format.h>

#include "generate.h"
#include "ir/error.h"
#include "ir/gemm_operand_sum.h"
#include "param_space.h"
#include "template_gemm_emitter.h"
#include "template_util.h"

namespace dc {
namespace gemm_detail {

void GemmEmitter::analyze() {
  const Graph& g = w_.graph;
  // 32-bit index math (cheaper to run and to compile) unless a tensor has 2^31 elements.
  for (const auto& [name, info] : g.tensors)
    if (shape_numel(info.shape) >= (int64_t{1} << 31) - 1) idx_ = "dc_i64";
  int heavy_count = 0;
  const Node* sum = nullptr;  // an operand sum (analyze_operand_sum)
  for (const auto& n : g.nodes) {
    if (op_traits(n.op).pattern == OpPattern::heavy) {  // Conv, ConvTranspose, MatMul, Gemm
      heavy_ = &n;
      ++heavy_count;
    } else if (n.op == "ReduceSum" && !sum) {
      sum = &n;
    } else {
      DC_INTERNAL_CHECK(ValueEmitter::supports(n), v_.template_name, ": cannot fuse ", n.op);
    }
  }
  DC_INTERNAL_CHECK(heavy_count == 1, v_.template_name, ": workload has ", heavy_count,
                    " heavy ops, expected 1");
  // Operands and outputs of any float storage type: values are read as float (dc_to_f32)
  // and stored through dc_from_f32<T>; the math path is Variant::precision.
  for (const auto& t : heavy_->inputs)
    if (!t.empty())
      DC_INTERNAL_CHECK(float_storage_type(g.info(t).dtype) != nullptr, v_.template_name,
                        ": float operands only, '", t, "' is ", dtype_name(g.info(t).dtype));
  mma_ = v_.precision != "fp32";
  heavy_out_ = heavy_->outputs.at(0);
  heavy_shape_ = g.info(heavy_out_).shape;
  if (const auto glu = gemm_glu_epilogue(g)) {
    glu_ = true;
    glu_even_ = g.nodes[glu->even].outputs[0];
    glu_odd_ = g.nodes[glu->odd].outputs[0];
  }
  if (sum) sum_out_ = sum->outputs.at(0);
  const Shape out_shape = glu_ ? g.info(glu_even_).shape : heavy_shape_;
  for (const auto& o : g.outputs)
    DC_INTERNAL_CHECK(o == sum_out_ || g.info(o).shape == out_shape, v_.template_name, ": output '", o,
                      "' of shape ", shape_str(g.info(o).shape), " is not elementwise with the ",
                      heavy_->op, " output ", shape_str(out_shape));
  a_.label = "a";
  b_.label = "b";
  a_.tensor = heavy_->input(0);
  b_.tensor = heavy_->input(1);
  for (Operand* o : {&a_, &b_}) {
    o->memory = o->tensor;
    o->direct = is_input(o->memory);
  }
  a_.dtype = g.info(a_.tensor).dtype;
  b_.dtype = g.info(b_.tensor).dtype;
  if (heavy_->op == "MatMul") analyze_matmul();
  else if (heavy_->op == "Gemm") analyze_gemm();
  else if (heavy_->op == "dc.ConvGradWeight") analyze_conv_weight_grad();
  else analyze_conv();
  a_.rows = m_;
  b_.rows = n_;
  if (sum) analyze_operand_sum(*sum);

  // The parameter space derived its figures the same way; disagreeing is a generator bug.
  const WorkloadShape s = analyze_workload(w_);
  DC_INTERNAL_CHECK(s.m == m_ && s.n == n_ && s.k == k_ && s.batch == batch_, v_.template_name,
                    ": GEMM figures ", m_, "x", n_, "x", k_, " batch ", batch_,
                    " disagree with analyze_workload's ", s.m, "x", s.n, "x", s.k, " batch ",
                    s.batch);
}

bool GemmEmitter::is_input(const std::string& t) const {
  const auto& in = w_.graph.inputs;
  return std::find(in.begin(), in.end(), t) != in.end();
}

// A MatMul or Gemm operand computed by a Transpose that swaps the last two dims of a cluster
// input is read from that input in place, with the other layout (matmul_swapped_source).
void GemmEmitter::choose_memory(Operand& o) const {
  const std::string source = matmul_swapped_source(w_.graph, *heavy_, &o == &a_ ? 0 : 1);
  if (source.empty()) return;
  o.memory = source;
  o.swapped = true;
  o.direct = true;
}

void GemmEmitter::analyze_matmul() {
  kind_ = HeavyKind::matmul;
  DC_INTERNAL_CHECK(v_.template_name == "gemm_tiled", "MatMul with template ", v_.template_name);
  a_shape_ = w_.graph.info(a_.tensor).shape;
  b_shape_ = w_.graph.info(b_.tensor).shape;
  Shape a = a_shape_, b = b_shape_;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  k_ = a.back();
  n_ = b.back();
  folded_ = b.size() == 2;
  if (folded_) {
    m_ = 1;
    for (size_t i = 0; i + 1 < a.size(); ++i) m_ *= a[i];
    batch_ = 1;
  } else {
    m_ = a[a.size() - 2];
    batch_shape_ = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
    batch_ = shape_numel(batch_shape_);
  }
  choose_memory(a_);
  choose_memory(b_);
  a_.along_rows = a_.swapped;   // A(m, k) at m*K + k; swapped: at k*M + m
  b_.along_rows = !b_.swapped;  // B(k, n) at k*N + n; swapped: at n*K + k
}

void GemmEmitter::analyze_gemm() {
  kind_ = HeavyKind::gemm;
  DC_INTERNAL_CHECK(v_.template_name == "gemm_tiled", "Gemm with template ", v_.template_name);
  const Shape& a = w_.graph.info(a_.tensor).shape;
  const Shape& b = w_.graph.info(b_.tensor).shape;
  DC_INTERNAL_CHECK(a.size() == 2 && b.size() == 2, "Gemm operands of rank ", a.size(), ", ",
                    b.size());
  trans_a_ = heavy_->attrs.get_int("transA", 0) != 0;
  trans_b_ = heavy_->attrs.get_int("transB", 0) != 0;
  alpha_ = heavy_->attrs.get_float("alpha", 1.f);
  beta_ = heavy_->attrs.get_float("beta", 1.f);
  if (heavy_->has_input(2) && beta_ != 0.f) c_tensor_ = heavy_->input(2);
  m_ = trans_a_ ? a[1] : a[0];
  k_ = trans_a_ ? a[0] : a[1];
  n_ = trans_b_ ? b[0] : b[1];
  batch_ = 1;
  choose_memory(a_);
  choose_memory(b_);
  // A stored [K, M] when transposed, B [K, N] unless transposed; read in place from its
  // Transpose's input, an operand has the other layout.
  a_.along_rows = trans_a_ != a_.swapped;
  b_.along_rows = trans_b_ == b_.swapped;
}

void GemmEmitter::analyze_conv() {
  kind_ = HeavyKind::conv;
  DC_INTERNAL_CHECK(v_.template_name == "conv_implicit_gemm", heavy_->op, " with template ",
                    v_.template_name);
  const Shape& x = w_.graph.info(a_.tensor).shape;
  const Shape& wt = w_.graph.info(b_.tensor).shape;
  DC_INTERNAL_CHECK(x.size() >= 3 && x.size() <= 5, "conv_implicit_gemm: ", x.size() - 2,
                    "-D convolution (1-D to 3-D only)");
  spatial_rank_ = static_cast<int>(x.size()) - 2;
  transposed_ = heavy_->op == "ConvTranspose";
  groups_ = heavy_->attrs.get_int("group", 1);
  channels_ = x[1];
  if (transposed_) {
    const ref::ConvTransposeGeometry geo =
        ref::conv_transpose_geometry(*heavy_, x, wt, nullptr);
    win_ = geo.window;
    out_channels_ = geo.filters;
  } else {
    win_ = ref::make_window(*heavy_, {"Conv", false}, Shape(x.begin() + 2, x.end()),
                            Shape(wt.begin() + 2, wt.end()));
    out_channels_ = wt[0];
  }
  cin_group_ = channels_ / groups_;
  cout_group_ = out_channels_ / groups_;
  DC_INTERNAL_CHECK(transposed_ || wt[1] == cin_group_, "Conv weight has ", wt[1],
                    " input channels per group");
  if (heavy_->has_input(2)) bias_tensor_ = heavy_->input(2);
  m_ = x[0] * win_.out_size();
  n_ = cout_group_;
  k_ = cin_group_ * win_.kernel_size();
  batch_ = groups_;
  // A(m, k): contiguous along m for 1x1 stride-1 (vector loads), along the output row (ow)
  // otherwise: either way rows-fastest loads coalesce.
  a_.along_rows = true;
  b_.along_rows = false;  // W[oc][k] (ConvTranspose: W[c][oc][taps], read through ValueEmitter)
}

// The weight gradient of a Conv, dc.ConvGradWeight(X, dY) -> dW [M, C / group, k...], groups
// as the GEMM's batch: for group g, dW[g Mg + m][c * taps + t] = sum over k = (n, p) of
// dY[n][g Mg + m][p] . X[n][g Cg + c][p * stride + t * dilation - pad]. A is dY (Mg x K, read
// by address along k, vectors inside an image's P positions), B the forward Conv's im2col
// gather with rows and k in swapped roles (conv_gather_value), the output dW row-major
// [group][Mg][Cg * taps]; no bias, split-K over the long K.
void GemmEmitter::analyze_conv_weight_grad() {
  kind_ = HeavyKind::conv_weight_grad;
  DC_INTERNAL_CHECK(v_.template_name == "conv_implicit_gemm", heavy_->op, " with template ",
                    v_.template_name);
  const Shape& x = w_.graph.info(heavy_->input(0)).shape;
  DC_INTERNAL_CHECK(x.size() >= 3 && x.size() <= 5 && heavy_shape_.size() == x.size(),
                    "conv_implicit_gemm: weight gradient of a ", x.size() - 2, "-D convolution");
  spatial_rank_ = static_cast<int>(x.size()) - 2;
  win_ = ref::make_window(*heavy_, {"Conv", false}, Shape(x.begin() + 2, x.end()),
                          Shape(heavy_shape_.begin() + 2, heavy_shape_.end()));
  groups_ = heavy_->attrs.get_int("group", 1);
  channels_ = x[1];
  out_channels_ = heavy_shape_[0];
  cin_group_ = heavy_shape_[1];
  cout_group_ = out_channels_ / groups_;
  DC_INTERNAL_CHECK(cin_group_ * groups_ == channels_ && cout_group_ * groups_ == out_channels_,
                    "conv_implicit_gemm: weight gradient of ", groups_, " groups, X ", shape_str(x), ", dW ",
                    shape_str(heavy_shape_));
  std::swap(a_, b_);  // A is dY (input 1), B is X (input 0)
  std::swap(a_.label, b_.label);
  m_ = cout_group_;
  n_ = cin_group_ * win_.kernel_size();
  k_ = x[0] * win_.out_size();
  batch_ = groups_;
  a_.along_rows = false;  // dY[n][m][p]: contiguous along k = (n, p) within an image
  b_.along_rows = false;  // X under the window: along the output positions
}

// sum = A or B summed over k: B (for sum(A), indexed by m) or A (sum(B), by n) gets a row of
// ones, so the sum is one more column or row of the product, accumulated beside the heavy
// output's on every path (split-K slices included) from the same loads.
void GemmEmitter::analyze_operand_sum(const Node& sum) {
  const auto form = gemm_operand_sum(w_.graph, *heavy_, sum);
  DC_INTERNAL_CHECK(form && !glu_ && kind_ != HeavyKind::conv,
                    v_.template_name, ": ReduceSum '", sum.name, "' is no sum of a ", heavy_->op,
                    " operand over k");
  (form->operand == 0 ? b_ : a_).ones_row = true;
}

int64_t GemmEmitter::vector_run(const Operand& o) const {
  const bool plane = (kind_ == HeavyKind::conv || kind_ == HeavyKind::conv_weight_grad) && &o == &a_;
  return plane ? win_.out_size() : 0;
}

std::string GemmEmitter::value(const std::string& tensor, const std::vector<std::string>& coords,
                               std::string& code) {
  return ve_.value_dedented(tensor, coords, code);
}

std::vector<std::string> GemmEmitter::unravel(const Shape& shape, const std::string& lin,
                                              const std::string& prefix, std::string& code) {
  std::string stmts;
  auto names = emit_unravel(shape, lin, prefix, stmts);
  code += dedent(stmts);
  return names;
}

// Operands addressed as memory: direct ones whose layout the template knows (the im2col
// gather has its own hoisted addressing, or goes through ValueEmitter).
bool GemmEmitter::has_address(const Operand& o) const {
  if (!o.direct) return false;
  // The CUDA-core path reads f16/bf16 operands element by element through ValueEmitter.
  if (!mma_ && o.dtype != DType::f32) return false;
  if (kind_ == HeavyKind::conv_weight_grad) return &o == &a_;  // B: X under the window
  if (kind_ == HeavyKind::conv && transposed_) return false;  // W is [C, M/group, taps]
  return !(kind_ == HeavyKind::conv && &o == &a_ && !win_.is_pointwise());
}

// Widest vector (<= the variant's vec) that divides the contiguous extent and the tile.
int64_t GemmEmitter::operand_vec(const Operand& o, bool contiguous_ok) const {
  if (!has_address(o) || !contiguous_ok) return 1;
  int64_t vec = std::max<int64_t>(1, p_.vec);
  const int64_t extent = o.along_rows ? o.rows : k_;
  const int64_t tile = o.along_rows ? o.tile : bk_;
  while (vec > 1 && (extent % vec != 0 || tile % vec != 0)) vec /= 2;
  return vec;
}

void GemmEmitter::choose_tiles() {
  bm_ = p_.block_m;
  bn_ = p_.block_n;
  bk_ = p_.block_k;
  tm_ = p_.thread_m;
  tn_ = p_.thread_n;
  DC_INTERNAL_CHECK(bm_ > 0 && bn_ > 0 && bk_ > 0 && tm_ > 0 && tn_ > 0 && bm_ % tm_ == 0 &&
                        bn_ % tn_ == 0,
                    v_.template_name, ": bad tile parameters in ", v_.key());
  threads_ = (bm_ / tm_) * (bn_ / tn_);
  DC_INTERNAL_CHECK(threads_ >= 1 && threads_ <= 1024, v_.template_name, ": ", threads_,
                    " threads per block");
  DC_INTERNAL_CHECK(v_.threads_per_block == 0 || v_.threads_per_block == threads_,
                    v_.template_name, ": variant says ", v_.threads_per_block,
                    " threads, tiles give ", threads_);
  // stages 2: register-staged double buffering; 3: a cp.async pipeline (see below).
  stages_ = std::clamp<int64_t>(p_.stages, 1, 3);  // absent (0): 1
  split_ = std::max<int64_t>(1, p_.split_k);
  warp_m_ = p_.warp_m;
  warp_n_ = p_.warp_n;
  warp_layout_ = threads_ % 32 == 0 && warp_m_ > 0 && warp_n_ > 0 && warp_m_ % tm_ == 0 &&
                 warp_n_ % tn_ == 0 && (warp_m_ / tm_) * (warp_n_ / tn_) == 32 &&
                 bm_ % warp_m_ == 0 && bn_ % warp_n_ == 0;
  a_.tile = bm_;
  b_.tile = bn_;
  for (Operand* o : {&a_, &b_}) {
    o->k_rows = false;
    o->ld = o->tile + kPad;
    o->stage = bk_ * o->ld;
  }
  a_.vec = operand_vec(a_, true);
  // Conv 1x1 (m) and the weight gradient's dY (k): a vector stays inside one image plane.
  if (vector_run(a_) > 0)
    while (a_.vec > 1 && vector_run(a_) % a_.vec != 0) a_.vec /= 2;
  b_.vec = operand_vec(b_, true);
  // cp.async copies global memory straight into shared memory, so both operands must be
  // plain loads (an address, or the hoisted implicit-GEMM gather); an operand with a fused
  // prologue goes through registers, and the kernel keeps register-staged double buffering.
  async_ = stages_ >= 3 && async_ok(a_) && async_ok(b_);
  if (stages_ >= 3 && !async_) stages_ = 2;
  // Split-K adds partial sums; without an epilogue they go straight into the output.
  split_direct_ = split_ > 1 && w_.graph.outputs.size() == 1 &&
                  w_.graph.outputs[0] == heavy_out_ && c_tensor_.empty() && bias_tensor_.empty() &&
                  w_.graph.info(heavy_out_).dtype == DType::f32;
}

const char* float_storage_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f16: return "dc_half";
    case DType::bf16: return "dc_bfloat16";
    default: return nullptr;
  }
}

std::string GemmEmitter::operand_value(const Operand& o, const std::string& row,
                                       const std::string& k, std::string& code) {
  const bool is_a = &o == &a_;
  std::vector<std::string> coords;
  std::vector<std::string> bc;
  for (size_t d = 0; d < batch_shape_.size(); ++d) bc.push_back(fmt::format("dc_bc{}", d));
  switch (kind_) {
    case HeavyKind::matmul:
      if (is_a) {
        if (a_shape_.size() == 1) {
          coords = {k};
        } else if (folded_ && a_shape_.size() > 2) {
          const Shape lead(a_shape_.begin(), a_shape_.end() - 1);
          coords = unravel(lead, row, fmt::format("dc_{}r{}_", o.label, uid_++), code);
          coords.push_back(k);
        } else {
          coords = bc;
          coords.push_back(row);
          coords.push_back(k);
        }
      } else {
        if (b_shape_.size() == 1) {
          coords = {k};
        } else {
          coords = bc;
          coords.push_back(k);
          coords.push_back(row);
        }
      }
      break;
    case HeavyKind::gemm:
      if (is_a) coords = trans_a_ ? std::vector<std::string>{k, row} : std::vector<std::string>{row, k};
      else coords = trans_b_ ? std::vector<std::string>{row, k} : std::vector<std::string>{k, row};
      break;
    case HeavyKind::conv_weight_grad: {
      if (!is_a) return conv_gather_value(o, k, row, code);  // k = (image, position), row = (c, tap)
      const std::string img = fmt::format("(({}) / {})", k, win_.out_size());
      const std::string p = fmt::format("(({}) % {})", k, win_.out_size());
      coords = {img, fmt::format("(dc_bz * {} + {})", cout_group_, row)};
      const auto pos = unravel(win_.out_dims(), p, fmt::format("dc_{}p{}_", o.label, uid_++), code);
      coords.insert(coords.end(), pos.begin(), pos.end());
      break;
    }
    case HeavyKind::conv: {
      if (is_a) return conv_gather_value(o, row, k, code);
      const Shape& ws = w_.graph.info(o.tensor).shape;
      if (transposed_) {  // W[g * Cg + c][n][taps], k = (c, taps)
        Shape ks(ws.begin() + 1, ws.end());
        ks[0] = cin_group_;
        const auto ct = unravel(ks, k, fmt::format("dc_{}k{}_", o.label, uid_++), code);
        coords = {fmt::format("(dc_bz * {} + {})", cin_group_, ct[0]), row};
        coords.insert(coords.end(), ct.begin() + 1, ct.end());
        break;
      }
      coords = {fmt::format("(dc_bz * {} + {})", cout_group_, row)};
      const auto taps = unravel(Shape(ws.begin() + 1, ws.end()), k,
                                     fmt::format("dc_{}k{}_", o.label, uid_++), code);
      coords.insert(coords.end(), taps.begin(), taps.end());
      break;
    }
  }
  return value(o.tensor, coords, code);
}

std::string GemmEmitter::operand_address(const Operand& o, const std::string& row,
                                         const std::string& k) const {
  const bool is_a = &o == &a_;
  switch (kind_) {
    case HeavyKind::matmul:
      if (is_a) return o.swapped ? fmt::format("dc_a_base + {} * {} + {}", k, m_, row)
                                 : fmt::format("dc_a_base + {} * {} + {}", row, k_, k);
      return o.swapped ? fmt::format("dc_b_base + {} * {} + {}", row, k_, k)
                       : fmt::format("dc_b_base + {} * {} + {}", k, n_, row);
    case HeavyKind::gemm:
      if (is_a) return trans_a_ != o.swapped ? fmt::format("{} * {} + {}", k, m_, row)
                                             : fmt::format("{} * {} + {}", row, k_, k);
      return trans_b_ != o.swapped ? fmt::format("{} * {} + {}", row, k_, k)
                                   : fmt::format("{} * {} + {}", k, n_, row);
    case HeavyKind::conv:
      if (is_a) {  // 1x1 stride 1: x[img][g*Cg + k][p], m = img * HW + p
        const int64_t hw = win_.out_size();
        return fmt::format("({0} / {1}) * {2} + (dc_bz * {3} + {4}) * {1} + {0} % {1}", row, hw,
                           channels_ * hw, cin_group_, k);
      }
      return fmt::format("(dc_bz * {} + {}) * {} + {}", cout_group_, row, k_, k);
    case HeavyKind::conv_weight_grad:  // dY[n][g Mg + m][p], k = n * P + p
      DC_INTERNAL_CHECK(is_a, "conv_implicit_gemm: the weight gradient's X has no plain address");
      return fmt::format("(({1}) / {2}) * {3} + (dc_bz * {4} + {0}) * {2} + ({1}) % {2}", row, k,
                         win_.out_size(), out_channels_ * win_.out_size(), cout_group_);
  }
  return "0";
}

std::vector<std::string> GemmEmitter::heavy_coords(std::string& code) {
  if (kind_ == HeavyKind::conv) {
    const int64_t ohw = win_.out_size(), ow = win_.out[2];
    code += fmt::format(
        "const {2} dc_o_img = dc_gm / {0}, dc_o_p = dc_gm % {0};\n"
        "const {2} dc_o_c = dc_bz * {1} + dc_gn;\n",
        ohw, cout_group_, idx_);
    if (spatial_rank_ == 3)
      return {"dc_o_img", "dc_o_c", fmt::format("(dc_o_p / {})", win_.out[1] * ow),
              fmt::format("(dc_o_p / {} % {})", ow, win_.out[1]), fmt::format("(dc_o_p % {})", ow)};
    if (spatial_rank_ == 2)
      return {"dc_o_img", "dc_o_c", fmt::format("(dc_o_p / {})", ow), fmt::format("(dc_o_p % {})", ow)};
    return {"dc_o_img", "dc_o_c", "dc_o_p"};
  }
  // Batch dims then (m, n) when the output has them all; otherwise (folded M, 1-D
  // operands) unravel the linear offset.
  const bool plain = (kind_ == HeavyKind::gemm) ||
                     (!folded_ && heavy_shape_.size() == batch_shape_.size() + 2) ||
                     (folded_ && a_shape_.size() == 2 && b_shape_.size() == 2);
  if (plain) {
    std::vector<std::string> c;
    for (size_t d = 0; d < batch_shape_.size(); ++d) c.push_back(fmt::format("dc_bc{}", d));
    c.push_back("dc_gm");
    c.push_back("dc_gn");
    return c;
  }
  code += fmt::format("const {} dc_o_lin = dc_bz * {} + dc_gm * {} + dc_gn;\n", idx_, m_ * n_, n_);
  return unravel(heavy_shape_, "dc_o_lin", "dc_o", code);
}

void GemmEmitter::heavy_value(const std::string& acc, const std::vector<std::string>& coords,
                              std::string& code, const std::string& var) {
  std::string expr = acc;
  if (kind_ == HeavyKind::gemm) {
    if (alpha_ != 1.f) expr = fmt::format("{} * {}", float_literal(alpha_), expr);
    if (!c_tensor_.empty()) {
      const std::string c = value(c_tensor_, coords, code);
      expr = beta_ == 1.f ? fmt::format("{} + {}", expr, c)
                          : fmt::format("{} + {} * {}", expr, float_literal(beta_), c);
    }
  } else if (kind_ == HeavyKind::conv && !bias_tensor_.empty()) {
    expr = fmt::format("{} + {}", expr, value(bias_tensor_, {coords[1]}, code));
  }
  // An f16/bf16 heavy output is rounded to its storage type, as the reference rounds it,
  // before an epilogue reads it.
  const DType t = w_.graph.info(heavy_out_).dtype;
  if (t == DType::f16) expr = fmt::format("dc_round_f16({})", expr);
  if (t == DType::bf16) expr = fmt::format("dc_round_bf16({})", expr);
  code += fmt::format("const float {} = {};\n", var, expr);
}

void GemmEmitter::store_outputs(const std::vector<std::string>& coords, std::string& code) {
  if (!glu_) ve_.bind(heavy_out_, "dc_h");
  for (const auto& o : w_.graph.outputs) {
    if (o == sum_out_) continue;  // operand_sum_code
    const std::string val = value(o, coords, code);
    const DType t = w_.graph.info(o).dtype;
    // f16/bf16 outputs: rounded once, to nearest even, from the fp32 value.
    const std::string stored = t == DType::f16 || t == DType::bf16
                                   ? fmt::format("dc_from_f32<{}>({})", float_storage_type(t), val)
                                   : val;
    code += fmt::format("{}[{}] = {};\n", ve_.param_name(o), ve_.offset(o, coords), stored);
  }
}

// Batch coordinates and operand base offsets of this block (blockIdx.z = batch * split + slice).
std::string GemmEmitter::setup_code() {
  std::string code = fmt::format(
      "const {1} dc_bz = blockIdx.z / {0};\n"
      "const int dc_slice = (int)(blockIdx.z % {0});\n",
      split_, idx_);
  if (kind_ != HeavyKind::matmul) return code;
  unravel(batch_shape_, "dc_bz", "dc_bc", code);
  // Broadcast batch offsets of the direct operands.
  auto base = [&](const Shape& s, const char* name) {
    std::string terms;
    if (!folded_ && s.size() > 2) {
      const Shape bs(s.begin(), s.end() - 2);
      const auto strides = shape_strides(s);
      const size_t off = batch_shape_.size() - bs.size();
      for (size_t d = 0; d < bs.size(); ++d)
        if (bs[d] != 1) terms += fmt::format(" + dc_bc{} * {}", off + d, strides[d]);
    }
    code += fmt::format("const {} {} = 0{};\n", idx_, name, terms);
  };
  base(a_shape_, "dc_a_base");
  base(b_shape_, "dc_b_base");
  for (size_t d = 0; d < batch_shape_.size(); ++d) code += fmt::format("(void)dc_bc{};\n", d);
  return code + "(void)dc_a_base;\n(void)dc_b_base;\n";
}

std::string GemmEmitter::epilogue_code() {
  if (glu_) return glu_epilogue_code();
  if (sum_out_.empty()) return heavy_epilogue_code();
  const std::string ones = a_.ones_row ? fmt::format("dc_gm == {}", m_) : fmt::format("dc_gn == {}", n_);
  return fmt::format("if ({}) {{\n{}}} else {{\n{}}}\n", ones, operand_sum_code(), heavy_epilogue_code());
}

// The ones row's accumulator (dc_acc) is element dc_gn (A's ones: a sum of B) or dc_gm of the
// sum, past the filters of the groups before (a grouped weight gradient: the groups are the
// batch); split-K adds it to scratch0 past the heavy output.
std::string GemmEmitter::operand_sum_code() {
  const std::string i = a_.ones_row                           ? "dc_gn"
                        : kind_ == HeavyKind::conv_weight_grad ? fmt::format("(dc_bz * {} + dc_gm)", m_)
                                                               : "dc_gm";
  if (split_ > 1)
    return fmt::format("atomicAdd(&scratch0[{} + {}], dc_acc);\n", shape_numel(heavy_shape_), i);
  const DType t = w_.graph.info(sum_out_).dtype;
  const std::string v = t == DType::f32 ? "dc_acc" : fmt::format("dc_from_f32<{}>(dc_acc)", float_storage_type(t));
  return fmt::format("{}[{}] = {};\n", ve_.param_name(sum_out_), i, v);
}

std::string GemmEmitter::heavy_epilogue_code() {
  std::string epi;
  ve_.reset_locals();
  const auto coords = heavy_coords(epi);
  if (split_ > 1 && split_direct_) {
    // Partial sums of the slice straight into the zero-initialised (f32) output.
    const std::string& o = w_.graph.outputs[0];
    const std::string acc = kind_ == HeavyKind::gemm && alpha_ != 1.f
                                ? fmt::format("{} * dc_acc", float_literal(alpha_))
                                : "dc_acc";
    epi += fmt::format("atomicAdd(&{}[{}], {});\n", ve_.param_name(o), ve_.offset(o, coords), acc);
  } else if (split_ > 1) {
    epi += fmt::format("atomicAdd(&scratch0[{}], dc_acc);\n", ve_.offset(heavy_out_, coords));
  } else {
    heavy_value("dc_acc", coords, epi);
    store_outputs(coords, epi);
  }
  ve_.reset_locals();
  return epi;
}

// The MatMul's output coordinates end with its column dc_gn whatever heavy_coords makes
// of the rows (batch dims, folded M), so the halves' element is the same coordinates with
// dc_gn / 2 last. The two heavy values are rounded to the heavy output's storage type, as
// the reference stores y before its Slices move the bits.
std::string GemmEmitter::glu_epilogue_code() {
  DC_INTERNAL_CHECK(split_ == 1 && kind_ == HeavyKind::matmul && heavy_shape_.back() == n_,
                    v_.template_name, ": GLU epilogue without a single-pass MatMul");
  std::string epi;
  ve_.reset_locals();
  auto coords = heavy_coords(epi);
  heavy_value("dc_acc0", coords, epi, "dc_h0");
  heavy_value("dc_acc1", coords, epi, "dc_h1");
  coords.back() = "(dc_gn / 2)";
  ve_.bind(glu_even_, "dc_h0");
  ve_.bind(glu_odd_, "dc_h1");
  store_outputs(coords, epi);
  ve_.unbind(glu_even_);
  ve_.unbind(glu_odd_);
  ve_.reset_locals();
  return epi;
}

std::string GemmEmitter::epilogue_loop_fp32() {
  const char* loop = glu_ ? R"(// GLU epilogue: column pairs (2j, 2j + 1) of the thread tile give output column j.
DC_UNROLL
for (int dc_i = 0; dc_i < dc_TM; ++dc_i) {
  DC_UNROLL
  for (int dc_j = 0; dc_j < dc_TN; dc_j += 2) {
    const $(IDX) dc_gm = dc_m_base + dc_i, dc_gn = dc_n_base + dc_j;
    if (dc_gm < $(M) && dc_gn < $(N)) {
      const float dc_acc0 = dc_accum[dc_i][dc_j], dc_acc1 = dc_accum[dc_i][dc_j + 1];
      $(EPILOGUE)
    }
  }
})"
                          : R"(DC_UNROLL
for (int dc_i = 0; dc_i < dc_TM; ++dc_i) {
  DC_UNROLL
  for (int dc_j = 0; dc_j < dc_TN; ++dc_j) {
    const $(IDX) dc_gm = dc_m_base + dc_i, dc_gn = dc_n_base + dc_j;
    if (dc_gm < $(M) && dc_gn < $(N)) {
      const float dc_acc = dc_accum[dc_i][dc_j];
      $(EPILOGUE)
    }
  }
})";
  DC_INTERNAL_CHECK(!glu_ || tn_ % 2 == 0, v_.template_name, ": GLU epilogue with an odd thread_n");
  return expand_template(loop, {{"IDX", idx_},
                                {"M", str(a_.rows_with_ones())},
                                {"N", str(b_.rows_with_ones())},
                                {"EPILOGUE", epilogue_code()}});
}

// Implicit-GEMM A gathers: the rows a thread loads are the same for every K tile when the
// thread count and block_m divide one another, so their (image, output position)
// decomposition is computed once per block, not per element per tile.

namespace {

// The CUDA-core kernel, by part: the tile's figures and its inner product (a device
// function), then the kernel: accumulators, the first tile, the K-tile pipeline, the
// epilogue loop.
constexpr const char* kFp32Tile = R"(// Tile figures: block $(BM)x$(BN)x$(BK), thread tile $(TM)x$(TN), $(THREADS) threads.
constexpr int dc_BM = $(BM), dc_BN = $(BN), dc_BK = $(BK), dc_TM = $(TM), dc_TN = $(TN);
constexpr int dc_LDA = $(LDA), dc_LDB = $(LDB);  // shared row length incl. pad

// Inner product of one K tile (the part a tensor-core version replaces): every thread
// multiplies its column of A (TM values) by its row of B (TN values), BK times.
__device__ __forceinline__ void dc_mma_tile_fp32(const float* DC_RESTRICT dc_as,
                                                 const float* DC_RESTRICT dc_bs,
                                                 float (&dc_accum)[dc_TM][dc_TN], int dc_row0,
                                                 int dc_col0) {
  DC_UNROLL_K
  for (int dc_kk = 0; dc_kk < dc_BK; ++dc_kk) {
    float dc_fa[dc_TM], dc_fb[dc_TN];
    DC_UNROLL
    for (int dc_i = 0; dc_i < dc_TM; ++dc_i) dc_fa[dc_i] = dc_as[dc_kk * dc_LDA + dc_row0 + dc_i];
    DC_UNROLL
    for (int dc_j = 0; dc_j < dc_TN; ++dc_j) dc_fb[dc_j] = dc_bs[dc_kk * dc_LDB + dc_col0 + dc_j];
    DC_UNROLL
    for (int dc_i = 0; dc_i < dc_TM; ++dc_i) {
      DC_UNROLL
      for (int dc_j = 0; dc_j < dc_TN; ++dc_j)
        dc_accum[dc_i][dc_j] = fmaf(dc_fa[dc_i], dc_fb[dc_j], dc_accum[dc_i][dc_j]);
    }
  }
}

)";
constexpr const char* kFp32Kernel = R"(extern "C" __global__ void DC_LAUNCH_BOUNDS($(THREADS)) dc_gemm($(PARAMS)) {
  DC_DYNAMIC_SMEM(float, dc_smem);
  // Shared memory: A tiles [stage][BK][LDA], then B tiles [stage][BK][LDB], both k-major.
  float* dc_as = dc_smem;
  float* dc_bs = dc_smem + $(A_SMEM);
  $(SETUP)
  const int dc_warp = (int)threadIdx.x / 32, dc_lane = (int)threadIdx.x % 32;
  (void)dc_warp;
  (void)dc_lane;
  const int dc_row0 = $(ROW0);
  const int dc_col0 = $(COL0);
  float dc_accum[dc_TM][dc_TN];
  DC_UNROLL
  for (int dc_i = 0; dc_i < dc_TM; ++dc_i) {
    DC_UNROLL
    for (int dc_j = 0; dc_j < dc_TN; ++dc_j) dc_accum[dc_i][dc_j] = 0.f;
  }
  $(STAGING)
  // K tiles of this split-K slice.
  const int dc_kt_begin = dc_slice * $(KT_PER);
  const int dc_kt_end = dc_kt_begin + $(KT_PER) < $(KT) ? dc_kt_begin + $(KT_PER) : $(KT);
  if (dc_kt_begin < dc_kt_end) {
    $(FIRST)
    $(PIPELINE)
  }
  const $(IDX) dc_m_base = ($(IDX))blockIdx.x * $(BM) + dc_row0;
  const $(IDX) dc_n_base = ($(IDX))blockIdx.y * $(BN) + dc_col0;
  $(EPILOGUE_LOOP)
}
DC_EXPORT_KERNEL(dc_gemm)
)";
// The K-tile pipelines: cp.async stages, double buffering through registers, one stage.
constexpr const char* kAsyncPipeline = R"(// cp.async pipeline of $(STAGES) stages: the next $(STAGES) - 1 K tiles are in flight
// (global -> shared, no registers) while this one is multiplied.
DC_UNROLL
for (int dc_s = 0; dc_s < $(STAGES) - 1; ++dc_s) {
  if (dc_kt_begin + dc_s < dc_kt_end) {
    const $(IDX) dc_k0 = ($(IDX))(dc_kt_begin + dc_s) * $(BK);
    const int dc_st = dc_s;
    $(ASYNC_LOAD)
  }
  dc_cp_async_commit();
}
for (int dc_kt = dc_kt_begin; dc_kt < dc_kt_end; ++dc_kt) {
  const int dc_t = dc_kt - dc_kt_begin;
  // Groups committed so far: $(STAGES) - 1 + dc_t; tile dc_t is group dc_t, complete once
  // at most $(STAGES) - 2 are pending. The barrier then makes every thread's copies
  // visible, and ends every thread's use of the stage the next copies overwrite.
  dc_cp_async_wait<$(STAGES) - 2>();
  __syncthreads();
  if (dc_kt + $(STAGES) - 1 < dc_kt_end) {
    const $(IDX) dc_k0 = ($(IDX))(dc_kt + $(STAGES) - 1) * $(BK);
    const int dc_st = (dc_t + $(STAGES) - 1) % $(STAGES);
    $(ASYNC_LOAD)
  }
  dc_cp_async_commit();
  const int dc_cur = dc_t % $(STAGES);
  dc_mma_tile_fp32(dc_as + dc_cur * $(BK) * $(LDA), dc_bs + dc_cur * $(BK) * $(LDB), dc_accum,
                   dc_row0, dc_col0);
}
dc_cp_async_wait<0>();
)";
constexpr const char* kDoubleBuffer = R"(// Double buffering: the next K tile goes global -> registers while this one is
// multiplied, then registers -> the other shared stage; one barrier per tile.
for (int dc_kt = dc_kt_begin; dc_kt < dc_kt_end; ++dc_kt) {
  const int dc_cur = (dc_kt - dc_kt_begin) & 1;
  const bool dc_more = dc_kt + 1 < dc_kt_end;
  if (dc_more) {
    const $(IDX) dc_k0 = ($(IDX))(dc_kt + 1) * $(BK);
    $(LOAD)
  }
  dc_mma_tile_fp32(dc_as + dc_cur * $(BK) * $(LDA), dc_bs + dc_cur * $(BK) * $(LDB), dc_accum,
                   dc_row0, dc_col0);
  if (dc_more) {
    const int dc_st = dc_cur ^ 1;
    $(STORE)
  }
  __syncthreads();
}
)";
constexpr const char* kSingleBuffer = R"(for (int dc_kt = dc_kt_begin; dc_kt < dc_kt_end; ++dc_kt) {
  if (dc_kt > dc_kt_begin) {
    const $(IDX) dc_k0 = ($(IDX))dc_kt * $(BK);
    $(LOAD)
    const int dc_st = 0;
    $(STORE)
    __syncthreads();
  }
  dc_mma_tile_fp32(dc_as, dc_bs, dc_accum, dc_row0, dc_col0);
  __syncthreads();
}
)";
// Register-staged pipelines load the first tile up front; cp.async has its own prologue.
constexpr const char* kStaging = R"(float dc_ra[$(RA)];  // staged global loads of A and B
  float dc_rb[$(RB)];)";
constexpr const char* kFirstTile = R"({
      const $(IDX) dc_k0 = ($(IDX))dc_kt_begin * $(BK);
      $(LOAD)
      const int dc_st = 0;
      $(STORE)
    }
    __syncthreads();)";

}  // namespace

// Tile figures, and where each thread's TM x TN tile starts: warps tiling the block as
// (BM / warp_m) x (BN / warp_n) with lanes tiling a warp's tile, or threads in row order.
TemplateVars GemmEmitter::fp32_vars() const {
  const int64_t lda = bm_ + kPad, ldb = bn_ + kPad;
  TemplateVars vars = {{"BM", str(bm_)},
                       {"BN", str(bn_)},
                       {"BK", str(bk_)},
                       {"TM", str(tm_)},
                       {"TN", str(tn_)},
                       {"THREADS", str(threads_)},
                       {"LDA", str(lda)},
                       {"LDB", str(ldb)},
                       {"M", str(m_)},
                       {"N", str(n_)},
                       {"KT", str(ceil_div(k_, bk_))},
                       {"KT_PER", str(ceil_div(ceil_div(k_, bk_), split_))},
                       {"A_SMEM", str(stages_ * bk_ * lda)},
                       {"IDX", idx_}};
  vars["RA"] = str(ceil_div(bm_ * bk_ / a_.vec, threads_) * a_.vec);
  vars["RB"] = str(ceil_div(bn_ * bk_ / b_.vec, threads_) * b_.vec);
  vars["PARAMS"] = split_ > 1 && !split_direct_
                       ? kernel_params(w_, {"float* DC_RESTRICT scratch0"})
                       : kernel_params(w_);
  if (warp_layout_) {
    // Warps tile the block as (BM / warp_m) x (BN / warp_n); lanes tile a warp's tile.
    vars["ROW0"] = fmt::format("(dc_warp / {}) * {} + (dc_lane / {}) * {}", bn_ / warp_n_, warp_m_,
                               warp_n_ / tn_, tm_);
    vars["COL0"] = fmt::format("(dc_warp % {}) * {} + (dc_lane % {}) * {}", bn_ / warp_n_, warp_n_,
                               warp_n_ / tn_, tn_);
  } else {
    vars["ROW0"] = fmt::format("((int)threadIdx.x / {}) * {}", bn_ / tn_, tm_);
    vars["COL0"] = fmt::format("((int)threadIdx.x % {}) * {}", bn_ / tn_, tn_);
  }
  return vars;
}

std::string GemmEmitter::main_kernel() {
  TemplateVars vars = fp32_vars();
  vars["SETUP"] = setup_code() + (hoist_conv_rows() ? conv_rows_code() : "");
  vars["LOAD"] = load_code(a_) + load_code(b_);
  vars["STORE"] = store_code(a_) + store_code(b_);
  vars["STAGES"] = str(stages_);
  if (async_) vars["ASYNC_LOAD"] = async_load_code(a_) + async_load_code(b_);
  vars["EPILOGUE_LOOP"] = epilogue_loop_fp32();
  vars["PIPELINE"] = expand_template(async_ ? kAsyncPipeline : stages_ >= 2 ? kDoubleBuffer : kSingleBuffer, vars);
  vars["STAGING"] = async_ ? "" : expand_template(kStaging, vars);
  vars["FIRST"] = async_ ? "" : expand_template(kFirstTile, vars);
  return expand_template(kFp32Tile, vars) + expand_template(kFp32Kernel, vars);
}

int64_t GemmEmitter::scratch_numel() const {
  const int64_t sum = sum_out_.empty() ? 0 : shape_numel(w_.graph.info(sum_out_).shape);
  return shape_numel(heavy_shape_) + sum;
}

// Split-K with an epilogue: the slices summed into scratch0 (laid out as the heavy op's
// output); this kernel applies bias/alpha/beta*C and the fused epilogue per element.
std::string GemmEmitter::epilogue_kernel() {
  std::string body;
  ve_.reset_locals();
  const auto coords = unravel(heavy_shape_, "dc_lin", "dc_e", body);
  body += "const float dc_acc = scratch0[dc_lin];\n";
  heavy_value("dc_acc", coords, body);
  store_outputs(coords, body);
  ve_.reset_locals();
  const int64_t heavy_numel = shape_numel(heavy_shape_);
  if (!sum_out_.empty()) {  // the operand sum follows the heavy output in scratch0
    const DType t = w_.graph.info(sum_out_).dtype;
    const std::string v = t == DType::f32 ? "scratch0[dc_lin]"
                                          : fmt::format("dc_from_f32<{}>(scratch0[dc_lin])", float_storage_type(t));
    body = fmt::format("if (dc_lin >= {0}) {{\n{1}[dc_lin - {0}] = {2};\n}} else {{\n{3}}}\n", heavy_numel,
                       ve_.param_name(sum_out_), v, body);
  }
  return expand_template(R"(
// Split-K epilogue: the summed slices (scratch0) through bias/alpha/beta*C and the cluster's
// epilogue, one thread per element.
extern "C" __global__ void DC_LAUNCH_BOUNDS($(T)) dc_gemm_epilogue($(PARAMS)) {
  const $(IDX) dc_lin = ($(IDX))blockIdx.x * $(T) + threadIdx.x;
  if (dc_lin < $(NUMEL)) {
    $(BODY)
  }
}
DC_EXPORT_KERNEL(dc_gemm_epilogue)
)",
                         {{"PARAMS", kernel_params(w_, {"float* DC_RESTRICT scratch0"})},
                          {"T", str(kEpilogueThreads)},
                          {"NUMEL", str(scratch_numel())},
                          {"IDX", idx_},
                          {"BODY", body}});
}

GeneratedKernel GemmEmitter::emit() {
  analyze();
  if (mma_) choose_tiles_mma();
  else choose_tiles();
  const int64_t grid_x = ceil_div(a_.rows_with_ones(), bm_), grid_y = ceil_div(b_.rows_with_ones(), bn_),
                grid_z = batch_ * split_;
  DC_INTERNAL_CHECK(grid_y <= 65535 && grid_z <= 65535 && grid_x < (int64_t{1} << 31),
                    v_.template_name, ": grid ", grid_x, "x", grid_y, "x", grid_z,
                    " exceeds CUDA's limits");
  GeneratedKernel k = start_kernel(w_, v_);
  std::string src = source_header(w_, v_.template_name, v_.key());
  src += fmt::format(
      "// {} {}x{}x{} (M x N x K), batch {}, split-K {}, stages {}, vector loads A {} B {}\n",
      heavy_->op, m_, n_, k_, batch_, split_, stages_, a_.vec, b_.vec);
  src += mma_ ? main_kernel_mma() : main_kernel();
  Launch main;
  main.kernel = "dc_gemm";
  main.grid = {grid_x, grid_y, grid_z};
  main.block = {threads_, 1, 1};
  main.dynamic_smem_bytes = stages_ * (a_.stage + b_.stage) * (mma_ && v_.precision != "tf32" ? 2 : 4);
  main.args = all_workload_args(w_);
  if (split_ > 1 && split_direct_) {
    for (auto& b : k.buffers)
      if (b.role == BufferRole::output) b.zero_init = true;
  } else if (split_ > 1) {
    const Shape scratch = sum_out_.empty() ? heavy_shape_ : Shape{scratch_numel()};
    k.buffers.push_back({"scratch0", BufferRole::scratch, DType::f32, scratch, true});
    main.args.push_back(static_cast<int>(k.buffers.size()) - 1);
    src += epilogue_kernel();
  }
  k.launches.push_back(main);
  if (split_ > 1 && !split_direct_) {
    Launch epi;
    epi.kernel = "dc_gemm_epilogue";
    epi.grid = {ceil_div(scratch_numel(), kEpilogueThreads), 1, 1};
    epi.block = {kEpilogueThreads, 1, 1};
    epi.args = main.args;
    k.launches.push_back(epi);
  }
  k.source = std::move(src);
  return k;
}

}  // namespace gemm_detail

GeneratedKernel generate_gemm(const Workload& w, const Variant& v) {
  DC_INTERNAL_CHECK(v.template_name == "gemm_tiled" || v.template_name == "conv_implicit_gemm",
                    "generate_gemm with template ", v.template_name);
  return gemm_detail::GemmEmitter(w, v).emit();
}

}  // namespace dc
