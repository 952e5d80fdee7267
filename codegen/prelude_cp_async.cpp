// Prelude section: cp.async, asynchronous global -> shared copies (see prelude_sections.h).
#include "prelude_sections.h"

namespace dc::prelude_text {

const char* const kCpAsync = R"dc_prelude(
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
// Byte-typed forms for any element type: _16 is cp.async.cg (L2 only), _8 and _4 cp.async.ca;
// dst (shared) and src (global) aligned to the copy's size. The emulator faults on a misaligned
// copy and on a destination outside the block's shared memory, as the GPU would.
#ifdef DC_HOST_EMULATION
__device__ __forceinline__ void dc_cp_async_check(const void* dst, const void* src, unsigned long long bytes,
                                                  const char* name) {
  static thread_local char dc_msg[160];
  if ((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src)) & (bytes - 1)) {
    snprintf(dc_msg, sizeof dc_msg, "misaligned %llu-byte cp.async (%s): dst %p, src %p", bytes, name, dst, src);
    dc_emu_cur_.api->trap(dc_emu_cur_.ctx, dc_msg);
  }
  if (!dc_emu_is_shared(dst, bytes)) {
    snprintf(dc_msg, sizeof dc_msg, "cp.async (%s) into %p, which is not the block's shared memory", name, dst);
    dc_emu_cur_.api->trap(dc_emu_cur_.ctx, dc_msg);
  }
}
#define DC_CP_ASYNC_CHECK(dst, src, bytes, name) dc_cp_async_check(dst, src, bytes, name)
#else
#define DC_CP_ASYNC_CHECK(dst, src, bytes, name)
#endif
__device__ __forceinline__ void dc_cp_async_16(void* dst, const void* src, bool valid) {
  DC_CP_ASYNC_CHECK(dst, src, 16, "dc_cp_async_16");
  uint4 v = {0u, 0u, 0u, 0u};
  if (valid) v = *reinterpret_cast<const uint4*>(src);
  *reinterpret_cast<uint4*>(dst) = v;
}
__device__ __forceinline__ void dc_cp_async_8(void* dst, const void* src, bool valid) {
  DC_CP_ASYNC_CHECK(dst, src, 8, "dc_cp_async_8");
  uint2 v = {0u, 0u};
  if (valid) v = *reinterpret_cast<const uint2*>(src);
  *reinterpret_cast<uint2*>(dst) = v;
}
__device__ __forceinline__ void dc_cp_async_4(void* dst, const void* src, bool valid) {
  DC_CP_ASYNC_CHECK(dst, src, 4, "dc_cp_async_4");
  *reinterpret_cast<unsigned*>(dst) = valid ? *reinterpret_cast<const unsigned*>(src) : 0u;
}
#undef DC_CP_ASYNC_CHECK
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
__device__ __forceinline__ void dc_cp_async_16(void* dst, const void* src, bool valid) {
  const unsigned dc_s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dc_s), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void dc_cp_async_8(void* dst, const void* src, bool valid) {
  const unsigned dc_s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dc_s), "l"(src), "r"(valid ? 8 : 0)
               : "memory");
}
__device__ __forceinline__ void dc_cp_async_4(void* dst, const void* src, bool valid) {
  const unsigned dc_s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dc_s), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void dc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void dc_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif
)dc_prelude";

}  // namespace dc::prelude_text
