#include "ref/gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "ir/error.h"
#include "ir/parallel.h"

namespace dc::ref {

namespace {

// Four floats in one SSE register. GCC's vector extension, not intrinsics: it compiles to
// baseline SSE2 here and to wider code wherever the build allows it.
typedef float v4f __attribute__((vector_size(16)));

// Register tile of the micro-kernel: MR x NR accumulators = 12 of the 16 SSE registers,
// leaving room for the B row and the broadcast A value.
constexpr int64_t MR = 6;
constexpr int64_t NR = 8;
constexpr int64_t NV = NR / 4;
// Cache blocks: an MC x KC block of packed A (~96 KiB) stays in L2 while KC x NR strips of
// packed B (8 KiB) stream through L1; NC sets the width of one parallel task.
constexpr int64_t KC = 256;
constexpr int64_t MC = 96;
constexpr int64_t NC = 256;
static_assert(MC % MR == 0 && NC % NR == 0 && NR % 4 == 0);

// Work below this many multiply-adds is not worth waking a second thread for.
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
};
using Buffer = std::unique_ptr<float[], AlignedFree>;
Buffer allocate(int64_t n) {
  return Buffer(static_cast<float*>(::operator new[](
      static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float), std::align_val_t{64})));
}

// C[0:m, 0:n] (m <= MR, n <= NR) = acc + beta * C, or = acc when beta == 0.
inline void store_tile(const v4f (&acc)[MR][NV], float* c, int64_t ldc, int64_t m, int64_t n,
                       float beta) {
  if (m == MR && n == NR) {
    for (int64_t i = 0; i < MR; ++i) {
      float* row = c + i * ldc;
      for (int64_t v = 0; v < NV; ++v) {
        v4f out = acc[i][v];
        if (beta != 0.f) {
          v4f old;
          std::memcpy(&old, row + 4 * v, sizeof old);
          out += beta == 1.f ? old : old * beta;
        }
        std::memcpy(row + 4 * v, &out, sizeof out);
      }
    }
    return;
  }
  float tile[MR][NR];
  std::memcpy(tile, acc, sizeof tile);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float& dst = c[i * ldc + j];
      dst = beta == 0.f ? tile[i][j] : tile[i][j] + beta * dst;
    }
}

// Computes an MR x NR tile over kc steps from a packed A strip (kc x MR, k-major) and a
// packed B strip (kc x NR, k-major), and stores its top-left m x n corner into C.
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* c,
                  int64_t ldc, int64_t m, int64_t n, float beta) {
  v4f acc[MR][NV] = {};
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    v4f bv[NV];
    std::memcpy(bv, b, sizeof bv);
    for (int64_t i = 0; i < MR; ++i) {
      const v4f av = {a[i], a[i], a[i], a[i]};
      for (int64_t v = 0; v < NV; ++v) acc[i][v] += av * bv[v];
    }
    a += MR;
    b += NR;
  }
  store_tile(acc, c, ldc, m, n, beta);
}

// Layout of a fully packed operand: K is cut into KC blocks, the other dimension into
// strips of `width` (MR for A, NR for B), zero-padded; strip (p, s) holds kc(p) x width
// floats, k-major, at p*KC*padded + s*kc(p)*width.
struct Packed {
  int64_t k = 0;       // reduction length
  int64_t extent = 0;  // rows of op(A) or columns of op(B)
  int64_t width = 0;   // MR or NR
  int64_t padded = 0;  // extent rounded up to width
  Buffer data;

  int64_t kc(int64_t p) const { return std::min(KC, k - p * KC); }
  const float* strip(int64_t p, int64_t s) const {
    return data.get() + p * KC * padded + s * kc(p) * width;
  }
  float* strip(int64_t p, int64_t s) { return data.get() + p * KC * padded + s * kc(p) * width; }
};

// Packs an extent x k operand whose element (r, kk) is src[r*rs + kk*ks], scaled by `scale`.
// op(A): r = row of A; op(B): r = column of B. Strips are independent: packed in parallel.
Packed pack(const float* src, int64_t rs, int64_t ks, int64_t extent, int64_t k, int64_t width,
            float scale, bool parallel) {
  Packed p;
  p.k = k;
  p.extent = extent;
  p.width = width;
  p.padded = round_up(extent, width);
  p.data = allocate(p.padded * k);
  const int64_t strips = p.padded / width;
  const int64_t kblocks = (k + KC - 1) / KC;
  auto work = [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t r0 = s * width;
      const int64_t rows = std::min(width, extent - r0);
      for (int64_t pb = 0; pb < kblocks; ++pb) {
        float* dst = p.strip(pb, s);
        const int64_t k0 = pb * KC, kc = p.kc(pb);
        if (ks == 1) {
          // Rows are contiguous in k: read each row once, scatter into the strip.
          for (int64_t r = 0; r < rows; ++r) {
            const float* row = src + (r0 + r) * rs + k0;
            for (int64_t kk = 0; kk < kc; ++kk) dst[kk * width + r] = scale * row[kk];
          }
        } else {
          // Strip rows are contiguous in the source (rs == 1): copy k-slices directly.
          for (int64_t kk = 0; kk < kc; ++kk) {
            const float* col = src + (k0 + kk) * ks + r0 * rs;
            for (int64_t r = 0; r < rows; ++r) dst[kk * width + r] = scale * col[r * rs];
          }
        }
        for (int64_t r = rows; r < width; ++r)
          for (int64_t kk = 0; kk < kc; ++kk) dst[kk * width + r] = 0.f;
      }
    }
  };
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, width * k));
  if (parallel)
    parallel_for(strips, grain, work);
  else
    work(0, strips);
  return p;
}

void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, GemmShape s, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, bool parallel) {
  const int64_t m = s.m, n = s.n, k = s.k;
  DC_INTERNAL_CHECK(m >= 0 && n >= 0 && k >= 0, "sgemm of negative size ", m, "x", n, "x", k);
  DC_INTERNAL_CHECK(ldc >= n && lda >= (trans_a ? m : k) && ldb >= (trans_b ? k : n),
                    "sgemm leading dimensions too small");
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    if (beta != 1.f) scale_c(m, n, beta, c, ldc);
    return;
  }
  parallel = parallel && m * n * k >= kMinParallelMacs;

  // op(A)(i, kk) = A[i*lda + kk] or A[kk*lda + i]; op(B)(kk, j) = B[kk*ldb + j] or B[j*ldb + kk].
  const Packed pa = trans_a ? pack(a, 1, lda, m, k, MR, alpha, parallel)
                            : pack(a, lda, 1, m, k, MR, alpha, parallel);
  const Packed pb =
      trans_b ? pack(b, ldb, 1, n, k, NR, 1.f, parallel) : pack(b, 1, ldb, n, k, NR, 1.f, parallel);

  // Tasks are MC x NC blocks of C, row blocks innermost so that neighbouring tasks (which
  // land on the same thread) share their B panel.
  const int64_t mblocks = (m + MC - 1) / MC, nblocks = (n + NC - 1) / NC;
  const int64_t kblocks = (k + KC - 1) / KC;
  auto work = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t % mblocks) * MC, j0 = (t / mblocks) * NC;
      const int64_t i1 = std::min(m, i0 + MC), j1 = std::min(n, j0 + NC);
      for (int64_t p = 0; p < kblocks; ++p) {
        const float beta_p = p == 0 ? beta : 1.f;
        const int64_t kc = pa.kc(p);
        for (int64_t j = j0; j < j1; j += NR) {
          const float* bs = pb.strip(p, j / NR);
          for (int64_t i = i0; i < i1; i += MR)
            micro_kernel(kc, pa.strip(p, i / MR), bs, c + i * ldc + j, ldc, std::min(MR, m - i),
                         std::min(NR, n - j), beta_p);
        }
      }
    }
  };
  const int64_t tasks = mblocks * nblocks;
  if (parallel)
    parallel_for(tasks, 1, work);
  else
    work(0, tasks);
}

}  // namespace dc::ref
