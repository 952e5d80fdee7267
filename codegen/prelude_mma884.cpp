// Prelude section: Volta's tensor cores (see prelude_sections.h), mma.sync.aligned.m8n8k4
// .row.col.f32.f16.f16.f32, the one tensor-core instruction of sm_70. A warp runs four
// independent 8x8x4 products, one per quad pair (lanes 4q..4q+3 and 4q+16..4q+19); the
// fragment layouts are the PTX ISA's "Matrix Fragments for mma.m8n8k4 with .f16 floating
// point type" (row-major A, column-major B, .f32 accumulators), written once as the
// dc_mma884_* functions below; the emulator, the templates and the layout tests
// (tests/unit/test_emulator_mma884.cpp) all use them. docs/emulator.md says how the
// warp-wide instruction is emulated.
#include "prelude_sections.h"

namespace dc::prelude_text {

const char* const kMma884 = R"dc_prelude(
// ---- Volta tensor cores (m8n8k4): fragment layouts ---------------------------------------------
// The quad pair of `lane` and its thread within it (0-3 low group, 4-7 high group).
__device__ __forceinline__ int dc_mma884_quad_pair(int lane) { return (lane >> 2) & 3; }
__device__ __forceinline__ int dc_mma884_thread(int lane) { return (lane & 3) + (lane >> 4) * 4; }
// A (8x4, m x k, .row), two f16x2 registers: a_i = (row dc_mma884_thread, col i), i = 0..3.
__device__ __forceinline__ int dc_mma884_a_row(int lane, int i) { return dc_mma884_thread(lane); }
__device__ __forceinline__ int dc_mma884_a_col(int lane, int i) { return i; }
// B (4x8, k x n, .col), two f16x2 registers: b_i = (row i, col dc_mma884_thread).
__device__ __forceinline__ int dc_mma884_b_row(int lane, int i) { return i; }
__device__ __forceinline__ int dc_mma884_b_col(int lane, int i) { return dc_mma884_thread(lane); }
// C/D (8x8 f32), eight registers: row = (lane & 1) + (i & 2) (+4 in the high group),
// col = (i & 4) + (lane & 2) + (i & 1).
__device__ __forceinline__ int dc_mma884_c_row(int lane, int i) { return (lane & 1) + (i & 2) + (lane >> 4) * 4; }
__device__ __forceinline__ int dc_mma884_c_col(int lane, int i) { return (i & 4) + (lane & 2) + (i & 1); }
// The templates' warp tile of one instruction: 16x16x4, quad pair q computing the 8x8 block
// at rows (q & 1) * 8, cols (q >> 1) * 8 (its A rows and B columns are that block's).
__device__ __forceinline__ int dc_mma884_block_row(int lane) { return (dc_mma884_quad_pair(lane) & 1) * 8; }
__device__ __forceinline__ int dc_mma884_block_col(int lane) { return (dc_mma884_quad_pair(lane) >> 1) * 8; }

#ifdef DC_HOST_EMULATION
// The warp's fragments gathered; each quad pair's D = A*B + C from its own eight lanes, this
// lane's part kept. Sums in k order, each rounded to fp32 (f16 products are exact in fp32).
inline void dc_emu_mma_m8n8k4(const char* instruction, float acc[8], const unsigned a[2], const unsigned b[2]) {
  struct Fragments { unsigned a[2]; unsigned b[2]; };
  Fragments mine, all[32];
  for (int i = 0; i < 2; ++i) {
    mine.a[i] = a[i];
    mine.b[i] = b[i];
  }
  dc_emu_warp_exchange_aligned(instruction, &mine, all, static_cast<int>(sizeof(Fragments)));
  const int lane = dc_emu_lane_id(), qp = dc_mma884_quad_pair(lane);
  float A[8][4], B[4][8];
  for (int l = 0; l < 32; ++l) {
    if (dc_mma884_quad_pair(l) != qp) continue;
    for (int i = 0; i < 4; ++i) {
      A[dc_mma884_a_row(l, i)][dc_mma884_a_col(l, i)] = dc_emu_mma_element(DC_EMU_MMA_F16, all[l].a, i);
      B[dc_mma884_b_row(l, i)][dc_mma884_b_col(l, i)] = dc_emu_mma_element(DC_EMU_MMA_F16, all[l].b, i);
    }
  }
  for (int i = 0; i < 8; ++i) {
    const int r = dc_mma884_c_row(lane, i), c = dc_mma884_c_col(lane, i);
    float d = acc[i];
    for (int k = 0; k < 4; ++k) d += A[r][k] * B[k][c];
    acc[i] = d;
  }
}
#endif

// ---- mma.sync m8n8k4 (sm_70 only: sm_80 and later run it slowly, sm_90 not at all) -----------
__device__ __forceinline__ void dc_mma_m8n8k4_f16(float acc[8], const unsigned a[2], const unsigned b[2]) {
#if defined(DC_HOST_EMULATION)
  dc_emu_mma_m8n8k4("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 (dc_mma_m8n8k4_f16)", acc, a, b);
#elif __CUDA_ARCH__ >= 700 && __CUDA_ARCH__ < 750
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%0,%1,%2,%3,%4,%5,%6,%7};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]),
        "+f"(acc[7])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}
)dc_prelude";

}  // namespace dc::prelude_text
