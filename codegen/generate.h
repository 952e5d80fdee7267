// Kernel generation: (workload, variant) -> GeneratedKernel. One template per family
// (codegen/param_space.h's Family), each in its own template_*.cpp.
#pragma once

#include "ir/kernel.h"
#include "variant.h"

namespace dc {

// Emits the kernel(s) for a variant of the workload. InternalError if the variant's
// template does not match the workload (a generator bug); UserError never.
GeneratedKernel generate_kernel(const Workload& w, const Variant& v);

// The naive reference kernel for any workload: one launch per node of the workload graph,
// one thread per output element, intermediates in scratch buffers. Workers compare every
// variant against it on the device.
GeneratedKernel generate_reference(const Workload& w);

// Per-template entry points (template_<name>.cpp).
GeneratedKernel generate_gemm(const Workload& w, const Variant& v);         // gemm_tiled, conv_implicit_gemm
GeneratedKernel generate_depthwise(const Workload& w, const Variant& v);    // depthwise_direct
GeneratedKernel generate_attention(const Workload& w, const Variant& v);    // attention_fused
GeneratedKernel generate_attention_backward(const Workload& w, const Variant& v);  // attention_backward
GeneratedKernel generate_reduction(const Workload& w, const Variant& v);    // row_reduce
GeneratedKernel generate_pool(const Workload& w, const Variant& v);         // pool_window
GeneratedKernel generate_elementwise(const Workload& w, const Variant& v);  // elementwise, opaque_generic

}  // namespace dc
