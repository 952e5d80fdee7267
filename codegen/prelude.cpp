#include "prelude.h"

namespace dc {

const std::string& cuda_prelude() {
  static const std::string text = R"dc_prelude(// ---- dc prelude -------------------------------------------------------------
#ifndef DC_HOST_EMULATION
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

// Warp reductions over all 32 lanes.
__device__ __forceinline__ float dc_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float dc_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// cp.async (sm_80+): global -> shared copies that bypass registers, committed in groups;
// dc_cp_async_wait<N>() waits until at most N groups of this thread are pending. _f32 copies
// 4 bytes (cp.async.ca); _f32x4 copies 16 (cp.async.cg, L2 only), both addresses 16-byte
// aligned. An invalid copy zero-fills (src-size 0: nothing is read). Before sm_80, and on the
// host emulator, a plain synchronous copy (the group calls do nothing), same results.
#if defined(DC_HOST_EMULATION) || __CUDA_ARCH__ < 800
__device__ __forceinline__ void dc_cp_async_f32(float* dst, const float* src, bool valid) {
  *dst = valid ? *src : 0.f;
}
__device__ __forceinline__ void dc_cp_async_f32x4(float* dst, const float* src, bool valid) {
#ifdef DC_HOST_EMULATION
  // The GPU faults on a misaligned 16-byte copy; so does the emulator.
  if ((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src)) & 15ull)
    dc_emu_cur_.api->trap(dc_emu_cur_.ctx, "misaligned 16-byte cp.async (dc_cp_async_f32x4)");
#endif
  float4 v = {0.f, 0.f, 0.f, 0.f};
  if (valid) v = *reinterpret_cast<const float4*>(src);
  *reinterpret_cast<float4*>(dst) = v;
}
__device__ __forceinline__ void dc_cp_async_commit() {}
template <int N>
__device__ __forceinline__ void dc_cp_async_wait() {}
#else
__device__ __forceinline__ void dc_cp_async_f32(float* dst, const float* src, bool valid) {
  const unsigned dc_s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dc_s), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void dc_cp_async_f32x4(float* dst, const float* src, bool valid) {
  const unsigned dc_s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dc_s), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void dc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void dc_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif
// ---- end of prelude ------------------------------------------------------------
)dc_prelude";
  return text;
}

}  // namespace dc
