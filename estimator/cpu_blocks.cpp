// The CPU device's block models (cpu_blocks.h): a work-group is one core running its
// work-items one after another; each family counts one work-item's instructions.
#include "cpu_blocks.h"

#include <algorithm>
#include <cmath>

#include "estimator.h"

namespace dc::estimator_detail {

namespace {

// The GEMM tile's costs on PoCL, in a core's cycles, measured (docs/estimator.md, "The CPU
// GEMM model"): paired timings of 303 variants of three 1x1 convolutions and of 8 variants
// of each of MobileNetV2's 33 convolutions, fitted by non-negative least squares. Counting
// instructions, as before, ranked these variants at a median rho of 0.14; these constants
// rank each held-out workload at 0.71.
// The bk products of the step run 2.6x the vector model's cycles (PoCL's code for the
// thread tile is not the ideal one FMA per row vector) ...
constexpr double kCpuGemmStepStretch = 2.6;
// ... and 1.7x that again when the work-group's tiles outgrow L1 (its loads come from L2).
constexpr double kCpuL1SpillStretch = 1.7;
// Staging: a vector of an operand contiguous along the tile's rows (a load, its index and
// guard, a vector store) ...
constexpr double kCpuRowVectorStageCycles = 3.7;
// ... an element of an operand contiguous along k, stored k-major one at a time ...
constexpr double kCpuScatteredElementStageCycles = 8.9;
// ... and an im2col element's decode (position and tap) where Conv's A is gathered.
constexpr double kCpuGatherCycles = 17;
// Stages 2: an element held in a private array through the tile's math (in memory past the
// core's 16 vector registers: a store and a load).
constexpr double kCpuHeldCycles = 4.4;
// The scalar epilogue: an output's index, guard, loads and store ...
constexpr double kCpuOutputCycles = 7;
// ... and a work-item's own setup (its indices, its accumulators).
constexpr double kCpuWorkItemCycles = 80;

// A work-group of an output-parallel kernel (elementwise, pooling) costs its core this much
// beside its work-items: PoCL's scheduler hands it out and enters the work-item loop. The
// same 1M floats in 64 to 4,096 groups of one kernel took 22 ns more wall time per group over
// 2 cores at 2.445 GHz: 108 cycles a core (scripts/probes/pocl_group_dispatch.c; docs/
// estimator.md, "A work-group's dispatch"). Depthwise and GEMM groups carry fixed staging work
// that their counts already charge.
constexpr double kCpuOutputGroupCycles = 110;

// Instructions of one element of depthwise_direct's input staging loop, counted from its
// source (codegen/template_depthwise.cpp): the element's channel, row and column (three
// divisions or remainders by constants, a multiply-high and shifts each: 12), the tile's
// origin in 64 bits (4), the halo bounds (5 compares and branches), the NCHW address (4),
// the load, the local store and the loop's step (3: PoCL runs the loop per work-item).
constexpr double kDepthwiseStagedInstructions = 30;
// ... and of one weight: its channel, row and column (12), the bound (2), the address (3),
// the load, the store and the loop's step (5).
constexpr double kDepthwiseWeightInstructions = 22;

// A core's figures in its own units: vector instructions of `lanes` fp32 lanes.
struct Core {
  double lanes = 8;
  double fma_pipes = 2;    // fp32_lanes_per_sm / lanes
  double issue = 2;        // instructions a clock: issue_per_clk warp instructions of 32 lanes
  double loads = 2;        // loads a clock: lsu_per_clk likewise
  double fma_latency = 4;  // cycles from an FMA to the next on the same accumulator
};

Core core_of(const GpuSpec& g) {
  Core c;
  c.lanes = g.simd_lanes;
  c.fma_pipes = std::max(1.0, g.fp32_lanes_per_sm / c.lanes);
  const double per_warp = (g.warp_size > 0 ? g.warp_size : 32) / c.lanes;
  c.issue = g.issue_per_clk * per_warp;
  c.loads = g.lsu_per_clk * per_warp;
  c.fma_latency = g.fma_latency_cycles;
  return c;
}

// Common to every CPU block: local memory is ordinary cached memory whose loads and stores
// the work-items' instruction counts hold (no bank term), a work-item hides no latency but
// its own (counted in its cycles), and a core's hardware prefetchers keep DRAM busy.
BlockModel serial_block(double work_group_cycles, const GpuSpec& g) {
  BlockModel b;
  b.pipe_cycles = work_group_cycles;
  b.warps_needed = 1;
  b.critical_cycles = 0;
  b.smem_bytes = 0;
  b.inflight_per_warp = g.dram_bytes_per_s() * model::kDramLatencyS;
  return b;
}

BlockModel gemm(const WorkloadShape& s, const Params& p, const Variant& v, const GpuSpec& g) {
  const Core c = core_of(g);
  const double threads = v.threads_per_block;
  const double bm = static_cast<double>(p.block_m), bn = static_cast<double>(p.block_n);
  const double bk = static_cast<double>(p.block_k);
  const double k_tiles = cdiv(cdiv(static_cast<double>(s.k), static_cast<double>(p.split_k)), bk);
  const double outputs = static_cast<double>(p.thread_m * p.thread_n);
  const double accumulators = static_cast<double>(p.thread_m) * cdiv(static_cast<double>(p.thread_n), c.lanes);
  // A K tile's two barriers cut the work-item loop into two regions (staging, products): PoCL
  // enters each once per work-item and carries the accumulators, live across the barriers,
  // out to the work-item's context and back (a vector store and load each).
  const double tile_regions = (2 * kWorkItemLoopInstructions + 2 * accumulators) / c.issue;
  // Per K tile a work-item stages its share of both tiles, then steps through bk products.
  const double a_elems = bm * bk / threads, b_elems = bn * bk / threads;
  auto staging = [&](const GemmOperandLayout& o, double elems, int64_t vec, bool gathered) {
    return (o.along_rows ? elems / static_cast<double>(vec) * kCpuRowVectorStageCycles
                         : elems * kCpuScatteredElementStageCycles) +
           (gathered ? elems * kCpuGatherCycles : 0);
  };
  const double stage =
      staging(s.a_layout, a_elems, gemm_operand_vec(s, true, p.vec, p.block_m, p.block_k), s.gather_a) +
      staging(s.b_layout, b_elems, gemm_operand_vec(s, false, p.vec, p.block_n, p.block_k), s.weight_grad);
  const double held = p.stages >= 2 ? kCpuHeldCycles * (a_elems + b_elems) : 0;
  // The step's loads come from L1 while the work-group's tiles fit there.
  const bool spills_l1 = g.l1_bytes > 0 && static_cast<double>(v.smem_bytes) > static_cast<double>(g.l1_bytes);
  const double step = cpu_gemm_step_cycles(p.thread_m, p.thread_n, g) * kCpuGemmStepStretch *
                      (spills_l1 ? kCpuL1SpillStretch : 1.0);
  const double m = static_cast<double>(s.m), n = static_cast<double>(s.n);
  const double batch = static_cast<double>(s.batch), k = static_cast<double>(s.k);
  const double epi = epilogue_flops_per_output(s, 2 * m * n * k * batch, m * n * batch);
  // The epilogue is scalar: each output's index, guard, loads and store, and its math.
  double tail = outputs * (kCpuOutputCycles + epi / c.issue) + kCpuWorkItemCycles;
  if (p.split_k > 1) tail += accumulators * 3 / c.issue;  // partial sums in and out
  BlockModel b = serial_block(threads * (k_tiles * (bk * step + stage + held + tile_regions) + tail), g);
  b.l2_bytes = k_tiles * (bm * bk + bk * bn) * s.elem_bytes;
  b.dram_bytes = s.bytes + reread_bytes(s.a_bytes, cdiv(n, bn), g) + reread_bytes(s.b_bytes, cdiv(m, bm), g) +
                 (p.split_k > 1 ? 2 * static_cast<double>(p.split_k) * m * n * batch * 4 : 0);
  return b;
}

// depthwise_direct: a work-item's pixels_per_thread adjacent outputs of one channel, scalar
// FMAs (its pixels are not contiguous vectors of a row it owns alone), each pixel's taps one
// dependent chain; the input tile with halo staged into local memory by the work-group.
BlockModel depthwise(const WorkloadShape& s, const Params& p, const Variant& v, const GpuSpec& g) {
  const Core c = core_of(g);
  const double threads = v.threads_per_block;
  const double th = static_cast<double>(p.tile_h), tw = static_cast<double>(p.tile_w);
  const double bc = static_cast<double>(p.block_c), ppt = static_cast<double>(p.pixels_per_thread);
  const double kh = static_cast<double>(s.kernel_h), kw = static_cast<double>(s.kernel_w);
  const double sw = static_cast<double>(s.stride_w), taps = kh * kw;
  const double multiplier = std::max(1.0, static_cast<double>(s.out_channels) /
                                              static_cast<double>(std::max<int64_t>(1, s.groups)));
  const double in_th = (th - 1) * static_cast<double>(s.stride_h) + (kh - 1) * static_cast<double>(s.dilation_h) + 1;
  const double in_tw = (tw - 1) * sw + (kw - 1) * static_cast<double>(s.dilation_w) + 1;
  const double tile_elems = cdiv(bc, multiplier) * in_th * in_tw;
  const double fma = ppt * taps;
  const double lds = kh * ((ppt - 1) * sw + kw) + taps;  // input rows reused across pixels, weights
  const double math = std::max({taps * c.fma_latency, fma / c.fma_pipes, lds / c.loads, (fma + lds) / c.issue});
  const double total_out = static_cast<double>(s.images * s.out_channels * s.out_h * s.out_w);
  const double epi = epilogue_flops_per_output(s, 2 * total_out * taps, total_out);
  // Its share of staging the tile (load, store, halo bounds, index arithmetic) and the
  // weights, its outputs, and the two regions (staging, compute).
  const double other =
      (tile_elems * kDepthwiseStagedInstructions + bc * taps * kDepthwiseWeightInstructions) / threads +
      ppt * (2 + epi) + 2 * kWorkItemLoopInstructions;
  BlockModel b = serial_block(threads * (math + other / c.issue), g);
  b.l2_bytes = (tile_elems + bc * taps) * s.elem_bytes;
  b.dram_bytes = s.bytes;
  return b;
}

// row_reduce: a row's threads_per_row work-items each load their vectors of it; every level
// of dc's warp shuffles is, on OpenCL, a store to local memory, a barrier and a load
// (codegen/opencl_dialect.cpp), so a new region of the work-item loop for each work-item.
BlockModel reduction(const WorkloadShape& s, const Params& p, const GpuSpec& g) {
  const Core c = core_of(g);
  const double len = static_cast<double>(s.row_len), rows = static_cast<double>(s.rows);
  const double tpr = static_cast<double>(p.threads_per_row), vec = static_cast<double>(p.vec);
  const double vecs = cdiv(len, tpr * vec);  // vector loads per work-item per pass
  const bool cached = p.cache != 0;
  const double passes = cached ? 1 : s.stream_reads;
  const double chip_passes = cached ? s.stream_reads - 1 : 0;
  const double loads = vecs * passes;
  const double chip = p.cache == 2 ? vecs * chip_passes * 2 : 0;  // local memory out and back
  const double alu = (s.flops / std::max(rows, 1.0)) / (tpr * vec);
  const bool block_reduce = tpr > 32;
  const double levels = s.reductions_per_row * (5 + (block_reduce ? std::log2(tpr / 32) + 4 : 0));
  const double stores = s.stream_reads >= 2 ? vecs : 1;
  const double per_item = loads + chip + alu + stores + levels * (3 + kWorkItemLoopInstructions) +
                          kWorkItemLoopInstructions;
  BlockModel b = serial_block(static_cast<double>(p.rows_per_block) * tpr * per_item / c.issue, g);
  const bool reread = !cached && s.stream_reads > 1 && s.in_bytes > static_cast<double>(g.l2_bytes) / 2 &&
                      len * s.elem_bytes > model::kL2ReuseRowBytes;
  b.dram_bytes = s.bytes + (reread ? (s.stream_reads - 1) * s.in_bytes : 0);
  return b;
}

// elementwise, pool_window, opaque: a work-item's elems_per_thread vectors of `vec` (vec <=
// lanes: one instruction per load, operation and store of a vector).
BlockModel output_parallel(const WorkloadShape& s, const Params& p, const Variant& v, const GpuSpec& g) {
  const Core c = core_of(g);
  const double ept = static_cast<double>(p.elems_per_thread), vec = static_cast<double>(p.vec);
  const double elements = std::max(1.0, static_cast<double>(s.elements));
  const double loads = ept * std::max(1, s.inputs) * static_cast<double>(s.window);
  const double alu = ept * (s.flops / elements) * cdiv(vec, c.lanes);
  const double index = ept * (s.vec_align > 1 ? 3 : 10);
  const double per_item = loads + alu + ept + index + kWorkItemLoopInstructions;
  BlockModel b = serial_block(v.threads_per_block * per_item / c.issue + kCpuOutputGroupCycles, g);
  b.dram_bytes = s.bytes;
  return b;
}

}  // namespace

double cpu_gemm_step_cycles(int64_t thread_m, int64_t thread_n, const GpuSpec& g) {
  const Core c = core_of(g);
  const double row_vectors = cdiv(static_cast<double>(thread_n), c.lanes);
  const double fma = static_cast<double>(thread_m) * row_vectors;
  const double loads = static_cast<double>(thread_m) + row_vectors;
  return std::max({c.fma_latency, fma / c.fma_pipes, loads / c.loads, (fma + loads) / c.issue});
}

bool cpu_block(const WorkloadShape& s, const Params& p, const Variant& v, const GpuSpec& g,
               BlockModel* out) {
  switch (s.family) {
    case Family::gemm:
    case Family::conv:
      if (v.precision != "fp32") return false;
      *out = gemm(s, p, v, g);
      return true;
    case Family::depthwise:
      *out = depthwise(s, p, v, g);
      return true;
    case Family::reduction:
      *out = reduction(s, p, g);
      return true;
    case Family::pool_window:
    case Family::elementwise:
    case Family::opaque:
      *out = output_parallel(s, p, v, g);
      return true;
    case Family::attention:
      return false;
  }
  return false;
}

}  // namespace dc::estimator_detail
