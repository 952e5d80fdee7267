// dc.NonFiniteCheck(G1, ..., Gn) -> flags: fp16 loss scaling's overflow check over many
// gradients in one multi-tensor kernel (docs/training.md, "Mixed precision"), in place of a
// Mul, a ReduceSum and an Add per gradient.
//
// flags is f32 of shape [F] (attribute lanes = F): flags[f] = 1 when an element e of any G with
// e % F == f is inf or NaN, else 0. On the device lane f is one thread: it reads elements f,
// f + F, f + 2F, ... of each tensor in turn (neighbouring threads read neighbouring elements,
// as the optimizer's loops do) and writes its own flag, so no flag is shared, zeroed first
// or written atomically, and the flags do not depend on the launch's block size. The step is
// finite when the flags sum to 0 (a ReduceSum of F floats at most).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dc {

inline constexpr const char* kNonFiniteCheck = "dc.NonFiniteCheck";

// Lanes of a check whose largest tensor has `largest` elements: as many as that tensor has,
// up to 2^18 (1024 blocks of 256 threads: an H100's 132 SMs full; h100 estimates of BERT-base's
// two checks and their counts, 2026-11-30: 2^16 lanes 484.5 us, 2^18 198.6 us, against a floor
// of 131 us to read its 110 M gradients once).
inline int64_t nonfinite_check_lanes(int64_t largest) { return std::clamp<int64_t>(largest, 1, int64_t{1} << 18); }

// Gradients one check node reads at most: its kernel's arguments stay within 128 pointers
// (1 KiB, OpenCL's smallest CL_DEVICE_MAX_PARAMETER_SIZE), the flags being the last.
inline constexpr size_t kNonFiniteCheckMaxInputs = 127;

}  // namespace dc
