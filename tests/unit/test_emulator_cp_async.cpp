// cp.async on the host emulator: the prelude's 16-byte copy (dc_cp_async_f32x4) and the
// byte-typed copies (dc_cp_async_16/8/4) copy and zero-fill like the GPU, and fault where the
// GPU would (a misaligned address, a destination outside shared memory); the kernels compile
// with NVRTC for the oldest target (the fallback) and the newest (cp.async.cg/.ca).
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

// Byte-typed copies of 16, 8 and 4 bytes into shared memory and back out (256 + 128 + 64 bytes,
// 16 threads); threads 3, 4 and 5 make an invalid (zero-filling) copy of each size in turn.
// DC_TEST_BAD 16/8/4 shifts that size's source by half its width; DC_TEST_BAD 1 copies into
// global memory.
const char* const kCpAsyncBytes = R"(
#ifndef DC_TEST_BAD
#define DC_TEST_BAD 0
#endif
extern "C" __global__ void copy_bytes(const unsigned char* __restrict__ x, unsigned char* __restrict__ y) {
  __shared__ __align__(16) unsigned char s[448];
  const int t = threadIdx.x;
  unsigned char* dst16 = DC_TEST_BAD == 1 ? y + t * 16 : &s[t * 16];
  dc_cp_async_16(dst16, x + t * 16 + (DC_TEST_BAD == 16 ? 8 : 0), t != 3);
  dc_cp_async_8(&s[256 + t * 8], x + 256 + t * 8 + (DC_TEST_BAD == 8 ? 4 : 0), t != 4);
  dc_cp_async_4(&s[384 + t * 4], x + 384 + t * 4 + (DC_TEST_BAD == 4 ? 2 : 0), t != 5);
  dc_cp_async_commit();
  dc_cp_async_wait<0>();
  __syncthreads();
  for (int i = t; i < 448; i += 16) y[i] = s[i];
}
DC_EXPORT_KERNEL(copy_bytes)
)";

EmulatorResult run_copy_bytes(int bad, std::vector<uint8_t>& x, std::vector<uint8_t>& y) {
  x.resize(464);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 7 + 11);  // no zero byte
  const GeneratedKernel k = make_kernel(
      "#define DC_TEST_BAD " + std::to_string(bad) + "\n" + kCpAsyncBytes,
      {buffer("x", BufferRole::input, {464}, DType::u8), buffer("y", BufferRole::output, {448}, DType::u8)},
      {launch("copy_bytes", {1, 1, 1}, {16, 1, 1}, {0, 1})});
  std::vector<Tensor> bufs = {Tensor::from_vector<uint8_t>({464}, x), Tensor()};
  EmulatorResult r = emulate(k, bufs, options());
  if (r.ok) y.assign(bufs[1].data<uint8_t>(), bufs[1].data<uint8_t>() + 448);
  return r;
}

TEST(Emulator, CpAsyncByteCopiesCopyAndZeroFill) {
  std::vector<uint8_t> x, y;
  const EmulatorResult r = run_copy_bytes(0, x, y);
  ASSERT_TRUE(r.ok) << r.error;
  for (int i = 0; i < 448; ++i) {
    const int thread = i < 256 ? i / 16 : i < 384 ? (i - 256) / 8 : (i - 384) / 4;
    const int invalid = i < 256 ? 3 : i < 384 ? 4 : 5;
    EXPECT_EQ(y[static_cast<size_t>(i)], thread == invalid ? 0 : x[static_cast<size_t>(i)]) << i;
  }
}

TEST(Emulator, MisalignedByteCpAsyncIsAFault) {
  for (int bytes : {16, 8, 4}) {
    std::vector<uint8_t> x, y;
    const EmulatorResult r = run_copy_bytes(bytes, x, y);
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(contains(r.error, "thread (0,0,0): misaligned " + std::to_string(bytes) +
                                      "-byte cp.async (dc_cp_async_" + std::to_string(bytes) + ")"));
  }
}

TEST(Emulator, ByteCpAsyncIntoGlobalMemoryIsAFault) {
  std::vector<uint8_t> x, y;
  const EmulatorResult r = run_copy_bytes(1, x, y);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "thread (0,0,0): cp.async (dc_cp_async_16) into"));
  EXPECT_TRUE(contains(r.error, "which is not the block's shared memory"));
}

TEST(Emulator, ByteCpAsyncCompilesWithNvrtc) {
  for (const std::string arch : {"sm_75", "sm_80", "sm_90"}) {
    const CompileResult r = compile_cuda(cuda_prelude() + kCpAsyncBytes, arch);
    EXPECT_TRUE(r.ok) << arch << ": " << r.log;
  }
}

}  // namespace
}  // namespace dc
