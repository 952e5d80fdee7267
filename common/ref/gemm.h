// Single-precision GEMM for the reference executor: C = alpha * op(A) * op(B) + beta * C.
//
// Row-major with leading dimensions, like cblas_sgemm(CblasRowMajor, ...). Cache-blocked
// and register-tiled (packed panels of A and B, a small micro-kernel kept in SSE registers),
// baseline x86-64 only: no -march flags, no intrinsics, so the binary runs anywhere.
#pragma once

#include <cstdint>

namespace dc::ref {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
};

// op(A) is m x k: A itself (lda >= k) or, with trans_a, the transpose of a k x m A (lda >= m).
// op(B) is k x n: B itself (ldb >= n) or, with trans_b, the transpose of an n x k B (ldb >= k).
// C is m x n with ldc >= n. beta == 0 ignores C's old contents (NaN included), as BLAS does.
// `parallel` runs on dc::parallel_for's threads; pass false when the caller already
// parallelises over independent GEMMs.
void sgemm(bool trans_a, bool trans_b, GemmShape s, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, bool parallel = true);

}  // namespace dc::ref
