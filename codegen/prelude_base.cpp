// Prelude section: the macros that differ between the GPU and the host emulator, the
// activations of fused epilogues and the warp reductions (see prelude_sections.h).
#include "prelude_sections.h"

namespace dc::prelude_text {

const char* const kBase = R"dc_prelude(// ---- dc prelude -------------------------------------------------------------
#if !defined(DC_HOST_EMULATION) && !defined(DC_OPENCL)
#define DC_EXPORT_KERNEL(name)
#define DC_DYNAMIC_SMEM(type, name) \
  extern __shared__ __align__(16) unsigned char dc_dynamic_smem_[]; \
  type* name = reinterpret_cast<type*>(dc_dynamic_smem_)
#define DC_RESTRICT __restrict__
#endif

typedef long long dc_i64;

// Activations and math used by fused epilogues (fp32; one definition for every template).
__device__ __forceinline__ float dc_relu(float x) { return x > 0.f ? x : 0.f; }
__device__ __forceinline__ float dc_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float dc_gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float dc_gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float dc_hard_sigmoid(float x, float alpha, float beta) {
  return fminf(1.f, fmaxf(0.f, alpha * x + beta));
}
__device__ __forceinline__ float dc_hard_swish(float x) {
  return x * fminf(1.f, fmaxf(0.f, x * (1.f / 6.f) + 0.5f));
}
__device__ __forceinline__ float dc_leaky_relu(float x, float alpha) { return x >= 0.f ? x : alpha * x; }
__device__ __forceinline__ float dc_clip(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
// ONNX Max/Min propagate NaN; fmaxf would drop it.
__device__ __forceinline__ float dc_max(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
__device__ __forceinline__ float dc_min(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }

// Philox4x32-10 (common/ref/philox.h, the same words): a uniform float in [0, 1) for element
// `index` of the stream (seed, step), so Dropout's mask is the same on the GPU, the host
// emulator and the CPU reference, drawn in any order.
#ifndef DC_OPENCL
__device__ __forceinline__ float dc_philox_uniform(unsigned long long seed, unsigned long long step,
                                                   unsigned long long index) {
  const unsigned long long block = index / 4;
  unsigned int c0 = (unsigned int)block, c1 = (unsigned int)(block >> 32);
  unsigned int c2 = (unsigned int)step, c3 = (unsigned int)(step >> 32);
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (unsigned int)p1;
    c2 = n2;
    c3 = (unsigned int)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const unsigned int i = (unsigned int)(index % 4);
  const unsigned int word = i == 0 ? c0 : (i == 1 ? c1 : (i == 2 ? c2 : c3));
  return (float)(word >> 8) * (1.0f / 16777216.0f);
}
#endif

// Warp reductions over all 32 lanes (OpenCL: the dialect's versions, codegen/opencl_dialect.cpp).
#ifndef DC_OPENCL
__device__ __forceinline__ float dc_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float dc_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
#endif

)dc_prelude";

}  // namespace dc::prelude_text
