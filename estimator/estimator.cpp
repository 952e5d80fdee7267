// The analytic model. Each template family describes one thread block (pipe cycles, the
// warps it needs resident to hide latency, its serial latency path, shared-memory traffic)
// and the kernel's DRAM traffic; combine() turns that into time on the GPU: blocks over
// SMs (the busiest SM's share, in rounds of the resident blocks), DRAM bytes over
// bandwidth limited by the bytes kept in flight, shared-memory bytes over bank bandwidth,
// plus launch overhead.
#include "estimator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "block_model.h"
#include "cpu_blocks.h"
#include "ir/error.h"

namespace dc {

using namespace model;

namespace estimator_detail {
namespace {

struct Field {
  std::string_view name;  // sized: most mismatches end at the length
  int64_t Params::*member;
  int64_t min;  // widths, counts and factors below 1 read as 1
};
constexpr Field kFields[] = {
    {"block_m", &Params::block_m, 0},
    {"block_n", &Params::block_n, 0},
    {"block_k", &Params::block_k, 0},
    {"warp_m", &Params::warp_m, 0},
    {"warp_n", &Params::warp_n, 0},
    {"thread_m", &Params::thread_m, 0},
    {"thread_n", &Params::thread_n, 0},
    {"vec", &Params::vec, 1},
    {"stages", &Params::stages, 1},
    {"split_k", &Params::split_k, 1},
    {"split_kv", &Params::split_kv, 1},
    {"tile_h", &Params::tile_h, 0},
    {"tile_w", &Params::tile_w, 0},
    {"block_c", &Params::block_c, 0},
    {"pixels_per_thread", &Params::pixels_per_thread, 1},
    {"threads", &Params::threads, 0},
    {"threads_per_row", &Params::threads_per_row, 0},
    {"rows_per_block", &Params::rows_per_block, 1},
    {"cache", &Params::cache, 0},
    {"elems_per_thread", &Params::elems_per_thread, 1},
};

}  // namespace

Params decode(const Variant& v) {
  Params p;
  for (const auto& [name, value] : v.params) {
    for (const Field& f : kFields) {
      if (name == f.name) {
        p.*(f.member) = std::max(f.min, value);
        break;
      }
    }
  }
  return p;
}

double cdiv(double a, double b) { return std::ceil(a / b); }

double epilogue_flops_per_output(const WorkloadShape& s, double gemm_flops, double outputs) {
  return outputs > 0 ? std::max(0.0, s.flops - gemm_flops) / outputs : 0;
}

double reread_bytes(double operand_bytes, double reads, const GpuSpec& g) {
  if (operand_bytes <= static_cast<double>(g.l2_bytes) / 2) return 0;
  return (reads - 1) * operand_bytes;
}

// Warp memory instructions that move one operand's K tile (`elems` per block) into shared
// memory on the CUDA-core path, as template_gemm_loads.cpp emits them. Register path: one
// LDG per vector, then one STS per vector when the operand is contiguous along its rows
// (the vector lands on consecutive floats of a k row) or one per element when it is
// contiguous along k (the k-major store scatters the vector over vec rows). cp.async: one
// 16-byte copy per vector of 4 along the rows, otherwise one copy per element.
double fp32_operand_instructions(const GemmOperandLayout& o, double elems, int64_t vec,
                                 bool async) {
  const double vectors = elems / static_cast<double>(vec);
  if (async) return o.along_rows && vec == 4 ? vectors : elems;
  return vectors + (o.along_rows ? vectors : elems);
}

}  // namespace estimator_detail

using namespace estimator_detail;

namespace {

double fp32_warp_fma_per_clk(const GpuSpec& g) { return g.fp32_lanes_per_sm / 32.0; }

double dram_latency_cycles(const GpuSpec& g) { return kDramLatencyS * g.clock_hz(); }

// Serial path of a K loop of `tiles` tiles whose loads take `latency` cycles: without
// pipelining each tile waits for its loads; with `stages` buffers the loads of the next
// stages-1 tiles overlap the current tile's work.
double pipelined_critical(double tiles, double tile_alone, double latency, int64_t stages) {
  if (stages <= 1) return tiles * (tile_alone + latency);
  return latency + tiles * std::max(tile_alone, latency / static_cast<double>(stages - 1));
}

BlockModel gemm_block(const WorkloadShape& s, const Params& p, const Variant& v, const GpuSpec& g) {
  BlockModel b;
  const double bm = static_cast<double>(p.block_m), bn = static_cast<double>(p.block_n);
  const double bk = static_cast<double>(p.block_k);
  const double threads = v.threads_per_block, warps = cdiv(threads, 32);
  const double m = static_cast<double>(s.m), n = static_cast<double>(s.n);
  const double k = static_cast<double>(s.k), batch = static_cast<double>(s.batch);
  const double split = static_cast<double>(p.split_k);
  const double k_tiles = cdiv(cdiv(k, split), bk);
  // im2col index arithmetic: Conv's A, or the weight gradient's B.
  const double gather = (s.gather_a ? 4 * bm * bk / threads : 0) + (s.weight_grad ? 4 * bn * bk / threads : 0);
  const bool tensor_core = v.precision != "fp32";
  const int smem_elem = v.precision == "fp16" || v.precision == "bf16" ? 2 : 4;

  double tile_pipe = 0, tile_issue = 0, tile_smem = 0;
  if (!tensor_core) {
    const double tm = static_cast<double>(p.thread_m), tn = static_cast<double>(p.thread_n);
    const double fma = bm * bn * bk / 32;  // warp FMA instructions per K tile
    const double lds = warps * bk * (cdiv(tm, 4) + cdiv(tn, 4));  // 128-bit shared loads
    // cp.async (no register round trip) only where both operands allow it; else stages 2.
    const bool async = p.stages >= 3 && gemm_async_ok(s, p.block_m, v.threads_per_block);
    const auto operand_vec = [&](bool a, int64_t tile) {
      return gemm_operand_vec(s, a, p.vec, tile, p.block_k);
    };
    const double memory =
        (fp32_operand_instructions(s.a_layout, bm * bk, operand_vec(true, p.block_m), async) +
         fp32_operand_instructions(s.b_layout, bn * bk, operand_vec(false, p.block_n), async)) /
        32;  // warp instructions
    const double overhead = warps * (bk + gather + 6);  // per-step addressing, sync, loop
    tile_pipe = std::max(fma / fp32_warp_fma_per_clk(g), (lds + memory) / g.lsu_per_clk);
    tile_issue = (fma + lds + memory + overhead) / g.issue_per_clk;
    tile_smem = 128 * lds + (bm * bk + bk * bn) * 4;  // one wavefront per warp load + stores
    b.warps_needed = std::clamp(64.0 / (tm * tn), 4.0, 32.0);
  } else {
    // Tensor-core path (template_gemm_mma.cpp), per K tile, in warp instructions.
    const bool tf32 = v.precision == "tf32";
    const double k_mma = tf32 ? 8 : 16;
    const double wm = static_cast<double>(p.warp_m), wn = static_cast<double>(p.warp_n);
    const double steps = warps * (bk / k_mma);  // warp k steps
    const double mma = steps * (wm / 16) * (wn / 8);
    // Fragments: fp16/bf16 one ldmatrix.x4 per m16 tile and per pair of n8 tiles (512
    // bytes each); tf32 one 32-bit shared load + cvt.rna per register (4 per m16 tile, 2
    // per n8 tile; 128 bytes each).
    const double frag = tf32 ? steps * (4 * wm / 16 + 2 * wn / 8) : steps * (wm / 16 + wn / 16);
    const double frag_bytes = frag * (tf32 ? 128 : 512);
    const double cvt = tf32 ? frag : 0;
    // Operand tiles: cp.async copies of copy_bytes, or through registers (one load per
    // vector, a conversion and a shared store per element).
    double memory = 0, convert = 0;
    const auto operand = [&](bool a, int64_t tile) {
      const double elems = static_cast<double>(tile) * bk;
      const int copy = gemm_mma_copy_bytes(s, a, v.precision, tile, p.block_k,
                                           v.threads_per_block);
      if (copy > 0) {
        memory += elems * smem_elem / copy / 32;
      } else {
        const GemmOperandLayout& o = a ? s.a_layout : s.b_layout;
        const double vec_load =
            o.dtype == DType::f32 ? static_cast<double>(gemm_operand_vec(s, a, p.vec, tile, p.block_k)) : 1;
        memory += (elems / vec_load + elems) / 32;
        convert += tf32 ? 0 : elems / 32;
      }
    };
    operand(true, p.block_m);
    operand(false, p.block_n);
    const double overhead = warps * (bk / k_mma + 6) + gather * warps + convert;
    const double rate = tf32 ? g.tc_tf32_flops_per_sm_clk
                        : v.precision == "bf16" ? g.tc_bf16_flops_per_sm_clk
                                                : g.tc_fp16_flops_per_sm_clk;
    tile_pipe = std::max(2 * bm * bn * bk / rate, (frag + memory) / g.lsu_per_clk);
    tile_issue = (mma + frag + cvt + memory + overhead) / g.issue_per_clk;
    tile_smem = frag_bytes + (bm * bk + bk * bn) * smem_elem;
    b.warps_needed = 4;
  }
  const double tile = std::max(tile_pipe, tile_issue);
  const double outputs = bm * bn;
  const double epi = epilogue_flops_per_output(s, 2 * m * n * k * batch, m * n * batch);
  double tail = outputs / 32 * (2 + epi) / g.issue_per_clk;       // epilogue: loads, math, stores
  if (p.split_k > 1) tail += outputs / 32 * 3 / g.issue_per_clk;  // partial sums in and out
  b.pipe_cycles = k_tiles * tile + tail;
  const double alone = tile / std::min(1.0, warps / b.warps_needed);
  b.critical_cycles = pipelined_critical(k_tiles, alone, kL2LatencyCycles, p.stages) + tail;
  b.smem_bytes = k_tiles * tile_smem;
  b.l2_bytes = k_tiles * (bm * bk + bk * bn) * s.elem_bytes;
  b.dram_bytes = s.bytes + reread_bytes(s.a_bytes, cdiv(n, bn), g) +
                 reread_bytes(s.b_bytes, cdiv(m, bm), g) +
                 (p.split_k > 1 ? 2 * split * m * n * batch * 4 : 0);
  b.inflight_per_warp = (bm * bk + bk * bn) * s.elem_bytes / warps *
                        static_cast<double>(std::max<int64_t>(1, p.stages - 1));
  return b;
}

BlockModel depthwise_block(const WorkloadShape& s, const Params& p, const Variant& v,
                           const GpuSpec& g) {
  BlockModel b;
  const double th = static_cast<double>(p.tile_h), tw = static_cast<double>(p.tile_w);
  const double bc = static_cast<double>(p.block_c), ppt = static_cast<double>(p.pixels_per_thread);
  const double kh = static_cast<double>(s.kernel_h), kw = static_cast<double>(s.kernel_w);
  const double sw = static_cast<double>(s.stride_w);
  const double warps = cdiv(v.threads_per_block, 32);
  const double multiplier = std::max(1.0, static_cast<double>(s.out_channels) /
                                              static_cast<double>(std::max<int64_t>(1, s.groups)));
  const double in_c = cdiv(bc, multiplier);
  const double in_th =
      (th - 1) * static_cast<double>(s.stride_h) + (kh - 1) * static_cast<double>(s.dilation_h) + 1;
  const double in_tw = (tw - 1) * sw + (kw - 1) * static_cast<double>(s.dilation_w) + 1;
  const double tile_elems = in_c * in_th * in_tw;
  const double outputs = th * tw * bc;
  const double taps = kh * kw;
  const double fma = outputs * taps / 32;
  const double lds = outputs / ppt * kh * ((ppt - 1) * sw + kw) / 32;  // row reuse in registers
  const double loads = tile_elems / 32 * 6;  // load, store, halo bounds and index arithmetic
  const double weights = bc * taps / 32 * 2;
  const double total_out = static_cast<double>(s.images * s.out_channels * s.out_h * s.out_w);
  const double epi = epilogue_flops_per_output(s, 2 * total_out * taps, total_out);
  const double tail = outputs / 32 * (2 + epi);
  b.pipe_cycles =
      std::max(fma / fp32_warp_fma_per_clk(g), (fma + lds + loads + weights + tail) / g.issue_per_clk);
  b.warps_needed = std::clamp(16.0 / ppt, 4.0, 32.0);  // a pixel's taps are a dependent chain
  b.critical_cycles =
      dram_latency_cycles(g) + b.pipe_cycles / std::min(1.0, warps / b.warps_needed);
  b.smem_bytes = lds * 128 * std::min(sw, 4.0) + tile_elems * 4 + bc * taps * 4;
  b.l2_bytes = (tile_elems + bc * taps) * s.elem_bytes;
  b.dram_bytes = s.bytes;  // halo re-reads of neighbouring tiles hit L2
  b.inflight_per_warp = tile_elems * s.elem_bytes / warps;
  return b;
}

BlockModel attention_block(const WorkloadShape& s, const Params& p, const Variant& v,
                           const GpuSpec& g) {
  BlockModel b;
  const double bm = static_cast<double>(p.block_m), bn = static_cast<double>(p.block_n);
  const double d = static_cast<double>(s.k), dv = static_cast<double>(s.dv);
  const double threads = v.threads_per_block, warps = cdiv(threads, 32);
  const double vec = static_cast<double>(p.vec);
  const double tiles = cdiv(static_cast<double>(s.n), bn);
  const double scores_pt = bm * bn / threads, out_pt = bm * dv / threads;
  const double fma = bm * bn * (d + dv) / 32;
  // A thread computes a near-square block of scores (and of outputs): per reduction step it
  // loads about 2 sqrt(elements) operands, four per 128-bit load.
  const double lds =
      warps * (d * cdiv(2 * std::sqrt(scores_pt), 4) + bn * cdiv(2 * std::sqrt(out_pt), 4));
  const double softmax = bm * bn * 6 / 32 + warps * 10;  // scale, mask, max, exp, sum, rescale
  const double probs = bm * bn / 32 * 2;                 // P through shared memory
  const double loads = warps * (bn * (d + dv) / (threads * vec)) * 2;
  const double tile_issue = (fma + lds + softmax + probs + loads) / g.issue_per_clk;
  const double tile_pipe = std::max(fma / fp32_warp_fma_per_clk(g), bm * bn / kSfuPerClk);
  const double tile = std::max(tile_issue, tile_pipe);
  const double edges = bm * (d + dv) / 32 * 2 / g.issue_per_clk;  // Q in, O out
  b.pipe_cycles = tiles * tile + edges;
  b.warps_needed = std::clamp(64.0 / scores_pt, 4.0, 32.0);
  const double alone = tile / std::min(1.0, warps / b.warps_needed);
  b.critical_cycles =
      kL2LatencyCycles + pipelined_critical(tiles, alone, kL2LatencyCycles, p.stages) + edges;
  b.smem_bytes = tiles * (128 * lds + bn * (d + dv) * 4 + bm * bn * 4 * 2);
  b.l2_bytes = tiles * bn * (d + dv) * s.elem_bytes + bm * d * s.elem_bytes;
  b.dram_bytes =
      s.bytes + reread_bytes(s.b_bytes + s.v_bytes, cdiv(static_cast<double>(s.m), bm), g);
  b.inflight_per_warp = bn * (d + dv) * s.elem_bytes / warps *
                        static_cast<double>(std::max<int64_t>(1, p.stages - 1));
  return b;
}

// FlashAttention-2's backward on CUDA cores (template_attention_backward.cpp): a launch of
// key blocks (per query tile: S and dP recomputed, dV and dKt accumulated), then one of query
// blocks (per key tile: S and dP recomputed, dQ accumulated), priced as their average block.
// Every product is register-blocked: a thread's thread_m x thread_n cell loads thread_m +
// thread_n operands from shared memory per step (scalar loads) for thread_m x thread_n
// multiply-adds; cells are dealt to the threads in rounds (the last one partly idle, cells
// past an edge computed and dropped). One exp per score on the SFU; per tile two barriers
// around an unpipelined load, so a tile pays the L2 latency. Every key block re-reads Q, dO
// and O, every query block K and V.
BlockModel attention_backward_block(const WorkloadShape& s, const Params& p, const Variant& v, const GpuSpec& g) {
  BlockModel b;
  const double bm = static_cast<double>(p.block_m), bn = static_cast<double>(p.block_n);
  const double d = static_cast<double>(s.k), dv = static_cast<double>(s.dv);
  const double sq = static_cast<double>(s.m), sk = static_cast<double>(s.n);
  const double tm = static_cast<double>(std::max<int64_t>(1, p.thread_m));
  const double tn = static_cast<double>(std::max<int64_t>(1, p.thread_n));
  const double threads = v.threads_per_block, warps = cdiv(threads, 32);
  const double key_blocks = cdiv(sk, bn), query_blocks = cdiv(sq, bm);
  const double blocks = key_blocks + query_blocks;
  const double q_tiles = cdiv(sq, bm), k_tiles = cdiv(sk, bn);
  // Warp steps of one blocked product rows x cols over klen: rounds of cells x warps x klen;
  // each step thread_m x thread_n FMAs and thread_m + thread_n shared loads.
  const auto steps = [&](double rows, double cols, double klen) {
    return cdiv(cdiv(rows, tm) * cdiv(cols, tn), threads) * warps * klen;
  };
  const double scores = steps(bm, bn, d + dv);                                    // S and dP
  const double key_steps = scores + steps(d, bn, bm) + steps(bn, dv, bm);          // + dKt, dV
  const double query_steps = scores + steps(bm, d, bn);                            // + dQ
  const double step_count = (key_blocks * q_tiles * key_steps + query_blocks * k_tiles * query_steps) / blocks;
  const double fma = step_count * tm * tn;  // warp instructions
  const double lds = step_count * (tm + tn);
  const double tiles = (key_blocks * q_tiles + query_blocks * k_tiles) / blocks;
  const double exps = tiles * bm * bn / kSfuPerClk;
  const double loads = tiles * (bm * (d + 2 * dv) + bn * (d + dv)) / 32;
  const double issue = (fma + lds + loads + tiles * bm * bn * 6 / 32) / g.issue_per_clk;
  b.pipe_cycles = std::max({issue, fma / fp32_warp_fma_per_clk(g), lds / g.lsu_per_clk, exps});
  // Independent multiply-adds per thread hide latency with fewer warps.
  b.warps_needed = std::clamp(16.0 / (tm * tn), 4.0, 8.0);
  // The two launches run one after the other: a key block's tile path, then a query
  // block's, and the second launch's overhead.
  const double per_tile = b.pipe_cycles / std::max(1.0, tiles) / std::min(1.0, warps / b.warps_needed);
  b.critical_cycles = (q_tiles + k_tiles) * (kL2LatencyCycles + per_tile) + g.launch_overhead_us * 1e-6 * g.clock_hz();
  // Bank traffic: a wavefront per warp operand load and per tile store, P and dS written once.
  b.smem_bytes = (lds + loads) * 128 + tiles * bm * bn * 2 * 4;
  b.l2_bytes = tiles * (bm * (d + 2 * dv) + bn * (d + dv)) * s.elem_bytes;
  const double q_side = s.a_bytes + 2 * static_cast<double>(s.batch) * sq * dv * s.elem_bytes;  // Q, O, dO
  b.dram_bytes = s.bytes + reread_bytes(q_side, key_blocks, g) + reread_bytes(s.b_bytes + s.v_bytes, query_blocks, g);
  b.inflight_per_warp = (bm * (d + 2 * dv) + bn * (d + dv)) * s.elem_bytes / warps;
  return b;
}

// attention_backward on tensor cores (template_attention_backward_mma.cpp): the CUDA-core
// path's two launches, a warp per 16 keys of a key block or 16 queries of a query block. Per
// tile the products run on mma.sync at the precision's tensor-core rate (key blocks: S^T,
// dP^T, dV and dK^T; query blocks: S, dP and dQ); their fragments are gathered element by
// element from shared memory (a 32-bit load and a cvt.rna per tf32 element; a load per
// element and a pack per pair for fp16/bf16; the K/V or Q/dO rows of the warp's own A
// fragments re-read every tile), P and dS go to the next products straight from the
// accumulators; per score about 10 instructions (scale, mask, LSE, exp, dS) and one exp on
// the SFU. Loads and barriers as the CUDA-core path (each tile pays the L2 latency); priced
// as the launches' average block.
BlockModel attention_backward_mma_block(const WorkloadShape& s, const Params& p, const Variant& v, const GpuSpec& g) {
  BlockModel b;
  const bool tf32 = v.precision == "tf32";
  const double k_step = tf32 ? 8 : 16;
  const double rate = tf32                    ? g.tc_tf32_flops_per_sm_clk
                      : v.precision == "bf16" ? g.tc_bf16_flops_per_sm_clk
                                              : g.tc_fp16_flops_per_sm_clk;
  const double bm = static_cast<double>(p.block_m), bn = static_cast<double>(p.block_n);
  const double dp = cdiv(static_cast<double>(s.k), k_step) * k_step;
  const double dvp = cdiv(static_cast<double>(s.dv), k_step) * k_step;
  const double d = static_cast<double>(s.k), dv = static_cast<double>(s.dv);
  const double sq = static_cast<double>(s.m), sk = static_cast<double>(s.n);
  const double key_blocks = cdiv(sk, bn), query_blocks = cdiv(sq, bm);
  const double blocks = key_blocks + query_blocks;
  const double q_tiles = cdiv(sq, bm), k_tiles = cdiv(sk, bn);
  const double kv_warps = bn / 16, q_warps = bm / 16;
  // Per tile: flops, fragment elements gathered, operand elements loaded from memory.
  const double kv_flops = 2 * bn * bm * 2 * (dp + dvp);  // S^T, dP^T over dp, dvp; dK^T, dV of dp, dvp
  const double q_flops = 2 * bm * bn * (2 * dp + dvp);    // S, dP, dQ
  const double kv_frag = bn * (dp + dvp) + kv_warps * 2 * bm * (dp + dvp);
  const double q_frag = bm * (dp + dvp) + q_warps * bn * (2 * dp + dvp);
  const double kv_loads = bm * (dp + 2 * dvp), q_loads = bn * (dp + dvp);
  const double per_frag = tf32 ? 2 : 1.5;  // load + cvt, or load + half a pack
  const auto tile_instructions = [&](double flops, double frag, double loads) {
    return flops / (2 * 16 * 8 * k_step) + frag * per_frag / 32 + bm * bn * 10 / 32 + loads * 2 / 32;
  };
  const double kv_tile = tile_instructions(kv_flops, kv_frag, kv_loads);
  const double q_tile = tile_instructions(q_flops, q_frag, q_loads);
  const double kv_n = key_blocks * q_tiles, q_n = query_blocks * k_tiles;  // tiles of each launch
  const double issue = (kv_n * kv_tile + q_n * q_tile) / blocks;
  const double flops = (kv_n * kv_flops + q_n * q_flops) / blocks;
  const double lds = (kv_n * (kv_frag + kv_loads) + q_n * (q_frag + q_loads)) / 32 / blocks;
  const double tiles = (kv_n + q_n) / blocks;
  const double exps = tiles * bm * bn / kSfuPerClk;
  b.pipe_cycles = std::max({issue / g.issue_per_clk, flops / rate, lds / g.lsu_per_clk, exps});
  b.warps_needed = 4;
  const double warps = cdiv(v.threads_per_block, 32);
  const double per_tile = b.pipe_cycles / std::max(1.0, tiles) / std::min(1.0, warps / b.warps_needed);
  b.critical_cycles = (q_tiles + k_tiles) * (kL2LatencyCycles + per_tile) + g.launch_overhead_us * 1e-6 * g.clock_hz();
  b.smem_bytes = lds * 128;
  b.l2_bytes = tiles * (bm * (d + 2 * dv) + bn * (d + dv)) * s.elem_bytes;
  const double q_side = s.a_bytes + 2 * static_cast<double>(s.batch) * sq * dv * s.elem_bytes;  // Q, O, dO
  b.dram_bytes = s.bytes + reread_bytes(q_side, key_blocks, g) + reread_bytes(s.b_bytes + s.v_bytes, query_blocks, g);
  b.inflight_per_warp = (bm * (d + 2 * dv) + bn * (d + dv)) * s.elem_bytes / warps;
  return b;
}

// Tensor-core attention (template_attention_mma.cpp): per key tile a warp runs the QK^T
// and P V mma.sync of its rows, reads K/V fragments from shared memory (ldmatrix.x4 for
// fp16/bf16, one 32-bit load + cvt per element for tf32), and the block copies the K/V tile
// in with 16-byte cp.async (register loads + stores where the operand is not copyable).
// Softmax: per score about 8 instructions (scale/mask, max, exp, sum, pack) and one exp on
// the SFU. split_kv slices write O, m, l and a combine launch reads them back.
BlockModel attention_mma_block(const WorkloadShape& s, const Params& p, const Variant& v,
                               const GpuSpec& g) {
  BlockModel b;
  const bool tf32 = v.precision == "tf32";
  const double elem = tf32 ? 4 : 2, k_step = tf32 ? 8 : 16;
  const double bm = static_cast<double>(p.block_m), bn = static_cast<double>(p.block_n);
  const double dp = cdiv(static_cast<double>(s.k), k_step) * k_step;
  const double dvp = cdiv(static_cast<double>(s.dv), tf32 ? 8 : 16) * (tf32 ? 8 : 16);
  const double warps = cdiv(v.threads_per_block, 32);
  const double split = static_cast<double>(p.split_kv);
  const double tiles = cdiv(cdiv(static_cast<double>(s.n), bn), split);
  const double rate = tf32                      ? g.tc_tf32_flops_per_sm_clk
                      : v.precision == "bf16"   ? g.tc_bf16_flops_per_sm_clk
                                                : g.tc_fp16_flops_per_sm_clk;
  const double mma_flops = 2 * bm * bn * (dp + dvp);
  const double mma = mma_flops / (2 * 16 * 8 * k_step);  // warp mma instructions
  // Fragment reads: every warp reads the whole K and V tiles.
  const double frag = tf32 ? warps * bn * (dp + dvp) / 32 : warps * bn * (dp + dvp) / 256;
  const double cvt = tf32 ? frag + bm * bn / 32 : bm * bn / 64;  // tf32 rounding / packing P
  const double kv_bytes = bn * (dp + dvp) * elem;
  const bool copyable = s.elem_bytes == static_cast<int>(elem);
  const double copies = copyable ? kv_bytes / 16 / 32 : 2 * bn * (dp + dvp) / 32;
  const double softmax = bm * bn * 8 / 32 + warps * 12;
  const double tile_issue = (mma + frag + cvt + copies + softmax + warps * 10) / g.issue_per_clk;
  const double tile_pipe = std::max({mma_flops / rate, (frag + copies) / g.lsu_per_clk, bm * bn / kSfuPerClk});
  const double tile = std::max(tile_issue, tile_pipe);
  const double epi = epilogue_flops_per_output(s, 2 * static_cast<double>(s.m) * static_cast<double>(s.n) *
                                                     (static_cast<double>(s.k) + static_cast<double>(s.dv)) *
                                                     static_cast<double>(s.batch),
                                               static_cast<double>(s.m * s.dv * s.batch));
  double edges = (bm * dp / 32 * 3 + bm * dvp / 32 * (2 + epi)) / g.issue_per_clk;  // Q in, O out
  if (p.split_kv > 1) edges += bm * dvp / 32 * 2 * (1 + split) / g.issue_per_clk;     // partials + combine
  b.pipe_cycles = tiles * tile + edges;
  b.warps_needed = 4;
  const double alone = tile / std::min(1.0, warps / b.warps_needed);
  b.critical_cycles =
      kL2LatencyCycles + pipelined_critical(tiles, alone, kL2LatencyCycles, p.stages) + edges;
  b.smem_bytes = tiles * (kv_bytes + warps * bn * (dp + dvp) * elem) + bm * dp * elem * 2;
  b.l2_bytes = tiles * bn * (s.k + s.dv) * s.elem_bytes + bm * s.k * s.elem_bytes;
  const double partials = p.split_kv > 1 ? 2 * split * static_cast<double>(s.m * s.batch) * (s.dv + 2) * 4 : 0;
  b.dram_bytes = s.bytes + partials +
                 reread_bytes(s.b_bytes + s.v_bytes, cdiv(static_cast<double>(s.m), bm), g);
  b.inflight_per_warp = kv_bytes / warps * static_cast<double>(std::max<int64_t>(1, p.stages - 1));
  return b;
}

BlockModel reduction_block(const WorkloadShape& s, const Params& p, const GpuSpec& g) {
  BlockModel b;
  const double len = static_cast<double>(s.row_len), rows = static_cast<double>(s.rows);
  const double tpr = static_cast<double>(p.threads_per_row), vec = static_cast<double>(p.vec);
  const double rpb = static_cast<double>(p.rows_per_block);
  const double vecs = cdiv(len, tpr * vec);  // vector loads per thread per pass
  const double warps_per_row = cdiv(tpr, 32);
  const bool cached = p.cache != 0;
  const double dram_passes = cached ? 1 : s.stream_reads;
  const double chip_passes = cached ? s.stream_reads - 1 : 0;
  const double loads = warps_per_row * vecs * dram_passes;
  const double chip = p.cache == 2 ? warps_per_row * vecs * chip_passes * 2 : 0;
  const double alu = (s.flops / std::max(rows, 1.0)) / 32;
  const bool block_reduce = tpr > 32;
  const double levels = block_reduce ? std::log2(tpr / 32) : 0;
  const double shuffles =
      s.reductions_per_row * warps_per_row * (5 + (block_reduce ? levels + 4 : 0));
  const double stores = s.stream_reads >= 2 ? warps_per_row * vecs : 1;  // row out, or one value
  b.pipe_cycles = rpb * (loads + chip + alu + shuffles + stores) / g.issue_per_clk;
  b.warps_needed = 8;
  const double reduce_latency =
      s.reductions_per_row *
      (5 * kShuffleLatencyCycles +
       (block_reduce ? 2 * kSyncLatencyCycles + levels * kShuffleLatencyCycles : 0));
  // A thread keeps up to four independent vector loads in flight per round trip.
  // ... plus the row's instructions, issued one after another by each of its warps.
  b.critical_cycles = dram_passes * cdiv(vecs, 4) * dram_latency_cycles(g) + reduce_latency +
                      (loads + chip + alu + stores) / warps_per_row;
  b.smem_bytes = p.cache == 2 ? rpb * len * s.elem_bytes * (1 + chip_passes) : 0;
  if (block_reduce) b.smem_bytes += rpb * s.reductions_per_row * tpr / 32 * 2 * 128;
  const bool reread = !cached && s.stream_reads > 1 &&
                      s.in_bytes > static_cast<double>(g.l2_bytes) / 2 &&
                      len * s.elem_bytes > kL2ReuseRowBytes;
  b.dram_bytes = s.bytes + (reread ? (s.stream_reads - 1) * s.in_bytes : 0);
  b.inflight_per_warp = 32 * vec * s.elem_bytes * std::min(vecs, 4.0);
  return b;
}

BlockModel output_parallel_block(const WorkloadShape& s, const Params& p, const Variant& v,
                                 const GpuSpec& g) {
  BlockModel b;
  const double warps = cdiv(v.threads_per_block, 32);
  const double ept = static_cast<double>(p.elems_per_thread), vec = static_cast<double>(p.vec);
  const double elements = std::max(1.0, static_cast<double>(s.elements));
  const double inputs = std::max(1, s.inputs);
  const double window = static_cast<double>(s.window);
  const double loads = ept * inputs * window;               // vector loads per thread
  const double alu = ept * vec * (s.flops / elements);      // scalar ops per thread
  const double index = ept * (s.vec_align > 1 ? 3 : 10);    // address arithmetic
  const double per_thread = loads + alu + ept + index + 4;  // + stores, loop
  b.pipe_cycles =
      std::max(warps * per_thread / g.issue_per_clk, warps * alu / fp32_warp_fma_per_clk(g));
  b.warps_needed = 8;
  b.critical_cycles = dram_latency_cycles(g) + per_thread;
  b.dram_bytes = s.bytes;
  // Loads of every input and the stores, all issued before the first use.
  b.inflight_per_warp = 32 * vec * ept * (inputs + 1) * s.elem_bytes;
  return b;
}

}  // namespace

double Calibration::factor(const std::string& gpu, ClusterKind kind, MathUnit unit) const {
  // Each math unit its own factor, never another's: CUDA-core fp32 results say nothing about
  // tensor-core variants (a unit without a factor of its own runs uncalibrated).
  if (unit != MathUnit::fp32) {
    auto it = unit_factors.find({gpu, kind, unit});
    return it == unit_factors.end() ? 1.0 : it->second;
  }
  auto it = factors.find({gpu, kind});
  return it == factors.end() ? 1.0 : it->second;
}

namespace {

double param_product(const Calibration& c, const Calibration::ParamGroup& group,
                     const std::map<std::string, int64_t>& params) {
  auto g = c.param_factors.find(group);
  if (g == c.param_factors.end()) return 1.0;
  double product = 1.0;
  for (const auto& [name, values] : g->second) {
    auto p = params.find(name);
    if (p == params.end()) continue;
    auto f = values.find(p->second);
    if (f != values.end()) product *= f->second;
  }
  return product;
}

// The ranking score of a variant of `group` (its template's rank vector over the variant's
// features), else 0: both Calibration::rank_log overloads.
double rank_score(const Calibration& c, const Calibration::ParamGroup& group,
                  const std::map<std::string, int64_t>& params, const WorkloadShape& s, const GpuSpec& gpu,
                  double estimate_us) {
  auto r = c.rank_vectors.find(group);
  if (r == c.rank_vectors.end()) return 0;
  return r->second.log_score(rank_features(std::get<3>(group), params, s, gpu, estimate_us));
}

}  // namespace

double Calibration::variant_factor(const std::string& gpu, ClusterKind kind, const Variant& v) const {
  const MathUnit unit = math_unit_of_path(v.precision);
  const double base = factor(gpu, kind, unit);
  if (param_factors.empty()) return base;
  return base * param_product(*this, {gpu, kind, unit, v.template_name}, v.params);
}

double Calibration::variant_factor(const std::string& gpu, ClusterKind kind, const std::string& variant_key) const {
  const MathUnit unit = math_unit_of_key(variant_key);
  const double base = factor(gpu, kind, unit);
  if (param_factors.empty()) return base;
  const std::optional<VariantKeyParts> k = parse_variant_key(variant_key);
  return k ? base * param_product(*this, {gpu, kind, unit, k->template_name}, k->params) : base;
}

double Calibration::rank_log(const GpuSpec& gpu, const WorkloadShape& s, const Variant& v,
                             double estimate_us) const {
  if (rank_vectors.empty()) return 0;  // no group key to build
  return rank_score(*this, {gpu.name, s.kind, math_unit_of_path(v.precision), v.template_name}, v.params, s, gpu,
                    estimate_us);
}

double Calibration::rank_log(const GpuSpec& gpu, const WorkloadShape& s, const std::string& variant_key,
                             double estimate_us) const {
  if (rank_vectors.empty()) return 0;  // no group key to build
  const std::optional<VariantKeyParts> k = parse_variant_key(variant_key);
  return k ? rank_score(*this, {gpu.name, s.kind, math_unit_of_key(variant_key), k->template_name}, k->params, s,
                        gpu, estimate_us)
           : 0;
}

void Calibration::set_param(const ParamGroup& group, const std::string& param, int64_t value, double f) {
  DC_USER_CHECK(std::isfinite(f) && f > 0, "calibration factor for ", std::get<0>(group), "/",
                cluster_kind_name(std::get<1>(group)), "/", std::get<3>(group), " ", param, "=", value,
                " must be a positive finite number, got ", f);
  param_factors[group][param][value] = f;
}

void Calibration::set(const std::string& gpu, ClusterKind kind, double f, MathUnit unit) {
  DC_USER_CHECK(std::isfinite(f) && f > 0, "calibration factor for ", gpu, "/",
                cluster_kind_name(kind), "/", math_unit_name(unit),
                " must be a positive finite number, got ", f);
  if (unit == MathUnit::fp32)
    factors[{gpu, kind}] = f;
  else
    unit_factors[{gpu, kind, unit}] = f;
}

double peak_flops(const GpuSpec& gpu, const std::string& precision) {
  const double per_sm_clk = gpu.sm_count * gpu.clock_hz();
  if (precision == "tf32") return gpu.tc_tf32_flops_per_sm_clk * per_sm_clk;
  if (precision == "fp16") return gpu.tc_fp16_flops_per_sm_clk * per_sm_clk;
  if (precision == "bf16") return gpu.tc_bf16_flops_per_sm_clk * per_sm_clk;
  DC_INTERNAL_CHECK(precision == "fp32", "unknown precision '", precision, "'");
  return gpu.fp32_peak_flops();
}

double floor_seconds(const WorkloadShape& s, const GpuSpec& gpu, const std::string& precision) {
  const double peak = peak_flops(gpu, precision);
  const double compute = s.flops > 0 ? s.flops / peak : 0;
  return std::max(compute, s.bytes / gpu.dram_bytes_per_s());
}

double floor_seconds(const Workload& w, const GpuSpec& gpu, const std::string& precision) {
  WorkloadShape s;
  s.flops = static_cast<double>(w.flops);
  s.bytes = static_cast<double>(w.bytes);
  return floor_seconds(s, gpu, precision);
}

Estimate estimate(const Workload& w, const Variant& v, const GpuSpec& gpu,
                  const Calibration& calibration) {
  return estimate(analyze_workload(w), v, gpu, calibration);
}

namespace {

Estimate estimate_kernel(const WorkloadShape& s, const Variant& v, const GpuSpec& g,
                         const Calibration& calibration) {
  Estimate e;
  e.launch_s = g.launch_overhead_us * 1e-6;
  const int bps = blocks_per_sm(v.threads_per_block, v.smem_bytes, v.regs_per_thread, g);
  e.blocks_per_sm = bps;
  if (bps < 1 || v.grid_blocks < 1 || !gpu_has_precision(g, v.precision)) {
    e.seconds = std::numeric_limits<double>::infinity();
    e.bound = "unfit";
    return e;
  }
  const Params p = decode(v);
  BlockModel b;
  if (!(g.runs_work_items_serially() && cpu_block(s, p, v, g, &b))) switch (s.family) {
    case Family::gemm:
    case Family::conv:
      b = gemm_block(s, p, v, g);
      break;
    case Family::depthwise:
      b = depthwise_block(s, p, v, g);
      break;
    case Family::attention:
      if (s.attention_backward)
        b = v.precision == "fp32" ? attention_backward_block(s, p, v, g) : attention_backward_mma_block(s, p, v, g);
      else b = v.precision == "fp32" ? attention_block(s, p, v, g) : attention_mma_block(s, p, v, g);
      break;
    case Family::reduction:
      b = reduction_block(s, p, g);
      break;
    case Family::pool_window:
    case Family::elementwise:
    case Family::opaque:
      b = output_parallel_block(s, p, v, g);
      break;
  }

  const double clk = g.clock_hz();
  const double grid = static_cast<double>(v.grid_blocks);
  const double sms = g.sm_count;
  const double warps = cdiv(v.threads_per_block, g.warp_size > 0 ? g.warp_size : 32);
  // Never faster than the precision's peak: a block does at least its share of the FLOPs.
  const double flops_per_clk_sm = peak_flops(g, v.precision) / (sms * clk);
  b.pipe_cycles = std::max(b.pipe_cycles, s.flops / grid / flops_per_clk_sm);

  // The busiest SM runs ceil(grid / SMs) blocks, bps at a time. A round of r resident
  // blocks takes the longer of their pipe work, stretched when r blocks' warps cannot hide
  // the latency, and one block's serial latency path.
  auto round_cycles = [&](double r) {
    if (r <= 0) return 0.0;
    const double hiding = std::min(1.0, r * warps / b.warps_needed);
    return std::max(r * b.pipe_cycles / hiding, b.critical_cycles);
  };
  const double per_sm = cdiv(grid, sms);
  const double rounds = std::floor(per_sm / bps);
  const double rest = per_sm - rounds * bps;
  const double compute_cycles = rounds * round_cycles(bps) + round_cycles(rest);
  e.compute_s = compute_cycles / clk;
  e.smem_s = per_sm * b.smem_bytes / (kSmemBytesPerClk * clk);
  // L2 to SM: the block's global loads (tiles re-read by other blocks included); kernels
  // without a tile model move their share of the DRAM traffic.
  const double l2_block = b.l2_bytes >= 0 ? b.l2_bytes : std::max(b.dram_bytes, s.bytes) / grid;
  e.l2_s = per_sm * l2_block / (kL2BytesPerClkPerSm * kL2Efficiency * clk);

  const double slots = sms * bps;
  e.waves = static_cast<int64_t>(cdiv(grid, slots));
  e.wave_efficiency = grid / (static_cast<double>(e.waves) * slots);
  e.occupancy = bps * warps / (g.max_threads_per_sm / 32.0);

  // DRAM: Little's law. Bandwidth needs bandwidth x latency bytes in flight; the blocks
  // resident at once (on average over the waves) keep fewer than that in flight when the
  // grid is small or the loads are narrow.
  e.dram_bytes = std::max(b.dram_bytes, s.bytes);
  const double bw = g.dram_bytes_per_s();
  double hiding_dram = 1;
  // Work a CPU device's last-level cache holds has no DRAM term: the L2 term above stands
  // for that cache's bandwidth.
  if (e.dram_bytes > 0 && !g.cache_holds(e.dram_bytes)) {
    const double concurrent = grid / static_cast<double>(e.waves);
    const double inflight = std::min(concurrent * warps * b.inflight_per_warp, e.dram_bytes);
    hiding_dram = std::min(1.0, inflight / (bw * kDramLatencyS));
    e.dram_s = std::max(kDramLatencyS,
                        e.dram_bytes / (bw * kDramEfficiency * std::max(hiding_dram, 1e-9)));
  }

  const double body = std::max({e.compute_s, e.dram_s, e.smem_s, e.l2_s});
  if (e.launch_s >= body) {
    e.bound = "launch";
  } else if (body == e.compute_s) {
    // More than half of the time is waiting that the resident warps cannot hide.
    const double ideal = per_sm * b.pipe_cycles / clk;
    e.bound = e.compute_s > 2 * ideal ? "latency" : "compute";
  } else if (body == e.dram_s) {
    e.bound = hiding_dram < 0.5 ? "latency" : "dram";
  } else if (body == e.l2_s) {
    e.bound = "l2";
  } else {
    e.bound = "smem";
  }
  e.seconds = (body + e.launch_s) * calibration.variant_factor(g.name, s.kind, v);
  e.rank_log = calibration.rank_log(g, s, v, (body + e.launch_s) * 1e6);
  return e;
}

}  // namespace

Estimate estimate(const WorkloadShape& s, const Variant& v, const GpuSpec& g,
                  const Calibration& calibration) {
  const Estimate e = estimate_kernel(s, v, g, calibration);
  if (s.family != Family::opaque || s.serial_threads <= 0 || !std::isfinite(e.seconds)) return e;
  // A naive kernel whose few outputs each loop over many elements (a per-channel statistic)
  // is priced again as those threads alone: a grid of a block or two, whose loads the
  // resident warps cannot keep in flight. The cluster takes the slower figure.
  WorkloadShape serial = s;
  serial.serial_threads = 0;
  serial.elements = s.serial_threads;
  serial.window = s.serial_loop;
  Variant sv = v;
  sv.grid_blocks = static_cast<int64_t>(cdiv(static_cast<double>(s.serial_threads), v.threads_per_block));
  const Estimate loops = estimate_kernel(serial, sv, g, calibration);
  return loops.seconds > e.seconds ? loops : e;
}

}  // namespace dc
