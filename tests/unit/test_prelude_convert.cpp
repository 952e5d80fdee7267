// The prelude's reduced-precision conversions on the host emulator: dc_from_f32<dc_half/
// dc_bfloat16> against common/ir/tensor.h's float_to_half/float_to_bf16 (round to nearest
// even) on every tie of both formats, their neighbours, specials and random bit patterns;
// dc_to_f32 on all 65536 bit patterns; the f16x2/bf16x2 pairs; cvt.rna.tf32 against an
// independent round-half-away model. The kernels compile with NVRTC for every architecture.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emulator_testing.h"
#include "nvrtc.h"

namespace dc {
namespace {

using namespace dc::emu_testing;  // NOLINT: the helpers are the vocabulary of these tests

// One block of 256 threads strides over the DC_N inputs.
const char* const kConvert = R"(
extern "C" __global__ void convert(const float* __restrict__ x, unsigned short* __restrict__ h,
                                   unsigned short* __restrict__ b, unsigned* __restrict__ t,
                                   float* __restrict__ rh, float* __restrict__ rb) {
  for (int i = threadIdx.x; i < DC_N; i += blockDim.x) {
    h[i] = dc_from_f32<dc_half>(x[i]).bits;
    b[i] = dc_from_f32<dc_bfloat16>(x[i]).bits;
    t[i] = dc_cvt_rna_tf32(x[i]);
    rh[i] = dc_round_f16(x[i]);
    rb[i] = dc_round_bf16(x[i]);
  }
}
DC_EXPORT_KERNEL(convert)

// Every 16-bit pattern read as fp16 and as bf16.
extern "C" __global__ void widen(const unsigned short* __restrict__ bits, float* __restrict__ fh,
                                 float* __restrict__ fb) {
  for (int i = threadIdx.x; i < 65536; i += blockDim.x) {
    dc_half h;
    h.bits = bits[i];
    dc_bfloat16 b;
    b.bits = bits[i];
    fh[i] = dc_to_f32(h);
    fb[i] = dc_to_f32(b);
  }
}
DC_EXPORT_KERNEL(widen)

// Pairs: x[2i] is lo, x[2i+1] hi.
extern "C" __global__ void pairs(const float* __restrict__ x, unsigned* __restrict__ ph,
                                 unsigned* __restrict__ pb, float* __restrict__ uh,
                                 float* __restrict__ ub) {
  for (int i = threadIdx.x; i < DC_N / 2; i += blockDim.x) {
    ph[i] = dc_pack_f16x2(x[2 * i], x[2 * i + 1]);
    pb[i] = dc_pack_bf16x2(x[2 * i], x[2 * i + 1]);
    const float2 h = dc_unpack_f16x2(ph[i]), b = dc_unpack_bf16x2(pb[i]);
    uh[2 * i] = h.x;
    uh[2 * i + 1] = h.y;
    ub[2 * i] = b.x;
    ub[2 * i + 1] = b.y;
  }
}
DC_EXPORT_KERNEL(pairs)
)";

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The inputs: exact ties of fp16, bf16 and tf32 with their float neighbours, both signs,
// specials, and random bit patterns. An even count (the pairs kernel).
std::vector<float> test_inputs() {
  std::vector<float> v;
  const auto add_around = [&](float m) {
    for (float s : {1.f, -1.f}) {
      v.push_back(s * m);
      v.push_back(s * std::nextafter(m, 0.f));
      v.push_back(s * std::nextafter(m, INFINITY));
    }
  };
  // fp16: every representable value and the midpoint to the next one (normal and subnormal,
  // and 65504 -> 65520, the threshold of overflow).
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const double lo = half_to_float(static_cast<uint16_t>(h));
    const double hi = h + 1 < 0x7c00u ? half_to_float(static_cast<uint16_t>(h + 1)) : 65536.0;
    add_around(static_cast<float>(lo));
    add_around(static_cast<float>((lo + hi) / 2));
  }
  // bf16: every finite value's midpoint to the next (bits + 0x8000), and the value itself.
  for (uint32_t b = 0; b < 0x7f80u; ++b) {
    add_around(from_bits(b << 16));
    add_around(from_bits((b << 16) | 0x8000u));
  }
  // tf32 ties (low 13 bits 0x1000) across the exponent range.
  std::mt19937 rng(1234);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t u = (rng() & 0x7fffe000u) | 0x1000u;
    if ((u & 0x7f800000u) != 0x7f800000u) add_around(from_bits(u));
  }
  // Specials: zeros, infinities, NaNs with different payloads, float subnormals, the largest float.
  for (uint32_t u : {0x00000000u, 0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7fc01234u,
                     0x00000001u, 0x007fffffu, 0x00400000u, 0x7f7fffffu, 0x7f7ff000u, 0x7f7fefffu,
                     0x33000000u, 0x33000001u, 0x32ffffffu, 0x33400000u, 0x477fe000u, 0x477fefffu,
                     0x477ff000u, 0x38800000u, 0x387fffffu, 0x387fe000u, 0x387ff000u}) {
    v.push_back(from_bits(u));
    v.push_back(from_bits(u | 0x80000000u));
  }
  for (int i = 0; i < 300000; ++i) v.push_back(from_bits(static_cast<uint32_t>(rng())));
  if (v.size() % 2) v.push_back(1.f);
  return v;
}

// cvt.rna.tf32.f32 modelled in double: round |x| to a multiple of its tf32 ulp (2^(e-10), e the
// exponent, at least -126), ties away from zero; NaN -> NaN, inf -> inf, beyond the largest
// tf32 value -> inf.
float tf32_rna_model(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.f) return x;
  int e = 0;
  std::frexp(static_cast<double>(x), &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 1, -126) - 10);
  const double r = std::floor(std::fabs(static_cast<double>(x)) / ulp + 0.5) * ulp;
  const double max_tf32 = std::ldexp(2.0 - std::ldexp(1.0, -10), 127);
  const float mag = r > max_tf32 ? INFINITY : static_cast<float>(r);
  return std::signbit(x) ? -mag : mag;
}

GeneratedKernel convert_kernel(int64_t n) {
  const std::string src = "#define DC_N " + std::to_string(n) + "\n" + kConvert;
  return make_kernel(src,
                     {buffer("x", BufferRole::input, {n}), buffer("h", BufferRole::output, {n}, DType::u16),
                      buffer("b", BufferRole::output, {n}, DType::u16),
                      buffer("t", BufferRole::output, {n}, DType::u32), buffer("rh", BufferRole::output, {n}),
                      buffer("rb", BufferRole::output, {n}), buffer("bits", BufferRole::input, {65536}, DType::u16),
                      buffer("fh", BufferRole::output, {65536}), buffer("fb", BufferRole::output, {65536}),
                      buffer("ph", BufferRole::output, {n / 2}, DType::u32),
                      buffer("pb", BufferRole::output, {n / 2}, DType::u32), buffer("uh", BufferRole::output, {n}),
                      buffer("ub", BufferRole::output, {n})},
                     {launch("convert", {1, 1, 1}, {256, 1, 1}, {0, 1, 2, 3, 4, 5}),
                      launch("widen", {1, 1, 1}, {256, 1, 1}, {6, 7, 8}),
                      launch("pairs", {1, 1, 1}, {256, 1, 1}, {0, 9, 10, 11, 12})});
}

// Same bits, or both NaN (the GPU's cvt gives the canonical NaN; tensor.h keeps the sign).
bool same_half(uint16_t got, uint16_t want) {
  const bool got_nan = (got & 0x7fffu) > 0x7c00u, want_nan = (want & 0x7fffu) > 0x7c00u;
  return got_nan || want_nan ? got_nan && want_nan : got == want;
}
bool same_bf16(uint16_t got, uint16_t want) {
  const bool got_nan = (got & 0x7fffu) > 0x7f80u, want_nan = (want & 0x7fffu) > 0x7f80u;
  return got_nan || want_nan ? got_nan && want_nan : got == want;
}
bool same_float(float got, float want) {
  return std::isnan(got) || std::isnan(want) ? std::isnan(got) && std::isnan(want)
                                             : bits_of(got) == bits_of(want);
}

TEST(PreludeConvert, HalfBfloat16AndTf32RoundLikeTheReference) {
  const std::vector<float> x = test_inputs();
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<Tensor> bufs(13);
  bufs[0] = Tensor::from_vector<float>({n}, x);
  bufs[6] = Tensor::from_vector<uint16_t>({65536}, all);
  const GeneratedKernel k = convert_kernel(n);
  ASSERT_TRUE(run_ok(k, bufs).ok);
  const auto* h = bufs[1].data<uint16_t>();
  const auto* b = bufs[2].data<uint16_t>();
  const auto* t = bufs[3].data<uint32_t>();
  const auto* rh = bufs[4].data<float>();
  const auto* rb = bufs[5].data<float>();
  const auto* ph = bufs[9].data<uint32_t>();
  const auto* pb = bufs[10].data<uint32_t>();
  const auto* uh = bufs[11].data<float>();
  const auto* ub = bufs[12].data<float>();
  int bad_h = 0, bad_b = 0, bad_t = 0, bad_pairs = 0, ties_away = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t want_h = float_to_half(x[i]), want_b = float_to_bf16(x[i]);
    if (!same_half(h[i], want_h) || !same_float(rh[i], half_to_float(want_h)))
      if (++bad_h <= 5) ADD_FAILURE() << "f16 of " << x[i] << " (0x" << std::hex << bits_of(x[i]) << "): 0x"
                                      << h[i] << ", want 0x" << want_h;
    if (!same_bf16(b[i], want_b) || !same_float(rb[i], bf16_to_float(want_b)))
      if (++bad_b <= 5) ADD_FAILURE() << "bf16 of 0x" << std::hex << bits_of(x[i]) << ": 0x" << b[i]
                                      << ", want 0x" << want_b;
    const float want_t = tf32_rna_model(x[i]);
    if (!same_float(from_bits(t[i]), want_t) || (!std::isnan(want_t) && (t[i] & 0x1fffu) != 0))
      if (++bad_t <= 5) ADD_FAILURE() << "tf32 of 0x" << std::hex << bits_of(x[i]) << ": 0x" << t[i]
                                      << ", want 0x" << bits_of(want_t);
    if ((bits_of(x[i]) & 0x7fffffffu) < 0x7f800000u && (bits_of(x[i]) & 0x1fffu) == 0x1000u &&
        std::fabs(from_bits(t[i])) > std::fabs(x[i]))
      ++ties_away;
  }
  for (int64_t i = 0; i < n / 2; ++i) {
    const float lo = x[2 * i], hi = x[2 * i + 1];
    const uint16_t hl = float_to_half(lo), hh = float_to_half(hi), bl = float_to_bf16(lo), bh = float_to_bf16(hi);
    const bool ok = same_half(static_cast<uint16_t>(ph[i]), hl) && same_half(static_cast<uint16_t>(ph[i] >> 16), hh) &&
                    same_bf16(static_cast<uint16_t>(pb[i]), bl) && same_bf16(static_cast<uint16_t>(pb[i] >> 16), bh) &&
                    same_float(uh[2 * i], half_to_float(hl)) && same_float(uh[2 * i + 1], half_to_float(hh)) &&
                    same_float(ub[2 * i], bf16_to_float(bl)) && same_float(ub[2 * i + 1], bf16_to_float(bh));
    if (!ok && ++bad_pairs <= 5) ADD_FAILURE() << "pair " << i << ": " << lo << ", " << hi;
  }
  EXPECT_EQ(bad_h, 0);
  EXPECT_EQ(bad_b, 0);
  EXPECT_EQ(bad_t, 0);
  EXPECT_EQ(bad_pairs, 0);
  EXPECT_GT(ties_away, 30000);  // the tf32 ties were really there, and went away from zero

  // Spot values that a wrong rounding rule would change.
  const auto fh = [](float v) { return dc::float_to_half(v); };
  EXPECT_EQ(fh(65519.f), 0x7bffu);  // below the overflow threshold
  EXPECT_EQ(fh(65520.f), 0x7c00u);  // the tie at 65520 rounds to even: inf
  EXPECT_EQ(fh(std::ldexp(1.f, -25)), 0x0000u);
  EXPECT_EQ(fh(std::ldexp(3.f, -25)), 0x0002u);  // 1.5 * 2^-24: tie to even 2
  // Every bit pattern widens exactly.
  const auto* fhv = bufs[7].data<float>();
  const auto* fbv = bufs[8].data<float>();
  int bad_widen = 0;
  for (uint32_t i = 0; i < 65536; ++i)
    if (!same_float(fhv[i], half_to_float(static_cast<uint16_t>(i))) ||
        !same_float(fbv[i], bf16_to_float(static_cast<uint16_t>(i))))
      if (++bad_widen <= 5) ADD_FAILURE() << "widening 0x" << std::hex << i;
  EXPECT_EQ(bad_widen, 0);
}

TEST(PreludeConvert, Tf32RoundsTiesAwayFromZero) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: rna goes up (rn would go to the even 1).
  const std::vector<float> x = {1.f + std::ldexp(1.f, -11), -(1.f + std::ldexp(1.f, -11)),
                                1.f + 3 * std::ldexp(1.f, -11), from_bits(0x7f7ff000u)};
  std::vector<Tensor> bufs(13);
  bufs[0] = Tensor::from_vector<float>({4}, x);
  bufs[6] = Tensor(DType::u16, {65536});
  ASSERT_TRUE(run_ok(convert_kernel(4), bufs).ok);
  const auto* t = bufs[3].data<uint32_t>();
  EXPECT_EQ(from_bits(t[0]), 1.f + std::ldexp(1.f, -10));
  EXPECT_EQ(from_bits(t[1]), -(1.f + std::ldexp(1.f, -10)));
  EXPECT_EQ(from_bits(t[2]), 1.f + std::ldexp(1.f, -9));  // 1.5 ulp: away to 2 ulp
  EXPECT_EQ(t[3], 0x7f800000u);  // the largest float's tie rounds to inf
}

TEST(PreludeConvert, CompilesWithNvrtcForEveryArchitecture) {
  for (const std::string arch : {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90"}) {
    const CompileResult r = compile_cuda(cuda_prelude() + "#define DC_N 64\n" + kConvert, arch);
    EXPECT_TRUE(r.ok) << arch << ": " << r.log;
  }
}

}  // namespace
}  // namespace dc
