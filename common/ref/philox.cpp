#include "ref/philox.h"

namespace dc::ref {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

void round_once(std::array<uint32_t, 4>& c, const std::array<uint32_t, 2>& k) {
  const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
  c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
       static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
}
}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int r = 0; r < 10; ++r) {
    round_once(counter, key);
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

float philox_uniform(uint64_t seed, uint64_t step, uint64_t index) {
  const uint64_t block = index / 4;
  const auto words = philox4x32(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
       static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(words[index % 4] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace dc::ref
