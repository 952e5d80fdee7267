// The host emulator (codegen/emulator.h): hand-written CUDA kernels, valid for NVRTC as they
// stand (the last test compiles them), run on the CPU and compared with values computed here.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "emulator.h"
#include "emulator_testing.h"
#include "ir/kernel.h"
#include "variant.h"
#include "nvrtc.h"
#include "prelude.h"
#include "testing.h"

namespace dc {
namespace {

using dc::testing::random_tensor;
using namespace dc::emu_testing;  // NOLINT: the helpers are the vocabulary of these tests

// ---- kernel texts (CUDA as NVRTC accepts it) -----------------------------------------------

const char* const kElementwise = R"(
extern "C" __global__ void __launch_bounds__(128)
axpb(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y) {
  const int n = 1000;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = dc_relu(2.f * x[i] + b[i % 10]);
}
DC_EXPORT_KERNEL(axpb)
)";

// 70x45 -> 45x70 through a 32x33 tile, 32x8 threads, 4 rows per thread.
const char* const kTranspose = R"(
#ifndef DC_TEST_BARRIER
#define DC_TEST_BARRIER __syncthreads()
#endif
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float tile[32][33];
  const int rows = 70, cols = 45;
  int x = blockIdx.x * 32 + threadIdx.x;
  int y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  DC_TEST_BARRIER;
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8)
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}
DC_EXPORT_KERNEL(transpose)
)";

// Row sums of a 5x300 matrix with 80 threads per row: the last warp has 16 lanes.
const char* const kRowSum = R"(
extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ y) {
  const int L = 300;
  __shared__ float partial[32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warps = (blockDim.x + 31) / 32;
  float v = 0.f;
  for (int i = tid; i < L; i += blockDim.x) v += x[blockIdx.x * L + i];
  // Only the lanes that exist take part; a partial warp reads nothing beyond them.
  const unsigned mask = __ballot_sync(0xffffffffu, 1);
  const int lanes = __popc(mask);
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_down_sync(mask, v, o);
    if (lane + o < lanes) v += other;
  }
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < warps ? partial[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[blockIdx.x] = s;
  }
}
DC_EXPORT_KERNEL(row_sum)
)";

// The same without the partial-warp guard: the last warp adds values of lanes that do not
// exist, which CUDA leaves undefined and the emulator makes NaN.
const char* const kRowSumUnguarded = R"(
extern "C" __global__ void row_sum_unguarded(const float* __restrict__ x, float* __restrict__ y) {
  const int L = 300;
  __shared__ float partial[32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float v = 0.f;
  for (int i = tid; i < L; i += blockDim.x) v += x[blockIdx.x * L + i];
  v = dc_warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (tid == 0) y[blockIdx.x] = partial[0] + partial[1] + partial[2];
}
DC_EXPORT_KERNEL(row_sum_unguarded)
)";

// Votes in an 8x6 block: warp 0 is rows 0-3, warp 1 rows 4-5 (16 lanes).
const char* const kVotes = R"(
extern "C" __global__ void votes(int* __restrict__ out) {
  const int pred = (threadIdx.x + threadIdx.y) % 3 == 0;
  const unsigned ballot = __ballot_sync(0xffffffffu, pred);
  const int any = __any_sync(0xffffffffu, threadIdx.y == 5);
  const int all = __all_sync(0xffffffffu, threadIdx.x < 8);
  const int none = __all_sync(0xffffffffu, threadIdx.x < 7);
  const int linear = threadIdx.y * blockDim.x + threadIdx.x;
  if (linear % 32 == 0) {
    const int w = linear / 32;
    out[w * 4 + 0] = (int)ballot;
    out[w * 4 + 1] = any;
    out[w * 4 + 2] = all;
    out[w * 4 + 3] = none;
  }
}
DC_EXPORT_KERNEL(votes)
)";

// Shuffle variants with widths below 32, one warp; each lane shuffles 100 + its lane.
const char* const kShuffles = R"(
extern "C" __global__ void shuffles(int* __restrict__ out) {
  const int lane = threadIdx.x;
  const int v = 100 + lane;
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, v, 3, 8);
  out[1 * 32 + lane] = __shfl_sync(0xffffffffu, v, 35);
  out[2 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, 2, 16);
  out[3 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, 5);
  out[4 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, 16, 16);
  out[5 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, 5, 8);
  // Two groups of 16 lanes shuffle independently under their own masks.
  int g;
  if (lane < 16) g = __shfl_sync(0x0000ffffu, v, 7);
  else g = __shfl_sync(0xffff0000u, v, 20);
  out[6 * 32 + lane] = g;
  const double d = __shfl_down_sync(0xffffffffu, 0.5 + lane, 1);
  out[7 * 32 + lane] = (int)(d * 2.0);
}
DC_EXPORT_KERNEL(shuffles)
)";

const char* const kAtomics = R"(
extern "C" __global__ void atomics(const float* __restrict__ x, const int* __restrict__ v,
                                   float* __restrict__ sum, int* __restrict__ counts) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(sum, x[i]);
  atomicAdd(&counts[0], 1);
  atomicMax(&counts[1], v[i]);
  atomicMin(&counts[2], v[i]);
  atomicCAS(&counts[3], 0, i + 1);  // only the first thread to get there succeeds
}
DC_EXPORT_KERNEL(atomics)
)";

// Each block of 256 reverses its chunk through dynamic shared memory.
const char* const kDynamicSmem = R"(
extern "C" __global__ void reverse_chunks(const float* __restrict__ x, float* __restrict__ y) {
  DC_DYNAMIC_SMEM(float, buf);
  const int base = blockIdx.x * blockDim.x;
  buf[threadIdx.x] = x[base + threadIdx.x];
  __syncthreads();
  y[base + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}
DC_EXPORT_KERNEL(reverse_chunks)
)";

// Reads shared memory nobody wrote: in a kernel, in a template and across blocks.
const char* const kUninitialisedSmem = R"(
template <int N>
__device__ __forceinline__ float stash(float v) {
  __shared__ float t[N];
  const float old = t[threadIdx.x];
  t[threadIdx.x] = v;
  return old;
}
extern "C" __global__ void uninit(float* __restrict__ y) {
  __shared__ float s[64];
  __shared__ float written_by_block0[64];
  if (blockIdx.x == 0) written_by_block0[threadIdx.x] = 1.f;
  __syncthreads();
  float* out = y + blockIdx.x * 256;
  out[threadIdx.x] = s[threadIdx.x] + 1.f;
  out[64 + threadIdx.x] = written_by_block0[threadIdx.x];
  out[128 + threadIdx.x] = stash<64>(1.f);
  out[192 + threadIdx.x] = stash<64>(2.f);
}
DC_EXPORT_KERNEL(uninit)
)";

const char* const kDivergentSync = R"(
extern "C" __global__ void divergent(float* __restrict__ y) {
  if (threadIdx.x < 16) __syncthreads();
  y[threadIdx.x] = 1.f;
}
DC_EXPORT_KERNEL(divergent)
)";

const char* const kDivergentShuffle = R"(
extern "C" __global__ void divergent_shuffle(float* __restrict__ y) {
  float v = threadIdx.x;
  if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  else __syncthreads();
  y[threadIdx.x] = v;
}
DC_EXPORT_KERNEL(divergent_shuffle)
)";

const char* const kLaneNotInMask = R"(
extern "C" __global__ void lane_not_in_mask(float* __restrict__ y) {
  y[threadIdx.x] = __shfl_sync(0x1u, 1.f, 0);
}
DC_EXPORT_KERNEL(lane_not_in_mask)
)";

const char* const kWritesPastEnd = R"(
extern "C" __global__ void past_end(const float* __restrict__ x, float* __restrict__ y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // 128 threads for 100 elements
  y[i] = x[i % 100];
}
DC_EXPORT_KERNEL(past_end)
)";

const char* const kWritesInput = R"(
extern "C" __global__ void writes_input(float* __restrict__ x, float* __restrict__ y) {
  x[threadIdx.x] = 0.f;
  y[threadIdx.x] = 1.f;
}
DC_EXPORT_KERNEL(writes_input)
)";

const char* const kDeepStack = R"(
extern "C" __global__ void deep_stack(float* __restrict__ y) {
  volatile float big[64 * 1024];  // 256 KiB of locals
  for (int i = 0; i < 64 * 1024; i += 1024) big[i] = (float)i;
  y[threadIdx.x] = big[threadIdx.x * 1024];
}
DC_EXPORT_KERNEL(deep_stack)
)";

const char* const kTrap = R"(
extern "C" __global__ void traps(float* __restrict__ y) {
  if (threadIdx.x == 5 && blockIdx.x == 1) __trap();
  y[blockIdx.x * blockDim.x + threadIdx.x] = 1.f;
}
DC_EXPORT_KERNEL(traps)
)";

const char* const kIntDivision = R"(
extern "C" __global__ void int_division(const int* __restrict__ x, int* __restrict__ y) {
  y[threadIdx.x] = 100 / x[threadIdx.x];
}
DC_EXPORT_KERNEL(int_division)
)";

// Two launches: column sums into a zeroed scratch buffer with atomics, then a scale.
const char* const kTwoLaunches = R"(
extern "C" __global__ void column_sums(const float* __restrict__ x, float* __restrict__ acc) {
  const int row = blockIdx.x, col = threadIdx.x;  // 12 rows, 20 columns
  atomicAdd(&acc[col], x[row * 20 + col]);
}
DC_EXPORT_KERNEL(column_sums)
extern "C" __global__ void scale(const float* __restrict__ acc, float* __restrict__ y) {
  y[threadIdx.x] = 2.f * acc[threadIdx.x];
}
DC_EXPORT_KERNEL(scale)
)";

// Every thread of a 3-D grid of 3-D blocks writes its coordinates.
const char* const kIndices = R"(
extern "C" __global__ void indices(int* __restrict__ out) {
  const int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  int* o = out + (block * threads + thread) * 2;
  o[0] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z;
  o[1] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;
}
DC_EXPORT_KERNEL(indices)
)";

const char* const kSyncthreadsCount = R"(
extern "C" __global__ void sync_count(int* __restrict__ out) {
  const int c = __syncthreads_count(threadIdx.x % 3 == 0);
  const int a = __syncthreads_and(threadIdx.x < 100);
  const int o = __syncthreads_or(threadIdx.x == 99);
  if (threadIdx.x == 0) { out[0] = c; out[1] = a; out[2] = o; }
}
DC_EXPORT_KERNEL(sync_count)
)";

// dc_emu_warp_exchange, the emulator's building block for warp-wide matrix operations; the
// GPU branch computes the same with a shuffle. Block of 48: warp 1 has 16 lanes.
const char* const kWarpExchange = R"(
extern "C" __global__ void exchange(float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const float2 mine = make_float2((float)lane, (float)(lane * lane));
#ifdef DC_HOST_EMULATION
  float2 all[32];
  dc_emu_warp_exchange(0xffffffffu, &mine, all, sizeof(float2));
  y[threadIdx.x] = all[(lane + 1) % 32].y;
#else
  y[threadIdx.x] = __shfl_sync(0xffffffffu, mine.y, (lane + 1) % 32);
#endif
}
DC_EXPORT_KERNEL(exchange)
)";

// 128x128x128 SGEMM: 64x64 tiles, BK = 8, 256 threads with 4x4 outputs each; two barriers
// per K-tile plus DC_TEST_EXTRA_BARRIERS.
const char* const kGemm = R"(
#ifndef DC_TEST_EXTRA_BARRIERS
#define DC_TEST_EXTRA_BARRIERS 0
#endif
extern "C" __global__ void __launch_bounds__(256)
gemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) {
  const int M = 128, N = 128, K = 128, BM = 64, BN = 64, BK = 8;
  __shared__ float As[8][64 + 4];
  __shared__ float Bs[8][64 + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int e = tid; e < BM * BK; e += 256) As[e % BK][e / BK] = A[(row0 + e / BK) * K + k0 + e % BK];
    for (int e = tid; e < BK * BN; e += 256) Bs[e / BN][e % BN] = B[(k0 + e / BN) * N + col0 + e % BN];
    __syncthreads();
    for (int kk = 0; kk < BK; ++kk) {
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    for (int s = 0; s < DC_TEST_EXTRA_BARRIERS; ++s) __syncthreads();
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) C[(row0 + ty * 4 + i) * N + col0 + tx * 4 + j] = acc[i][j];
  (void)M;
}
DC_EXPORT_KERNEL(gemm)
)";

// ---- tests ------------------------------------------------------------------------------------

TEST(Emulator, GridStrideElementwise) {
  const auto k = make_kernel(kElementwise,
                             {buffer("x", BufferRole::input, {1000}), buffer("b", BufferRole::input, {10}),
                              buffer("y", BufferRole::output, {1000})},
                             {launch("axpb", {3, 1, 1}, {128, 1, 1}, {0, 1, 2})});
  std::vector<Tensor> bufs = {random_tensor({1000}, 1), random_tensor({10}, 2), Tensor()};
  run_ok(k, bufs);
  const auto x = floats(bufs[0]), b = floats(bufs[1]), y = floats(bufs[2]);
  ASSERT_EQ(y.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    const float want = std::max(0.f, 2.f * x[i] + b[i % 10]);
    ASSERT_EQ(y[i], want) << "at " << i;
  }
}

GeneratedKernel transpose_kernel(const std::string& prefix = "") {
  return make_kernel(prefix + kTranspose,
                     {buffer("in", BufferRole::input, {70, 45}), buffer("out", BufferRole::output, {45, 70})},
                     {launch("transpose", {2, 3, 1}, {32, 8, 1}, {0, 1})});
}

TEST(Emulator, SharedMemoryTransposeWithSyncthreads) {
  std::vector<Tensor> bufs = {random_tensor({70, 45}, 3), Tensor()};
  run_ok(transpose_kernel(), bufs);
  const auto in = floats(bufs[0]), out = floats(bufs[1]);
  for (int r = 0; r < 70; ++r)
    for (int c = 0; c < 45; ++c) ASSERT_EQ(out[c * 70 + r], in[r * 45 + c]) << r << "," << c;
}

TEST(Emulator, TransposeWithoutTheBarrierReadsPoison) {
  // Threads read tile entries other threads write: without the barrier they read shared
  // memory before it is written, which the poisoning turns into NaN.
  std::vector<Tensor> bufs = {random_tensor({70, 45}, 3), Tensor()};
  run_ok(transpose_kernel("#define DC_TEST_BARRIER (void)0\n"), bufs);
  int nans = 0;
  for (float v : floats(bufs[1])) nans += std::isnan(v);
  EXPECT_GT(nans, 1000);
}

TEST(Emulator, BlockReductionWithPartialLastWarp) {
  const auto k = make_kernel(kRowSum, {buffer("x", BufferRole::input, {5, 300}), buffer("y", BufferRole::output, {5})},
                             {launch("row_sum", {5, 1, 1}, {80, 1, 1}, {0, 1})});
  std::vector<Tensor> bufs = {random_tensor({5, 300}, 4), Tensor()};
  run_ok(k, bufs);
  const auto x = floats(bufs[0]), y = floats(bufs[1]);
  for (int r = 0; r < 5; ++r) {
    double want = 0;
    for (int i = 0; i < 300; ++i) want += x[r * 300 + i];
    EXPECT_NEAR(y[r], want, 1e-4) << "row " << r;
  }
}

TEST(Emulator, ShuffleFromMissingLaneOfPartialWarpIsPoison) {
  const auto k = make_kernel(kRowSumUnguarded,
                             {buffer("x", BufferRole::input, {5, 300}), buffer("y", BufferRole::output, {5})},
                             {launch("row_sum_unguarded", {5, 1, 1}, {80, 1, 1}, {0, 1})});
  std::vector<Tensor> bufs = {random_tensor({5, 300}, 4), Tensor()};
  run_ok(k, bufs);
  for (float v : floats(bufs[1])) EXPECT_TRUE(std::isnan(v)) << v;
}

TEST(Emulator, VotesInTwoDimensionalBlockWithPartialWarp) {
  const auto k = make_kernel(kVotes, {buffer("out", BufferRole::output, {8}, DType::i32)},
                             {launch("votes", {1, 1, 1}, {8, 6, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  run_ok(k, bufs);
  // Lane l of warp w is thread (x, y) = (l % 8, 4w + l / 8); pred: (x + y) % 3 == 0.
  unsigned want[2] = {0, 0};
  for (int w = 0; w < 2; ++w)
    for (int l = 0; l < 32; ++l) {
      const int linear = w * 32 + l;
      if (linear >= 48) continue;
      const int x = linear % 8, y = linear / 8;
      if ((x + y) % 3 == 0) want[w] |= 1u << l;
    }
  EXPECT_EQ(want[0], 0x49922449u);  // rows y = 0..3 of 8 lanes: 0x49, 0x24, 0x92, 0x49
  EXPECT_EQ(want[1], 0x9224u);      // rows y = 4, 5: 0x24, 0x92
  const auto out = bufs[0].to_int64_vector();
  EXPECT_EQ(static_cast<unsigned>(out[0]), want[0]);
  EXPECT_EQ(out[1], 0);  // no thread of warp 0 has y == 5
  EXPECT_EQ(out[2], 1);
  EXPECT_EQ(out[3], 0);  // x == 7 exists
  EXPECT_EQ(static_cast<unsigned>(out[4]), want[1]);
  EXPECT_EQ(static_cast<unsigned>(out[4]) >> 16, 0u);  // lanes 16-31 of warp 1 do not exist
  EXPECT_EQ(out[5], 1);
  EXPECT_EQ(out[6], 1);
  EXPECT_EQ(out[7], 0);
}

TEST(Emulator, ShuffleVariantsFollowTheCudaDefinitions) {
  const auto k = make_kernel(kShuffles, {buffer("out", BufferRole::output, {8, 32}, DType::i32)},
                             {launch("shuffles", {1, 1, 1}, {32, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  run_ok(k, bufs);
  const auto out = bufs[0].to_int64_vector();
  for (int l = 0; l < 32; ++l) {
    SCOPED_TRACE("lane " + std::to_string(l));
    EXPECT_EQ(out[0 * 32 + l], 100 + l / 8 * 8 + 3);                  // idx within 8-lane segments
    EXPECT_EQ(out[1 * 32 + l], 100 + 3);                              // 35 is lane 3 (mod 32)
    EXPECT_EQ(out[2 * 32 + l], l % 16 < 2 ? 100 + l : 100 + l - 2);   // up stays in its 16 lanes
    EXPECT_EQ(out[3 * 32 + l], l + 5 < 32 ? 100 + l + 5 : 100 + l);   // down keeps its own at the end
    EXPECT_EQ(out[4 * 32 + l], l < 16 ? 100 + l : 100 + l - 16);      // xor into a later segment: own
    EXPECT_EQ(out[5 * 32 + l], (l ^ 5) / 8 == l / 8 ? 100 + (l ^ 5) : 100 + l);
    EXPECT_EQ(out[6 * 32 + l], l < 16 ? 107 : 120);
    EXPECT_EQ(out[7 * 32 + l], l < 31 ? 2 * l + 3 : 2 * l + 1);       // doubles move whole
  }
}

TEST(Emulator, WarpExchangeGathersEveryLane) {
  const auto k = make_kernel(kWarpExchange, {buffer("y", BufferRole::output, {48})},
                             {launch("exchange", {1, 1, 1}, {48, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  run_ok(k, bufs);
  const auto y = floats(bufs[0]);
  for (int t = 0; t < 48; ++t) {
    const int next = (t % 32 + 1) % 32;
    if (t == 47) {
      EXPECT_TRUE(std::isnan(y[t])) << "lane 16 of the partial warp does not exist";
    } else {
      EXPECT_EQ(y[t], float(next * next)) << t;
    }
  }
}

TEST(Emulator, AtomicsFromManyBlocks) {
  const int n = 64 * 128;
  const auto k = make_kernel(kAtomics,
                             {buffer("x", BufferRole::input, {n}), buffer("v", BufferRole::input, {n}, DType::i32),
                              buffer("sum", BufferRole::output, {1}, DType::f32, true),
                              buffer("counts", BufferRole::output, {4}, DType::i32, true)},
                             {launch("atomics", {64, 1, 1}, {128, 1, 1}, {0, 1, 2, 3})});
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i * 7919) % 10007 - 5000;
  std::vector<Tensor> bufs = {random_tensor({n}, 5, 0.f, 1.f), Tensor::from_vector<int32_t>({n}, v), Tensor(),
                              Tensor()};
  run_ok(k, bufs);
  double want = 0;
  for (float x : floats(bufs[0])) want += x;
  EXPECT_NEAR(floats(bufs[2])[0], want, 1e-3 * want);
  const auto counts = bufs[3].to_int64_vector();
  EXPECT_EQ(counts[0], n);
  EXPECT_EQ(counts[1], *std::max_element(v.begin(), v.end()));
  EXPECT_EQ(counts[2], std::min(0, *std::min_element(v.begin(), v.end())));  // starts at 0
  EXPECT_GE(counts[3], 1);
  EXPECT_LE(counts[3], n);
}

TEST(Emulator, DynamicSharedMemory) {
  const auto k = make_kernel(kDynamicSmem, {buffer("x", BufferRole::input, {768}), buffer("y", BufferRole::output, {768})},
                             {launch("reverse_chunks", {3, 1, 1}, {256, 1, 1}, {0, 1}, 256 * 4)});
  std::vector<Tensor> bufs = {random_tensor({768}, 6), Tensor()};
  run_ok(k, bufs);
  const auto x = floats(bufs[0]), y = floats(bufs[1]);
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 256; ++t) ASSERT_EQ(y[b * 256 + t], x[b * 256 + 255 - t]);
}

TEST(Emulator, DynamicSharedMemoryOverrunIsReported) {
  const auto k = make_kernel(kDynamicSmem, {buffer("x", BufferRole::input, {768}), buffer("y", BufferRole::output, {768})},
                             {launch("reverse_chunks", {3, 1, 1}, {256, 1, 1}, {0, 1}, 512)});
  std::vector<Tensor> bufs = {random_tensor({768}, 6), Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "dynamic shared memory (512 bytes)"));
  EXPECT_TRUE(contains(r.error, "block (0,0,0), thread (128,0,0)"));
}

TEST(Emulator, SharedMemoryIsPoisonedAtEveryBlockStart) {
  const auto k = make_kernel(kUninitialisedSmem, {buffer("y", BufferRole::output, {2, 256})},
                             {launch("uninit", {2, 1, 1}, {64, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  run_ok(k, bufs);
  const auto y = floats(bufs[0]);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 64; ++t) {
      const float* o = y.data() + b * 256;
      EXPECT_TRUE(std::isnan(o[t])) << "read before write, block " << b;
      if (b == 0) {
        EXPECT_EQ(o[64 + t], 1.f);
      } else {
        EXPECT_TRUE(std::isnan(o[64 + t])) << "block 0's shared memory leaked into block 1";
      }
      EXPECT_TRUE(std::isnan(o[128 + t])) << "a template's __shared__ is poisoned too";
      EXPECT_EQ(o[192 + t], 1.f) << "and shared between its calls";
    }
}

TEST(Emulator, DivergentSyncthreadsIsADeadlockNotAHang) {
  const auto k = make_kernel(kDivergentSync, {buffer("y", BufferRole::output, {64})},
                             {launch("divergent", {1, 1, 1}, {64, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "deadlock in block (0,0,0)"));
  EXPECT_TRUE(contains(r.error, "threads 0-15 wait at __syncthreads()"));
  EXPECT_TRUE(contains(r.error, "threads 16-63 have exited"));
}

TEST(Emulator, ShuffleWaitingForLanesAtABarrierIsADeadlock) {
  const auto k = make_kernel(kDivergentShuffle, {buffer("y", BufferRole::output, {64})},
                             {launch("divergent_shuffle", {1, 1, 1}, {64, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "deadlock"));
  EXPECT_TRUE(contains(r.error, "threads 16-31, 48-63 wait at __syncthreads()"));
  EXPECT_TRUE(contains(r.error, "threads 0-15 wait in __shfl_xor_sync(mask 0xffffffff)"));
}

TEST(Emulator, LaneOutsideItsMaskIsAnError) {
  const auto k = make_kernel(kLaneNotInMask, {buffer("y", BufferRole::output, {32})},
                             {launch("lane_not_in_mask", {1, 1, 1}, {32, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "__shfl_sync with mask 0x00000001 called by lane"));
}

TEST(Emulator, SyncthreadsCountAndOr) {
  const auto k = make_kernel(kSyncthreadsCount, {buffer("out", BufferRole::output, {3}, DType::i32)},
                             {launch("sync_count", {1, 1, 1}, {100, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  run_ok(k, bufs);
  EXPECT_EQ(bufs[0].to_int64_vector(), (std::vector<int64_t>{34, 1, 1}));  // 0, 3, ..., 99
}

TEST(Emulator, ThreeDimensionalGridAndBlocks) {
  const int blocks = 2 * 3 * 2, threads = 4 * 2 * 3;
  const auto k = make_kernel(kIndices, {buffer("out", BufferRole::output, {blocks * threads, 2}, DType::i32)},
                             {launch("indices", {2, 3, 2}, {4, 2, 3}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  run_ok(k, bufs);
  const auto out = bufs[0].to_int64_vector();
  int i = 0;
  for (int bz = 0; bz < 2; ++bz)
    for (int by = 0; by < 3; ++by)
      for (int bx = 0; bx < 2; ++bx)
        for (int tz = 0; tz < 3; ++tz)
          for (int ty = 0; ty < 2; ++ty)
            for (int tx = 0; tx < 4; ++tx, ++i) {
              ASSERT_EQ(out[2 * i], bx + 10 * by + 100 * bz);
              ASSERT_EQ(out[2 * i + 1], tx + 10 * ty + 100 * tz);
            }
}

TEST(Emulator, LaunchesRunInOrderOnZeroedScratch) {
  const auto k = make_kernel(kTwoLaunches,
                             {buffer("x", BufferRole::input, {12, 20}),
                              buffer("scratch0", BufferRole::scratch, {20}, DType::f32, true),
                              buffer("y", BufferRole::output, {20})},
                             {launch("column_sums", {12, 1, 1}, {20, 1, 1}, {0, 1}),
                              launch("scale", {1, 1, 1}, {20, 1, 1}, {1, 2})});
  std::vector<Tensor> bufs = {random_tensor({12, 20}, 7), Tensor(), Tensor()};
  run_ok(k, bufs);
  const auto x = floats(bufs[0]), acc = floats(bufs[1]), y = floats(bufs[2]);
  for (int c = 0; c < 20; ++c) {
    double want = 0;
    for (int r = 0; r < 12; ++r) want += x[r * 20 + c];
    EXPECT_NEAR(acc[c], want, 1e-5);
    EXPECT_NEAR(y[c], 2 * want, 2e-5);
  }
}

TEST(Emulator, UnwrittenOutputsArePoisoned) {
  // The kernel writes the first 640 of y's 1000 elements; the zeros given for y do not count.
  std::string text = kElementwise;
  text.replace(text.find("n = 1000"), 8, "n = 640");
  const auto k = make_kernel(text,
                             {buffer("x", BufferRole::input, {1000}), buffer("b", BufferRole::input, {10}),
                              buffer("y", BufferRole::output, {1000})},
                             {launch("axpb", {5, 1, 1}, {128, 1, 1}, {0, 1, 2})});
  std::vector<Tensor> bufs = {random_tensor({1000}, 1), random_tensor({10}, 2), Tensor(DType::f32, {1000})};
  run_ok(k, bufs);
  const auto y = floats(bufs[2]);
  EXPECT_FALSE(std::isnan(y[639]));
  for (int i = 640; i < 1000; ++i) ASSERT_TRUE(std::isnan(y[i])) << i;
}

TEST(Emulator, OutOfBoundsWriteIsReportedWithTheBuffer) {
  const auto k = make_kernel(kWritesPastEnd, {buffer("x", BufferRole::input, {100}), buffer("t3", BufferRole::output, {100})},
                             {launch("past_end", {1, 1, 1}, {128, 1, 1}, {0, 1})});
  std::vector<Tensor> bufs = {random_tensor({100}, 8), Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  // 100 floats end at a 16-byte boundary: element 100 is the first past the end.
  EXPECT_TRUE(contains(r.error, "out-of-bounds access at element 100 of buffer 1 't3' (100 elements)"));
  EXPECT_TRUE(contains(r.error, "launch 0 (kernel 'past_end')"));
  EXPECT_TRUE(contains(r.error, "thread (100,0,0)"));
}

TEST(Emulator, WriteToAnInputIsReported) {
  const auto k = make_kernel(kWritesInput, {buffer("x", BufferRole::input, {32}), buffer("y", BufferRole::output, {32})},
                             {launch("writes_input", {1, 1, 1}, {32, 1, 1}, {0, 1})});
  std::vector<Tensor> bufs = {random_tensor({32}, 9), Tensor()};
  const Tensor before = bufs[0].clone();
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "write to input buffer 0 'x'"));
  EXPECT_TRUE(bufs[0].bitwise_equal(before));
}

TEST(Emulator, StackOverflowIsReported) {
  const auto k = make_kernel(kDeepStack, {buffer("y", BufferRole::output, {32})},
                             {launch("deep_stack", {1, 1, 1}, {32, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  EmulatorOptions o = options();
  const EmulatorResult r = emulate(k, bufs, o);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "stack overflow"));
  o.stack_bytes = 512 * 1024;  // enough for 256 KiB of locals
  const EmulatorResult big = emulate(k, bufs, o);
  EXPECT_TRUE(big.ok) << big.error;
  EXPECT_EQ(floats(bufs[0])[3], 3072.f);
}

TEST(Emulator, TrapIsReportedWithTheThread) {
  const auto k = make_kernel(kTrap, {buffer("y", BufferRole::output, {128})},
                             {launch("traps", {2, 1, 1}, {64, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "block (1,0,0), thread (5,0,0): __trap() called"));
}

TEST(Emulator, IntegerDivisionByZeroIsReported) {
  const auto k = make_kernel(kIntDivision, {buffer("x", BufferRole::input, {4}, DType::i32),
                                            buffer("y", BufferRole::output, {4}, DType::i32)},
                             {launch("int_division", {1, 1, 1}, {4, 1, 1}, {0, 1})});
  std::vector<Tensor> bufs = {Tensor::from_vector<int32_t>({4}, {1, 2, 0, 4}), Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "thread (2,0,0): SIGFPE (integer division by zero)"));
}

TEST(Emulator, CompileErrorCarriesTheCompilerMessage) {
  const std::string text = "extern \"C\" __global__ void broken(float* y) {\n"
                           "  y[threadIdx.x] = undefined_name;\n"
                           "}\nDC_EXPORT_KERNEL(broken)\n";
  const auto k = make_kernel(text, {buffer("y", BufferRole::output, {32})},
                             {launch("broken", {1, 1, 1}, {32, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "host compiler failed"));
  EXPECT_TRUE(contains(r.error, "undefined_name"));
  // Lines are those of GeneratedKernel::source: the prelude, then this text.
  const auto prelude_lines = std::count(cuda_prelude().begin(), cuda_prelude().end(), '\n');
  EXPECT_TRUE(contains(r.error, "kernel.cu:" + std::to_string(prelude_lines + 2)));
}

TEST(Emulator, MissingExportIsAnError) {
  const auto k = make_kernel("extern \"C\" __global__ void unexported(float* y) { y[0] = 1.f; }\n",
                             {buffer("y", BufferRole::output, {1})}, {launch("unexported", {1, 1, 1}, {1, 1, 1}, {0})});
  std::vector<Tensor> bufs = {Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "DC_EXPORT_KERNEL(unexported)"));
}

TEST(Emulator, BadLaunchesAreResults) {
  std::vector<Tensor> bufs = {Tensor()};
  auto k = make_kernel(kDivergentSync, {buffer("y", BufferRole::output, {64})},
                       {launch("divergent", {1, 1, 1}, {2048, 1, 1}, {0})});
  EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "invalid launch configuration grid (1,1,1), block (2048,1,1)"));

  k.launches[0].block = {64, 1, 1};
  k.launches[0].args = {0, 0};
  r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "takes 1 buffer parameters but its launch passes 2"));
}

TEST(Emulator, MismatchedBuffersThrow) {
  const auto k = make_kernel(kElementwise,
                             {buffer("x", BufferRole::input, {1000}), buffer("b", BufferRole::input, {10}),
                              buffer("y", BufferRole::output, {1000})},
                             {launch("axpb", {3, 1, 1}, {128, 1, 1}, {0, 1, 2})});
  std::vector<Tensor> too_few = {random_tensor({1000}, 1)};
  EXPECT_THROW(emulate(k, too_few, options()), InternalError);
  std::vector<Tensor> wrong_shape = {random_tensor({999}, 1), random_tensor({10}, 2), Tensor()};
  EXPECT_THROW(emulate(k, wrong_shape, options()), InternalError);
  std::vector<Tensor> wrong_dtype = {random_tensor({1000}, 1), Tensor(DType::i32, {10}), Tensor()};
  EXPECT_THROW(emulate(k, wrong_dtype, options()), InternalError);
  std::vector<Tensor> missing_input = {random_tensor({1000}, 1), Tensor(), Tensor()};
  EXPECT_THROW(emulate(k, missing_input, options()), InternalError);
}

TEST(Emulator, SecondRunComesFromTheCache) {
  EmulatorOptions o;
  char dir[] = "/tmp/dc-emulator-cache-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  o.cache_dir = dir;
  const auto k = transpose_kernel();
  std::vector<Tensor> first = {random_tensor({70, 45}, 10), Tensor()};
  const EmulatorResult a = emulate(k, first, o);
  ASSERT_TRUE(a.ok) << a.error;
  EXPECT_FALSE(a.from_cache);
  std::vector<Tensor> second = {first[0], Tensor()};
  const EmulatorResult b = emulate(k, second, o);
  ASSERT_TRUE(b.ok) << b.error;
  EXPECT_TRUE(b.from_cache);
  EXPECT_LT(b.compile_seconds, 0.05);
  EXPECT_LT(b.compile_seconds * 10, a.compile_seconds);
  EXPECT_TRUE(second[1].bitwise_equal(first[1]));
  // Other flags are another library.
  o.flags.push_back("-DDC_TEST_UNUSED=1");
  const EmulatorResult c = emulate(k, second, o);
  EXPECT_FALSE(c.from_cache);
  std::filesystem::remove_all(dir);
}

TEST(Emulator, UnwritableCacheFallsBackToATemporaryDirectory) {
  EmulatorOptions o;
  o.cache_dir = "/proc/dc-emulator-cannot-exist";
  std::vector<Tensor> bufs = {random_tensor({70, 45}, 11), Tensor()};
  const EmulatorResult r = emulate(transpose_kernel(), bufs, o);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.from_cache);
}

TEST(Emulator, ConcurrentEmulationsOfOneKernel) {
  const auto k = transpose_kernel();
  std::vector<Tensor> warm = {random_tensor({70, 45}, 12), Tensor()};
  run_ok(k, warm);  // compiled once, then loaded by both threads
  std::vector<std::vector<Tensor>> bufs(4);
  std::vector<EmulatorResult> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    bufs[t] = {random_tensor({70, 45}, 20 + t), Tensor()};
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) results[t] = emulate(k, bufs[t], options());
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    ASSERT_TRUE(results[t].ok) << results[t].error;
    const auto in = floats(bufs[t][0]), out = floats(bufs[t][1]);
    for (int r = 0; r < 70; ++r)
      for (int c = 0; c < 45; ++c) ASSERT_EQ(out[c * 70 + r], in[r * 45 + c]);
  }
}

void check_gemm(const std::string& prefix, const char* label) {
  const auto k = make_kernel(prefix + kGemm,
                             {buffer("A", BufferRole::input, {128, 128}), buffer("B", BufferRole::input, {128, 128}),
                              buffer("C", BufferRole::output, {128, 128})},
                             {launch("gemm", {2, 2, 1}, {256, 1, 1}, {0, 1, 2})});
  std::vector<Tensor> bufs = {random_tensor({128, 128}, 13), random_tensor({128, 128}, 14), Tensor()};
  const EmulatorResult r = run_ok(k, bufs);
  const auto a = floats(bufs[0]), b = floats(bufs[1]), c = floats(bufs[2]);
  double err = 0, norm = 0;
  for (int i = 0; i < 128; ++i)
    for (int j = 0; j < 128; ++j) {
      double want = 0;
      for (int kk = 0; kk < 128; ++kk) want += double(a[i * 128 + kk]) * b[kk * 128 + j];
      err += (c[i * 128 + j] - want) * (c[i * 128 + j] - want);
      norm += want * want;
    }
  EXPECT_LE(std::sqrt(err / norm), 1e-5);
  // Emulation speed, for docs/emulator.md; the bound only catches a pathological slowdown.
  std::cout << "[ emulator ] 128^3 GEMM, 4 blocks of 256 threads, " << label << ": run "
            << r.run_seconds * 1e3 << " ms, compile " << r.compile_seconds * 1e3 << " ms"
            << (r.from_cache ? " (cached)" : "") << "\n";
  ::testing::Test::RecordProperty(std::string("run_ms_") + label, std::to_string(r.run_seconds * 1e3));
  EXPECT_LT(r.run_seconds, 10.0);
}

TEST(Emulator, TiledGemm) { check_gemm("", "2_barriers_per_k_tile"); }

TEST(Emulator, TiledGemmWithEightBarriersPerKTile) {
  check_gemm("#define DC_TEST_EXTRA_BARRIERS 6\n", "8_barriers_per_k_tile");
}

// The kernels above are CUDA as NVRTC takes it: compile each for the oldest and newest targets.
TEST(Emulator, TestKernelsCompileWithNvrtc) {
  const char* const texts[] = {kElementwise, kTranspose,  kRowSum,        kRowSumUnguarded, kVotes,
                               kShuffles,    kAtomics,    kDynamicSmem,   kUninitialisedSmem,
                               kDivergentSync, kDivergentShuffle, kLaneNotInMask, kWritesPastEnd,
                               kWritesInput, kDeepStack,  kTrap,          kIntDivision,     kTwoLaunches,
                               kIndices,     kSyncthreadsCount, kWarpExchange, kGemm};
  const std::vector<std::string> archs = supported_archs();
  ASSERT_FALSE(archs.empty());
  // The oldest target takes the prelude's fallbacks, the newest its cp.async and the like.
  for (const std::string& arch : {archs.front(), archs.back()})
    for (const char* text : texts) {
      const CompileResult r = compile_cuda(cuda_prelude() + text, arch);
      EXPECT_TRUE(r.ok) << arch << ": " << r.log << "\n" << text;
    }
}

}  // namespace
}  // namespace dc
