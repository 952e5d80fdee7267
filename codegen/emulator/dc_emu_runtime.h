// dc host emulator runtime: the text that precedes dc::cuda_prelude() and a generated CUDA
// source when codegen/emulator.cpp compiles it for the CPU with the host C++ compiler. It
// defines DC_HOST_EMULATION and host versions of CUDA's built-ins. Barriers and warp
// collectives call back into the host scheduler (codegen/emulator/grid_runner.cpp), which
// runs the threads of a block as fibers on one OS thread.
//
// The library embeds this file as text at build time (codegen/CMakeLists.txt); the host side
// includes it with DC_EMU_ABI_ONLY defined to share the interface structs below.
//
// Shared memory: `__shared__` is `thread_local`. The fibers of a block run on one OS thread,
// so they share it, and the host finds every such variable (kernels, templates and inline
// functions alike) in the library's TLS block, which it poisons at the start of each block.
// The emulator state itself lives there too and is rewritten after the poisoning.
#ifndef DC_EMU_RUNTIME_ABI_
#define DC_EMU_RUNTIME_ABI_

extern "C" {

struct dc_emu_uint3 {
  unsigned int x, y, z;
};

struct dc_emu_host_api;

// Per OS thread, inside the kernel library; written by the host scheduler.
struct dc_emu_state {
  dc_emu_uint3 thread_idx;
  dc_emu_uint3 block_idx;
  dc_emu_uint3 block_dim;
  dc_emu_uint3 grid_dim;
  unsigned char* dynamic_smem;
  const dc_emu_host_api* api;
  void* ctx;  // the host scheduler of the running launch
};

// Block barriers (block_barrier's kind).
enum { DC_EMU_BAR_SYNC = 0, DC_EMU_BAR_COUNT = 1, DC_EMU_BAR_AND = 2, DC_EMU_BAR_OR = 3 };
// Warp collectives (warp_collective's kind).
enum {
  DC_EMU_SHFL_IDX = 0,
  DC_EMU_SHFL_UP = 1,
  DC_EMU_SHFL_DOWN = 2,
  DC_EMU_SHFL_XOR = 3,
  DC_EMU_VOTE_BALLOT = 4,
  DC_EMU_VOTE_ANY = 5,
  DC_EMU_VOTE_ALL = 6,
  DC_EMU_SYNCWARP = 7,
  DC_EMU_EXCHANGE = 8,
  DC_EMU_EXCHANGE_ALIGNED = 9
};

// Host functions the kernel library calls; ctx is dc_emu_state::ctx.
struct dc_emu_host_api {
  // __syncthreads and its _count/_and/_or forms: returns the reduced predicate.
  int (*block_barrier)(void* ctx, int kind, int predicate);
  // Shuffles (value: the caller's bits, arg: lane/delta/mask), votes (value: predicate) and
  // __syncwarp: returns the caller's result bits.
  unsigned long long (*warp_collective)(void* ctx, int kind, unsigned int mask,
                                        unsigned long long value, int arg, int width);
  // Ends the launch with an error (the calling thread never resumes).
  void (*trap)(void* ctx, const char* message);
  // dc_emu_warp_exchange: every lane of `mask` gives `bytes` at `mine` and receives all 32
  // lanes' contributions at `all` (lane l's at all + l * bytes; lanes that do not take part
  // read as 0xff bytes). The building block of warp-wide matrix operations (mma.sync,
  // ldmatrix) executed per the PTX fragment layouts.
  void (*warp_exchange)(void* ctx, unsigned int mask, const void* mine, void* all, int bytes);
  // dc_emu_warp_exchange_aligned: the exchange of a `.sync.aligned` instruction (mma.sync,
  // ldmatrix) named `instruction`: all 32 lanes of the warp must arrive at the same
  // instruction (same name); a lane that has exited or does not exist, or lanes that meet in a
  // different collective or instruction, end the launch with an error.
  void (*warp_exchange_aligned)(void* ctx, const char* instruction, const void* mine, void* all,
                                int bytes);
  // 1 if [p, p + bytes) lies inside the running block's shared memory (static __shared__
  // variables in the library's TLS block, or the launch's dynamic shared memory), else 0.
  int (*is_shared)(void* ctx, const void* p, unsigned long long bytes);
  // Runs the launch's grid; thread_main(closure) is the body of one thread.
  int (*run_grid)(void* ctx, void (*thread_main)(void*), void* closure, int num_params);
};

// dc_emu_launch_<kernel>(api, ctx, args): what DC_EXPORT_KERNEL(kernel) defines.
typedef int (*dc_emu_launch_fn)(const dc_emu_host_api* api, void* ctx, void* const* args);
// dc_emu_thread_state(): the calling thread's dc_emu_state (allocates the TLS block).
typedef dc_emu_state* (*dc_emu_thread_state_fn)(void);

}  // extern "C"

#endif  // DC_EMU_RUNTIME_ABI_

#ifndef DC_EMU_ABI_ONLY
// ---- everything below is seen only by the kernel library -------------------------------
#define DC_HOST_EMULATION 1

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

using std::abs;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;

#define DC_EMU_EXPORT extern "C" __attribute__((visibility("default")))

static thread_local dc_emu_state dc_emu_cur_;

DC_EMU_EXPORT dc_emu_state* dc_emu_thread_state(void) { return &dc_emu_cur_; }

// ---- qualifiers and the prelude's macros -------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
// `used`: a __shared__ array that this thread never writes is still written by others, so the
// compiler must not fold its reads to the zero it starts with.
#define __shared__ thread_local __attribute__((used))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define DC_RESTRICT __restrict__
#define DC_DYNAMIC_SMEM(type, name) type* name = reinterpret_cast<type*>(dc_emu_cur_.dynamic_smem)

template <class... P>
struct dc_emu_closure {
  void (*kernel)(P...);
  void* const* args;
};

template <class... P, std::size_t... I>
inline void dc_emu_invoke(const dc_emu_closure<P...>* c, std::index_sequence<I...>) {
  c->kernel(static_cast<P>(c->args[I])...);
}

template <class... P>
void dc_emu_thread_main(void* closure) {
  dc_emu_invoke(static_cast<const dc_emu_closure<P...>*>(closure), std::index_sequence_for<P...>{});
}

template <class... P>
int dc_emu_launch_kernel(const dc_emu_host_api* api, void* ctx, void (*kernel)(P...),
                         void* const* args) {
  static_assert((std::is_pointer<P>::value && ...),
                "dc kernels take buffer pointers only (shapes are baked into the source)");
  const dc_emu_closure<P...> closure{kernel, args};
  return api->run_grid(ctx, &dc_emu_thread_main<P...>, const_cast<dc_emu_closure<P...>*>(&closure),
                       static_cast<int>(sizeof...(P)));
}

#define DC_EXPORT_KERNEL(name)                                                             \
  DC_EMU_EXPORT int dc_emu_launch_##name(const dc_emu_host_api* api, void* ctx,           \
                                         void* const* args) {                             \
    return dc_emu_launch_kernel(api, ctx, &name, args);                                    \
  }

// ---- vector types --------------------------------------------------------------------------
typedef dc_emu_uint3 uint3;

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define DC_EMU_VEC2(T, N, A)                                  \
  struct __attribute__((aligned(A))) N##2 { T x, y; };        \
  inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define DC_EMU_VEC3(T, N)                                             \
  struct N##3 { T x, y, z; };                                         \
  inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define DC_EMU_VEC4(T, N, A)                                                    \
  struct __attribute__((aligned(A))) N##4 { T x, y, z, w; };                    \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }

DC_EMU_VEC2(signed char, char, 2)
DC_EMU_VEC3(signed char, char)
DC_EMU_VEC4(signed char, char, 4)
DC_EMU_VEC2(unsigned char, uchar, 2)
DC_EMU_VEC3(unsigned char, uchar)
DC_EMU_VEC4(unsigned char, uchar, 4)
DC_EMU_VEC2(short, short, 4)
DC_EMU_VEC3(short, short)
DC_EMU_VEC4(short, short, 8)
DC_EMU_VEC2(unsigned short, ushort, 4)
DC_EMU_VEC3(unsigned short, ushort)
DC_EMU_VEC4(unsigned short, ushort, 8)
DC_EMU_VEC2(int, int, 8)
DC_EMU_VEC3(int, int)
DC_EMU_VEC4(int, int, 16)
DC_EMU_VEC2(unsigned int, uint, 8)
DC_EMU_VEC4(unsigned int, uint, 16)
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }
DC_EMU_VEC2(long long, longlong, 16)
DC_EMU_VEC2(unsigned long long, ulonglong, 16)
DC_EMU_VEC2(float, float, 8)
DC_EMU_VEC3(float, float)
DC_EMU_VEC4(float, float, 16)
DC_EMU_VEC2(double, double, 16)
DC_EMU_VEC3(double, double)

#undef DC_EMU_VEC2
#undef DC_EMU_VEC3
#undef DC_EMU_VEC4

// ---- built-in variables ----------------------------------------------------------------------
#define threadIdx (static_cast<const uint3&>(dc_emu_cur_.thread_idx))
#define blockIdx (static_cast<const uint3&>(dc_emu_cur_.block_idx))
#define blockDim (static_cast<const uint3&>(dc_emu_cur_.block_dim))
#define gridDim (static_cast<const uint3&>(dc_emu_cur_.grid_dim))
static const int warpSize = 32;

// ---- synchronisation -------------------------------------------------------------------------
inline void __syncthreads() { dc_emu_cur_.api->block_barrier(dc_emu_cur_.ctx, DC_EMU_BAR_SYNC, 0); }
inline int __syncthreads_count(int p) {
  return dc_emu_cur_.api->block_barrier(dc_emu_cur_.ctx, DC_EMU_BAR_COUNT, p != 0);
}
inline int __syncthreads_and(int p) {
  return dc_emu_cur_.api->block_barrier(dc_emu_cur_.ctx, DC_EMU_BAR_AND, p != 0);
}
inline int __syncthreads_or(int p) {
  return dc_emu_cur_.api->block_barrier(dc_emu_cur_.ctx, DC_EMU_BAR_OR, p != 0);
}
inline void __syncwarp(unsigned int mask = 0xffffffffu) {
  dc_emu_cur_.api->warp_collective(dc_emu_cur_.ctx, DC_EMU_SYNCWARP, mask, 0, 0, 32);
}
// One OS thread runs every emulated thread: fences only need to stop compiler reordering
// across the (opaque) barrier calls, which they already do.
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
// Emulator-only (see dc_emu_host_api::warp_exchange); CUDA code reaches it through prelude
// functions under #ifdef DC_HOST_EMULATION.
inline void dc_emu_warp_exchange(unsigned int mask, const void* mine, void* all, int bytes) {
  dc_emu_cur_.api->warp_exchange(dc_emu_cur_.ctx, mask, mine, all, bytes);
}
inline void dc_emu_warp_exchange_aligned(const char* instruction, const void* mine, void* all, int bytes) {
  dc_emu_cur_.api->warp_exchange_aligned(dc_emu_cur_.ctx, instruction, mine, all, bytes);
}
inline bool dc_emu_is_shared(const void* p, unsigned long long bytes) {
  return dc_emu_cur_.api->is_shared(dc_emu_cur_.ctx, p, bytes) != 0;
}
// The calling thread's lane: its linear index in the block, modulo 32 (as on the GPU).
inline int dc_emu_lane_id() {
  const dc_emu_uint3& t = dc_emu_cur_.thread_idx;
  const dc_emu_uint3& d = dc_emu_cur_.block_dim;
  return static_cast<int>((t.x + d.x * (t.y + d.y * t.z)) & 31u);
}
[[noreturn]] inline void __trap() {
  dc_emu_cur_.api->trap(dc_emu_cur_.ctx, "__trap() called");
  __builtin_unreachable();
}

// ---- warp shuffles and votes -----------------------------------------------------------------
template <class T>
inline T dc_emu_shuffle(int kind, unsigned int mask, T var, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp shuffles move values of at most 8 bytes");
  unsigned long long bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = dc_emu_cur_.api->warp_collective(dc_emu_cur_.ctx, kind, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
template <class T>
inline T __shfl_sync(unsigned int mask, T var, int src_lane, int width = 32) {
  return dc_emu_shuffle(DC_EMU_SHFL_IDX, mask, var, src_lane, width);
}
template <class T>
inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = 32) {
  return dc_emu_shuffle(DC_EMU_SHFL_UP, mask, var, static_cast<int>(delta), width);
}
template <class T>
inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = 32) {
  return dc_emu_shuffle(DC_EMU_SHFL_DOWN, mask, var, static_cast<int>(delta), width);
}
template <class T>
inline T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = 32) {
  return dc_emu_shuffle(DC_EMU_SHFL_XOR, mask, var, lane_mask, width);
}
inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
  return static_cast<unsigned int>(dc_emu_cur_.api->warp_collective(
      dc_emu_cur_.ctx, DC_EMU_VOTE_BALLOT, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned int mask, int predicate) {
  return static_cast<int>(dc_emu_cur_.api->warp_collective(dc_emu_cur_.ctx, DC_EMU_VOTE_ANY, mask,
                                                           predicate != 0, 0, 32));
}
inline int __all_sync(unsigned int mask, int predicate) {
  return static_cast<int>(dc_emu_cur_.api->warp_collective(dc_emu_cur_.ctx, DC_EMU_VOTE_ALL, mask,
                                                           predicate != 0, 0, 32));
}

// ---- atomics: one OS thread runs every emulated thread, so a plain read-modify-write is
// atomic. CUDA has no float atomicMax/atomicMin; neither has the emulator. ----------------------
#define DC_EMU_ATOMIC(name, T, expr) \
  inline T name(T* address, T val) { T old = *address; *address = (expr); return old; }
DC_EMU_ATOMIC(atomicAdd, int, static_cast<int>(static_cast<unsigned int>(old) + static_cast<unsigned int>(val)))
DC_EMU_ATOMIC(atomicAdd, unsigned int, old + val)
DC_EMU_ATOMIC(atomicAdd, unsigned long long, old + val)
DC_EMU_ATOMIC(atomicAdd, float, old + val)
DC_EMU_ATOMIC(atomicAdd, double, old + val)
DC_EMU_ATOMIC(atomicSub, int, static_cast<int>(static_cast<unsigned int>(old) - static_cast<unsigned int>(val)))
DC_EMU_ATOMIC(atomicSub, unsigned int, old - val)
DC_EMU_ATOMIC(atomicExch, int, val)
DC_EMU_ATOMIC(atomicExch, unsigned int, val)
DC_EMU_ATOMIC(atomicExch, unsigned long long, val)
DC_EMU_ATOMIC(atomicExch, float, val)
DC_EMU_ATOMIC(atomicMax, int, old > val ? old : val)
DC_EMU_ATOMIC(atomicMax, unsigned int, old > val ? old : val)
DC_EMU_ATOMIC(atomicMax, long long, old > val ? old : val)
DC_EMU_ATOMIC(atomicMax, unsigned long long, old > val ? old : val)
DC_EMU_ATOMIC(atomicMin, int, old < val ? old : val)
DC_EMU_ATOMIC(atomicMin, unsigned int, old < val ? old : val)
DC_EMU_ATOMIC(atomicMin, long long, old < val ? old : val)
DC_EMU_ATOMIC(atomicMin, unsigned long long, old < val ? old : val)
DC_EMU_ATOMIC(atomicAnd, int, old & val)
DC_EMU_ATOMIC(atomicAnd, unsigned int, old & val)
DC_EMU_ATOMIC(atomicAnd, unsigned long long, old & val)
DC_EMU_ATOMIC(atomicOr, int, old | val)
DC_EMU_ATOMIC(atomicOr, unsigned int, old | val)
DC_EMU_ATOMIC(atomicOr, unsigned long long, old | val)
DC_EMU_ATOMIC(atomicXor, int, old ^ val)
DC_EMU_ATOMIC(atomicXor, unsigned int, old ^ val)
DC_EMU_ATOMIC(atomicXor, unsigned long long, old ^ val)
DC_EMU_ATOMIC(atomicInc, unsigned int, old >= val ? 0u : old + 1u)
DC_EMU_ATOMIC(atomicDec, unsigned int, (old == 0u || old > val) ? val : old - 1u)
#undef DC_EMU_ATOMIC
#define DC_EMU_ATOMIC_CAS(T)                                    \
  inline T atomicCAS(T* address, T compare, T val) {            \
    T old = *address;                                           \
    if (old == compare) *address = val;                         \
    return old;                                                 \
  }
DC_EMU_ATOMIC_CAS(int)
DC_EMU_ATOMIC_CAS(unsigned int)
DC_EMU_ATOMIC_CAS(unsigned long long)
DC_EMU_ATOMIC_CAS(unsigned short)
#undef DC_EMU_ATOMIC_CAS

// ---- loads and stores with cache hints ---------------------------------------------------------
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }

// ---- math ------------------------------------------------------------------------------------
// glibc declares some of CUDA's intrinsic names (__expf, ...) itself, so every CUDA-only name
// is a macro for a dc_emu_ function.
inline float dc_emu_rsqrtf(float x) { return 1.f / sqrtf(x); }
inline double dc_emu_rsqrt(double x) { return 1.0 / sqrt(x); }
inline float dc_emu_rcbrtf(float x) { return 1.f / cbrtf(x); }
inline float dc_emu_fdividef(float a, float b) { return a / b; }
inline float dc_emu_saturatef(float x) { return x != x ? 0.f : fminf(fmaxf(x, 0.f), 1.f); }
inline float dc_emu_sinpif(float x) { return sinf(3.14159265358979323846f * x); }
inline float dc_emu_cospif(float x) { return cosf(3.14159265358979323846f * x); }
inline float dc_emu_exp10f(float x) { return powf(10.f, x); }
inline void dc_emu_sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float dc_emu_frcp(float x) { return 1.f / x; }
inline float dc_emu_fadd(float a, float b) { return a + b; }
inline float dc_emu_fsub(float a, float b) { return a - b; }
inline float dc_emu_fmul(float a, float b) { return a * b; }
inline float dc_emu_fdiv(float a, float b) { return a / b; }
#define rsqrtf dc_emu_rsqrtf
#define rsqrt dc_emu_rsqrt
#define rcbrtf dc_emu_rcbrtf
#define fdividef dc_emu_fdividef
#define sinpif dc_emu_sinpif
#define cospif dc_emu_cospif
#define exp10f dc_emu_exp10f
#define sincosf dc_emu_sincosf
#define __fdividef dc_emu_fdividef
#define __saturatef dc_emu_saturatef
#define __expf expf
#define __exp10f dc_emu_exp10f
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __powf powf
#define __sincosf dc_emu_sincosf
#define __fsqrt_rn sqrtf
#define __frsqrt_rn dc_emu_rsqrtf
#define __frcp_rn dc_emu_frcp
#define __fmaf_rn fmaf
#define __fadd_rn dc_emu_fadd
#define __fsub_rn dc_emu_fsub
#define __fmul_rn dc_emu_fmul
#define __fdiv_rn dc_emu_fdiv

// CUDA's min/max: overloads for every arithmetic pair; floating point ignores a NaN (fmin).
template <class A, class B>
inline auto min(A a, B b) -> decltype(a < b ? a : b) { return b < a ? b : a; }
template <class A, class B>
inline auto max(A a, B b) -> decltype(a < b ? a : b) { return a < b ? b : a; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int umax(unsigned int a, unsigned int b) { return a < b ? b : a; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a < b ? b : a; }

// ---- bit reinterpretation, conversions and integer intrinsics --------------------------------
template <class To, class From>
inline To dc_emu_bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between types of different sizes");
  To out;
  std::memcpy(&out, &v, sizeof(To));
  return out;
}
inline int __float_as_int(float x) { return dc_emu_bit_cast<int>(x); }
inline unsigned int __float_as_uint(float x) { return dc_emu_bit_cast<unsigned int>(x); }
inline float __int_as_float(int x) { return dc_emu_bit_cast<float>(x); }
inline float __uint_as_float(unsigned int x) { return dc_emu_bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return dc_emu_bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return dc_emu_bit_cast<double>(x); }

inline int __float2int_rn(float x) { return static_cast<int>(rintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(truncf(x)); }
inline int __float2int_rd(float x) { return static_cast<int>(floorf(x)); }
inline int __float2int_ru(float x) { return static_cast<int>(ceilf(x)); }
inline unsigned int __float2uint_rn(float x) { return static_cast<unsigned int>(rintf(x)); }
inline unsigned int __float2uint_rz(float x) { return static_cast<unsigned int>(truncf(x)); }
inline long long __float2ll_rn(float x) { return static_cast<long long>(rintf(x)); }
inline long long __float2ll_rz(float x) { return static_cast<long long>(truncf(x)); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned int x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }
inline float __double2float_rn(double x) { return static_cast<float>(x); }

inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mulhi(int a, int b) {
  return static_cast<int>((static_cast<long long>(a) * static_cast<long long>(b)) >> 32);
}
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline long long __mul64hi(long long a, long long b) {
  return static_cast<long long>((static_cast<__int128>(a) * b) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __mul24(int a, int b) {
  const int sa = static_cast<int>(static_cast<unsigned int>(a) << 8) >> 8;  // low 24 bits, signed
  const int sb = static_cast<int>(static_cast<unsigned int>(b) << 8) >> 8;
  return static_cast<int>(static_cast<unsigned int>(sa) * static_cast<unsigned int>(sb));
}
inline unsigned int __umul24(unsigned int a, unsigned int b) { return (a & 0xffffffu) * (b & 0xffffffu); }

// ---- end of the dc emulator runtime; the generated source follows ---------------------------
#endif  // DC_EMU_ABI_ONLY
