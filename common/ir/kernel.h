// A generated kernel: self-contained CUDA C++ source (prelude included, no #include) plus
// its launch description as data. The same source runs on a GPU (NVRTC, common/cuda/nvrtc.h)
// and on the CPU (host emulator, codegen/emulator.h).
//
// Source conventions every template follows, so that both backends can run it:
//  - kernels are `extern "C" __global__ void NAME(...)` and are followed by
//    `DC_EXPORT_KERNEL(NAME)` (nothing on the GPU; a launch stub on the host emulator);
//  - kernel parameters are the buffers named by the launch, in order, as `T* __restrict__`
//    (const for read-only ones); shapes and strides are baked in as constants;
//  - dynamic shared memory is declared with `DC_DYNAMIC_SMEM(type, name);`;
//  - everything beyond CUDA's built-ins (threadIdx, __syncthreads, __shfl_xor_sync,
//    atomicAdd, expf, float4, ...) comes from the prelude (codegen/prelude.h), including
//    the future tensor-core forms (mma.sync, ldmatrix, cp.async) as prelude functions,
//    never raw inline asm in a template.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/shape.h"

namespace dc {

enum class BufferRole { input, output, scratch };

struct KernelBuffer {
  std::string name;  // the workload tensor name (t0, t1, ...) or "scratch0", ...
  BufferRole role = BufferRole::input;
  DType dtype = DType::f32;
  Shape shape;
  bool zero_init = false;  // scratch/outputs that must be zeroed before the launches (split-K)
};

struct Launch {
  std::string kernel;                  // extern "C" kernel name in the source
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  int64_t dynamic_smem_bytes = 0;
  std::vector<int> args;               // indices into GeneratedKernel::buffers, in parameter order
};

struct GeneratedKernel {
  std::string template_name;           // e.g. "gemm_tiled", "reference"
  std::string variant_key;             // Variant::key() of what it was generated from
  std::string source;                  // complete CUDA C++ (prelude + kernels)
  std::vector<KernelBuffer> buffers;   // workload inputs (graph input order), outputs, scratch
  std::vector<Launch> launches;        // run in order; usually one
};

// "input", "output", "scratch".
const char* buffer_role_name(BufferRole r);

// C type of a dtype in generated code ("float", "long long", "int", "unsigned char", ...;
// "dc_half" and "dc_bfloat16" for f16/bf16, the prelude's storage structs).
const char* cuda_type(DType t);

}  // namespace dc
