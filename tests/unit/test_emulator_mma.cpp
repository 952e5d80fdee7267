// Layout tests of the tensor-core prelude functions on the host emulator (issue 11):
// - the fragment tables (dc_mma_*_row/col, dc_ldmatrix_row/col) against the PTX ISA's, written
//   out again here from the ISA's formulas;
// - mma.sync per shape: fragments loaded from global memory through the tables, D stored
//   through the C table, compared exactly with a scalar product (values whose products and
//   sums are exact); a kernel that loads one element of one lane from the wrong place must
//   fail (the tests can fail);
// - ldmatrix x1/x2/x4 and .trans against the documented element map with distinct values;
// - faults: a misaligned or non-shared ldmatrix row, a missing lane, a partial warp, lanes
//   that diverge into different instructions or collectives.
// Every kernel also compiles with NVRTC for sm_80 and sm_90.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "emulator_testing.h"
#include "nvrtc.h"

namespace dc {
namespace {

using namespace dc::emu_testing;  // NOLINT: the helpers are the vocabulary of these tests

// ---- the tables against the PTX ISA ---------------------------------------------------------

// Writes every table entry: 32 lanes x 8 elements x 13 tables x (row, col).
const char* const kTables = R"(
extern "C" __global__ void tables(int* out) {
  const int lane = threadIdx.x;
  for (int i = 0; i < 8; ++i) {
    int* o = out + (lane * 8 + i) * 26;
    o[0] = dc_mma_f16_a_row(lane, i); o[1] = dc_mma_f16_a_col(lane, i);
    o[2] = dc_mma_f16_b_row(lane, i & 3); o[3] = dc_mma_f16_b_col(lane, i & 3);
    o[4] = dc_mma_tf32_a_row(lane, i & 3); o[5] = dc_mma_tf32_a_col(lane, i & 3);
    o[6] = dc_mma_tf32_b_row(lane, i & 1); o[7] = dc_mma_tf32_b_col(lane, i & 1);
    o[8] = dc_mma_c_row(lane, i & 3); o[9] = dc_mma_c_col(lane, i & 3);
    o[10] = dc_ldmatrix_row(lane, i & 1, false); o[11] = dc_ldmatrix_col(lane, i & 1, false);
    o[12] = dc_ldmatrix_row(lane, i & 1, true); o[13] = dc_ldmatrix_col(lane, i & 1, true);
    for (int k = 14; k < 26; ++k) o[k] = 0;
  }
}
DC_EXPORT_KERNEL(tables)
)";

// The PTX ISA's formulas ("Matrix fragments for mma.m16n8k16 with floating point type",
// "... mma.m16n8k8 ... .tf32", "ldmatrix"), element i of the fragment's halves/values.
struct Pos {
  int row, col;
};
Pos isa_f16_a(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {(i < 2 || (i >= 4 && i < 6)) ? g : g + 8, t * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}
Pos isa_f16_b(int lane, int i) { return {(lane & 3) * 2 + (i & 1) + (i >= 2 ? 8 : 0), lane >> 2}; }
Pos isa_tf32_a(int lane, int i) {
  return {(i == 0 || i == 2) ? lane >> 2 : (lane >> 2) + 8, i < 2 ? lane & 3 : (lane & 3) + 4};
}
Pos isa_tf32_b(int lane, int i) { return {i == 0 ? lane & 3 : (lane & 3) + 4, lane >> 2}; }
Pos isa_c(int lane, int i) { return {i < 2 ? lane >> 2 : (lane >> 2) + 8, (lane & 3) * 2 + (i & 1)}; }
// ldmatrix: "each thread receives ... row lane/4, elements 2*(lane%4) and +1"; .trans the transpose.
Pos isa_ldmatrix(int lane, int e, bool trans) {
  const Pos p{lane >> 2, (lane & 3) * 2 + e};
  return trans ? Pos{p.col, p.row} : p;
}

TEST(EmulatorMma, FragmentTablesMatchThePtxIsa) {
  const GeneratedKernel k = make_kernel(kTables, {buffer("out", BufferRole::output, {32 * 8 * 26}, DType::i32)},
                                        {launch("tables", {1, 1, 1}, {32, 1, 1}, {0})});
  std::vector<Tensor> bufs(1);
  ASSERT_TRUE(run_ok(k, bufs).ok);
  const int* out = bufs[0].data<int32_t>();
  // Each operand's table is also a bijection onto its tile (every element held exactly once).
  std::vector<int> seen_a(256), seen_b(128), seen_ta(128), seen_tb(64), seen_c(128);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const int* o = out + (lane * 8 + i) * 26;
      const auto expect = [&](int at, Pos want, const char* what) {
        EXPECT_EQ(o[at], want.row) << what << " row, lane " << lane << ", element " << i;
        EXPECT_EQ(o[at + 1], want.col) << what << " col, lane " << lane << ", element " << i;
      };
      expect(0, isa_f16_a(lane, i), "f16 A");
      expect(2, isa_f16_b(lane, i & 3), "f16 B");
      expect(4, isa_tf32_a(lane, i & 3), "tf32 A");
      expect(6, isa_tf32_b(lane, i & 1), "tf32 B");
      expect(8, isa_c(lane, i & 3), "C");
      expect(10, isa_ldmatrix(lane, i & 1, false), "ldmatrix");
      expect(12, isa_ldmatrix(lane, i & 1, true), "ldmatrix.trans");
      ++seen_a[o[0] * 16 + o[1]];
      if (i < 4) ++seen_b[o[2] * 8 + o[3]], ++seen_ta[o[4] * 8 + o[5]], ++seen_c[o[8] * 8 + o[9]];
      if (i < 2) ++seen_tb[o[6] * 8 + o[7]];
    }
  }
  for (const auto* seen : {&seen_a, &seen_b, &seen_ta, &seen_tb, &seen_c})
    for (size_t e = 0; e < seen->size(); ++e) EXPECT_EQ((*seen)[e], 1) << "element " << e;
}

// ---- mma.sync -----------------------------------------------------------------------------------

// Two warps, each multiplies its own tile: D = A*B + C with A (16 x K), B (K x 8), C, D (16 x 8),
// all row-major floats in global memory. DC_TEST_TYPE: 0 f16, 1 bf16, 2 tf32 (whose registers
// carry junk in the 13 bits the hardware ignores). DC_PERMUTE_OPERAND (1 A, 2 B, 3 D) makes lane
// DC_PERMUTE_LANE load its register 1 (store acc[1]) one row off: a deliberately wrong mapping.
const char* const kMmaTest = R"(
#ifndef DC_PERMUTE_OPERAND
#define DC_PERMUTE_OPERAND 0
#define DC_PERMUTE_LANE -1
#endif
#if DC_TEST_TYPE == 2
#define DC_K 8
#else
#define DC_K 16
#endif
__device__ int dc_test_flip(int lane, int operand, int reg) {
  return lane == DC_PERMUTE_LANE && operand == DC_PERMUTE_OPERAND && reg == 1 ? 1 : 0;
}
extern "C" __global__ void mma_test(const float* __restrict__ A, const float* __restrict__ B,
                                    const float* __restrict__ C, float* __restrict__ D) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  A += warp * 16 * DC_K;
  B += warp * DC_K * 8;
  C += warp * 16 * 8;
  D += warp * 16 * 8;
  unsigned a[4], b[2];
  float acc[4];
  for (int r = 0; r < 4; ++r) {
    const int f = dc_test_flip(lane, 1, r);
#if DC_TEST_TYPE == 2
    a[r] = __float_as_uint(A[(dc_mma_tf32_a_row(lane, r) ^ f) * DC_K + dc_mma_tf32_a_col(lane, r)]) |
           ((lane * 131u + r * 17u) & 0x1fffu);
#else
    const float lo = A[(dc_mma_f16_a_row(lane, 2 * r) ^ f) * DC_K + dc_mma_f16_a_col(lane, 2 * r)];
    const float hi = A[(dc_mma_f16_a_row(lane, 2 * r + 1) ^ f) * DC_K + dc_mma_f16_a_col(lane, 2 * r + 1)];
    a[r] = DC_TEST_TYPE == 0 ? dc_pack_f16x2(lo, hi) : dc_pack_bf16x2(lo, hi);
#endif
  }
  for (int r = 0; r < 2; ++r) {
    const int f = dc_test_flip(lane, 2, r);
#if DC_TEST_TYPE == 2
    b[r] = __float_as_uint(B[(dc_mma_tf32_b_row(lane, r) ^ f) * 8 + dc_mma_tf32_b_col(lane, r)]) |
           ((lane * 71u + r * 29u) & 0x1fffu);
#else
    const float lo = B[(dc_mma_f16_b_row(lane, 2 * r) ^ f) * 8 + dc_mma_f16_b_col(lane, 2 * r)];
    const float hi = B[(dc_mma_f16_b_row(lane, 2 * r + 1) ^ f) * 8 + dc_mma_f16_b_col(lane, 2 * r + 1)];
    b[r] = DC_TEST_TYPE == 0 ? dc_pack_f16x2(lo, hi) : dc_pack_bf16x2(lo, hi);
#endif
  }
  for (int i = 0; i < 4; ++i) acc[i] = C[dc_mma_c_row(lane, i) * 8 + dc_mma_c_col(lane, i)];
#if DC_TEST_TYPE == 0
  dc_mma_m16n8k16_f16(acc, a, b);
#elif DC_TEST_TYPE == 1
  dc_mma_m16n8k16_bf16(acc, a, b);
#else
  dc_mma_m16n8k8_tf32(acc, a, b);
#endif
  for (int i = 0; i < 4; ++i)
    D[(dc_mma_c_row(lane, i) ^ dc_test_flip(lane, 3, i)) * 8 + dc_mma_c_col(lane, i)] = acc[i];
}
DC_EXPORT_KERNEL(mma_test)
)";

struct MmaCase {
  const char* name;
  int type;  // DC_TEST_TYPE
  int k;
};
const MmaCase kF16{"f16", 0, 16}, kBf16{"bf16", 1, 16}, kTf32{"tf32", 2, 8};
void PrintTo(const MmaCase& c, std::ostream* os) { *os << c.name; }

std::string mma_source(const MmaCase& c, int permute_operand = 0, int permute_lane = 5) {
  std::string s = "#define DC_TEST_TYPE " + std::to_string(c.type) + "\n";
  if (permute_operand != 0)
    s += "#define DC_PERMUTE_OPERAND " + std::to_string(permute_operand) + "\n#define DC_PERMUTE_LANE " +
         std::to_string(permute_lane) + "\n";
  return s + kMmaTest;
}

GeneratedKernel mma_kernel(const MmaCase& c, int permute_operand = 0) {
  return make_kernel(mma_source(c, permute_operand),
                     {buffer("A", BufferRole::input, {2, 16, c.k}), buffer("B", BufferRole::input, {2, c.k, 8}),
                      buffer("C", BufferRole::input, {2, 16, 8}), buffer("D", BufferRole::output, {2, 16, 8})},
                     {launch("mma_test", {1, 1, 1}, {64, 1, 1}, {0, 1, 2, 3})});
}

// n distinct integers in [lo, lo + n), shuffled by a fixed stride (coprime with n).
std::vector<float> distinct(int n, int lo, int stride) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(lo + (i * stride) % n);
  return v;
}

struct MmaRun {
  std::vector<float> A, B, C, D;
};

// Runs the kernel on distinct small integers (exact in every operand type; products and the
// K-term sums are exact in fp32) and returns inputs and output.
MmaRun run_mma(const MmaCase& c, int permute_operand = 0) {
  MmaRun r;
  // Per warp: A 16*K values, B K*8, C 128; the second warp gets other values.
  for (int w = 0; w < 2; ++w) {
    const auto a = distinct(16 * c.k, -(8 * c.k), 37 + 2 * w), b = distinct(8 * c.k, -(4 * c.k), 29 + 2 * w),
               cc = distinct(128, -1000 + 500 * w, 45);
    r.A.insert(r.A.end(), a.begin(), a.end());
    r.B.insert(r.B.end(), b.begin(), b.end());
    r.C.insert(r.C.end(), cc.begin(), cc.end());
  }
  std::vector<Tensor> bufs = {Tensor::from_vector<float>({2, 16, c.k}, r.A),
                              Tensor::from_vector<float>({2, c.k, 8}, r.B),
                              Tensor::from_vector<float>({2, 16, 8}, r.C), Tensor()};
  run_ok(mma_kernel(c, permute_operand), bufs);
  r.D = floats(bufs[3]);
  return r;
}

// (warp, row, col) of every element of D that differs from the scalar product.
std::vector<std::array<int, 3>> mismatches(const MmaCase& c, const MmaRun& r) {
  std::vector<std::array<int, 3>> out;
  for (int w = 0; w < 2; ++w)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; ++j) {
        double want = r.C[static_cast<size_t>((w * 16 + i) * 8 + j)];
        for (int k = 0; k < c.k; ++k)
          want += static_cast<double>(r.A[static_cast<size_t>((w * 16 + i) * c.k + k)]) *
                  r.B[static_cast<size_t>((w * c.k + k) * 8 + j)];
        const float got = r.D[static_cast<size_t>((w * 16 + i) * 8 + j)];
        if (!(got == static_cast<float>(want))) out.push_back({w, i, j});
      }
  return out;
}

class EmulatorMmaShape : public ::testing::TestWithParam<MmaCase> {};

TEST_P(EmulatorMmaShape, EqualsTheScalarProduct) {
  const MmaCase c = GetParam();
  const MmaRun r = run_mma(c);
  const auto bad = mismatches(c, r);
  EXPECT_TRUE(bad.empty()) << bad.size() << " elements differ, first (warp, row, col) = (" << bad[0][0] << ", "
                           << bad[0][1] << ", " << bad[0][2] << ")";
}

// The same test against a kernel whose lane 5 loads one register from the wrong row: it must
// fail, exactly where that register's elements enter D.
TEST_P(EmulatorMmaShape, FailsWhenOneLaneLoadsAWrongElement) {
  const MmaCase c = GetParam();
  // Lane 5: g = 1, t = 1. Its A register 1 holds row g+8 = 9 (f16/bf16 cols 2-3; tf32 col 1),
  // read from row 8 instead: only D's row 9 changes, in both warps.
  const auto bad_a = mismatches(c, run_mma(c, 1));
  EXPECT_FALSE(bad_a.empty());
  for (const auto& [w, row, col] : bad_a) EXPECT_EQ(row, 9) << w << "," << col;
  // Its B register 1 holds column n = g = 1 (k 10-11 resp. k 5), read from k^1: column 1 changes.
  const auto bad_b = mismatches(c, run_mma(c, 2));
  EXPECT_FALSE(bad_b.empty());
  for (const auto& [w, row, col] : bad_b) EXPECT_EQ(col, 1) << w << "," << row;
  // Its acc[1] (row 1, col 3) stored to row 0: (1, 3) is never written (still poisoned), and
  // (0, 3), which lane 1 writes too, holds the wrong value if lane 5 stores last.
  const auto bad_d = mismatches(c, run_mma(c, 3));
  for (int w = 0; w < 2; ++w)
    EXPECT_NE(std::find(bad_d.begin(), bad_d.end(), std::array<int, 3>{w, 1, 3}), bad_d.end()) << w;
  for (const auto& [w, row, col] : bad_d) EXPECT_TRUE(col == 3 && row <= 1) << w << "," << row << "," << col;
}

TEST_P(EmulatorMmaShape, CompilesWithNvrtc) {
  const MmaCase c = GetParam();
  for (const std::string arch : {"sm_75", "sm_80", "sm_90"}) {
    const CompileResult r = compile_cuda(cuda_prelude() + mma_source(c), arch);
    EXPECT_TRUE(r.ok) << arch << ": " << r.log;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatorMmaShape, ::testing::Values(kF16, kBf16, kTf32),
                         [](const ::testing::TestParamInfo<MmaCase>& p) { return std::string(p.param.name); });

// The documented accumulation order: C first, then the products k = 0, 1, ... each rounded to
// fp32. With C = 2^24 and sixteen products of 1, each addition rounds back to 2^24 (a sum of
// the products first would give 2^24 + 16).
TEST(EmulatorMma, AccumulatesFromCInKOrder) {
  std::vector<Tensor> bufs = {Tensor::from_vector<float>({2, 16, 16}, std::vector<float>(512, 1.f)),
                              Tensor::from_vector<float>({2, 16, 8}, std::vector<float>(256, 1.f)),
                              Tensor::from_vector<float>({2, 16, 8}, std::vector<float>(256, 16777216.f)), Tensor()};
  run_ok(mma_kernel(kF16), bufs);
  for (float d : floats(bufs[3])) EXPECT_EQ(d, 16777216.f);
}

// ---- ldmatrix -----------------------------------------------------------------------------------

// The 32 rows (matrix j = row / 8) of 8 distinct 16-bit values, M[row * 8 + c], lie in shared
// memory at scrambled 16-byte slots; lane l passes the address of row DC_ROW_OF(l). Each of the
// six forms writes its registers (0xdeadbeef where it has none) to out[form][lane][0..3]. The
// lanes whose addresses x1 and x2 ignore pass global and misaligned addresses.
const char* const kLdmatrix = R"(
#ifndef DC_ROW_OF
#define DC_ROW_OF(lane) (lane)
#endif
extern "C" __global__ void ldm(const unsigned short* __restrict__ M, unsigned* __restrict__ out) {
  __shared__ __align__(16) unsigned short s[40 * 8];
  const int lane = threadIdx.x;
  const int slot = (lane * 7 + 3) % 40;
  for (int c = 0; c < 8; ++c) s[slot * 8 + c] = M[lane * 8 + c];
  __syncwarp();
  const unsigned short* row = &s[((DC_ROW_OF(lane)) * 7 + 3) % 40 * 8];
  const void* ignored = lane % 2 ? static_cast<const void*>(M) : static_cast<const void*>(M + 1);
  unsigned r[6][4];
  for (int v = 0; v < 6; ++v)
    for (int j = 0; j < 4; ++j) r[v][j] = 0xdeadbeefu;
  dc_ldmatrix_x1(r[0], lane < 8 ? static_cast<const void*>(row) : ignored);
  dc_ldmatrix_x2(r[1], lane < 16 ? static_cast<const void*>(row) : ignored);
  dc_ldmatrix_x4(r[2], row);
  dc_ldmatrix_x1_trans(r[3], lane < 8 ? static_cast<const void*>(row) : ignored);
  dc_ldmatrix_x2_trans(r[4], lane < 16 ? static_cast<const void*>(row) : ignored);
  dc_ldmatrix_x4_trans(r[5], row);
  for (int v = 0; v < 6; ++v)
    for (int j = 0; j < 4; ++j) out[(v * 32 + lane) * 4 + j] = r[v][j];
}
DC_EXPORT_KERNEL(ldm)
)";

uint16_t ldm_value(int row, int col) { return static_cast<uint16_t>(((row * 8 + col) * 37 + 1000) & 0xffff); }

// (form, lane, register) of every register that differs from the documented element map.
std::vector<std::array<int, 3>> ldmatrix_mismatches(const std::string& prefix) {
  std::vector<uint16_t> m(256);
  for (int row = 0; row < 32; ++row)
    for (int c = 0; c < 8; ++c) m[static_cast<size_t>(row * 8 + c)] = ldm_value(row, c);
  const GeneratedKernel k = make_kernel(
      prefix + kLdmatrix,
      {buffer("M", BufferRole::input, {256}, DType::u16), buffer("out", BufferRole::output, {6 * 32 * 4}, DType::u32)},
      {launch("ldm", {1, 1, 1}, {32, 1, 1}, {0, 1})});
  std::vector<Tensor> bufs = {Tensor::from_vector<uint16_t>({256}, m), Tensor()};
  std::vector<std::array<int, 3>> bad;
  if (!run_ok(k, bufs).ok) return {{-1, -1, -1}};
  const uint32_t* out = bufs[1].data<uint32_t>();
  const int num[6] = {1, 2, 4, 1, 2, 4};
  for (int v = 0; v < 6; ++v)
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < 4; ++j) {
        uint32_t want = 0xdeadbeefu;
        if (j < num[v]) {
          const Pos lo = isa_ldmatrix(lane, 0, v >= 3), hi = isa_ldmatrix(lane, 1, v >= 3);
          want = ldm_value(8 * j + lo.row, lo.col) | static_cast<uint32_t>(ldm_value(8 * j + hi.row, hi.col)) << 16;
        }
        if (out[(v * 32 + lane) * 4 + j] != want) bad.push_back({v, lane, j});
      }
  return bad;
}

TEST(EmulatorMma, LdmatrixFollowsTheDocumentedElementMap) {
  const auto bad = ldmatrix_mismatches("");
  EXPECT_TRUE(bad.empty()) << bad.size() << " registers differ, first (form, lane, register) = (" << bad[0][0]
                           << ", " << bad[0][1] << ", " << bad[0][2] << ")";
}

// Lanes 5 and 6 swap their row addresses (rows 5 and 6 of matrix 0): the test must fail, and
// only in matrix 0's registers.
TEST(EmulatorMma, LdmatrixTestFailsWhenTwoRowsAreSwapped) {
  const auto bad = ldmatrix_mismatches("#define DC_ROW_OF(lane) ((lane) == 5 ? 6 : (lane) == 6 ? 5 : (lane))\n");
  EXPECT_GE(bad.size(), 6u * 8u);  // every form, 8 lanes' register 0 (rows or columns 5 and 6)
  for (const auto& [v, lane, j] : bad) EXPECT_EQ(j, 0) << "form " << v << ", lane " << lane;
}

TEST(EmulatorMma, LdmatrixCompilesWithNvrtc) {
  for (const std::string arch : {"sm_75", "sm_80", "sm_90"}) {
    const CompileResult r = compile_cuda(cuda_prelude() + kLdmatrix, arch);
    EXPECT_TRUE(r.ok) << arch << ": " << r.log;
  }
}

// ---- faults -------------------------------------------------------------------------------------

// ldmatrix.x4 from shared memory (static, or dynamic with DC_DYNAMIC), with DC_FAULT: 1 lane 3's
// row misaligned by 2 bytes, 2 lane 3's row in global memory, 3 (dynamic) lane 3's row just past
// the end of the dynamic shared memory, 4 lanes 16-31 execute ldmatrix.x4.trans instead.
const char* const kLdmatrixFault = R"(
extern "C" __global__ void ldm_fault(const unsigned short* __restrict__ M, unsigned* __restrict__ out) {
#ifdef DC_DYNAMIC
  DC_DYNAMIC_SMEM(unsigned short, s);
#else
  __shared__ __align__(16) unsigned short s[32 * 8];
#endif
  const int lane = threadIdx.x;
  for (int c = 0; c < 8; ++c) s[lane * 8 + c] = M[lane * 8 + c];
  __syncwarp();
  const unsigned short* row = &s[lane * 8];
#if DC_FAULT == 1
  if (lane == 3) row += 1;
#elif DC_FAULT == 2
  if (lane == 3) row = M + 3 * 8;
#elif DC_FAULT == 3
  if (lane == 3) row = s + 32 * 8;
#endif
  unsigned r[4];
#if DC_FAULT == 4
  if (lane >= 16) dc_ldmatrix_x4_trans(r, row); else
#endif
  dc_ldmatrix_x4(r, row);
  for (int j = 0; j < 4; ++j) out[lane * 4 + j] = r[j];
}
DC_EXPORT_KERNEL(ldm_fault)
)";

EmulatorResult run_ldmatrix_fault(int fault, bool dynamic) {
  const std::string prefix = "#define DC_FAULT " + std::to_string(fault) + "\n" + (dynamic ? "#define DC_DYNAMIC\n" : "");
  const GeneratedKernel k = make_kernel(
      prefix + kLdmatrixFault,
      {buffer("M", BufferRole::input, {256}, DType::u16), buffer("out", BufferRole::output, {128}, DType::u32)},
      {launch("ldm_fault", {1, 1, 1}, {32, 1, 1}, {0, 1}, dynamic ? 512 : 0)});
  std::vector<uint16_t> m(256);
  for (int i = 0; i < 256; ++i) m[static_cast<size_t>(i)] = static_cast<uint16_t>(i * 3 + 1);
  std::vector<Tensor> bufs = {Tensor::from_vector<uint16_t>({256}, m), Tensor()};
  EmulatorResult r = emulate(k, bufs, options());
  if (r.ok) {  // lane 0's register 0: row 0, elements 0-1; lane 31's register 3: row 31, elements 6-7
    const uint32_t* out = bufs[1].data<uint32_t>();
    EXPECT_EQ(out[0], 1u | (4u << 16));
    EXPECT_EQ(out[4 * 31 + 3], 763u | (766u << 16));
  }
  return r;
}

TEST(EmulatorMma, LdmatrixReadsStaticAndDynamicSharedMemory) {
  EXPECT_TRUE(run_ldmatrix_fault(0, false).ok);
  const EmulatorResult r = run_ldmatrix_fault(0, true);
  EXPECT_TRUE(r.ok) << r.error;
}

TEST(EmulatorMma, LdmatrixMisalignedRowIsAFault) {
  for (bool dynamic : {false, true}) {
    const EmulatorResult r = run_ldmatrix_fault(1, dynamic);
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(contains(r.error, "thread (3,0,0): ldmatrix.sync.aligned.m8n8.x4.shared.b16 (dc_ldmatrix_x4): row address"));
    EXPECT_TRUE(contains(r.error, "of lane 3 is not 16-byte aligned"));
  }
}

TEST(EmulatorMma, LdmatrixRowOutsideSharedMemoryIsAFault) {
  const EmulatorResult global = run_ldmatrix_fault(2, false);
  EXPECT_FALSE(global.ok);
  EXPECT_TRUE(contains(global.error, "thread (3,0,0)"));
  EXPECT_TRUE(contains(global.error, "of lane 3 is not in the block's shared memory"));
  const EmulatorResult past_end = run_ldmatrix_fault(3, true);
  EXPECT_FALSE(past_end.ok);
  EXPECT_TRUE(contains(past_end.error, "of lane 3 is not in the block's shared memory"));
}

TEST(EmulatorMma, LdmatrixLanesInDifferentFormsAreAnError) {
  const EmulatorResult r = run_ldmatrix_fault(4, false);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "met in different warp collectives (ldmatrix.sync.aligned.m8n8.x4"));
  EXPECT_TRUE(contains(r.error, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 (dc_ldmatrix_x4_trans)"));
}

// mma.sync with DC_WARP_FAULT: 1 lane 5 returns first; 2 lanes 16-31 execute the bf16 mma;
// 3 lanes 16-31 are in __shfl_sync over the full mask meanwhile; 4 lanes 16-31 sync among
// themselves (__shfl_sync with mask 0xffff0000) and leave; 5 (48 threads) a partial last warp.
const char* const kWarpFault = R"(
extern "C" __global__ void warp_fault(float* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const unsigned a[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u}, b[2] = {0x3c003c00u, 0x3c003c00u};
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
#if DC_WARP_FAULT == 1
  if (lane == 5) return;
#endif
#if DC_WARP_FAULT == 2
  if (lane >= 16) dc_mma_m16n8k16_bf16(acc, a, b); else
#elif DC_WARP_FAULT == 3
  if (lane >= 16) acc[0] = __shfl_sync(0xffffffffu, acc[0], 0); else
#elif DC_WARP_FAULT == 4
  if (lane >= 16) acc[0] = __shfl_sync(0xffff0000u, acc[0], 16); else
#endif
  dc_mma_m16n8k16_f16(acc, a, b);
  out[threadIdx.x] = acc[0];
}
DC_EXPORT_KERNEL(warp_fault)
)";

EmulatorResult run_warp_fault(int fault) {
  const GeneratedKernel k = make_kernel("#define DC_WARP_FAULT " + std::to_string(fault) + "\n" + kWarpFault,
                                        {buffer("out", BufferRole::output, {64})},
                                        {launch("warp_fault", {1, 1, 1}, {fault == 5 ? 48 : 64, 1, 1}, {0})});
  std::vector<Tensor> bufs(1);
  EmulatorResult r = emulate(k, bufs, options());
  if (fault == 0 && r.ok) {
    for (float v : floats(bufs[0])) EXPECT_EQ(v, 16.f);  // sixteen products 1 * 1
  }
  return r;
}

TEST(EmulatorMma, WarpWithEveryLaneRuns) { EXPECT_TRUE(run_warp_fault(0).ok); }

TEST(EmulatorMma, MissingLaneIsAnError) {
  const EmulatorResult r = run_warp_fault(1);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "warp 0: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (dc_mma_m16n8k16_f16) "
                                "needs all 32 lanes of the warp, but lane 5 has exited"));
}

TEST(EmulatorMma, LanesInDifferentInstructionsAreAnError) {
  const EmulatorResult r = run_warp_fault(2);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "met in different warp collectives (mma.sync.aligned.m16n8k16.row.col.f32.f16"));
  EXPECT_TRUE(contains(r.error, "(dc_mma_m16n8k16_bf16)"));
}

TEST(EmulatorMma, LanesInAnotherCollectiveAreAnError) {
  const EmulatorResult r = run_warp_fault(3);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "met in different warp collectives"));
  EXPECT_TRUE(contains(r.error, "__shfl_sync"));
}

TEST(EmulatorMma, LanesThatSyncOnAPartialMaskAndLeaveAreAnError) {
  const EmulatorResult r = run_warp_fault(4);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "needs all 32 lanes of the warp, but lanes 16-31 have exited"));
}

TEST(EmulatorMma, PartialWarpIsAnError) {
  const EmulatorResult r = run_warp_fault(5);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(r.error, "warp 1: mma.sync"));
  EXPECT_TRUE(contains(r.error, "lanes 16-31 do not exist"));
}

TEST(EmulatorMma, FaultKernelsCompileWithNvrtc) {
  for (const std::string arch : {"sm_80", "sm_90"}) {
    for (int f = 0; f <= 4; ++f) {
      const CompileResult a = compile_cuda(cuda_prelude() + "#define DC_FAULT " + std::to_string(f) + "\n" + kLdmatrixFault, arch);
      EXPECT_TRUE(a.ok) << arch << ": " << a.log;
      const CompileResult b = compile_cuda(cuda_prelude() + "#define DC_WARP_FAULT " + std::to_string(f) + "\n" + kWarpFault, arch);
      EXPECT_TRUE(b.ok) << arch << ": " << b.log;
    }
    const CompileResult t = compile_cuda(cuda_prelude() + kTables, arch);
    EXPECT_TRUE(t.ok) << arch << ": " << t.log;
  }
}

}  // namespace
}  // namespace dc
