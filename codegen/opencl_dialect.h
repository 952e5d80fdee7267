// The OpenCL dialect layer: a generated kernel's CUDA-style source (kernel.h's conventions)
// as OpenCL kernel source, from the same templates. What differs is said once here:
//
//  - the prelude: the CUDA prelude's text is replaced by the OpenCL prelude, which maps
//    CUDA's built-ins (threadIdx, blockIdx, __syncthreads, __shared__, __shfl_*_sync,
//    atomicAdd, expf, make_float4, __float_as_uint, ...) onto OpenCL's, then includes the
//    shared sections of the CUDA prelude (activations, fp16/bf16 storage types with their
//    software conversions) under DC_OPENCL;
//  - the one emission hook: every pointer parameter of a kernel gets `__global`, and each
//    kernel body starts with DC_OCL_KERNEL_LOCALS (the work-group's local buffer through
//    which warp shuffles are exchanged; OpenCL declares __local only at kernel scope).
//
// The language is C++ for OpenCL 2021 (Khronos: OpenCL C 3.0 with the generic address space,
// plus C++17): the templates' casts, overloads and templates stay as written, and pointers
// into global or local memory are generic. clang compiles it to SPIR (codegen/opencl_compile.h);
// docs/opencl.md says why and what it asks of a device.
#pragma once

#include <string>

#include "ir/kernel.h"
#include "variant.h"

namespace dc {

// The OpenCL prelude (the CUDA prelude's place in an OpenCL source).
const std::string& opencl_prelude();

// `kernel.source` as C++ for OpenCL: the prelude replaced, kernel parameters in __global,
// the kernel-scope locals added, and DC_OCL_DYNAMIC_SMEM_BYTES (the largest dynamic shared
// memory of its launches) defined. InternalError when the source does not follow kernel.h's
// conventions (no CUDA prelude, an unbalanced parameter list).
std::string opencl_source(const GeneratedKernel& kernel);

}  // namespace dc
