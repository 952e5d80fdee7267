// An implementation variant: one point of a cluster kind's parameter space, i.e. the
// exact arguments a kernel template is instantiated with, plus the resources they imply.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_spec.h"
#include "ir/workload.h"

namespace dc {

struct Variant {
  std::string template_name;              // e.g. "gemm_tiled", "conv_implicit_gemm", "row_reduce"
  std::map<std::string, int64_t> params;  // block_m, block_n, block_k, warp_m, ..., split_k, vec
  std::string precision = "fp32";         // precision path: fp32 | tf32 | fp16 | bf16

  // Resources the parameters imply, filled by the parameter space:
  int threads_per_block = 0;
  int64_t smem_bytes = 0;        // static + dynamic shared memory per block
  int regs_per_thread = 0;       // estimate from the tile (register blocking + addressing)
  int64_t grid_blocks = 0;       // blocks launched for this workload

  int64_t param(const std::string& name, int64_t dflt = 0) const;
  // Canonical text: "gemm_tiled/fp32/block_k=16,block_m=128,...": stable, used as a DB key.
  std::string key() const;
};

// The workload's naive reference kernel (codegen/generate.h's generate_reference) as a
// variant: tune measures it once per workload and GPU type as the baseline that reports
// compare the chosen kernels with ("speedup over the reference kernel"); selection never
// chooses it. Key "reference/fp32/". is_reference_key is THE test for "is this the
// reference kernel?" (tune, the tuning DB, dc-db and the report all ask it).
inline constexpr const char* kReferenceTemplate = "reference";
Variant reference_variant();
bool is_reference_key(const std::string& variant_key);
bool is_reference(const Variant& v);  // is_reference_key(v.key())

// "fp16" from "gemm_mma/fp16/block_k=32,...": a variant key's math path ("" if malformed).
std::string variant_key_precision(const std::string& variant_key);

// Every variant of the workload's kind that the GPU can run: enumerated from the kind's
// parameter space (param_space_*.cpp) and filtered by the GPU's hard limits (threads per
// block, shared memory per block, registers per thread, per-SM residency of at least one
// block), so that no invalid variant leaves this stage. Deterministic order.
std::vector<Variant> enumerate_variants(const Workload& w, const GpuSpec& gpu);

// True if the variant fits the GPU's hard limits; otherwise sets `why`.
bool fits_gpu(const Variant& v, const GpuSpec& gpu, std::string* why = nullptr);

}  // namespace dc
