// An implementation variant: one point of a cluster kind's parameter space, i.e. the
// exact arguments a kernel template is instantiated with, plus the resources they imply.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
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

  // A parameter the variant carries; InternalError when it does not (a typo, another
  // family's or another path's name). Generators read their family's typed struct instead
  // (variant_params.h: GemmParams::of(v), ...).
  int64_t param(const std::string& name) const;
  // A parameter any family has, or `dflt` when this variant does not carry it (generic code
  // asking every family for "stages" or "vec"); InternalError on a name no family has.
  int64_t param_or(const std::string& name, int64_t dflt) const;
  // Canonical text: "gemm_tiled/fp32/block_k=16,block_m=128,...": stable, used as a DB key.
  std::string key() const;

  // The variant of `key` for workload w on the GPU, without enumerating the parameter
  // space (codegen/variant_from_key.cpp): the key is parsed, its template, precision and
  // every parameter name checked against the workload's family (variant_params.h), and the
  // parameters asked of the family's space (param_space_point.h), which recomputes the
  // resources and checks fits_gpu. So from_key(v.key(), w, gpu) == v for every v of
  // enumerate_variants(w, gpu), and nullopt for any other key, with the reason in *why
  // (malformed, unknown template or parameter, a parameter missing or of another path, not
  // a point of this space, too big for the GPU). The reference kernel's key is no point of
  // a space.
  static std::optional<Variant> from_key(const std::string& key, const Workload& w, const GpuSpec& gpu,
                                         std::string* why = nullptr);

  // Every field equal: template, precision, parameters and the resources they imply.
  bool operator==(const Variant&) const = default;
};

// The workload's naive reference kernel (codegen/generate.h's generate_reference) as a
// variant: tune measures it once per workload and GPU type as the baseline that reports
// compare the chosen kernels with ("speedup over the reference kernel"); selection never
// chooses it. Key "reference/fp32/". is_reference_key is THE test for "is this the
// reference kernel?" (tune, the tuning DB, dc-db and the report all ask it).
inline constexpr const char* kReferenceTemplate = "reference";
// FlashAttention-2's backward of the training step's dc.AttentionGrad (family attention).
inline constexpr const char* kAttentionBackwardTemplate = "attention_backward";
Variant reference_variant();
bool is_reference_key(const std::string& variant_key);
bool is_reference(const Variant& v);  // is_reference_key(v.key())

// A variant key's parts, "TEMPLATE/PRECISION/NAME=VALUE,...", parsed without a workload:
// what the key says, not whether it is a point of any space (Variant::from_key checks that).
struct VariantKeyParts {
  std::string template_name, precision;
  std::map<std::string, int64_t> params;
};
// nullopt for a malformed key, with the reason in *why.
std::optional<VariantKeyParts> parse_variant_key(const std::string& key, std::string* why = nullptr);

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
