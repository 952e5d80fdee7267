// Layout tests of Volta's tensor-core prelude functions (codegen/prelude_mma884.cpp) on the
// host emulator:
// - the fragment tables (dc_mma884_*) against the PTX ISA's "Matrix Fragments for mma.m8n8k4
//   with .f16 floating point type" (row-major A, column-major B, .f32 C/D), written out again
//   here from the ISA's formulas, and each a bijection onto its quad pair's tile;
// - mma.sync m8n8k4 as the templates use it (a warp's 16x16 tile, quad pair q on the 8x8 block
//   dc_mma884_block_row/col): fragments loaded through the tables, D stored through the C
//   table, compared exactly with a scalar product; a kernel in which one lane loads one
//   register from the wrong place must fail, exactly where that register enters D;
// - the kernel compiles for sm_70 (NVRTC 12) to the m8n8k4 instruction.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "emulator_testing.h"
#include "nvrtc.h"

namespace dc {
namespace {

using namespace dc::emu_testing;  // NOLINT: the helpers are the vocabulary of these tests

const char* const kTables = R"(
extern "C" __global__ void tables(int* out) {
  const int lane = threadIdx.x;
  for (int i = 0; i < 8; ++i) {
    int* o = out + (lane * 8 + i) * 8;
    o[0] = dc_mma884_a_row(lane, i & 3); o[1] = dc_mma884_a_col(lane, i & 3);
    o[2] = dc_mma884_b_row(lane, i & 3); o[3] = dc_mma884_b_col(lane, i & 3);
    o[4] = dc_mma884_c_row(lane, i); o[5] = dc_mma884_c_col(lane, i);
    o[6] = dc_mma884_quad_pair(lane); o[7] = 0;
  }
}
DC_EXPORT_KERNEL(tables)
)";

struct Pos {
  int row, col;
};
// The ISA's formulas, element i of lane `lane`'s fragment within its quad pair's matrices.
// A, row major: row = %laneid % 4 if %laneid < 16, (%laneid % 4) + 4 otherwise; col = i.
Pos isa_a(int lane, int i) { return {lane < 16 ? lane % 4 : lane % 4 + 4, i}; }
// B, column major: row = i; col = %laneid % 4 if %laneid < 16, (%laneid % 4) + 4 otherwise.
Pos isa_b(int lane, int i) { return {i, lane < 16 ? lane % 4 : lane % 4 + 4}; }
// C/D, .f32: row = X if %laneid < 16, X + 4 otherwise, X = (%laneid & 0b1) + (i & 0b10);
// col = (i & 0b100) + (%laneid & 0b10) + (i & 0b1).
Pos isa_c(int lane, int i) {
  const int x = (lane & 1) + (i & 2);
  return {lane < 16 ? x : x + 4, (i & 4) + (lane & 2) + (i & 1)};
}
// The quad pairs: MMA computation q + 1 is lanes 4q..4q+3 and 4q+16..4q+19.
int isa_quad_pair(int lane) { return (lane % 16) / 4; }

TEST(EmulatorMma884, FragmentTablesMatchThePtxIsa) {
  const GeneratedKernel k = make_kernel(kTables, {buffer("out", BufferRole::output, {32 * 8 * 8}, DType::i32)},
                                        {launch("tables", {1, 1, 1}, {32, 1, 1}, {0})});
  std::vector<Tensor> bufs(1);
  ASSERT_TRUE(run_ok(k, bufs).ok);
  const int* out = bufs[0].data<int32_t>();
  // Per quad pair, every element of A (8x4), B (4x8) and C (8x8) is held exactly once.
  std::vector<int> seen_a(4 * 32), seen_b(4 * 32), seen_c(4 * 64);
  for (int lane = 0; lane < 32; ++lane) {
    const int q = isa_quad_pair(lane);
    for (int i = 0; i < 8; ++i) {
      const int* o = out + (lane * 8 + i) * 8;
      const auto expect = [&](int at, Pos want, const char* what) {
        EXPECT_EQ(o[at], want.row) << what << " row, lane " << lane << ", element " << i;
        EXPECT_EQ(o[at + 1], want.col) << what << " col, lane " << lane << ", element " << i;
      };
      expect(0, isa_a(lane, i & 3), "A");
      expect(2, isa_b(lane, i & 3), "B");
      expect(4, isa_c(lane, i), "C");
      EXPECT_EQ(o[6], q) << "quad pair of lane " << lane;
      if (i < 4) ++seen_a[q * 32 + o[0] * 4 + o[1]], ++seen_b[q * 32 + o[2] * 8 + o[3]];
      ++seen_c[q * 64 + o[4] * 8 + o[5]];
    }
  }
  for (const auto* seen : {&seen_a, &seen_b, &seen_c})
    for (size_t e = 0; e < seen->size(); ++e) EXPECT_EQ((*seen)[e], 1) << "element " << e;
}

// Two warps, each D = A*B + C over its own 16x16 tile: A (16 x 8), B (8 x 16), C, D (16 x 16),
// row-major floats; two m8n8k4 steps. DC_PERMUTE_OPERAND (1 A, 2 B, 3 D) makes lane
// DC_PERMUTE_LANE load its register 1 (store acc[1]) one row off.
const char* const kMmaTest = R"(
#ifndef DC_PERMUTE_OPERAND
#define DC_PERMUTE_OPERAND 0
#define DC_PERMUTE_LANE -1
#endif
#define DC_K 8
__device__ int dc_test_flip(int lane, int operand, int reg) {
  return lane == DC_PERMUTE_LANE && operand == DC_PERMUTE_OPERAND && reg == 1 ? 1 : 0;
}
extern "C" __global__ void mma884_test(const float* __restrict__ A, const float* __restrict__ B,
                                       const float* __restrict__ C, float* __restrict__ D) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  A += warp * 16 * DC_K;
  B += warp * DC_K * 16;
  C += warp * 256;
  D += warp * 256;
  const int r0 = dc_mma884_block_row(lane), c0 = dc_mma884_block_col(lane);
  float acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = C[(r0 + dc_mma884_c_row(lane, i)) * 16 + c0 + dc_mma884_c_col(lane, i)];
  for (int k0 = 0; k0 < DC_K; k0 += 4) {
    unsigned a[2], b[2];
    for (int r = 0; r < 2; ++r) {
      const int f = dc_test_flip(lane, 1, r);
      const float lo = A[(r0 + (dc_mma884_a_row(lane, 2 * r) ^ f)) * DC_K + k0 + dc_mma884_a_col(lane, 2 * r)];
      const float hi = A[(r0 + (dc_mma884_a_row(lane, 2 * r + 1) ^ f)) * DC_K + k0 + dc_mma884_a_col(lane, 2 * r + 1)];
      a[r] = dc_pack_f16x2(lo, hi);
    }
    for (int r = 0; r < 2; ++r) {
      const int f = dc_test_flip(lane, 2, r);
      const float lo = B[(k0 + (dc_mma884_b_row(lane, 2 * r) ^ f)) * 16 + c0 + dc_mma884_b_col(lane, 2 * r)];
      const float hi = B[(k0 + (dc_mma884_b_row(lane, 2 * r + 1) ^ f)) * 16 + c0 + dc_mma884_b_col(lane, 2 * r + 1)];
      b[r] = dc_pack_f16x2(lo, hi);
    }
    dc_mma_m8n8k4_f16(acc, a, b);
  }
  for (int i = 0; i < 8; ++i)
    D[(r0 + (dc_mma884_c_row(lane, i) ^ dc_test_flip(lane, 3, i))) * 16 + c0 + dc_mma884_c_col(lane, i)] = acc[i];
}
DC_EXPORT_KERNEL(mma884_test)
)";

constexpr int kK = 8;

std::string mma_source(int permute_operand = 0, int permute_lane = 5) {
  std::string s;
  if (permute_operand != 0)
    s += "#define DC_PERMUTE_OPERAND " + std::to_string(permute_operand) + "\n#define DC_PERMUTE_LANE " +
         std::to_string(permute_lane) + "\n";
  return s + kMmaTest;
}

GeneratedKernel mma_kernel(int permute_operand = 0) {
  return make_kernel(mma_source(permute_operand),
                     {buffer("A", BufferRole::input, {2, 16, kK}), buffer("B", BufferRole::input, {2, kK, 16}),
                      buffer("C", BufferRole::input, {2, 16, 16}), buffer("D", BufferRole::output, {2, 16, 16})},
                     {launch("mma884_test", {1, 1, 1}, {64, 1, 1}, {0, 1, 2, 3})});
}

// n distinct integers in [lo, lo + n), shuffled by a stride coprime with n.
std::vector<float> distinct(int n, int lo, int stride) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(lo + (i * stride) % n);
  return v;
}

struct MmaRun {
  std::vector<float> A, B, C, D;
};

// Distinct small integers: exact in f16, products and sums exact in fp32.
MmaRun run_mma(int permute_operand = 0) {
  MmaRun r;
  for (int w = 0; w < 2; ++w) {
    const auto a = distinct(16 * kK, -64, 37 + 2 * w), b = distinct(16 * kK, -64, 29 + 2 * w),
               c = distinct(256, -1000 + 500 * w, 45);
    r.A.insert(r.A.end(), a.begin(), a.end());
    r.B.insert(r.B.end(), b.begin(), b.end());
    r.C.insert(r.C.end(), c.begin(), c.end());
  }
  std::vector<Tensor> bufs = {Tensor::from_vector<float>({2, 16, kK}, r.A), Tensor::from_vector<float>({2, kK, 16}, r.B),
                              Tensor::from_vector<float>({2, 16, 16}, r.C), Tensor()};
  run_ok(mma_kernel(permute_operand), bufs);
  r.D = floats(bufs[3]);
  return r;
}

// (warp, row, col) of every element of D that differs from the scalar product.
std::vector<std::array<int, 3>> mismatches(const MmaRun& r) {
  std::vector<std::array<int, 3>> out;
  for (int w = 0; w < 2; ++w)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        double want = r.C[static_cast<size_t>((w * 16 + i) * 16 + j)];
        for (int k = 0; k < kK; ++k)
          want += static_cast<double>(r.A[static_cast<size_t>((w * 16 + i) * kK + k)]) *
                  r.B[static_cast<size_t>((w * kK + k) * 16 + j)];
        if (!(r.D[static_cast<size_t>((w * 16 + i) * 16 + j)] == static_cast<float>(want))) out.push_back({w, i, j});
      }
  return out;
}

TEST(EmulatorMma884, EqualsTheScalarProduct) {
  const auto bad = mismatches(run_mma());
  EXPECT_TRUE(bad.empty()) << bad.size() << " elements differ, first (warp, row, col) = (" << bad[0][0] << ", "
                           << bad[0][1] << ", " << bad[0][2] << ")";
}

// Lane 5 is thread 1 of quad pair 1, whose block is rows 8-15, cols 0-7.
TEST(EmulatorMma884, FailsWhenOneLaneLoadsAWrongElement) {
  // Its A register 1 holds row 8 + 1 = 9, k 2-3, read from row 8: only D's row 9 (block cols) changes.
  const auto bad_a = mismatches(run_mma(1));
  EXPECT_FALSE(bad_a.empty());
  for (const auto& [w, row, col] : bad_a) EXPECT_TRUE(row == 9 && col < 8) << w << "," << row << "," << col;
  // Its B register 1 holds column 1, k 2-3, read swapped (k 3, 2): column 1 of rows 8-15 changes.
  const auto bad_b = mismatches(run_mma(2));
  EXPECT_FALSE(bad_b.empty());
  for (const auto& [w, row, col] : bad_b) EXPECT_TRUE(col == 1 && row >= 8) << w << "," << row << "," << col;
  // Its acc[1] is (row 9, col 1), stored to row 8: (9, 1) is never written (still poisoned).
  const auto bad_d = mismatches(run_mma(3));
  for (int w = 0; w < 2; ++w)
    EXPECT_NE(std::find(bad_d.begin(), bad_d.end(), std::array<int, 3>{w, 9, 1}), bad_d.end()) << w;
  for (const auto& [w, row, col] : bad_d) EXPECT_TRUE(col == 1 && (row == 8 || row == 9)) << w << "," << row;
}

// C first, then the products k = 0, 1, ... each rounded to fp32: with C = 2^24 and products of
// 1, every addition rounds back to 2^24.
TEST(EmulatorMma884, AccumulatesFromCInKOrder) {
  std::vector<Tensor> bufs = {Tensor::from_vector<float>({2, 16, kK}, std::vector<float>(2 * 16 * kK, 1.f)),
                              Tensor::from_vector<float>({2, kK, 16}, std::vector<float>(2 * 16 * kK, 1.f)),
                              Tensor::from_vector<float>({2, 16, 16}, std::vector<float>(512, 16777216.f)), Tensor()};
  run_ok(mma_kernel(), bufs);
  for (float d : floats(bufs[3])) EXPECT_EQ(d, 16777216.f);
}

// sm_70 compiles it with NVRTC 12 to the instruction itself; sm_80 compiles the trap.
TEST(EmulatorMma884, CompilesForSm70ToTheM8n8k4Instruction) {
  CompileOptions o;
  o.keep_ptx = true;
  const CompileResult r = compile_cuda(cuda_prelude() + mma_source(), "sm_70", o);
  ASSERT_TRUE(r.ok) << r.log;
  EXPECT_EQ(r.nvrtc_version.substr(0, 3), "12.");
  EXPECT_NE(r.ptx.find("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32"), std::string::npos);
  const CompileResult a100 = compile_cuda(cuda_prelude() + mma_source(), "sm_80", o);
  ASSERT_TRUE(a100.ok) << a100.log;
  EXPECT_EQ(a100.ptx.find("m8n8k4"), std::string::npos);
}

}  // namespace
}  // namespace dc
