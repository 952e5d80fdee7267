// Prelude section: reduced-precision storage types and conversions (see prelude_sections.h).
// The software conversions are the host emulator's implementation and the device's fallback
// where an architecture lacks the instruction (cvt.rn.bf16.f32 and cvt.rna.tf32.f32 need
// sm_80); tests/unit/test_prelude_half.cpp checks them against common/ir/tensor.h.
#include "prelude_sections.h"

namespace dc::prelude_text {

const char* const kHalf = R"dc_prelude(
// ---- storage types: fp16, bf16 and tf32 ------------------------------------------------------
// The 16 bits of an IEEE binary16 / a bfloat16 value. Defined here (not cuda_fp16.h) so that
// sources stay self-contained and read the same on the host emulator. Arithmetic is done in
// float: read with dc_to_f32, store with dc_from_f32<T>.
struct dc_half { unsigned short bits; };
struct dc_bfloat16 { unsigned short bits; };

// Software conversions, bit-exact to cvt.rn (round to nearest even; NaN gives the canonical
// NaN 0x7fff like the GPU; a value that rounds beyond the largest finite one gives inf).
__device__ __forceinline__ unsigned short dc_f32_to_f16_bits_sw(float x) {
  const unsigned u = __float_as_uint(x);
  const unsigned short sign = static_cast<unsigned short>((u >> 16) & 0x8000u);
  const unsigned a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;                                        // NaN
  if (a >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half (units of 2^-24) or zero
    const unsigned e = a >> 23;
    if (e < 102u) return sign;  // below 2^-25 (a tie at 2^-25 goes to the even 0)
    const unsigned m = (a & 0x7fffffu) | 0x800000u;  // value = m * 2^(e-150)
    const unsigned shift = 126u - e;                 // 14..24: value / 2^-24 = m >> shift
    unsigned q = m >> shift;
    const unsigned rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<unsigned short>(sign | q);
  }
  const unsigned r = a + 0xfffu + ((a >> 13) & 1u);  // round the 13 dropped bits, ties to even
  return static_cast<unsigned short>(sign | ((r - 0x38000000u) >> 13));
}
__device__ __forceinline__ float dc_f16_bits_to_f32_sw(unsigned short h) {
  const unsigned sign = static_cast<unsigned>(h & 0x8000u) << 16;
  const unsigned e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e != 0u) return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
  const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // subnormal: m * 2^-24, exact
  return sign ? -v : v;
}
__device__ __forceinline__ unsigned short dc_f32_to_bf16_bits_sw(float x) {
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN
  return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// cvt.rna.tf32.f32: round to 10 mantissa bits, ties away from zero; the low 13 bits are zero
// (except in the canonical NaN 0x7fffffff, which stays a NaN when an mma ignores those bits).
__device__ __forceinline__ unsigned dc_cvt_rna_tf32_sw(float x) {
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffffffu;  // NaN: the canonical NaN
  if ((u & 0x7f800000u) == 0x7f800000u) return u;          // inf
  return (u + 0x1000u) & 0xffffe000u;  // adds half a tf32 ulp to the magnitude (overflow: inf)
}

// The conversions templates call: the instruction where the architecture has it.
__device__ __forceinline__ unsigned short dc_f32_to_f16_bits(float x) {
#if defined(DC_HOST_EMULATION) || defined(DC_OPENCL)
  return dc_f32_to_f16_bits_sw(x);
#else
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#endif
}
__device__ __forceinline__ unsigned short dc_f32_to_bf16_bits(float x) {
#if !defined(DC_HOST_EMULATION) && __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
#else
  return dc_f32_to_bf16_bits_sw(x);
#endif
}

__device__ __forceinline__ float dc_to_f32(float x) { return x; }
__device__ __forceinline__ float dc_to_f32(dc_half x) {
#if defined(DC_HOST_EMULATION) || defined(DC_OPENCL)
  return dc_f16_bits_to_f32_sw(x.bits);
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
#endif
}
__device__ __forceinline__ float dc_to_f32(dc_bfloat16 x) {
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
}

// dc_from_f32<T>(x): x rounded to nearest even into the storage type T.
template <class T>
__device__ __forceinline__ T dc_from_f32(float x);
template <>
__device__ __forceinline__ float dc_from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ dc_half dc_from_f32<dc_half>(float x) {
  dc_half h;
  h.bits = dc_f32_to_f16_bits(x);
  return h;
}
template <>
__device__ __forceinline__ dc_bfloat16 dc_from_f32<dc_bfloat16>(float x) {
  dc_bfloat16 h;
  h.bits = dc_f32_to_bf16_bits(x);
  return h;
}
// x rounded to the storage type and back (the value an f16/bf16 tensor stores).
__device__ __forceinline__ float dc_round_f16(float x) { return dc_to_f32(dc_from_f32<dc_half>(x)); }
__device__ __forceinline__ float dc_round_bf16(float x) { return dc_to_f32(dc_from_f32<dc_bfloat16>(x)); }

// Pairs, the operand registers of mma: `lo` (bits 0-15) is the element at the lower address or
// column. cvt.rn.{f16,bf16}x2.f32 d, a, b puts a in the upper half.
__device__ __forceinline__ unsigned dc_pack_f16x2(float lo, float hi) {
#if !defined(DC_HOST_EMULATION) && __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<unsigned>(dc_f32_to_f16_bits(lo)) | (static_cast<unsigned>(dc_f32_to_f16_bits(hi)) << 16);
#endif
}
__device__ __forceinline__ unsigned dc_pack_bf16x2(float lo, float hi) {
#if !defined(DC_HOST_EMULATION) && __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<unsigned>(dc_f32_to_bf16_bits(lo)) | (static_cast<unsigned>(dc_f32_to_bf16_bits(hi)) << 16);
#endif
}
__device__ __forceinline__ float2 dc_unpack_f16x2(unsigned v) {
  dc_half lo, hi;
  lo.bits = static_cast<unsigned short>(v & 0xffffu);
  hi.bits = static_cast<unsigned short>(v >> 16);
  float2 r;
  r.x = dc_to_f32(lo);
  r.y = dc_to_f32(hi);
  return r;
}
__device__ __forceinline__ float2 dc_unpack_bf16x2(unsigned v) {
  float2 r;
  r.x = __uint_as_float(v << 16);
  r.y = __uint_as_float(v & 0xffff0000u);
  return r;
}

// cvt.rna.tf32.f32 (sm_80+; the software version elsewhere): the tf32 operand of an mma.
__device__ __forceinline__ unsigned dc_cvt_rna_tf32(float x) {
#if !defined(DC_HOST_EMULATION) && __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
#else
  return dc_cvt_rna_tf32_sw(x);
#endif
}
)dc_prelude";

}  // namespace dc::prelude_text
