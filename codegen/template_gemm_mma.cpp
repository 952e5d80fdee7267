// GEMM-family tensor-core path (Variant::precision tf32, fp16, bf16) of gemm_tiled and
// conv_implicit_gemm: the workload analysis, prologues, epilogue, split-K and im2col gather
// are GemmEmitter's (template_gemm.cpp, template_gemm_loads.cpp); this file chooses the
// tiles and emits the main loop:
//  - the block tile block_m x block_n splits into warp tiles warp_m x warp_n, each a grid of
//    m16n8 fragments accumulated in fp32 registers by mma.sync (m16n8k8 tf32, m16n8k16
//    f16/bf16), through the prelude's dc_mma_* functions;
//  - a ring of `stages` (2-4) shared-memory buffers filled by cp.async, 16 bytes per copy
//    wherever the extents allow, for every operand whose storage type is the math type; an
//    operand of another storage type, with a fused prologue, or gathered (fp16/bf16) goes
//    through registers (loaded as float, converted, stored after the tile's mma);
//  - operands keep their contiguous axis in shared memory (rows of k, or rows of m/n), read
//    by ldmatrix (.trans for rows of m/n) on fp16/bf16 and by 32-bit loads + cvt.rna on
//    tf32; rows are padded so that those reads are bank-conflict-free (gemm_mma_pad_elems,
//    docs/codegen.md);
//  - the epilogue per accumulator, in fp32, stored through dc_from_f32<T>.
// On sm_70 (Variant param m8n8k4 = 1, fp16 only) the same kernel runs Volta's mma.sync
// m8n8k4 instead: warp tiles of m16 x n16 fragments, each one instruction per k4 step whose
// four quad pairs compute its four 8x8 blocks (dc_mma884_*), operands read from shared
// memory element pairs (no ldmatrix), the ring's copies synchronous (cp.async's pre-sm_80
// fallback, stages = 2).
#include <algorithm>

#include <fmt/format.h>

#include "ir/error.h"
#include "param_space.h"
#include "template_gemm_emitter.h"
#include "template_util.h"

namespace dc::gemm_detail {

std::string GemmEmitter::smem_type() const {
  if (v_.precision == "fp16") return "dc_half";
  if (v_.precision == "bf16") return "dc_bfloat16";
  return "float";
}

// Shared layout and copy width of one operand (tile, bk_, threads_ set).
void GemmEmitter::choose_operand_mma(Operand& o) {
  const bool tf32 = v_.precision == "tf32";
  o.k_rows = !o.along_rows;
  o.ld = (o.k_rows ? bk_ : o.tile) + gemm_mma_pad_elems(v_.precision, o.k_rows);
  o.stage = (o.k_rows ? o.tile : bk_) * o.ld;
  const DType math = tf32 ? DType::f32 : v_.precision == "fp16" ? DType::f16 : DType::bf16;
  o.copy_bytes = 0;
  o.vec = 1;
  if (has_address(o) && o.dtype == math) {
    // Stored as the math type: copied as is, 16 bytes per copy where the contiguous extent,
    // the tile (and for Conv's A the image plane) divide by the vector.
    const int elem = tf32 ? 4 : 2;
    int64_t vec = 16 / elem;
    const int64_t extent = o.along_rows ? o.rows : k_;
    const int64_t along = o.along_rows ? o.tile : bk_;
    const int64_t plane = vector_run(o) > 0 ? vector_run(o) : vec;
    while (vec > 1 && (extent % vec != 0 || along % vec != 0 || plane % vec != 0)) vec /= 2;
    if (vec * elem >= 4) {
      o.vec = vec;
      o.copy_bytes = static_cast<int>(vec * elem);
    }
  } else if (tf32 && &o == &a_ && o.dtype == DType::f32 && hoist_conv_rows()) {
    o.copy_bytes = 4;  // the im2col gather, element by element
  }
  // Through registers: f32 storage keeps the CUDA-core path's vector loads.
  if (o.copy_bytes == 0 && o.dtype == DType::f32) o.vec = operand_vec(o, true);
  if (o.copy_bytes == 0 && vector_run(o) > 0)
    while (o.vec > 1 && vector_run(o) % o.vec != 0) o.vec /= 2;
}

void GemmEmitter::choose_tiles_mma() {
  bm_ = p_.block_m;
  bn_ = p_.block_n;
  bk_ = p_.block_k;
  warp_m_ = p_.warp_m;
  warp_n_ = p_.warp_n;
  DC_INTERNAL_CHECK(v_.precision == "tf32" || v_.precision == "fp16" || v_.precision == "bf16",
                    v_.template_name, ": unknown precision path ", v_.precision);
  volta_ = p_.m8n8k4 != 0;
  DC_INTERNAL_CHECK(!volta_ || v_.precision == "fp16", v_.template_name, ": m8n8k4 is fp16 only, not ",
                    v_.precision);
  // Warp tiles of whole m16 x n16 fragment pairs (B fragments load in pairs with ldmatrix
  // x4); K tiles of whole k16 steps (two tf32 k8 steps).
  DC_INTERNAL_CHECK(bm_ > 0 && bn_ > 0 && bk_ > 0 && warp_m_ > 0 && warp_n_ > 0 &&
                        warp_m_ % 16 == 0 && warp_n_ % 16 == 0 && bm_ % warp_m_ == 0 &&
                        bn_ % warp_n_ == 0 && bk_ % 16 == 0,
                    v_.template_name, ": bad tensor-core tile parameters in ", v_.key());
  threads_ = (bm_ / warp_m_) * (bn_ / warp_n_) * 32;
  DC_INTERNAL_CHECK(threads_ <= 1024, v_.template_name, ": ", threads_, " threads per block");
  DC_INTERNAL_CHECK(v_.threads_per_block == 0 || v_.threads_per_block == threads_,
                    v_.template_name, ": variant says ", v_.threads_per_block,
                    " threads, tiles give ", threads_);
  stages_ = std::clamp<int64_t>(p_.stages, 2, 4);  // absent (0): 2
  split_ = std::max<int64_t>(1, p_.split_k);
  a_.tile = bm_;
  b_.tile = bn_;
  choose_operand_mma(a_);
  choose_operand_mma(b_);
  async_ = a_.copy_bytes > 0 || b_.copy_bytes > 0;
  split_direct_ = split_ > 1 && w_.graph.outputs.size() == 1 &&
                  w_.graph.outputs[0] == heavy_out_ && c_tensor_.empty() && bias_tensor_.empty() &&
                  w_.graph.info(heavy_out_).dtype == DType::f32;
}

// Fragment loads of one k step (dc_kk) from the current stages dc_as / dc_bs into dc_fa
// (A, per m16 tile) and dc_fb (B, per n8 tile), following the PTX ISA fragment tables
// (CONTRACT.md): groupID g = lane / 4, thread-in-group t = lane % 4.
std::string GemmEmitter::mma_fragment_code() const {
  std::string code;
  if (volta_) return mma884_fragment_code();
  if (v_.precision == "tf32") {
    // 32-bit shared loads (ldmatrix is b16 only), rounded by cvt.rna.tf32.f32.
    // A (16 x 8): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4).
    code += a_.k_rows
                ? "const float* dc_p = dc_as + (dc_wm0 + dc_mi * 16 + dc_g) * dc_LDA + dc_kk + dc_t;\n"
                  "dc_fa[dc_mi][0] = dc_cvt_rna_tf32(dc_p[0]);\n"
                  "dc_fa[dc_mi][1] = dc_cvt_rna_tf32(dc_p[8 * dc_LDA]);\n"
                  "dc_fa[dc_mi][2] = dc_cvt_rna_tf32(dc_p[4]);\n"
                  "dc_fa[dc_mi][3] = dc_cvt_rna_tf32(dc_p[8 * dc_LDA + 4]);\n"
                : "const float* dc_p = dc_as + (dc_kk + dc_t) * dc_LDA + dc_wm0 + dc_mi * 16 + dc_g;\n"
                  "dc_fa[dc_mi][0] = dc_cvt_rna_tf32(dc_p[0]);\n"
                  "dc_fa[dc_mi][1] = dc_cvt_rna_tf32(dc_p[8]);\n"
                  "dc_fa[dc_mi][2] = dc_cvt_rna_tf32(dc_p[4 * dc_LDA]);\n"
                  "dc_fa[dc_mi][3] = dc_cvt_rna_tf32(dc_p[4 * dc_LDA + 8]);\n";
    code = expand_template("DC_UNROLL\nfor (int dc_mi = 0; dc_mi < dc_MI; ++dc_mi) {\n  $(BODY)\n}\n",
                           {{"BODY", code}});
    // B (8 x 8, k x n): b0 (k t, n g), b1 (k t+4, n g).
    std::string b = b_.k_rows
                        ? "const float* dc_p = dc_bs + (dc_wn0 + dc_ni * 8 + dc_g) * dc_LDB + dc_kk + dc_t;\n"
                          "dc_fb[dc_ni][0] = dc_cvt_rna_tf32(dc_p[0]);\n"
                          "dc_fb[dc_ni][1] = dc_cvt_rna_tf32(dc_p[4]);\n"
                        : "const float* dc_p = dc_bs + (dc_kk + dc_t) * dc_LDB + dc_wn0 + dc_ni * 8 + dc_g;\n"
                          "dc_fb[dc_ni][0] = dc_cvt_rna_tf32(dc_p[0]);\n"
                          "dc_fb[dc_ni][1] = dc_cvt_rna_tf32(dc_p[4 * dc_LDB]);\n";
    code += expand_template("DC_UNROLL\nfor (int dc_ni = 0; dc_ni < dc_NI; ++dc_ni) {\n  $(BODY)\n}\n",
                            {{"BODY", b}});
    return code;
  }
  // ldmatrix x4: lane l supplies row l % 8 of 8x8 matrix l / 8 (dc_j, dc_r).
  // A (16 x 16) matrices: 0 (m 0-7, k 0-7), 1 (m 8-15, k 0-7), 2 (m 0-7, k 8-15),
  // 3 (m 8-15, k 8-15) = a0..a3. Rows of k: plain; rows of m: .trans of the k x m blocks.
  code += a_.k_rows
              ? "dc_ldmatrix_x4(dc_fa[dc_mi], dc_as + (dc_wm0 + dc_mi * 16 + (dc_j & 1) * 8 + dc_r) * "
                "dc_LDA + dc_kk + (dc_j >> 1) * 8);\n"
              : "dc_ldmatrix_x4_trans(dc_fa[dc_mi], dc_as + (dc_kk + (dc_j >> 1) * 8 + dc_r) * dc_LDA + "
                "dc_wm0 + dc_mi * 16 + (dc_j & 1) * 8);\n";
  code = "DC_UNROLL\nfor (int dc_mi = 0; dc_mi < dc_MI; ++dc_mi)\n  " + code;
  // B, two n8 tiles per x4: matrices 0 (n 0-7, k 0-7), 1 (n 0-7, k 8-15), 2 (n 8-15, k 0-7),
  // 3 (n 8-15, k 8-15) = b0, b1 of tile ni, b0, b1 of tile ni + 1.
  const std::string b = b_.k_rows
                            ? "dc_ldmatrix_x4(dc_q, dc_bs + (dc_wn0 + dc_ni * 8 + (dc_j >> 1) * 8 + dc_r) * "
                              "dc_LDB + dc_kk + (dc_j & 1) * 8);\n"
                            : "dc_ldmatrix_x4_trans(dc_q, dc_bs + (dc_kk + (dc_j & 1) * 8 + dc_r) * dc_LDB + "
                              "dc_wn0 + dc_ni * 8 + (dc_j >> 1) * 8);\n";
  code += "DC_UNROLL\nfor (int dc_ni = 0; dc_ni < dc_NI; dc_ni += 2) {\n  unsigned dc_q[4];\n  " + b +
          "  dc_fb[dc_ni][0] = dc_q[0];\n  dc_fb[dc_ni][1] = dc_q[1];\n"
          "  dc_fb[dc_ni + 1][0] = dc_q[2];\n  dc_fb[dc_ni + 1][1] = dc_q[3];\n}\n";
  return code;
}

// m8n8k4 fragments of one k4 step (dc_kk) for the m16 x n16 tiles of the warp: lane l of
// quad pair q supplies A row dc_mma884_a_row of the 8-row block dc_mma884_block_row (k 0-3
// in two f16x2 registers) and B column dc_mma884_b_col of the block dc_mma884_block_col.
std::string GemmEmitter::mma884_fragment_code() const {
  // Two elements at `first` and `first + step` of a dc_half array as one f16x2 register.
  auto pair = [](const std::string& p, const std::string& first, const std::string& step) {
    return fmt::format("(unsigned){0}[{1}].bits | ((unsigned){0}[{1} + {2}].bits << 16)", p, first, step);
  };
  std::string a = "const int dc_row = dc_wm0 + dc_mi * 16 + dc_mma884_block_row(dc_lane) + dc_mma884_a_row(dc_lane, 0);\n";
  if (a_.k_rows)  // [BM][LDA]: k contiguous
    a += fmt::format("dc_fa[dc_mi][0] = {};\ndc_fa[dc_mi][1] = {};\n", pair("dc_as", "dc_row * dc_LDA + dc_kk", "1"),
                     pair("dc_as", "dc_row * dc_LDA + dc_kk + 2", "1"));
  else  // [BK][LDA]: m contiguous
    a += fmt::format("dc_fa[dc_mi][0] = {};\ndc_fa[dc_mi][1] = {};\n", pair("dc_as", "dc_kk * dc_LDA + dc_row", "dc_LDA"),
                     pair("dc_as", "(dc_kk + 2) * dc_LDA + dc_row", "dc_LDA"));
  std::string b = "const int dc_col = dc_wn0 + dc_ni * 16 + dc_mma884_block_col(dc_lane) + dc_mma884_b_col(dc_lane, 0);\n";
  if (b_.k_rows)  // [BN][LDB]: k contiguous
    b += fmt::format("dc_fb[dc_ni][0] = {};\ndc_fb[dc_ni][1] = {};\n", pair("dc_bs", "dc_col * dc_LDB + dc_kk", "1"),
                     pair("dc_bs", "dc_col * dc_LDB + dc_kk + 2", "1"));
  else  // [BK][LDB]: n contiguous
    b += fmt::format("dc_fb[dc_ni][0] = {};\ndc_fb[dc_ni][1] = {};\n", pair("dc_bs", "dc_kk * dc_LDB + dc_col", "dc_LDB"),
                     pair("dc_bs", "(dc_kk + 2) * dc_LDB + dc_col", "dc_LDB"));
  return expand_template("DC_UNROLL\nfor (int dc_mi = 0; dc_mi < dc_MI; ++dc_mi) {\n  $(A)\n}\n"
                         "DC_UNROLL\nfor (int dc_ni = 0; dc_ni < dc_NI; ++dc_ni) {\n  $(B)\n}\n",
                         {{"A", a}, {"B", b}});
}

// Accumulators 0,1 (and 2,3) of a lane are adjacent columns of one row: stored as one
// 8-byte float2 or one 4-byte f16/bf16 pair where every output is laid out as the heavy
// output with n innermost (MatMul, Gemm), N is even (the pair is in bounds and aligned
// together), no split-K atomics and no operand sum. Empty when that does not hold. In the GLU epilogue the
// pair is always taken: accumulator dc_i is an even column (the first half), dc_i + 1 the
// odd one (the second half).
std::string GemmEmitter::epilogue_pair_code() {
  if (glu_)
    return fmt::format("const {} dc_gn = dc_gn0;\n"
                       "const float dc_acc0 = dc_accum[dc_mi][dc_ni][dc_i], dc_acc1 = "
                       "dc_accum[dc_mi][dc_ni][dc_i + 1];\n",
                       idx_) +
           glu_epilogue_code();
  if (split_ > 1 || kind_ == HeavyKind::conv || n_ % 2 != 0 || !sum_out_.empty()) return "";
  std::string scratch;
  ve_.reset_locals();
  const auto coords = heavy_coords(scratch);
  ve_.reset_locals();
  if (!scratch.empty() || coords.empty() || coords.back() != "dc_gn") return "";
  const auto& outs = w_.graph.outputs;
  std::string code;
  for (size_t o = 0; o < outs.size(); ++o)
    code += fmt::format("float dc_pv{0}_0, dc_pv{0}_1;\n", o);
  for (int e = 0; e < 2; ++e) {
    std::string one = fmt::format("const {} dc_gn = dc_gn0 + {};\n", idx_, e);
    one += fmt::format("const float dc_acc = dc_accum[dc_mi][dc_ni][dc_i + {}];\n", e);
    ve_.reset_locals();
    const auto c = heavy_coords(one);
    heavy_value("dc_acc", c, one);
    ve_.bind(heavy_out_, "dc_h");
    for (size_t o = 0; o < outs.size(); ++o)
      one += fmt::format("dc_pv{}_{} = {};\n", o, e, value(outs[o], c, one));
    ve_.reset_locals();
    code += expand_template("{\n  $(ONE)\n}\n", {{"ONE", one}});
  }
  std::string store = fmt::format("const {} dc_gn = dc_gn0;\n", idx_);
  for (size_t o = 0; o < outs.size(); ++o) {
    const DType t = w_.graph.info(outs[o]).dtype;
    const std::string dst = fmt::format("&{}[{}]", ve_.param_name(outs[o]), ve_.offset(outs[o], coords));
    if (t == DType::f32)
      store += fmt::format("*reinterpret_cast<float2*>({}) = make_float2(dc_pv{}_0, dc_pv{}_1);\n", dst, o, o);
    else if (t == DType::f16 || t == DType::bf16)
      store += fmt::format("*reinterpret_cast<unsigned*>({}) = dc_pack_{}x2(dc_pv{}_0, dc_pv{}_1);\n", dst,
                           t == DType::f16 ? "f16" : "bf16", o, o);
    else
      return "";
  }
  return code + expand_template("{\n  $(STORE)\n}\n", {{"STORE", store}});
}

namespace {

// The tensor-core kernel, by part: the tile's figures and its mma.sync steps (a device
// function), then the kernel: accumulators, the K-tile ring, the epilogue loop.
constexpr const char* kMmaTile = R"(// Tensor-core tiles ($(MMA)): block $(BM)x$(BN)x$(BK), warp $(WM)x$(WN), $(THREADS)
// threads, $(STAGES) stages; loads: $(COPIES).
constexpr int dc_BK = $(BK), dc_MI = $(WM) / 16, dc_NI = $(WN) / $(N_FRAG);
constexpr int dc_LDA = $(LDA), dc_LDB = $(LDB);  // shared row length incl. pad

// The mma.sync steps of one K tile: fragments of the warp tile from shared memory, then
// every m16 x n$(N_FRAG) fragment's accumulators += A . B.
__device__ __forceinline__ void dc_mma_tile(const $(T)* DC_RESTRICT dc_as,
                                            const $(T)* DC_RESTRICT dc_bs,
                                            float (&dc_accum)[dc_MI][dc_NI][$(ACC)], int dc_wm0,
                                            int dc_wn0, int dc_lane) {
  const int dc_g = dc_lane >> 2, dc_t = dc_lane & 3;  // fragment row group, thread in group
  const int dc_j = dc_lane >> 3, dc_r = dc_lane & 7;  // ldmatrix: matrix and row supplied
  (void)dc_g;
  (void)dc_t;
  (void)dc_j;
  (void)dc_r;
  DC_UNROLL
  for (int dc_kk = 0; dc_kk < dc_BK; dc_kk += $(KSTEP)) {
    unsigned dc_fa[dc_MI][$(A_REGS)], dc_fb[dc_NI][2];
    $(FRAGMENTS)
    DC_UNROLL
    for (int dc_mi = 0; dc_mi < dc_MI; ++dc_mi) {
      DC_UNROLL
      for (int dc_ni = 0; dc_ni < dc_NI; ++dc_ni) $(MMA)(dc_accum[dc_mi][dc_ni], dc_fa[dc_mi], dc_fb[dc_ni]);
    }
  }
}

)";
constexpr const char* kMmaKernel = R"(extern "C" __global__ void DC_LAUNCH_BOUNDS($(THREADS)) dc_gemm($(PARAMS)) {
  DC_DYNAMIC_SMEM($(T), dc_smem);
  // Shared memory: A stages $(LAYOUT_A), then B stages $(LAYOUT_B).
  $(T)* dc_as = dc_smem;
  $(T)* dc_bs = dc_smem + $(A_SMEM);
  $(SETUP)
  const int dc_warp = (int)threadIdx.x / 32, dc_lane = (int)threadIdx.x % 32;
  const int dc_wm0 = (dc_warp / $(WARPS_N)) * $(WM), dc_wn0 = (dc_warp % $(WARPS_N)) * $(WN);
  float dc_accum[dc_MI][dc_NI][$(ACC)];
  DC_UNROLL
  for (int dc_mi = 0; dc_mi < dc_MI; ++dc_mi) {
    DC_UNROLL
    for (int dc_ni = 0; dc_ni < dc_NI; ++dc_ni) {
      DC_UNROLL
      for (int dc_i = 0; dc_i < $(ACC); ++dc_i) dc_accum[dc_mi][dc_ni][dc_i] = 0.f;
    }
  }
  $(STAGING)
  // K tiles of this split-K slice.
  const int dc_kt_begin = dc_slice * $(KT_PER);
  const int dc_kt_end = dc_kt_begin + $(KT_PER) < $(KT) ? dc_kt_begin + $(KT_PER) : $(KT);
  if (dc_kt_begin < dc_kt_end) {
    // Ring of $(STAGES) stages: tiles t + 1 .. t + $(STAGES) - 1 are in flight while tile t
    // is multiplied; cp.async operands go global -> shared, register operands are loaded
    // before the tile's mma and stored after it.
    DC_UNROLL
    for (int dc_s = 0; dc_s < $(STAGES) - 1; ++dc_s) {
      if (dc_kt_begin + dc_s < dc_kt_end) {
        const $(IDX) dc_k0 = ($(IDX))(dc_kt_begin + dc_s) * $(BK);
        const int dc_st = dc_s;
        $(ISSUE)
        $(LOAD)
        $(STORE)
      }
      dc_cp_async_commit();
    }
    for (int dc_kt = dc_kt_begin; dc_kt < dc_kt_end; ++dc_kt) {
      const int dc_tile = dc_kt - dc_kt_begin;
      // Committed groups: $(STAGES) - 1 + dc_tile; tile dc_tile's is complete once at most
      // $(STAGES) - 2 are pending. The barrier publishes every thread's copies and stores,
      // and ends all reads of the stage refilled below (read by tile dc_tile - 1).
      dc_cp_async_wait<$(STAGES) - 2>();
      __syncthreads();
      const bool dc_more = dc_kt + $(STAGES) - 1 < dc_kt_end;
      const int dc_st = (dc_tile + $(STAGES) - 1) % $(STAGES);
      if (dc_more) {
        const $(IDX) dc_k0 = ($(IDX))(dc_kt + $(STAGES) - 1) * $(BK);
        $(ISSUE)
        $(LOAD)
      }
      dc_cp_async_commit();
      const int dc_cur = dc_tile % $(STAGES);
      dc_mma_tile(dc_as + dc_cur * $(A_STAGE), dc_bs + dc_cur * $(B_STAGE), dc_accum, dc_wm0,
                  dc_wn0, dc_lane);
      if (dc_more) {
        $(STORE)
      }
    }
    dc_cp_async_wait<0>();
  }
  // Epilogue per accumulator (C fragment: $(C_ROW), $(C_COL)), in fp32.
  const $(IDX) dc_m_base = ($(IDX))blockIdx.x * $(BM) + dc_wm0;
  const $(IDX) dc_n_base = ($(IDX))blockIdx.y * $(BN) + dc_wn0;
  DC_UNROLL
  for (int dc_mi = 0; dc_mi < dc_MI; ++dc_mi) {
    DC_UNROLL
    for (int dc_ni = 0; dc_ni < dc_NI; ++dc_ni) {
      $(EPILOGUE_LOOP)
    }
  }
}
DC_EXPORT_KERNEL(dc_gemm)
)";
// The epilogue per accumulator, or per pair of adjacent columns (one vector store).
constexpr const char* kMmaEpilogueSingle = R"(DC_UNROLL
for (int dc_i = 0; dc_i < $(ACC); ++dc_i) {
  const $(IDX) dc_gm = dc_m_base + dc_mi * 16 + $(C_ROW);
  const $(IDX) dc_gn = dc_n_base + dc_ni * $(N_FRAG) + $(C_COL);
  if (dc_gm < $(M) && dc_gn < $(N)) {
    const float dc_acc = dc_accum[dc_mi][dc_ni][dc_i];
    $(EPILOGUE)
  }
})";
constexpr const char* kMmaEpiloguePairs = R"(// Accumulator pairs (dc_i, dc_i + 1): adjacent columns, one vector store.
DC_UNROLL
for (int dc_i = 0; dc_i < $(ACC); dc_i += 2) {
  const $(IDX) dc_gm = dc_m_base + dc_mi * 16 + $(C_ROW);
  const $(IDX) dc_gn0 = dc_n_base + dc_ni * $(N_FRAG) + $(C_COL);
  if (dc_gm < $(M) && dc_gn0 < $(N)) {
    $(PAIR)
  }
})";

}  // namespace

// Tile figures, the mma instruction and where accumulator dc_i sits in its fragment.
TemplateVars GemmEmitter::mma_vars() const {
  const bool tf32 = v_.precision == "tf32";
  TemplateVars vars = {{"BM", str(bm_)},
                       {"BN", str(bn_)},
                       {"BK", str(bk_)},
                       {"WM", str(warp_m_)},
                       {"WN", str(warp_n_)},
                       {"WARPS_N", str(bn_ / warp_n_)},
                       {"THREADS", str(threads_)},
                       {"LDA", str(a_.ld)},
                       {"LDB", str(b_.ld)},
                       {"A_STAGE", str(a_.stage)},
                       {"B_STAGE", str(b_.stage)},
                       {"A_SMEM", str(stages_ * a_.stage)},
                       {"M", str(a_.rows_with_ones())},
                       {"N", str(b_.rows_with_ones())},
                       {"KT", str(ceil_div(k_, bk_))},
                       {"KT_PER", str(ceil_div(ceil_div(k_, bk_), split_))},
                       {"STAGES", str(stages_)},
                       {"KSTEP", volta_ ? "4" : tf32 ? "8" : "16"},
                       {"N_FRAG", volta_ ? "16" : "8"},
                       {"ACC", volta_ ? "8" : "4"},
                       {"A_REGS", volta_ ? "2" : "4"},
                       {"T", smem_type()},
                       {"IDX", idx_}};
  vars["MMA"] = volta_ ? "dc_mma_m8n8k4_f16"
                : tf32 ? "dc_mma_m16n8k8_tf32"
                : v_.precision == "fp16" ? "dc_mma_m16n8k16_f16"
                                         : "dc_mma_m16n8k16_bf16";
  vars["C_ROW"] = volta_ ? "dc_mma884_block_row(dc_lane) + dc_mma884_c_row(dc_lane, dc_i)"
                        : "dc_mma_c_row(dc_lane, dc_i)";
  vars["C_COL"] = volta_ ? "dc_mma884_block_col(dc_lane) + dc_mma884_c_col(dc_lane, dc_i)"
                        : "dc_mma_c_col(dc_lane, dc_i)";
  vars["PARAMS"] = split_ > 1 && !split_direct_
                       ? kernel_params(w_, {"float* DC_RESTRICT scratch0"})
                       : kernel_params(w_);
  return vars;
}

// Operand loads: cp.async where the operand allows it (ISSUE), else through registers
// (LOAD before the tile's mma, STORE after it, STAGING the registers).
void GemmEmitter::mma_operand_vars(TemplateVars& vars) {
  std::string issue, load, store, staging;
  for (Operand* o : {&a_, &b_}) {
    if (o->copy_bytes > 0) {
      issue += async_load_code(*o);
    } else {
      load += load_code(*o);
      store += store_code(*o);
      staging += fmt::format("float dc_r{}[{}];  // operand {} through registers\n", o->label,
                             ceil_div(o->tile * bk_ / o->vec, threads_) * o->vec, o->label);
    }
  }
  vars["ISSUE"] = issue;
  vars["LOAD"] = load;
  vars["STORE"] = store;
  vars["STAGING"] = staging;
}

std::string GemmEmitter::main_kernel_mma() {
  TemplateVars vars = mma_vars();
  vars["SETUP"] = setup_code() + (hoist_conv_rows() ? conv_rows_code() : "");
  mma_operand_vars(vars);
  vars["FRAGMENTS"] = mma_fragment_code();
  vars["EPILOGUE"] = epilogue_code();
  const std::string pair = epilogue_pair_code();
  vars["LAYOUT_A"] = a_.k_rows ? "[BM][LDA] (rows of k)" : "[BK][LDA] (rows of m)";
  vars["LAYOUT_B"] = b_.k_rows ? "[BN][LDB] (rows of k)" : "[BK][LDB] (rows of n)";
  vars["COPIES"] = fmt::format("A {}, B {}", a_.copy_bytes ? str(a_.copy_bytes) + "-byte cp.async" : "registers",
                               b_.copy_bytes ? str(b_.copy_bytes) + "-byte cp.async" : "registers");
  TemplateVars e = vars;
  e["PAIR"] = pair;
  vars["EPILOGUE_LOOP"] = expand_template(pair.empty() ? kMmaEpilogueSingle : kMmaEpiloguePairs, e);
  return expand_template(kMmaTile, vars) + expand_template(kMmaKernel, vars);
}

}  // namespace dc::gemm_detail
