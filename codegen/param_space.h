// Implementation-parameter spaces, the part shared by their enumerators (param_space_*.cpp),
// the estimator and, later, the kernel templates:
//   - WorkloadShape: the figures of a workload that its kernel template is parameterised
//     over (GEMM M/N/K, convolution geometry, reduction rows, element counts), computed once
//     per workload so that enumerating and estimating thousands of variants stays cheap;
//   - the resource formulas a variant's parameters imply (shared memory, registers,
//     residency per SM), one definition for the spaces, fits_gpu and the estimator;
//   - the per-family enumerators behind enumerate_variants.
// docs/estimator.md describes every space.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_spec.h"
#include "gpu/occupancy.h"
#include "ir/glu.h"
#include "ir/workload.h"
#include "variant.h"

namespace dc {

// Which template family computes a workload. Mostly the cluster kind, refined by the
// geometry: a Conv whose groups each see one input channel is depthwise whatever its kind,
// a grouped Conv with wider groups is a batched implicit GEMM, a windowed pooling is an
// output-parallel loop, not a row reduction.
enum class Family {
  gemm,         // "gemm_tiled": MatMul / Gemm, batched, + epilogue
  conv,         // "conv_implicit_gemm": Conv2d (groups >= 1, one GEMM per group) + epilogue
  depthwise,    // "depthwise_direct": one input channel per group
  attention,    // "attention_fused": QK^T -> scale/mask -> softmax -> PV with online softmax
  reduction,    // "row_reduce": Softmax, LayerNorm, Reduce*, global pooling, InstanceNorm
  pool_window,  // "pool_window": MaxPool / AveragePool / LpPool windows, one output per lane
  elementwise,  // "elementwise": injective chains
  opaque,       // "opaque_generic": one thread per output element
};

const char* family_template_name(Family f);

// How the GEMM template reads one operand, seen as a rows x K matrix (A: M x K, B: N x K),
// as GemmEmitter::analyze sets it (template_gemm.cpp).
struct GemmOperandLayout {
  bool along_rows = false;  // memory contiguous along the rows (m for A, n for B), else along k
  bool direct = false;      // a workload input: no fused prologue computes it
  // Read by address (GemmEmitter::has_address): direct, and for Conv's A not the im2col
  // gather. Only plain operands get vector loads and 16-byte cp.async copies; the others go
  // element by element, a prologue operand through registers.
  bool plain = false;
  // Read by address in any storage type (the tensor-core path copies f16/bf16 operands as
  // they are); `plain` additionally requires f32, for the CUDA-core path.
  bool addressable = false;
  DType dtype = DType::f32;  // storage type
};

// The cluster input that operand `operand` (0: A, 1: B) of a MatMul or a Gemm is read from
// in place: the input of the Transpose that computes the operand by swapping its last two
// dims (the MatMul gradient's dY x B^T and A^T x dY; a Gemm's 2-D operand transposed by the
// model or by a gradient rule), which gemm_tiled reads with the other layout (a MatMul's A
// stored [.., K, M], B stored [.., N, K]; a Gemm's transA or transB flipped). "" otherwise,
// and for a MatMul's A when B has no batch dims (M then folds A's batch dims, whose rows a
// transposed A does not keep contiguous).
std::string matmul_swapped_source(const Graph& g, const Node& matmul, size_t operand);

struct WorkloadShape {
  ClusterKind kind = ClusterKind::opaque;
  Family family = Family::opaque;
  double flops = 0;    // Workload::flops
  double bytes = 0;    // Workload::bytes: compulsory DRAM traffic
  int elem_bytes = 4;  // element size of the main input as stored in DRAM

  // GEMM family: C[batch][m][n] = A[batch][m][k] . B[batch][k][n]. For Conv (implicit
  // GEMM, NCHW): m = N*OH*OW, n = OC/groups, k = IC/groups*KH*KW, batch = groups; for its
  // weight gradient (weight_grad) m = OC, n = IC*KH*KW, k = N*OH*OW, batch 1. For
  // attention: the first GEMM, m = Sq, n = Sk, k = D, batch = batch*heads.
  int64_t m = 0, n = 0, k = 0, batch = 1;
  double a_bytes = 0;     // operand A as stored (Conv: the input tensor, not its im2col)
  double b_bytes = 0;     // operand B as stored (Conv: the weights; attention: K)
  double v_bytes = 0;     // attention: V
  bool gather_a = false;  // Conv whose A tile is an im2col gather (not 1x1/stride 1/pad 0)
  // A Conv's weight gradient (dc.ConvGradWeight, the template's weight-gradient mode):
  // m = filters, n = C*taps, k = N*output pixels; A is dY (contiguous along k within an
  // image), B the im2col gather of X.
  bool weight_grad = false;
  int64_t dv = 0;         // attention: V's head dimension
  // attention: the workload is one dc.AttentionGrad (FlashAttention-2's backward,
  // "attention_backward", template_attention_backward.cpp) rather than the forward cluster.
  bool attention_backward = false;
  GemmOperandLayout a_layout, b_layout;  // gemm / conv: how the template reads A and B
  // gemm: a GLU epilogue (gemm_glu_epilogue): the outputs hold n / 2 columns, each from the
  // accumulators of columns 2j and 2j + 1, which one thread holds; no split-K.
  bool glu = false;
  bool wide_index = false;  // a tensor of >= 2^31 - 1 elements: 64-bit index math

  // Convolution geometry (conv, depthwise), NCHW.
  int64_t images = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, out_h = 0, out_w = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;

  // Reductions: `rows` independent rows of `row_len` elements each.
  int64_t rows = 0, row_len = 0;
  int reductions_per_row = 1;  // tree reductions per row: softmax 2 (max, sum), LayerNorm 2
  int stream_reads = 1;        // passes over a row's input when it is not cached on chip
  bool row_contiguous = true;  // the reduced elements of a row are adjacent in memory
  int64_t window = 1;          // pool_window: input elements per output; opaque: loop steps per output
  // opaque: the naive kernel's longest serial work (template_reference_training.cpp), when a
  // few of its outputs each loop over many elements: `serial_threads` threads, each reading
  // `serial_loop` elements (dc.SoftmaxCrossEntropy's loss: one thread over every row).
  // 0 when the kernel has none.
  int64_t serial_threads = 0, serial_loop = 0;
  // opaque: a multi-tensor optimizer update (template_optimizer.h) or dc.MultiCast
  // (template_multi_cast.h), whose kernel may read float4s whatever its tensors' extents (each
  // tensor's last elements one at a time).
  bool optimizer_update = false;

  // Output-parallel families (elementwise, pool_window, opaque) and the row reductions:
  int64_t elements = 0;  // output elements
  int inputs = 1;        // tensors read per output element
  double in_bytes = 0;   // bytes of the reduced input (reduction)

  // Largest of 4, 2, 1 elements that every vectorised global access of the template can
  // use with natural alignment (the contiguous extents divide by it).
  int vec_align = 1;
};

// Figures of a workload for its family. InternalError if the cluster lacks the node its
// kind promises (a gemm cluster without MatMul/Gemm/Conv, ...): the candidate generator
// and this function disagree.
WorkloadShape analyze_workload(const Workload& w);

// The GLU epilogue of a gemm workload: its MatMul's output is read only by the Slices of
// its even and odd columns (glu_split, ir/glu.h), B has rank >= 2, and every other node
// after the MatMul (prologues of its operands may be anything the template reads) is
// pointwise (ops of is_pointwise_op) with the halves' shape, so that the template, holding
// the accumulators of columns 2j and 2j + 1 in one thread, binds them to the two halves
// and computes every output at column j. nullopt otherwise.
std::optional<GluSplit> gemm_glu_epilogue(const Graph& g);

// Restricts enumeration. Empty `precisions` = every precision path the GPU supports;
// the CUDA-core code generator (issue 4) passes {"fp32"} until tensor-core templates exist.
struct SpaceOptions {
  std::vector<std::string> precisions;
};
std::vector<Variant> enumerate_variants(const Workload& w, const GpuSpec& gpu,
                                        const SpaceOptions& options);
std::vector<Variant> enumerate_variants(const WorkloadShape& s, const GpuSpec& gpu,
                                        const SpaceOptions& options = {});

// True if the GPU has a unit for the precision path: fp32 always; fp16 on tensor cores
// from sm_75 (mma.sync m16n8k8), tf32 and bf16 from sm_80.
bool gpu_has_precision(const GpuSpec& gpu, const std::string& precision);

// --- Resource formulas -----------------------------------------------------------------

// Residency and launch limits (blocks_per_sm, launch_refusal): gpu/occupancy.h.

// Bytes of an operand-tile row pad (against bank conflicts): 16 bytes.
constexpr int64_t kSmemPadBytes = 16;

// GEMM-family shared memory: `stages` copies of the A tile stored k-major (block_k rows
// of block_m elements + pad) and of the B tile (block_k rows of block_n + pad), elements
// of `smem_elem_bytes` (4 for fp32/tf32, 2 for fp16/bf16).
int64_t gemm_smem_bytes(int64_t block_m, int64_t block_n, int64_t block_k, int64_t stages,
                        int smem_elem_bytes);
// The most registers ptxas gives a thread under __launch_bounds__(threads), which every
// template declares: max_regs_per_thread_for_block with the register-file rules every GPU of
// gpus.yaml shares (65536 per block, warps in units of 256 registers counted in multiples of
// 4, at most 255; GpuCatalog.RegisterRulesAreShared checks the table).
int launch_bounds_regs(int64_t threads);
// Whether a stages-3 GEMM variant runs as a cp.async pipeline, as GemmEmitter::async_ok
// decides for both operands: each plain, or Conv's A an im2col gather with 32-bit indices
// whose rows the block hoists (threads and block_m divide one another). Otherwise the kernel
// silently runs register-staged stages 2.
bool gemm_async_ok(const WorkloadShape& s, int64_t block_m, int64_t threads);
// Elements per global load of operand A or B, as GemmEmitter::operand_vec: the variant's
// vec for a plain operand, narrowed until it divides the contiguous extent and the tile
// (Conv's A: also the image plane); 1 for the others.
int64_t gemm_operand_vec(const WorkloadShape& s, bool operand_a, int64_t vec, int64_t tile,
                         int64_t block_k);

// What one thread of a CUDA-core GEMM block loads per K tile: A and B elements, the global
// loads they take (vectors of gemm_operand_vec elements), and the elements of operands a
// fused prologue computes (index math and the prologue's own values, element by element).
struct GemmThreadLoads {
  double elems = 0;
  double loads = 0;
  double prologue_elems = 0;
};
GemmThreadLoads gemm_thread_loads(const WorkloadShape& s, int64_t block_m, int64_t block_n,
                                  int64_t block_k, int64_t vec, int64_t threads);
// CUDA-core GEMM registers, fitted to ptxas (docs/bench/registers.md): the thread_m x
// thread_n accumulators + 23.5 + per loaded element 1.1 (unrolled inner products,
// fragments) + per global load 3.4 (address, predicate) + per prologue element 0.4 + per
// register-staged element (stages == 2) 0.5; at most the launch bound when that is below
// 255 (ptxas spills instead). A demand above 255 is returned as is: fits_gpu rejects it.
int gemm_fp32_regs(int64_t thread_m, int64_t thread_n, const GemmThreadLoads& loads,
                   int64_t stages, int64_t threads);
// Tensor-core GEMM shared tiles (template_gemm_mma.cpp): an operand contiguous along k in
// memory is stored as rows of k ("k rows": [tile][block_k + pad]), one contiguous along m or
// n as rows of m/n ([block_k][tile + pad]). The pad makes the fragment reads conflict-free
// (ldmatrix's 8 row addresses per phase, tf32's 32-bit reads; docs/codegen.md): 16 bytes,
// except 8 floats for tf32 rows of m/n. Tiles: multiples of 16 elements.
int64_t gemm_mma_pad_elems(const std::string& precision, bool k_rows);
// Elements of one stage of an operand tile (tile = block_m or block_n).
int64_t gemm_mma_stage_elems(const std::string& precision, bool k_rows, int64_t tile,
                             int64_t block_k);
// Bytes of the `stages` A and B stages of a tensor-core variant of workload `s`.
int64_t gemm_mma_smem_bytes(const WorkloadShape& s, const std::string& precision, int64_t block_m,
                            int64_t block_n, int64_t block_k, int64_t stages);
// Bytes per cp.async copy of operand A or B on a tensor-core path, as
// GemmEmitter::choose_operand_mma: an addressable operand stored as the math type (f32 for
// tf32) in the widest vector of <= 16 bytes that divides its contiguous extent and the tile
// (Conv's A: and the image plane), at least 4 bytes; tf32 Conv A gathers 4 bytes per element
// where the block hoists its rows. 0: the operand goes through registers.
int gemm_mma_copy_bytes(const WorkloadShape& s, bool operand_a, const std::string& precision,
                        int64_t tile, int64_t block_k, int64_t threads);
// Tensor-core GEMM registers, fitted to ptxas (docs/bench/registers.md):
// a·(1.2 + a/256) for the warp tile's a = warp_m·warp_n/32 fp32 accumulators + its A and B
// fragment registers (4 per m16 tile, 2 per n8 tile) + 1.7 x the elements a thread stages
// through registers in vector loads per K tile (f32 storage, the gathered conv input) +
// 1.8 x `live_scalar`, the f16/bf16 elements it loads one by one through registers times
// the K tiles live at once (min(stages, K tiles of a split)) + `gathered` (the enumerator
// passes 2 per im2col element a thread copies per K tile, 4 per element it gathers through
// registers, and 4 per tile element a thread moves per K tile beyond 48) + 25; at most the
// launch bound when that is below 255 (a demand above 255 is returned: fits_gpu drops it).
int gemm_mma_regs(int64_t warp_m, int64_t warp_n, double staged, double live_scalar,
                  double gathered, int64_t threads);

// What a thread of a tf32 tensor-core GEMM tile moves per K tile: the inputs of
// gemm_tf32_regs.
struct Tf32ThreadLoad {
  int64_t warp_m = 0, warp_n = 0, stages = 2;
  double moved = 0;         // tile elements of both operands, (block_m + block_n)·block_k / threads
  double staged = 0;        // of those, elements through registers in vector loads
  double gathered = 0;      // im2col cost: 2 per element copied, 4 per element through registers
  double narrow_copies = 0;  // 4-byte copies of operands not gathered (0 with <= 2 K tiles)
  bool conv = false;        // implicit-GEMM convolution (output coordinates, bounds per row)
};
// Tensor-core tf32 GEMM registers, fitted to ptxas over the whole tf32 kept matrix (10,407
// compiles for sm_80/86/89/90 and 60 first choices, docs/bench/registers.md, session 8):
// a·(0.8 + a/256) + 1.85 moved + 5 staged + 0.9 gathered + 5.2 narrow_copies + 5 stages +
// 16.8 [conv], with a = warp_m·warp_n/32 accumulators. tf32 fragments come from 32-bit
// shared loads (no ldmatrix) in k8 steps, so the fp16 fit (gemm_mma_regs) underestimated
// tf32 by 23 registers on average. At most the launch bound below 255.
int gemm_tf32_regs(const Tf32ThreadLoad& t, int64_t threads);

// Tensor-core attention registers (param_space_attention.cpp), fitted to ptxas on 54
// compiles (docs/bench/compile-all.md): 37 + 1.17 x (per m16 tile of a warp: Q's fragments,
// the block_n/2 score accumulators, the output accumulators, 4 for m and l); at most the
// launch bound below 255.
int attention_mma_regs(const WorkloadShape& s, const std::string& precision, int64_t warp_m,
                       int64_t block_n, int64_t threads);

// attention_backward's dynamic shared memory (template_attention_backward.cpp's layout).
int64_t attention_backward_smem_bytes(const WorkloadShape& s, int64_t block_m, int64_t block_n);

// attention_backward on tensor cores (template_attention_backward_mma.cpp): head dims padded to
// the mma's k step, row pitches (float, 16 bytes of pad), one warp per 16 keys of a key block
// and per 16 queries of a query block, and the dynamic shared memory of either launch.
struct AttentionBackwardMmaLayout {
  int64_t dp = 0, dvp = 0, ldq = 0, ldk = 0, ldv = 0, kv_threads = 0, q_threads = 0, smem_bytes = 0;
};
AttentionBackwardMmaLayout attention_backward_mma_layout(const WorkloadShape& s, const std::string& precision,
                                                         int64_t block_m, int64_t block_n);

// --- Per-family enumerators (param_space_gemm.cpp, _attention.cpp, _reduction.cpp,
// _elementwise.cpp) ----
// Each emits only variants that pass fits_gpu, in a deterministic order.
std::vector<Variant> enumerate_gemm_family(const WorkloadShape& s, const GpuSpec& gpu,
                                           const std::vector<std::string>& precisions);
std::vector<Variant> enumerate_depthwise(const WorkloadShape& s, const GpuSpec& gpu);
std::vector<Variant> enumerate_attention(const WorkloadShape& s, const GpuSpec& gpu,
                                         const std::vector<std::string>& precisions);
std::vector<Variant> enumerate_reduction(const WorkloadShape& s, const GpuSpec& gpu);
std::vector<Variant> enumerate_output_parallel(const WorkloadShape& s, const GpuSpec& gpu);

// Small integer helpers the spaces share.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}
// The choices from `all` not larger than the extent rounded up to a power of two (a tile
// much larger than the problem only computes padding), keeping at least `min_tile`.
inline std::vector<int64_t> tiles_up_to(std::initializer_list<int64_t> all, int64_t extent,
                                        int64_t min_tile) {
  const int64_t cap = std::max(min_tile, pow2_ceil(std::max<int64_t>(extent, 1)));
  std::vector<int64_t> out;
  for (int64_t t : all)
    if (t <= cap) out.push_back(t);
  return out;
}

}  // namespace dc
