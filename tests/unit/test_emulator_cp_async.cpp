// cp.async on the host emulator: the prelude's 16-byte copy (dc_cp_async_f32x4) copies and
// zero-fills like the GPU, and faults where the GPU would (a misaligned address); the kernel
// compiles with NVRTC for the oldest target (the fallback) and the newest (cp.async.cg).
#include <string>
#include <vector>

#include "emulator_testing.h"
#include "nvrtc.h"
#include "testing.h"

namespace dc {
namespace {

using dc::testing::random_tensor;
using namespace dc::emu_testing;  // NOLINT: the helpers are the vocabulary of these tests

// 16-byte cp.async copies into shared memory and back out; thread 3's copy is invalid
// (zero-filled). Shifted by DC_TEST_SHIFT floats, the source is misaligned.
const char* const kCpAsync16 = R"(
#ifndef DC_TEST_SHIFT
#define DC_TEST_SHIFT 0
#endif
extern "C" __global__ void copy16(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ __align__(16) float s[64];
  dc_cp_async_f32x4(&s[threadIdx.x * 4], x + DC_TEST_SHIFT + threadIdx.x * 4, threadIdx.x != 3);
  dc_cp_async_commit();
  dc_cp_async_wait<0>();
  __syncthreads();
  for (int i = 0; i < 4; ++i) y[threadIdx.x * 4 + i] = s[threadIdx.x * 4 + i];
}
DC_EXPORT_KERNEL(copy16)
)";

// 16 threads copy 64 floats of x (68, room for the shift) into y.
GeneratedKernel copy16(const std::string& prefix = "") {
  return make_kernel(prefix + kCpAsync16,
                     {buffer("x", BufferRole::input, {68}), buffer("y", BufferRole::output, {64})},
                     {launch("copy16", {1, 1, 1}, {16, 1, 1}, {0, 1})});
}

TEST(Emulator, CpAsync16BytesCopiesAndZeroFills) {
  const auto k = copy16();
  std::vector<Tensor> bufs = {random_tensor({68}, 11), Tensor()};
  run_ok(k, bufs);
  const std::vector<float> x = floats(bufs[0]), y = floats(bufs[1]);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(y[i], i / 4 == 3 ? 0.f : x[i]) << i;
}

TEST(Emulator, MisalignedCpAsync16BytesIsAFault) {
  const auto k = copy16("#define DC_TEST_SHIFT 1\n");
  std::vector<Tensor> bufs = {random_tensor({68}, 11), Tensor()};
  const EmulatorResult r = emulate(k, bufs, options());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "thread (0,0,0): misaligned 16-byte cp.async"));
}

TEST(Emulator, CpAsync16BytesCompilesWithNvrtc) {
  const std::vector<std::string> archs = supported_archs();
  ASSERT_FALSE(archs.empty());
  for (const std::string& arch : {archs.front(), archs.back()}) {
    const CompileResult r = compile_cuda(cuda_prelude() + kCpAsync16, arch);
    EXPECT_TRUE(r.ok) << arch << ": " << r.log;
  }
}

}  // namespace
}  // namespace dc
