// GEMM-family tile loads (see template_gemm_emitter.h): per K tile, each operand from global
// memory into its k-major shared stage, either through registers (load_code + store_code,
// with fused prologues and float4/float2 loads) or with cp.async copies (async_load_code,
// stages 3); the implicit-GEMM gather with rows hoisted out of the K loop. docs/codegen.md.
#include <fmt/format.h>

#include "ir/error.h"
#include "template_gemm_emitter.h"
#include "template_util.h"

namespace dc::gemm_detail {

bool GemmEmitter::hoist_conv_rows() const {
  // The CUDA-core path reads f16/bf16 inputs through ValueEmitter, not by address.
  return kind_ == HeavyKind::conv && !transposed_ && spatial_rank_ <= 2 && a_.direct &&
         (mma_ || a_.dtype == DType::f32) &&
         !win_.is_pointwise() && idx_ == "int" &&
         (threads_ % bm_ == 0 || bm_ % threads_ == 0);
}

std::string GemmEmitter::conv_rows_code() const {
  const int64_t nr = threads_ % bm_ == 0 ? 1 : bm_ / threads_;
  const int64_t hw = win_.in[1] * win_.in[2];
  return expand_template(R"(// Rows of the A tile this thread gathers: input base, top-left tap, validity.
int dc_xrow_base[$(NR)], dc_xrow_ih[$(NR)], dc_xrow_iw[$(NR)];
bool dc_xrow_ok[$(NR)];
DC_UNROLL
for (int dc_j = 0; dc_j < $(NR); ++dc_j) {
  const int dc_row = (int)blockIdx.x * $(BM) + ((int)threadIdx.x + dc_j * $(THREADS)) % $(BM);
  const int dc_img = dc_row / $(OHW), dc_p = dc_row % $(OHW);
  dc_xrow_ok[dc_j] = dc_row < $(M);
  dc_xrow_base[dc_j] = dc_img * $(CHW) + dc_bz * $(CGHW);
  dc_xrow_ih[dc_j] = (dc_p / $(OW)) * $(SH) - $(PH);
  dc_xrow_iw[dc_j] = (dc_p % $(OW)) * $(SW) - $(PW);
}
)",
                         {{"NR", str(nr)},
                          {"BM", str(bm_)},
                          {"THREADS", str(threads_)},
                          {"OHW", str(win_.out_size())},
                          {"M", str(m_)},
                          {"CHW", str(channels_ * hw)},
                          {"CGHW", str(cin_group_ * hw)},
                          {"OW", str(win_.out[2])},
                          {"SH", str(win_.stride[1])},
                          {"PH", str(win_.pad_begin[1])},
                          {"SW", str(win_.stride[2])},
                          {"PW", str(win_.pad_begin[2])}});
}

// One A load slot with hoisted rows (dc_l, dc_k in scope).
std::string GemmEmitter::conv_gather_body() const {
  return expand_template(R"(const int dc_j = $(J);
if (dc_xrow_ok[dc_j]) {
  const int dc_ch = dc_k / $(KK), dc_tap = dc_k % $(KK);
  const int dc_ih = dc_xrow_ih[dc_j] + (dc_tap / $(KW)) * $(DH);
  const int dc_iw = dc_xrow_iw[dc_j] + (dc_tap % $(KW)) * $(DW);
  if (dc_ih >= 0 && dc_ih < $(H) && dc_iw >= 0 && dc_iw < $(W))
    dc_ra[dc_l] = $(LOAD_OPEN)$(X)[dc_xrow_base[dc_j] + dc_ch * $(HW) + dc_ih * $(W) + dc_iw]$(LOAD_CLOSE);
}
)",
                         [&] {
                           TemplateVars g = conv_gather_vars();
                           const bool f32 = a_.dtype == DType::f32;
                           g.insert({{"LOAD_OPEN", f32 ? "" : "dc_to_f32("},
                                     {"LOAD_CLOSE", f32 ? "" : ")"}});
                           return g;
                         }());
}

// The window figures a gather of A needs (conv_gather_body, async_load_code): the hoisted
// row slot J of load slot dc_l, kernel taps, dilation, input plane, the input's parameter.
TemplateVars GemmEmitter::conv_gather_vars() const {
  const int64_t nr = threads_ % bm_ == 0 ? 1 : bm_ / threads_;
  return {{"J", nr == 1 ? "0" : "dc_l % " + str(nr)},
          {"KK", str(win_.kernel_size())},
          {"KW", str(win_.kernel[2])},
          {"DH", str(win_.dilation[1])},
          {"DW", str(win_.dilation[2])},
          {"H", str(win_.in[1])},
          {"W", str(win_.in[2])},
          {"HW", str(win_.in[1] * win_.in[2])},
          {"X", ve_.param_name(a_.tensor)}};
}

std::string GemmEmitter::conv_gather_value(const Operand& o, const std::string& row,
                                           const std::string& k, std::string& code) {
  // row -> (image, output position), k -> (channel, kernel tap); per spatial dim the input
  // position under the tap: o * s - p + t * d for Conv, (o + p - t * d) / s when exact for
  // ConvTranspose.
  const std::string p = fmt::format("dc_{}{}", o.label, uid_++);
  code += fmt::format(
      "const {0} {1}_img = ({2}) / {3}, {1}_p = ({2}) % {3};\n"
      "const {0} {1}_c = ({4}) / {5}, {1}_tap = ({4}) % {5};\n",
      idx_, p, row, win_.out_size(), k, win_.kernel_size());
  std::vector<std::string> coords = {p + "_img", fmt::format("(dc_bz * {} + {}_c)", cin_group_, p)};
  std::vector<std::string> inside;
  int64_t ostride = 1, kstride = 1;
  std::vector<std::string> dims;
  for (int d = ref::Window::kMaxRank - 1; d >= ref::Window::kMaxRank - spatial_rank_; --d) {
    const std::string od = fmt::format("{}_o{}", p, d), td = fmt::format("{}_t{}", p, d);
    const std::string id = fmt::format("{}_i{}", p, d);
    std::string s = fmt::format("const {0} {1} = ({2}_p / {3}) % {4}, {5} = ({2}_tap / {6}) % {7};\n",
                                idx_, od, p, ostride, win_.out[d], td, kstride, win_.kernel[d]);
    if (!transposed_) {
      s += fmt::format("const {} {} = {} * {} - {} + {} * {};\n", idx_, id, od, win_.stride[d],
                       win_.pad_begin[d], td, win_.dilation[d]);
      inside.push_back(fmt::format("{0} >= 0 && {0} < {1}", id, win_.in[d]));
    } else {
      const std::string nd = fmt::format("{}_n{}", p, d);
      s += fmt::format("const {} {} = {} + {} - {} * {};\n", idx_, nd, od, win_.pad_begin[d], td,
                       win_.dilation[d]);
      s += fmt::format("const {} {} = {} / {};\n", idx_, id, nd, win_.stride[d]);
      inside.push_back(win_.stride[d] == 1
                           ? fmt::format("{0} >= 0 && {1} < {2}", nd, id, win_.in[d])
                           : fmt::format("{0} >= 0 && {0} % {1} == 0 && {2} < {3}", nd,
                                         win_.stride[d], id, win_.in[d]));
    }
    dims.insert(dims.begin(), s);
    coords.insert(coords.begin() + 2, id);
    ostride *= win_.out[d];
    kstride *= win_.kernel[d];
  }
  for (const auto& s : dims) code += s;
  std::string inner;
  const std::string x = value(o.tensor, coords, inner);
  ve_.reset_locals();  // locals made inside the branch are not visible after it
  std::string cond;
  for (const auto& c : inside) cond += (cond.empty() ? "" : " && ") + c;
  code += expand_template(R"(float $(P)_x = 0.f;
if ($(COND)) {
  $(INNER)
  $(P)_x = $(X);
}
)",
                          {{"P", p}, {"COND", cond}, {"INNER", inner}, {"X", x}});
  return p + "_x";
}

// Index of a load slot's element in its tile: rows-fastest or k-fastest, in vectors.
TemplateVars slot_index(const Operand& o, int64_t bk) {
  if (o.along_rows)
    return {{"R", fmt::format("(dc_i % {}) * {}", o.tile / o.vec, o.vec)},
            {"C", fmt::format("dc_i / {}", o.tile / o.vec)}};
  return {{"R", fmt::format("dc_i / {}", bk / o.vec)},
          {"C", fmt::format("(dc_i % {}) * {}", bk / o.vec, o.vec)}};
}

// Global -> registers for one operand's K tile at dc_k0: LOADS slots per thread, vectors of
// `vec` elements along the contiguous dimension, zeros outside the matrix.
std::string GemmEmitter::load_code(const Operand& o) {
  const int64_t total = o.tile * bk_ / o.vec;
  const int64_t loads = ceil_div(total, threads_);
  TemplateVars vars = slot_index(o, bk_);
  vars.insert({{"L", o.label},
               {"LOADS", str(loads)},
               {"THREADS", str(threads_)},
               {"TOTAL", str(total)},
               {"VEC", str(o.vec)},
               {"IDX", idx_}});
  vars["ROW0"] = std::string(o.label) == "a" ? "(" + idx_ + ")blockIdx.x * " + str(bm_)
                                             : "(" + idx_ + ")blockIdx.y * " + str(bn_);
  vars["COND"] = fmt::format("{}dc_row < {} && dc_k < {}",
                             total % threads_ == 0 ? "" : fmt::format("dc_i < {} && ", total),
                             o.rows, k_);
  std::string zero;
  for (int64_t j = 0; j < o.vec; ++j) zero += fmt::format("dc_r{}[dc_l * {} + {}] = 0.f;\n", o.label, o.vec, j);
  vars["ZERO"] = zero;
  std::string body;
  if (&o == &a_ && hoist_conv_rows()) {
    body = conv_gather_body();
  } else if (o.vec > 1) {
    const char* vt = o.vec == 4 ? "float4" : "float2";
    body = fmt::format("const {0} dc_q = *reinterpret_cast<const {0}*>({1} + {2});\n", vt,
                       ve_.param_name(o.memory), operand_address(o, "dc_row", "dc_k"));
    const char* comp[] = {"x", "y", "z", "w"};
    for (int64_t j = 0; j < o.vec; ++j)
      body += fmt::format("dc_r{}[dc_l * {} + {}] = dc_q.{};\n", o.label, o.vec, j, comp[j]);
  } else if (has_address(o)) {
    // f16/bf16 storage (tensor-core path only): the value as float.
    const std::string load = fmt::format("{}[{}]", ve_.param_name(o.memory),
                                         operand_address(o, "dc_row", "dc_k"));
    body = fmt::format("dc_r{}[dc_l] = {};\n", o.label,
                       o.dtype == DType::f32 ? load : "dc_to_f32(" + load + ")");
  } else {
    ve_.reset_locals();
    const std::string val = operand_value(o, "dc_row", "dc_k", body);
    ve_.reset_locals();
    body += fmt::format("dc_r{}[dc_l] = {};\n", o.label, val);
  }
  vars["BODY"] = body;
  // The ones row (Operand::ones_row): a vector along k is all ones (K divides by it), one
  // along the rows has the ones row first (the rows divide by it) and zeros past it.
  std::string ones;
  if (o.ones_row) {
    ones = fmt::format(" else if ({}dc_row == {} && dc_k < {}) {{\n",
                       total % threads_ == 0 ? "" : fmt::format("dc_i < {} && ", total), o.rows, k_);
    for (int64_t j = 0; j < (o.along_rows ? 1 : o.vec); ++j)
      ones += fmt::format("  dc_r{}[dc_l * {} + {}] = 1.f;\n", o.label, o.vec, j);
    ones += "}";
  }
  vars["ONES"] = ones;
  return expand_template(R"(// operand $(L): $(TOTAL) loads of $(VEC) per K tile
DC_UNROLL
for (int dc_l = 0; dc_l < $(LOADS); ++dc_l) {
  const int dc_i = (int)threadIdx.x + dc_l * $(THREADS);
  $(ZERO)
  const $(IDX) dc_row = $(ROW0) + $(R);
  const $(IDX) dc_k = dc_k0 + $(C);
  if ($(COND)) {
    $(BODY)
  }$(ONES)
}
)",
                         vars);
}

std::string GemmEmitter::smem_index(const Operand& o, int64_t j) const {
  const std::string r = o.along_rows && j > 0 ? fmt::format("(dc_r + {})", j) : "dc_r";
  const std::string c = !o.along_rows && j > 0 ? fmt::format("(dc_c + {})", j) : "dc_c";
  const std::string in_stage = o.k_rows ? fmt::format("{} * {} + {}", r, o.ld, c)
                                        : fmt::format("{} * {} + {}", c, o.ld, r);
  return fmt::format("dc_st * {} + {}", o.stage, in_stage);
}

// Registers -> shared stage `dc_st` in the operand's layout (Operand::k_rows, ld), converted
// to the shared element type on the fp16/bf16 tensor-core paths.
std::string GemmEmitter::store_code(const Operand& o) const {
  const int64_t total = o.tile * bk_ / o.vec;
  TemplateVars vars = slot_index(o, bk_);
  vars.insert({{"LOADS", str(ceil_div(total, threads_))}, {"THREADS", str(threads_)}});
  vars["GUARD"] = total % threads_ == 0 ? "" : fmt::format("if (dc_i >= {}) continue;", total);
  const bool convert = mma_ && v_.precision != "tf32";
  std::string stores;
  for (int64_t j = 0; j < o.vec; ++j) {
    const std::string val = fmt::format("dc_r{}[dc_l * {} + {}]", o.label, o.vec, j);
    stores += fmt::format("dc_{}s[{}] = {};\n", o.label, smem_index(o, j),
                          convert ? fmt::format("dc_from_f32<{}>({})", smem_type(), val) : val);
  }
  vars["STORES"] = stores;
  return expand_template(R"(DC_UNROLL
for (int dc_l = 0; dc_l < $(LOADS); ++dc_l) {
  const int dc_i = (int)threadIdx.x + dc_l * $(THREADS);
  $(GUARD)
  const int dc_r = $(R);
  const int dc_c = $(C);
  $(STORES)
}
)",
                         vars);
}

std::string GemmEmitter::ones_smem_code(const Operand& o) const {
  const bool convert = mma_ && v_.precision != "tf32";
  std::string code;
  for (int64_t j = 0; j < o.vec; ++j) {
    const char* v = o.along_rows && j > 0 ? "0.f" : "1.f";  // rows past the ones row: zeros
    code += fmt::format("dc_{}s[{}] = {};\n", o.label, smem_index(o, j),
                        convert ? fmt::format("dc_from_f32<{}>({})", smem_type(), v) : v);
  }
  return code;
}

bool GemmEmitter::async_ok(const Operand& o) const {
  if (mma_) return o.copy_bytes > 0;
  return has_address(o) || (&o == &a_ && hoist_conv_rows());
}

// A vector of 4 along the rows lands on 4 consecutive floats of a k row in shared memory: at
// a 16-byte aligned spot when the row pitch, the stage and the operand's base all are (the
// global side is aligned as for the float4 loads: the vector choice checked it).
bool GemmEmitter::async_16_bytes(const Operand& o) const {
  const int64_t base = &o == &a_ ? 0 : stages_ * a_.stage;
  return o.along_rows && !o.k_rows && o.vec == 4 && o.ld % 4 == 0 && o.stage % 4 == 0 &&
         base % 4 == 0;
}

// Global -> shared stage `dc_st` for one operand's K tile at dc_k0 with cp.async (zero-filled
// outside the matrix), into the layout store_code writes. CUDA-core path: 16-byte copies
// where a vector is contiguous in both (async_16_bytes), else element by element. Tensor-
// core path: the shared layout keeps the global contiguous axis, so every vector is one
// copy of Operand::copy_bytes (16 wherever the extents allow); the im2col gather copies
// single f32 elements (its k order is channel-outer, tap-inner: not contiguous in NCHW).
std::string GemmEmitter::async_load_code(const Operand& o) {
  const int64_t total = o.tile * bk_ / o.vec;
  TemplateVars vars = slot_index(o, bk_);
  vars.insert({{"L", o.label},
               {"LOADS", str(ceil_div(total, threads_))},
               {"THREADS", str(threads_)},
               {"TOTAL", str(total)},
               {"VEC", str(o.vec)},
               {"IDX", idx_},
               {"X", ve_.param_name(o.memory)},
               {"ROWS", str(o.rows)},
               {"K", str(k_)}});
  vars["ROW0"] = std::string(o.label) == "a" ? "(" + idx_ + ")blockIdx.x * " + str(bm_)
                                             : "(" + idx_ + ")blockIdx.y * " + str(bn_);
  vars["GUARD"] = total % threads_ == 0 ? "" : fmt::format("if (dc_i >= {}) continue;", total);
  std::string body;
  if (&o == &a_ && hoist_conv_rows()) {
    DC_INTERNAL_CHECK(o.dtype == DType::f32, "cp.async gather of a ", dtype_name(o.dtype), " input");
    body = expand_template(R"(const int dc_j = $(J);
const float* dc_src = $(X);
bool dc_ok = false;
if (dc_row < $(ROWS) && dc_k < $(K) && dc_xrow_ok[dc_j]) {
  const int dc_ch = dc_k / $(KK), dc_tap = dc_k % $(KK);
  const int dc_ih = dc_xrow_ih[dc_j] + (dc_tap / $(KW)) * $(DH);
  const int dc_iw = dc_xrow_iw[dc_j] + (dc_tap % $(KW)) * $(DW);
  if (dc_ih >= 0 && dc_ih < $(H) && dc_iw >= 0 && dc_iw < $(W)) {
    dc_src = $(X) + dc_xrow_base[dc_j] + dc_ch * $(HW) + dc_ih * $(W) + dc_iw;
    dc_ok = true;
  }
}
dc_cp_async_f32(&dc_as[$(DST)], dc_src, dc_ok);
)",
                           [&] {
                             TemplateVars g = conv_gather_vars();
                             g.insert({{"ROWS", vars.at("ROWS")}, {"K", vars.at("K")},
                                       {"DST", smem_index(o, 0)}});
                             return g;
                           }());
  } else if (mma_) {
    // One copy of the whole vector (a vector never straddles the matrix edge: its extent
    // is a multiple of vec).
    body = fmt::format("const bool dc_ok = dc_row < {} && dc_k < {};\n", o.rows, k_);
    body += fmt::format("dc_cp_async_{}(&dc_{}s[{}], dc_ok ? {} + {} : {}, dc_ok);\n",
                        o.copy_bytes, o.label, smem_index(o, 0), vars.at("X"),
                        operand_address(o, "dc_row", "dc_k"), vars.at("X"));
  } else if (async_16_bytes(o)) {
    // Four consecutive elements in global memory and in the shared row: one 16-byte copy.
    body = fmt::format("const bool dc_ok = dc_row < {} && dc_k < {};\n", o.rows, k_);
    body += fmt::format("dc_cp_async_f32x4(&dc_{}s[{}], dc_ok ? {} + {} : {}, dc_ok);\n",
                        o.label, smem_index(o, 0), vars.at("X"),
                        operand_address(o, "dc_row", "dc_k"), vars.at("X"));
  } else {
    // A vector never straddles the matrix edge (its extent is a multiple of vec), so the
    // first element's bounds hold for all of it.
    body = fmt::format("const bool dc_ok = dc_row < {} && dc_k < {};\n", o.rows, k_);
    for (int64_t j = 0; j < o.vec; ++j) {
      // Parenthesised: operand_address divides and takes remainders of them.
      const std::string row = o.along_rows ? fmt::format("(dc_row + {})", j) : "dc_row";
      const std::string k = o.along_rows ? "dc_k" : fmt::format("(dc_k + {})", j);
      body += fmt::format("dc_cp_async_f32(&dc_{}s[{}], dc_ok ? {} + {} : {}, dc_ok);\n",
                          o.label, smem_index(o, j), vars.at("X"), operand_address(o, row, k),
                          vars.at("X"));
    }
  }
  // The ones row is stored, not copied: a zero-filling copy to the same place could land
  // after the store.
  if (o.ones_row)
    body = fmt::format("if (dc_row == {} && dc_k < {}) {{\n{}}} else {{\n{}}}\n", o.rows, k_,
                       ones_smem_code(o), body);
  vars["BODY"] = body;
  return expand_template(R"(// operand $(L): $(TOTAL) cp.async copies of $(VEC) per K tile
DC_UNROLL
for (int dc_l = 0; dc_l < $(LOADS); ++dc_l) {
  const int dc_i = (int)threadIdx.x + dc_l * $(THREADS);
  $(GUARD)
  const int dc_r = $(R);
  const int dc_c = $(C);
  const $(IDX) dc_row = $(ROW0) + dc_r;
  const $(IDX) dc_k = dc_k0 + dc_c;
  $(BODY)
}
)",
                         vars);
}

}  // namespace dc::gemm_detail
