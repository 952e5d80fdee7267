// Strided iteration over a contiguous output, shared by the elementwise and data-movement
// kernels: numpy broadcasting, transposes, slices and expands are all "output element i
// reads operand k at offset_k + sum(idx_d * stride_kd)".
//
// Dims that every operand walks the same way are merged first, so the common cases
// (same shape, scalar, per-channel or suffix broadcast) become one or two long dims and
// the kernel's innermost loop runs long, with operand strides of 0 or 1 it can specialise on.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "ir/error.h"
#include "ir/shape.h"

namespace dc::ref {

// The output's dims (never empty: a scalar is {1}) and, per operand, a base offset and one
// stride per dim, in elements (strides may be 0 or negative).
template <size_t N>
struct StridedLoop {
  Shape dims;
  std::array<int64_t, N> offsets{};
  std::array<std::vector<int64_t>, N> strides;
};

// Merges adjacent dims that every operand walks contiguously and drops extent-1 dims.
template <size_t N>
StridedLoop<N> collapse(const Shape& dims, const std::array<std::vector<int64_t>, N>& strides,
                        const std::array<int64_t, N>& offsets = {}) {
  StridedLoop<N> loop;
  loop.offsets = offsets;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool merge = !loop.dims.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = loop.strides[k].back() == strides[k][d] * dims[d];
    if (merge) {
      loop.dims.back() *= dims[d];
      for (size_t k = 0; k < N; ++k) loop.strides[k].back() = strides[k][d];
    } else {
      loop.dims.push_back(dims[d]);
      for (size_t k = 0; k < N; ++k) loop.strides[k].push_back(strides[k][d]);
    }
  }
  if (loop.dims.empty()) {
    loop.dims.push_back(1);
    for (size_t k = 0; k < N; ++k) loop.strides[k].push_back(0);
  }
  return loop;
}

// Loop for operands of the given shapes read broadcast (numpy rules) to `out`.
template <size_t N>
StridedLoop<N> broadcast_loop(const Shape& out, const std::array<const Shape*, N>& inputs) {
  std::array<std::vector<int64_t>, N> strides;
  for (size_t k = 0; k < N; ++k) strides[k] = broadcast_strides(*inputs[k], out);
  return collapse<N>(out, strides);
}

// Visits the flat output range [begin, end) in runs along the innermost dim, calling
// fn(out_pos, offsets, count): output elements out_pos .. out_pos+count-1 read operand k at
// offsets[k] + j * loop.strides[k].back(), j = 0 .. count-1.
template <size_t N, class Fn>
void for_each_run(const StridedLoop<N>& loop, int64_t begin, int64_t end, Fn&& fn) {
  if (begin >= end) return;
  const size_t rank = loop.dims.size();
  std::vector<int64_t> idx(rank, 0);
  std::array<int64_t, N> off = loop.offsets;
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rest % loop.dims[d];
    rest /= loop.dims[d];
    for (size_t k = 0; k < N; ++k) off[k] += idx[d] * loop.strides[k][d];
  }
  const int64_t inner = loop.dims.back();
  int64_t pos = begin;
  while (pos < end) {
    const int64_t count = std::min(inner - idx.back(), end - pos);
    fn(pos, off, count);
    pos += count;
    if (pos >= end) break;
    // The run reached the end of the innermost dim: carry into the outer dims.
    for (size_t k = 0; k < N; ++k) off[k] -= idx.back() * loop.strides[k].back();
    idx.back() = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      for (size_t k = 0; k < N; ++k) off[k] += loop.strides[k][d];
      if (++idx[d] < loop.dims[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= loop.dims[d] * loop.strides[k][d];
      idx[d] = 0;
    }
  }
}

// Elements per parallel_for chunk for cheap elementwise work: big enough that thread
// start-up is noise, small enough that a ResNet activation splits across cores.
inline constexpr int64_t kElementwiseGrain = 1 << 15;

}  // namespace dc::ref
