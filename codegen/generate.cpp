#include "generate.h"

#include "ir/error.h"

namespace dc {

GeneratedKernel generate_kernel(const Workload& w, const Variant& v) {
  const std::string& t = v.template_name;
  if (t == "gemm_tiled" || t == "conv_implicit_gemm") return generate_gemm(w, v);
  if (t == "depthwise_direct") return generate_depthwise(w, v);
  if (t == "attention_fused") return generate_attention(w, v);
  if (t == kAttentionBackwardTemplate) return generate_attention_backward(w, v);
  if (t == "row_reduce") return generate_reduction(w, v);
  if (t == "pool_window") return generate_pool(w, v);
  if (t == "elementwise" || t == "opaque_generic") return generate_elementwise(w, v);
  if (t == kReferenceTemplate) {  // the baseline measured like a variant
    GeneratedKernel k = generate_reference(w);
    k.variant_key = v.key();
    return k;
  }
  throw_internal_error("no template named '", t, "'");
}

}  // namespace dc
