// Prelude section: tensor cores (see prelude_sections.h). The fragment layouts of the PTX ISA
// ("Matrix fragments for mma.m16n8k16" / "mma.m16n8k8", "ldmatrix") are written once, as the
// dc_*_row/col functions below; the emulator's mma and ldmatrix, the templates' epilogues and
// the layout tests (tests/unit/test_emulator_mma.cpp) all use them. docs/emulator.md says how
// the warp-wide instructions are emulated.
#include "prelude_sections.h"

namespace dc::prelude_text {

const char* const kMma = R"dc_prelude(
// ---- tensor cores: fragment layouts ----------------------------------------------------------
// Element i of `lane`'s fragment lies at (row, col) of the operand's tile; groupID g = lane >> 2,
// threadID_in_group t = lane & 3. A 32-bit register holds elements 2j (bits 0-15) and 2j+1.
// m16n8k16 f16/bf16, A (16x16, m x k): a[0]=(g, 2t..2t+1) a[1]=(g+8, ..) a[2]=(g, 2t+8..) a[3]=(g+8, 2t+8..)
__device__ __forceinline__ int dc_mma_f16_a_row(int lane, int i) { return (lane >> 2) + ((i >> 1) & 1) * 8; }
__device__ __forceinline__ int dc_mma_f16_a_col(int lane, int i) { return (lane & 3) * 2 + (i & 1) + (i >> 2) * 8; }
// m16n8k16 f16/bf16, B (16x8, k x n): b[0]=(k 2t..2t+1, n g) b[1]=(k 2t+8.., n g)
__device__ __forceinline__ int dc_mma_f16_b_row(int lane, int i) { return (lane & 3) * 2 + (i & 1) + (i >> 1) * 8; }
__device__ __forceinline__ int dc_mma_f16_b_col(int lane, int i) { return lane >> 2; }
// m16n8k8 tf32 (one element per register), A (16x8): a[0]=(g,t) a[1]=(g+8,t) a[2]=(g,t+4) a[3]=(g+8,t+4)
__device__ __forceinline__ int dc_mma_tf32_a_row(int lane, int i) { return (lane >> 2) + (i & 1) * 8; }
__device__ __forceinline__ int dc_mma_tf32_a_col(int lane, int i) { return (lane & 3) + (i >> 1) * 4; }
// m16n8k8 tf32, B (8x8, k x n): b[0]=(k t, n g) b[1]=(k t+4, n g)
__device__ __forceinline__ int dc_mma_tf32_b_row(int lane, int i) { return (lane & 3) + i * 4; }
__device__ __forceinline__ int dc_mma_tf32_b_col(int lane, int i) { return lane >> 2; }
// C/D of both shapes (16x8 f32): acc[0]=(g,2t) acc[1]=(g,2t+1) acc[2]=(g+8,2t) acc[3]=(g+8,2t+1)
__device__ __forceinline__ int dc_mma_c_row(int lane, int i) { return (lane >> 2) + (i >> 1) * 8; }
__device__ __forceinline__ int dc_mma_c_col(int lane, int i) { return (lane & 3) * 2 + (i & 1); }
// ldmatrix m8n8.b16: element e (0 low half, 1 high half) of r[j] of `lane` is element (row, col)
// of matrix j as stored: row = the 16-byte row whose address lane 8j + row supplied, col = the
// 16-bit element in it. Without .trans: (lane/4, 2(lane%4)+e); with .trans: (2(lane%4)+e, lane/4).
__device__ __forceinline__ int dc_ldmatrix_row(int lane, int e, bool trans) {
  return trans ? (lane & 3) * 2 + e : lane >> 2;
}
__device__ __forceinline__ int dc_ldmatrix_col(int lane, int e, bool trans) {
  return trans ? lane >> 2 : (lane & 3) * 2 + e;
}

#ifdef DC_HOST_EMULATION
// ---- host emulation: gather the warp's fragments, compute, keep this lane's part -------------
enum { DC_EMU_MMA_F16 = 0, DC_EMU_MMA_BF16 = 1, DC_EMU_MMA_TF32 = 2 };
// Element i of a fragment as a float: f16/bf16 pairs per register, tf32 one per register of
// which the hardware reads only the tf32 bits (the low 13 are ignored).
inline float dc_emu_mma_element(int type, const unsigned* regs, int i) {
  if (type == DC_EMU_MMA_TF32) return __uint_as_float(regs[i] & 0xffffe000u);
  const unsigned short h = static_cast<unsigned short>(regs[i >> 1] >> ((i & 1) * 16));
  return type == DC_EMU_MMA_F16 ? dc_f16_bits_to_f32_sw(h) : __uint_as_float(static_cast<unsigned>(h) << 16);
}
// D = A*B + C over the warp; this lane's D elements, from its own C: acc[i] += a(r,0)*b(0,c),
// then k = 1, 2, ... in order, each sum rounded to fp32 (the products of f16/bf16/tf32
// operands are exact in fp32). The hardware's summation order and rounding inside the
// tensor core are not specified; results agree to fp32 rounding of the K-term sum.
inline void dc_emu_mma_m16n8(const char* instruction, int type, float acc[4], const unsigned a[4],
                             const unsigned b[2]) {
  struct Fragments { unsigned a[4]; unsigned b[2]; };
  Fragments mine, all[32];
  for (int i = 0; i < 4; ++i) mine.a[i] = a[i];
  for (int i = 0; i < 2; ++i) mine.b[i] = b[i];
  dc_emu_warp_exchange_aligned(instruction, &mine, all, static_cast<int>(sizeof(Fragments)));
  const bool tf32 = type == DC_EMU_MMA_TF32;
  const int k_dim = tf32 ? 8 : 16, a_elems = tf32 ? 4 : 8, b_elems = tf32 ? 2 : 4;
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < a_elems; ++i) {
      const int r = tf32 ? dc_mma_tf32_a_row(l, i) : dc_mma_f16_a_row(l, i);
      const int c = tf32 ? dc_mma_tf32_a_col(l, i) : dc_mma_f16_a_col(l, i);
      A[r][c] = dc_emu_mma_element(type, all[l].a, i);
    }
    for (int i = 0; i < b_elems; ++i) {
      const int r = tf32 ? dc_mma_tf32_b_row(l, i) : dc_mma_f16_b_row(l, i);
      const int c = tf32 ? dc_mma_tf32_b_col(l, i) : dc_mma_f16_b_col(l, i);
      B[r][c] = dc_emu_mma_element(type, all[l].b, i);
    }
  }
  const int lane = dc_emu_lane_id();
  for (int i = 0; i < 4; ++i) {
    const int r = dc_mma_c_row(lane, i), c = dc_mma_c_col(lane, i);
    float d = acc[i];
    for (int k = 0; k < k_dim; ++k) d += A[r][k] * B[k][c];
    acc[i] = d;
  }
}
// ldmatrix: lanes 0..8*num-1 each supply one 16-byte row (lanes 8j..8j+7: the rows of matrix j);
// a supplied address that is misaligned or not in the block's shared memory faults.
inline void dc_emu_ldmatrix(const char* instruction, int num, bool trans, unsigned* r, const void* row) {
  const int lane = dc_emu_lane_id();
  if (lane < 8 * num) {
    static thread_local char dc_msg[200];
    if (reinterpret_cast<unsigned long long>(row) & 15ull) {
      snprintf(dc_msg, sizeof dc_msg, "%s: row address %p of lane %d is not 16-byte aligned", instruction, row, lane);
      dc_emu_cur_.api->trap(dc_emu_cur_.ctx, dc_msg);
    }
    if (!dc_emu_is_shared(row, 16)) {
      snprintf(dc_msg, sizeof dc_msg, "%s: row address %p of lane %d is not in the block's shared memory",
               instruction, row, lane);
      dc_emu_cur_.api->trap(dc_emu_cur_.ctx, dc_msg);
    }
  }
  const void* rows[32];
  dc_emu_warp_exchange_aligned(instruction, &row, rows, static_cast<int>(sizeof(const void*)));
  for (int j = 0; j < num; ++j) {
    unsigned v = 0;
    for (int e = 0; e < 2; ++e) {
      const auto* src = static_cast<const unsigned short*>(rows[8 * j + dc_ldmatrix_row(lane, e, trans)]);
      v |= static_cast<unsigned>(src[dc_ldmatrix_col(lane, e, trans)]) << (16 * e);
    }
    r[j] = v;
  }
}
#endif

// ---- mma.sync (sm_80+; traps before): acc = A*B + acc, warp-collective -------------------------
#define DC_MMA_M16N8(name, shape_types, type)                                                          \
  __device__ __forceinline__ void name(float acc[4], const unsigned a[4], const unsigned b[2]) {    \
    DC_MMA_M16N8_BODY(shape_types, type, #name)                                                     \
  }
#if defined(DC_HOST_EMULATION)
#define DC_MMA_M16N8_BODY(shape_types, type, fname) \
  dc_emu_mma_m16n8("mma.sync.aligned." shape_types " (" fname ")", type, acc, a, b);
#elif __CUDA_ARCH__ >= 800
#define DC_MMA_M16N8_BODY(shape_types, type, fname)                                                 \
  asm volatile("mma.sync.aligned." shape_types " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
#define DC_MMA_M16N8_BODY(shape_types, type, fname) __trap();
#endif
DC_MMA_M16N8(dc_mma_m16n8k16_f16, "m16n8k16.row.col.f32.f16.f16.f32", 0)
DC_MMA_M16N8(dc_mma_m16n8k16_bf16, "m16n8k16.row.col.f32.bf16.bf16.f32", 1)
DC_MMA_M16N8(dc_mma_m16n8k8_tf32, "m16n8k8.row.col.f32.tf32.tf32.f32", 2)
#undef DC_MMA_M16N8_BODY
#undef DC_MMA_M16N8

// ---- ldmatrix (sm_75+): row is this lane's 16-byte row in shared memory -----------------------
#if defined(DC_HOST_EMULATION)
#define DC_LDMATRIX(name, num, trans, suffix)                                                       \
  __device__ __forceinline__ void name(unsigned r[num], const void* row) {                          \
    dc_emu_ldmatrix("ldmatrix.sync.aligned.m8n8" suffix ".shared.b16 (" #name ")", num, trans, r, row); \
  }
#elif __CUDA_ARCH__ >= 750
#define DC_LDMATRIX_ASM_1 "{%0}, [%1];\n" : "=r"(r[0]) : "r"(dc_s)
#define DC_LDMATRIX_ASM_2 "{%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(dc_s)
#define DC_LDMATRIX_ASM_4 "{%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(dc_s)
#define DC_LDMATRIX(name, num, trans, suffix)                                                      \
  __device__ __forceinline__ void name(unsigned r[num], const void* row) {                         \
    const unsigned dc_s = static_cast<unsigned>(__cvta_generic_to_shared(row));                    \
    asm volatile("ldmatrix.sync.aligned.m8n8" suffix ".shared.b16 " DC_LDMATRIX_ASM_##num);        \
  }
#else
#define DC_LDMATRIX(name, num, trans, suffix) \
  __device__ __forceinline__ void name(unsigned r[num], const void* row) { __trap(); }
#endif
DC_LDMATRIX(dc_ldmatrix_x1, 1, false, ".x1")
DC_LDMATRIX(dc_ldmatrix_x2, 2, false, ".x2")
DC_LDMATRIX(dc_ldmatrix_x4, 4, false, ".x4")
DC_LDMATRIX(dc_ldmatrix_x1_trans, 1, true, ".x1.trans")
DC_LDMATRIX(dc_ldmatrix_x2_trans, 2, true, ".x2.trans")
DC_LDMATRIX(dc_ldmatrix_x4_trans, 4, true, ".x4.trans")
#undef DC_LDMATRIX
#undef DC_LDMATRIX_ASM_1
#undef DC_LDMATRIX_ASM_2
#undef DC_LDMATRIX_ASM_4
)dc_prelude";

}  // namespace dc::prelude_text
