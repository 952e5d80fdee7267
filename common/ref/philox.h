// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Random value i of a stream is a pure function of (key, i), so a
// GPU thread, the host emulator and this reference draw the same numbers in any order:
// Dropout's mask is reproducible from (seed, step, element index) without storing state.
#pragma once

#include <array>
#include <cstdint>

namespace dc::ref {

// The four 32-bit words of block `counter` under `key` (10 rounds, the published constants).
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// A uniform float in [0, 1) for element `index` of the stream (seed, step): word index % 4 of
// block index / 4, its top 24 bits scaled by 2^-24.
float philox_uniform(uint64_t seed, uint64_t step, uint64_t index);

}  // namespace dc::ref
