// f32 -> f16/bf16 storage conversion (ir/converted_bytes.h), eager and lazy: a weight on
// disk converted chunk by chunk gives the same bits as the whole tensor converted in
// memory, on values that exercise every branch of the rounding (subnormals, ties, inf,
// NaN, values beyond the f16 range that are clamped).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "ir/converted_bytes.h"
#include "testing.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

// Random values over many binades, plus every edge case; n is large enough for several
// conversion chunks (1 Mi elements each).
std::vector<float> edge_and_random_values(size_t n, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.f, -0.f, inf, -inf, std::nanf(""), -std::nanf(""),
                          std::bit_cast<float>(0x7f800001u),  // signalling NaN
                          std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(), 65504.f, 65519.f, 65520.f, -65536.f, 1e5f, -3e38f,
                          std::ldexp(1.f, -24), std::ldexp(1.f, -25), std::ldexp(3.f, -25), std::ldexp(1.f, -14),
                          std::ldexp(1023.f, -24), 1.f + std::ldexp(1.f, -11), 1.f + std::ldexp(3.f, -11),
                          1.f + std::ldexp(1.f, -8), 1.f + std::ldexp(3.f, -8), 6.1e-5f, 5.9e-8f, 3e-8f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1.f, 1.f);
  std::uniform_int_distribution<int> exp(-40, 40);
  std::uniform_int_distribution<uint32_t> bits;
  while (v.size() < n) {
    // Mostly values of ordinary magnitude, some arbitrary bit patterns (NaNs, subnormals, huge).
    v.push_back(v.size() % 7 == 0 ? std::bit_cast<float>(bits(rng)) : std::ldexp(mant(rng), exp(rng)));
  }
  return v;
}

// Today's rule, written out independently of convert_to_storage: clamp, then round.
uint16_t expected_storage(float v, DType to) {
  const float hi = to == DType::f16 ? 65504.f : std::bit_cast<float>(0x7f7f0000u);
  if (!std::isnan(v) && std::fabs(v) > hi) v = v > 0 ? hi : -hi;
  return to == DType::f16 ? float_to_half(v) : float_to_bf16(v);
}

TEST(StorageConversion, KnownBitPatterns) {
  const auto h = [](float v) {
    uint16_t out;
    convert_to_storage(&v, 1, DType::f16, &out, nullptr);
    return out;
  };
  EXPECT_EQ(h(1.f), 0x3c00);
  EXPECT_EQ(h(1.f + std::ldexp(1.f, -11)), 0x3c00);       // tie: to even
  EXPECT_EQ(h(1.f + std::ldexp(3.f, -11)), 0x3c02);       // tie: to even (up)
  EXPECT_EQ(h(std::ldexp(1.f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(h(std::ldexp(1.f, -25)), 0x0000);             // tie: to even (zero)
  EXPECT_EQ(h(std::ldexp(3.f, -25)), 0x0002);             // tie: to even (up)
  EXPECT_EQ(h(65519.f), 0x7bff);
  EXPECT_EQ(h(1e5f), 0x7bff);                             // clamped, not inf
  EXPECT_EQ(h(-std::numeric_limits<float>::infinity()), 0xfbff);
  EXPECT_EQ(h(std::nanf("")) & 0x7e00, 0x7e00);
  uint16_t b;
  const float big = 3e38f;
  convert_to_storage(&big, 1, DType::bf16, &b, nullptr);
  EXPECT_EQ(b, 0x7f62);  // 3e38 = 0x7f61b1e6: rounds up
}

TEST(StorageConversion, F16AgreesWithTheCompilersConversionInRange) {
  for (float v : edge_and_random_values(200000, 3)) {
    if (std::isnan(v) || std::fabs(v) > 65504.f) continue;
    const _Float16 ref = static_cast<_Float16>(v);
    uint16_t want, got;
    std::memcpy(&want, &ref, 2);
    convert_to_storage(&v, 1, DType::f16, &got, nullptr);
    ASSERT_EQ(got, want) << "value " << v;
  }
}

TEST(StorageConversion, LazyFromAFileIsBitIdenticalToEager) {
  testing::TempDir dir;
  const size_t n = (size_t{5} << 19) + 3;  // 2.5 chunks and a bit: odd sizes at the end
  const std::vector<float> values = edge_and_random_values(n, 17);
  for (uint64_t offset : {uint64_t{4096}, uint64_t{6}}) {
    {
      std::ofstream out(dir.file("w.bin"), std::ios::binary | std::ios::trunc);
      const std::string pad(offset, 'x');
      out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
      out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(n * 4));
    }
    const Tensor src = Tensor::from_file(DType::f32, {static_cast<int64_t>(n)}, dir.file("w.bin"), offset);
    for (DType to : {DType::f16, DType::bf16}) {
      std::vector<uint16_t> want(n);
      ClampStats want_stats;
      for (size_t i = 0; i < n; ++i) {
        want[i] = expected_storage(values[i], to);
        const float hi = static_cast<float>(storage_finite_max(to));
        want_stats.clamped += !std::isnan(values[i]) && std::fabs(values[i]) > hi;
      }
      const ClampStats stats = scan_clamps(src, to);
      EXPECT_EQ(stats.clamped, want_stats.clamped);
      EXPECT_GT(stats.clamped, 0);
      const Tensor lazy = convert_lazily(src, to);
      EXPECT_EQ(lazy.dtype(), to);
      EXPECT_FALSE(lazy.resident());
      // Ranges that start and end inside an element and cross chunk boundaries.
      for (auto [from, len] : std::vector<std::pair<size_t, size_t>>{
               {0, 1}, {1, 2}, {3, 5}, {(size_t{1} << 21) - 3, 9}, {1001, (size_t{1} << 22) + 7}, {2 * n - 1, 1}}) {
        std::vector<char> part(len, 'p');
        lazy.copy_bytes(from, len, part.data());
        ASSERT_EQ(std::memcmp(part.data(), reinterpret_cast<const char*>(want.data()) + from, len), 0)
            << dtype_name(to) << " bytes [" << from << ", " << from + len << ")";
      }
      EXPECT_FALSE(lazy.resident());
      EXPECT_FALSE(src.resident()) << "converting must not make the f32 source resident";
      const Tensor copy = lazy;
      ASSERT_EQ(std::memcmp(lazy.raw(), want.data(), n * 2), 0) << dtype_name(to);
      EXPECT_TRUE(copy.resident()) << "copies share one conversion";
      EXPECT_FALSE(src.resident());
      // The eager path over the same values gives the same bits.
      std::vector<uint16_t> eager(n);
      convert_to_storage(values.data(), n, to, eager.data(), nullptr);
      EXPECT_EQ(eager, want);
    }
  }
}

}  // namespace
}  // namespace dc
