#include "opencl_dialect.h"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "ir/error.h"
#include "prelude.h"
#include "prelude_sections.h"

namespace dc {

namespace {

// CUDA's built-ins in OpenCL terms. A warp is 32 consecutive work-items of the work-group
// (linear local id, x fastest, as CUDA forms warps); its shuffles go through dc_shfl_, the
// kernel's local buffer, between two barriers, so every work-item of the group must reach
// them (the templates' shuffles run in uniform control flow, full mask).
// DC_UNROLL_K unrolls by 4, not in full: PoCL's CPU build of the fp32 GEMM tile's K loop
// unrolled in full (block_k 16: 16 x 8 x 8 FMAs in one body) ran 1.7 to 2.4x slower than the
// same tile with block_k 8 or 32, and by 4 at least as fast as either (docs/opencl.md,
// "Unrolling the K loop").
const char* const kOpenClBuiltins = R"dc_ocl(// ---- dc OpenCL prelude (codegen/opencl_dialect.cpp) ----------------------------------------
#define DC_OPENCL 1
#define DC_EXPORT_KERNEL(name)
#define DC_RESTRICT __restrict
#define DC_UNROLL _Pragma("unroll")
#define DC_UNROLL_K _Pragma("unroll 4")
#define DC_LAUNCH_BOUNDS(n)
#define DC_DYNAMIC_SMEM(type, name) \
  __local __attribute__((aligned(16))) unsigned char dc_dynamic_smem_[DC_OCL_DYNAMIC_SMEM_BYTES]; \
  type* name = (type*)(dc_dynamic_smem_)
#define DC_OCL_WARP_BUFFER 1024
#define DC_OCL_KERNEL_LOCALS __local float dc_shfl_[DC_OCL_WARP_BUFFER];
#define __global__ __kernel
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ __local
#define __constant__ __constant
#define __launch_bounds__(...)

struct dc_dim3 { unsigned x, y, z; };
#define threadIdx (dc_dim3{(unsigned)get_local_id(0), (unsigned)get_local_id(1), (unsigned)get_local_id(2)})
#define blockIdx (dc_dim3{(unsigned)get_group_id(0), (unsigned)get_group_id(1), (unsigned)get_group_id(2)})
#define blockDim (dc_dim3{(unsigned)get_local_size(0), (unsigned)get_local_size(1), (unsigned)get_local_size(2)})
#define gridDim (dc_dim3{(unsigned)get_num_groups(0), (unsigned)get_num_groups(1), (unsigned)get_num_groups(2)})
#define __syncthreads() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#define __syncwarp(...) barrier(CLK_LOCAL_MEM_FENCE)
#define __threadfence() mem_fence(CLK_GLOBAL_MEM_FENCE)
#define __threadfence_block() mem_fence(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)

// libm's float names and CUDA's intrinsics: OpenCL's overloaded built-ins.
#define expf(x) exp(x)
#define exp2f(x) exp2(x)
#define expm1f(x) expm1(x)
#define logf(x) log(x)
#define log2f(x) log2(x)
#define log10f(x) log10(x)
#define log1pf(x) log1p(x)
#define powf(x, y) pow(x, y)
#define sqrtf(x) sqrt(x)
#define rsqrtf(x) rsqrt(x)
#define cbrtf(x) cbrt(x)
#define sinf(x) sin(x)
#define cosf(x) cos(x)
#define tanf(x) tan(x)
#define asinf(x) asin(x)
#define acosf(x) acos(x)
#define atanf(x) atan(x)
#define atan2f(y, x) atan2(y, x)
#define sinhf(x) sinh(x)
#define coshf(x) cosh(x)
#define tanhf(x) tanh(x)
#define asinhf(x) asinh(x)
#define acoshf(x) acosh(x)
#define atanhf(x) atanh(x)
#define erff(x) erf(x)
#define erfcf(x) erfc(x)
#define fabsf(x) fabs(x)
#define floorf(x) floor(x)
#define ceilf(x) ceil(x)
#define truncf(x) trunc(x)
#define roundf(x) round(x)
#define rintf(x) rint(x)
#define nearbyintf(x) rint(x)
#define fmodf(x, y) fmod(x, y)
#define remainderf(x, y) remainder(x, y)
#define fminf(x, y) fmin(x, y)
#define fmaxf(x, y) fmax(x, y)
#define fmaf(x, y, z) fma(x, y, z)
#define copysignf(x, y) copysign(x, y)
#define hypotf(x, y) hypot(x, y)
#define __expf(x) exp(x)
#define __logf(x) log(x)
#define __powf(x, y) pow(x, y)
#define __sinf(x) sin(x)
#define __cosf(x) cos(x)
#define __tanf(x) tan(x)
#define __fdividef(x, y) ((x) / (y))
#define __frcp_rn(x) (1.0f / (x))
#define __fsqrt_rn(x) sqrt(x)
#define __fadd_rn(x, y) ((x) + (y))
#define __fmul_rn(x, y) ((x) * (y))
#define __fmaf_rn(x, y, z) fma(x, y, z)
#define __saturatef(x) clamp((float)(x), 0.0f, 1.0f)
#define __float_as_uint(x) as_uint((float)(x))
#define __float_as_int(x) as_int((float)(x))
#define __uint_as_float(x) as_float((unsigned)(x))
#define __int_as_float(x) as_float((int)(x))
#define __ldg(p) (*(p))
#define make_float2(a, b) ((float2)((a), (b)))
#define make_float4(a, b, c, d) ((float4)((a), (b), (c), (d)))
#define make_int2(a, b) ((int2)((a), (b)))
#define make_uint2(a, b) ((uint2)((a), (b)))

// Warp shuffles over the work-group's local buffer (see above).
inline unsigned dc_ocl_lid() {
  return (unsigned)(get_local_id(0) + get_local_size(0) * (get_local_id(1) + get_local_size(1) * get_local_id(2)));
}
inline float dc_ocl_exchange(__local float* buf, float v, unsigned from) {
  const unsigned me = dc_ocl_lid();
  barrier(CLK_LOCAL_MEM_FENCE);
  buf[me] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  const float r = buf[from];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
inline float dc_ocl_shfl_xor(__local float* buf, float v, int mask) {
  return dc_ocl_exchange(buf, v, dc_ocl_lid() ^ (unsigned)(mask & 31));
}
inline int dc_ocl_shfl_xor(__local float* buf, int v, int mask) { return as_int(dc_ocl_shfl_xor(buf, as_float(v), mask)); }
inline unsigned dc_ocl_shfl_xor(__local float* buf, unsigned v, int mask) {
  return as_uint(dc_ocl_shfl_xor(buf, as_float(v), mask));
}
inline float dc_ocl_shfl(__local float* buf, float v, int lane) {
  return dc_ocl_exchange(buf, v, (dc_ocl_lid() & ~31u) + (unsigned)(lane & 31));
}
inline int dc_ocl_shfl(__local float* buf, int v, int lane) { return as_int(dc_ocl_shfl(buf, as_float(v), lane)); }
inline float dc_ocl_shfl_down(__local float* buf, float v, unsigned d) {
  const unsigned me = dc_ocl_lid();
  const float r = dc_ocl_exchange(buf, v, (me & 31u) + d < 32u ? me + d : me);
  return r;
}
inline float dc_ocl_shfl_up(__local float* buf, float v, unsigned d) {
  const unsigned me = dc_ocl_lid();
  return dc_ocl_exchange(buf, v, (me & 31u) >= d ? me - d : me);
}
#define __shfl_xor_sync(mask, v, o) dc_ocl_shfl_xor(dc_shfl_, v, o)
#define __shfl_sync(mask, v, lane) dc_ocl_shfl(dc_shfl_, v, lane)
#define __shfl_down_sync(mask, v, d) dc_ocl_shfl_down(dc_shfl_, v, d)
#define __shfl_up_sync(mask, v, d) dc_ocl_shfl_up(dc_shfl_, v, d)
inline float dc_ocl_warp_sum(__local float* buf, float v) {
  for (int o = 16; o > 0; o >>= 1) v += dc_ocl_shfl_xor(buf, v, o);
  return v;
}
inline float dc_ocl_warp_max(__local float* buf, float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, dc_ocl_shfl_xor(buf, v, o));
  return v;
}
#define dc_warp_sum(v) dc_ocl_warp_sum(dc_shfl_, v)
#define dc_warp_max(v) dc_ocl_warp_max(dc_shfl_, v)

// Atomics on generic pointers: compare-and-swap loops (OpenCL 1.2 devices have no float add).
inline float atomicAdd(float* p, float v) {
  unsigned* u = (unsigned*)p;
  unsigned old = __atomic_load_n(u, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(u, &old, as_uint(as_float(old) + v), false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return as_float(old);
}
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline int atomicMax(int* p, int v) { return __atomic_fetch_max(p, v, __ATOMIC_RELAXED); }
inline int atomicMin(int* p, int v) { return __atomic_fetch_min(p, v, __ATOMIC_RELAXED); }
inline int atomicCAS(int* p, int cmp, int v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;
}
inline unsigned atomicCAS(unsigned* p, unsigned cmp, unsigned v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return cmp;
}

)dc_ocl";

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The index of the ')' closing the '(' at `open`.
size_t matching_paren(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    else if (s[i] == ')' && --depth == 0) return i;
  }
  throw_internal_error("opencl_source: unbalanced parentheses after offset ", open);
}

// `params` (a kernel's parameter list) with `__global` before every pointer parameter.
std::string global_params(const std::string& params) {
  std::string out;
  size_t b = 0;
  int depth = 0;
  for (size_t i = 0; i <= params.size(); ++i) {
    if (i < params.size() && params[i] == '(') ++depth;
    if (i < params.size() && params[i] == ')') --depth;
    if (i < params.size() && (params[i] != ',' || depth > 0)) continue;
    std::string p = params.substr(b, i - b);
    const size_t lead = p.find_first_not_of(" \n");
    if (lead != std::string::npos && p.find('*') != std::string::npos) p.insert(lead, "__global ");
    out += p;
    if (i < params.size()) out += ",";
    b = i + 1;
  }
  return out;
}

// Every `__global__` kernel: pointer parameters in __global, DC_OCL_KERNEL_LOCALS first in
// its body.
std::string rewrite_kernels(const std::string& src) {
  std::string out;
  size_t i = 0;
  while (true) {
    size_t k = src.find("__global__", i);
    while (k != std::string::npos &&
           ((k > 0 && is_ident_char(src[k - 1])) || (k + 10 < src.size() && is_ident_char(src[k + 10]))))
      k = src.find("__global__", k + 10);
    if (k == std::string::npos) break;
    // The parameter list: the first '(' after the name, skipping DC_LAUNCH_BOUNDS(...).
    size_t open = src.find('(', k);
    DC_INTERNAL_CHECK(open != std::string::npos, "opencl_source: a kernel without parameters");
    const size_t lb = src.find("DC_LAUNCH_BOUNDS", k);
    if (lb != std::string::npos && lb < open) open = src.find('(', matching_paren(src, open) + 1);
    const size_t close = matching_paren(src, open);
    const size_t body = src.find('{', close);
    DC_INTERNAL_CHECK(body != std::string::npos, "opencl_source: a kernel without a body");
    out += src.substr(i, open + 1 - i) + global_params(src.substr(open + 1, close - open - 1)) +
           src.substr(close, body + 1 - close) + " DC_OCL_KERNEL_LOCALS";
    i = body + 1;
  }
  return out + src.substr(i);
}

}  // namespace

const std::string& opencl_prelude() {
  static const std::string text = std::string(kOpenClBuiltins) + prelude_text::kBase + prelude_text::kHalf +
                                  "// ---- end of prelude ------------------------------------------------------------\n";
  return text;
}

// OpenCL's `long long` is a 128-bit type (OpenCL C 3.0, 6.3.1 "reserved data types"; clang
// makes it i128), and so are LL literals: CUDA's 64-bit `long long` is OpenCL's `long`. Left
// as written, int64 tensors (Gather's indices) were read 16 bytes apart and every dc_i64
// index computation ran in 128-bit arithmetic.
namespace {
std::string long_long_as_long(const std::string& source) {
  static const std::regex type(R"(\blong\s+long\b)");
  static const std::regex literal(R"(\b([0-9]+|0[xX][0-9a-fA-F]+)([uU]?)(?:ll|LL)([uU]?)\b)");
  return std::regex_replace(std::regex_replace(source, type, "long"), literal, "$1$2L$3");
}
}  // namespace

std::string opencl_source(const GeneratedKernel& kernel) {
  const std::string& cuda = cuda_prelude();
  const size_t at = kernel.source.find(cuda);
  DC_INTERNAL_CHECK(at != std::string::npos, "opencl_source: kernel ", kernel.template_name,
                    " does not start with the CUDA prelude");
  int64_t smem = 16;
  for (const Launch& l : kernel.launches) smem = std::max(smem, l.dynamic_smem_bytes);
  const std::string head = kernel.source.substr(0, at);
  const std::string rest = kernel.source.substr(at + cuda.size());
  return head + fmt::format("#define DC_OCL_DYNAMIC_SMEM_BYTES {}\n", smem) +
         long_long_as_long(opencl_prelude() + rewrite_kernels(rest));
}

}  // namespace dc
