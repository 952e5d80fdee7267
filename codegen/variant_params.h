// Typed parameters of each template family, and the one list of each family's parameter
// names: the parameter space writes a variant's params from them (param_space_*.cpp), each
// generator reads them once at its top (template_*.cpp), Variant::from_key checks a key's
// names against them, and Variant::param_or refuses a name no family has (a typo), Variant::param one the variant lacks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/error.h"
#include "variant.h"

namespace dc {

// The code paths of a family; a parameter is carried by the variants of some of them.
enum ParamPath : unsigned {
  kCudaCorePath = 1,    // fp32 on CUDA cores
  kTensorCorePath = 2,  // tf32/fp16/bf16 mma.sync (sm_80+)
  kVoltaPath = 4,       // fp16 mma.sync m8n8k4 (sm_70/72)
  kAttentionBackwardPath = 8,  // attention_backward (fp32, with kCudaCorePath's fields)
  kAttentionBackwardMmaPath = 16,  // attention_backward on tensor cores (tf32/fp16/bf16): its tiles only
};
constexpr unsigned kEveryPath = kCudaCorePath | kTensorCorePath | kVoltaPath;
constexpr unsigned kMmaPaths = kTensorCorePath | kVoltaPath;

// The path of a variant of `precision`: m8n8k4 on a Volta GPU, else by precision.
inline unsigned param_path(const std::string& precision, bool m8n8k4) {
  if (precision == "fp32") return kCudaCorePath;
  return m8n8k4 ? kVoltaPath : kTensorCorePath;
}

template <class P>
struct ParamField {
  const char* name;
  int64_t P::*member;
  unsigned paths;  // ParamPath bits: the paths whose variants carry it
};

// gemm_tiled, conv_implicit_gemm (template_gemm.cpp, template_gemm_mma.cpp).
struct GemmParams {
  int64_t block_m = 0, block_n = 0, block_k = 0;
  int64_t warp_m = 0, warp_n = 0;      // a warp's tile (0: a hand-made CUDA-core variant)
  int64_t thread_m = 0, thread_n = 0;  // CUDA-core path: a thread's tile
  int64_t vec = 1;                     // elements per global load of a plain operand
  int64_t stages = 0;                  // 0: the path's default (the generators clamp)
  int64_t split_k = 1;
  int64_t m8n8k4 = 0;  // 1: sm_70/72's mma.sync m8n8k4
  static const std::vector<ParamField<GemmParams>>& fields();
  static GemmParams of(const Variant& v);
};

// depthwise_direct (template_depthwise.cpp).
struct DepthwiseParams {
  int64_t tile_h = 0, tile_w = 0, block_c = 0, pixels_per_thread = 1;
  static const std::vector<ParamField<DepthwiseParams>>& fields();
  static DepthwiseParams of(const Variant& v);
};

// attention_fused (template_attention.cpp: fp32; template_attention_mma.cpp: the others).
struct AttentionParams {
  int64_t block_m = 0, block_n = 0;
  int64_t threads = 0;  // CUDA-core path
  int64_t vec = 1;      // CUDA-core path
  int64_t warp_m = 16;  // tensor-core paths: rows of a warp (16 or 32)
  int64_t split_kv = 1;
  int64_t stages = 1;   // of() makes it 2 for the tensor-core paths when absent
  int64_t m8n8k4 = 0;
  int64_t thread_m = 1, thread_n = 1;  // attention_backward: a thread's tile
  static const std::vector<ParamField<AttentionParams>>& fields();
  static AttentionParams of(const Variant& v);
};

// row_reduce (template_reduction.cpp).
struct ReductionParams {
  int64_t threads_per_row = 32, rows_per_block = 1, vec = 1;
  int64_t cache = 0;  // where a row lives between passes: 0 none, 1 registers, 2 shared
  static const std::vector<ParamField<ReductionParams>>& fields();
  static ReductionParams of(const Variant& v);
};

// elementwise, pool_window, opaque_generic (template_elementwise.cpp, template_pool.cpp).
struct OutputParams {
  int64_t threads = 256, elems_per_thread = 1, vec = 1;
  static const std::vector<ParamField<OutputParams>>& fields();
  static OutputParams of(const Variant& v);
};

// The parameter names of a template family (any path); nullptr for a template that is no
// family's (the reference kernel has no parameters).
const std::vector<std::string>* template_param_names(const std::string& template_name);

// Whether any family has a parameter of this name (Variant::param's check against typos).
bool is_param_name(const std::string& name);

// `defaults` overwritten by the variant's params; InternalError on a name P does not have.
template <class P>
P read_params(const Variant& v, P defaults) {
  for (const auto& [name, value] : v.params) {
    const ParamField<P>* field = nullptr;
    for (const auto& f : P::fields())
      if (name == f.name) field = &f;
    DC_INTERNAL_CHECK(field, v.template_name, " has no parameter '", name, "' (", v.key(), ")");
    defaults.*(field->member) = value;
  }
  return defaults;
}

// v.params: the fields of `path`, from p.
template <class P>
void write_params(const P& p, unsigned path, Variant& v) {
  v.params.clear();
  for (const auto& f : P::fields())
    if (f.paths & path) v.params[f.name] = p.*(f.member);
}

}  // namespace dc
