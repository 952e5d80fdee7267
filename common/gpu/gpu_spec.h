// Public hardware figures of one GPU type: what the estimator predicts from and what the
// parameter spaces are limited by. The table of known GPUs is common/gpu/gpus.yaml, loaded by
// common/gpu/gpu_catalog.h; this struct lives in common/ so that codegen can read limits
// without depending on the estimator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dc {

struct GpuSpec {
  std::string name;       // canonical short name: "a100", "h100", ...
  std::string full_name;  // "NVIDIA A100-SXM4-40GB"
  std::vector<std::string> device_patterns;  // substrings of CUDA's device name mapping here
  std::string arch;       // architecture family: volta, turing, ampere, ada, hopper; OpenCL: xe-hpg, cdna2, ...
  // The API dc drives the device through: "cuda" (NVRTC, the CUDA driver) or "opencl"
  // (codegen/opencl_dialect.h; clang to SPIR, clBuildProgram). For an OpenCL device the
  // SM fields describe its compute units: sm_count = compute units, fp32_lanes_per_sm = fp32
  // FMA lanes per CU, smem = local memory; cc and tensor-core figures are 0.
  std::string api = "cuda";
  bool fp16 = true;       // fp16 arithmetic (OpenCL: cl_khr_fp16); every CUDA GPU dc knows has it
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  double boost_clock_mhz = 0;
  int fp32_lanes_per_sm = 0;             // FP32 FMA lanes per SM (2 FLOPs each per clock)
  double tc_fp16_flops_per_sm_clk = 0;   // dense tensor-core FLOPs per SM per clock, fp16 in, fp32 acc
  double tc_bf16_flops_per_sm_clk = 0;
  double tc_tf32_flops_per_sm_clk = 0;
  double dram_bandwidth_gbs = 0;         // GB/s (1e9 bytes)
  int64_t l2_bytes = 0;
  int64_t smem_per_sm_bytes = 0;         // configurable shared memory carve-out, max
  int64_t smem_per_block_bytes = 0;      // max dynamic shared memory per block (opt-in)
  int regs_per_sm = 0;
  int regs_per_thread = 0;
  int max_threads_per_sm = 0;
  int max_threads_per_block = 1024;
  int max_blocks_per_sm = 0;
  int warp_size = 32;
  // Allocation rules of the CUDA occupancy calculator (common/gpu/occupancy.h): registers go
  // to warps in units of reg_alloc_unit, a block's warps are counted in multiples of the SM's
  // sub-partitions against regs_per_block, shared memory is allocated per block in units of
  // smem_alloc_unit on top of smem_reserved_per_block (the driver's 1 KB from sm_80).
  int regs_per_block = 65536;
  int reg_alloc_unit = 256;
  int sm_sub_partitions = 4;
  int smem_alloc_unit = 128;
  int64_t smem_reserved_per_block = 1024;
  double launch_overhead_us = 3.0;       // host launch + kernel ramp, a modelling constant
  // Instruction throughput per SM (CU) per clock, in warp instructions of 32 lanes: every
  // instruction (issue), and memory instructions (LD/ST units). An NVIDIA SM issues 4 (one
  // per scheduler) and moves 1 (32 LD/ST lanes); a CPU core under PoCL issues far fewer.
  double issue_per_clk = 4.0;
  double lsu_per_clk = 1.0;
  // A CPU device (arch "cpu"): the fp32 lanes of one vector instruction (AVX2: 8) and the
  // latency of a dependent FMA in cycles. With simd_lanes > 0 the estimator models a
  // work-group as one core running its work-items one after another (estimator/cpu_blocks.h);
  // 0 for GPUs, which never read them.
  int simd_lanes = 0;
  double fma_latency_cycles = 4.0;
  // A CPU device: one core's L1 data cache. A GEMM tile that outgrows it reads its operands
  // from L2 in every step (estimator/cpu_blocks.cpp); 0: unknown, never assumed.
  int64_t l1_bytes = 0;
  bool generic = false;                  // built from a device's report, not from the table

  // Every field equal: the generated table against gpus.yaml (test_gpu_catalog.cpp).
  bool operator==(const GpuSpec&) const = default;

  double clock_hz() const { return boost_clock_mhz * 1e6; }
  // Peak FP32 FLOP/s on CUDA cores (FMA = 2 FLOPs).
  double fp32_peak_flops() const { return 2.0 * fp32_lanes_per_sm * sm_count * clock_hz(); }
  double dram_bytes_per_s() const { return dram_bandwidth_gbs * 1e9; }
  // The compile target: "sm_XY" for CUDA, "spir64" (SPIR bitcode) for OpenCL.
  std::string sm_arch() const {
    return api == "opencl" ? "spir64" : "sm_" + std::to_string(cc_major * 10 + cc_minor);
  }
  bool is_opencl() const { return api == "opencl"; }
  // A CPU device is timed with hot caches (PoCL re-runs a kernel over the same buffers): work
  // whose bytes fit its last-level cache (l2_bytes) is served from there, not from DRAM.
  bool cache_holds(double bytes) const { return arch == "cpu" && bytes <= static_cast<double>(l2_bytes); }
  // Work-items run as a core's serial threads (PoCL's work-item loops): a CPU entry with its
  // SIMD width.
  bool runs_work_items_serially() const { return arch == "cpu" && simd_lanes > 0; }
};

}  // namespace dc
