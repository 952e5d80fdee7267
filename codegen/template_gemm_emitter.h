// The GEMM-family emitter shared by template_gemm.cpp (analysis, tiling, the kernel and its
// epilogue) and template_gemm_loads.cpp (global -> shared tile loads: register-staged,
// cp.async, the implicit-GEMM gather). Private to codegen: templates' entry points are in
// generate.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/workload.h"
#include "ir/kernel.h"
#include "ref/conv_transpose.h"
#include "ref/im2col.h"
#include "template_text.h"
#include "value_emitter.h"
#include "variant.h"
#include "variant_params.h"

namespace dc::gemm_detail {

constexpr int64_t kPad = 4;                // floats of row pad in the shared tiles (16 bytes)
constexpr int64_t kEpilogueThreads = 256;  // threads per block of the split-K epilogue kernel

inline std::string str(int64_t v) { return std::to_string(v); }

// conv_weight_grad: dc.ConvGradWeight, the implicit-GEMM conv's weight-gradient mode.
enum class HeavyKind { matmul, gemm, conv, conv_weight_grad };

// How the kernel reads one operand, seen as a `rows` x K matrix: A is M x K, B is read
// transposed (N x K), so both are staged alike, k-major in shared memory.
struct Operand {
  const char* label = "a";  // "a" / "b": names in the generated code
  std::string tensor;       // workload tensor the heavy op reads
  // Tensor read by address: `tensor`, or (MatMul) the cluster input of a Transpose that
  // swaps `tensor`'s last two dims, read in place with the other layout (`swapped`).
  std::string memory;
  bool swapped = false;
  int64_t rows = 0;         // M or N
  int64_t tile = 0;         // block_m or block_n
  int64_t vec = 1;          // elements per global load (vector loads: direct operands only)
  bool along_rows = false;  // load order rows-fastest (memory contiguous along rows), else k-fastest
  bool direct = false;      // `memory` is a graph input, read by address
  DType dtype = DType::f32;  // storage type of the tensor
  // Shared-memory tile: element (row, k) at [k * ld + row] (k-major, the fp32 path and
  // tensor-core operands contiguous along rows) or at [row * ld + k] (k_rows: tensor-core
  // operands contiguous along k). `stage` elements per pipeline stage.
  bool k_rows = false;
  int64_t ld = 0;
  int64_t stage = 0;
  // Tensor-core path: bytes per cp.async copy (16, 8, 4: one vector of `vec` elements, or
  // 4: one f32 element of the im2col gather); 0 = through registers (loaded as float,
  // converted to the shared type, stored).
  int copy_bytes = 0;
  // One more row past `rows` whose elements are all 1 (k < K): its accumulators are the sum
  // of the other operand over k, the workload's operand sum (ir/gemm_operand_sum.h).
  bool ones_row = false;
  int64_t rows_with_ones() const { return rows + (ones_row ? 1 : 0); }
};

class GemmEmitter {
 public:
  GemmEmitter(const Workload& w, const Variant& v) : w_(w), v_(v), p_(GemmParams::of(v)), ve_(w.graph) {}

  GeneratedKernel emit();

 private:
  void analyze();
  bool is_input(const std::string& tensor) const;
  void choose_memory(Operand& o) const;
  void analyze_matmul();
  void analyze_gemm();
  void analyze_conv();
  void analyze_conv_weight_grad();
  // The workload's ReduceSum of an operand over k: the other operand's ones row.
  void analyze_operand_sum(const Node& sum);
  // Elements a vector of operand `o` may not straddle: the image plane of Conv's A (m runs
  // over images) and of the weight gradient's dY (k runs over images); 0 = no limit.
  int64_t vector_run(const Operand& o) const;
  void choose_tiles();
  int64_t operand_vec(const Operand& o, bool contiguous_ok) const;
  bool has_address(const Operand& o) const;

  // Scalar value of operand `o` at (row, k), both in bounds, through ValueEmitter
  // (prologues, broadcasting); appends statements.
  std::string operand_value(const Operand& o, const std::string& row, const std::string& k,
                            std::string& code);
  // Element offset of (row, k) in the memory of a direct operand.
  std::string operand_address(const Operand& o, const std::string& row, const std::string& k) const;
  // Coordinates of the heavy output element (dc_gm, dc_gn) of batch dc_bz.
  std::vector<std::string> heavy_coords(std::string& code);
  // The heavy op's output value from its accumulated sum (alpha, beta*C, conv bias): `var`.
  void heavy_value(const std::string& acc, const std::vector<std::string>& coords,
                   std::string& code, const std::string& var = "dc_h");
  // ve_.value / emit_unravel with their statements dedented into `code`.
  std::string value(const std::string& tensor, const std::vector<std::string>& coords,
                    std::string& code);
  std::vector<std::string> unravel(const Shape& shape, const std::string& lin,
                                   const std::string& prefix, std::string& code);
  // Stores every cluster output at `coords` from the bound heavy output.
  void store_outputs(const std::vector<std::string>& coords, std::string& code);

  std::string setup_code();
  bool hoist_conv_rows() const;
  std::string conv_rows_code() const;
  std::string conv_gather_body() const;
  // Conv's A operand (implicit im2col, 1-D to 3-D) or ConvTranspose's (the transposed index
  // map of ref/conv_transpose.h) at (row, k) through ValueEmitter: 0 where no input is read.
  std::string conv_gather_value(const Operand& o, const std::string& row, const std::string& k,
                                std::string& code);
  TemplateVars conv_gather_vars() const;
  std::string load_code(const Operand& o);
  std::string store_code(const Operand& o) const;
  // cp.async pipelines (stages >= 3): both operands plain loads, copied global -> shared.
  bool async_16_bytes(const Operand& o) const;
  bool async_ok(const Operand& o) const;
  std::string async_load_code(const Operand& o);
  TemplateVars fp32_vars() const;
  std::string main_kernel();
  std::string epilogue_kernel();
  // Elements of split-K's scratch: the heavy output's, then the operand sum's.
  int64_t scratch_numel() const;
  // The per-accumulator epilogue (dc_gm, dc_gn, dc_acc in scope): split-K partial sums, or
  // the heavy value and the cluster outputs.
  std::string epilogue_code();
  // The heavy output's part of epilogue_code; the operand sum's (the ones row's accumulators:
  // the split-K partial sums, or the sum stored).
  std::string heavy_epilogue_code();
  std::string operand_sum_code();
  // Shared-memory stores of the ones row's elements of a load slot (dc_r, dc_c in scope).
  std::string ones_smem_code(const Operand& o) const;
  // The GLU epilogue (glu_): the accumulators of columns dc_gn (even) and dc_gn + 1 in
  // dc_acc0 and dc_acc1 (with dc_gm) are the heavy values of the two halves' element
  // (dc_gm, dc_gn / 2); every output is stored there.
  std::string glu_epilogue_code();
  // The CUDA-core kernel's loop over its thread tile: the per-accumulator epilogue, or the
  // GLU epilogue over column pairs.
  std::string epilogue_loop_fp32();
  // Destination offset of tile element (dc_r, dc_c) in shared stage dc_st, `j` elements
  // further along the operand's contiguous axis.
  std::string smem_index(const Operand& o, int64_t j) const;

  // Tensor-core path (template_gemm_mma.cpp: tiles, kernel; template_gemm_mma_loads.cpp:
  // shared layouts, copy widths, fragment loads).
  void choose_tiles_mma();
  void choose_operand_mma(Operand& o);
  std::string mma_fragment_code() const;
  std::string mma884_fragment_code() const;  // sm_70's m8n8k4 (volta_)
  TemplateVars mma_vars() const;
  void mma_operand_vars(TemplateVars& vars);
  std::string main_kernel_mma();
  std::string epilogue_pair_code();
  std::string smem_type() const;  // float (tf32), dc_half (fp16), dc_bfloat16 (bf16)

  const Workload& w_;
  const Variant& v_;
  const GemmParams p_;  // the parameters of v_, read once
  ValueEmitter ve_;
  const Node* heavy_ = nullptr;
  HeavyKind kind_ = HeavyKind::matmul;
  int64_t m_ = 0, n_ = 0, k_ = 0, batch_ = 1;
  Operand a_, b_;
  std::string heavy_out_;
  Shape heavy_shape_;
  // GLU epilogue (gemm_glu_epilogue): the Slices of the heavy output's even and odd columns,
  // bound to the two accumulators of a pair; outputs have n / 2 columns.
  bool glu_ = false;
  std::string glu_even_, glu_odd_;
  // The operand sum's output (a ReduceSum of A or B over k): "" if none.
  std::string sum_out_;
  std::string idx_ = "int";  // C type of index math: int while every tensor fits

  // MatMul
  Shape a_shape_, b_shape_, batch_shape_;
  bool folded_ = false;  // B has no batch dims: A's batch dims fold into M
  // Gemm
  bool trans_a_ = false, trans_b_ = false;
  float alpha_ = 1.f, beta_ = 1.f;
  std::string c_tensor_;
  // Conv
  ref::Window win_;
  int64_t channels_ = 0, out_channels_ = 0, groups_ = 1, cin_group_ = 0, cout_group_ = 0;
  std::string bias_tensor_;
  int spatial_rank_ = 2;
  bool transposed_ = false;  // ConvTranspose: the gather goes through ref/conv_transpose.h's map

  // Tiling
  int64_t bm_ = 0, bn_ = 0, bk_ = 0, tm_ = 0, tn_ = 0, threads_ = 0, stages_ = 1, split_ = 1;
  bool async_ = false;  // stages_ >= 3 as a cp.async pipeline
  bool mma_ = false;    // tensor-core path (Variant::precision tf32 / fp16 / bf16)
  bool volta_ = false;  // ... through sm_70's mma.sync m8n8k4 (Variant param m8n8k4)
  int64_t warp_m_ = 0, warp_n_ = 0;
  bool warp_layout_ = false;
  bool split_direct_ = false;  // split-K atomics go straight into the (single) output
  int uid_ = 0;                // suffix of generated local names
};

// Index of a load slot's element in its tile: rows-fastest or k-fastest, in vectors.
TemplateVars slot_index(const Operand& o, int64_t bk);

// C storage type of a float tensor in generated code: float, dc_half, dc_bfloat16.
const char* float_storage_type(DType t);

}  // namespace dc::gemm_detail
