// SGEMM against a naive triple loop: odd sizes that cut every block and tile edge, all
// transposes, alpha/beta, padded leading dimensions, several K blocks, threads on and off.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "ref/gemm.h"

namespace {

using dc::ref::GemmShape;
using dc::ref::sgemm;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Case {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // extra elements on every leading dimension
};

// Runs sgemm and the naive loop (double accumulation) on the same seeded operands and
// compares with a tolerance scaled by K.
void expect_matches_naive(const Case& c, bool parallel = true) {
  const int64_t lda = (c.ta ? c.m : c.k) + c.pad, ldb = (c.tb ? c.k : c.n) + c.pad;
  const int64_t ldc = c.n + c.pad;
  const auto a = random_values(static_cast<size_t>((c.ta ? c.k : c.m) * lda), 1);
  const auto b = random_values(static_cast<size_t>((c.tb ? c.n : c.k) * ldb), 2);
  auto y = random_values(static_cast<size_t>(c.m * ldc), 3);
  const auto y0 = y;
  sgemm(c.ta, c.tb, GemmShape{c.m, c.n, c.k}, c.alpha, a.data(), lda, b.data(), ldb, c.beta,
        y.data(), ldc, parallel);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const double av = c.ta ? a[kk * lda + i] : a[i * lda + kk];
        const double bv = c.tb ? b[j * ldb + kk] : b[kk * ldb + j];
        acc += av * bv;
      }
      const double want = c.alpha * acc + (c.beta == 0.f ? 0.0 : c.beta * y0[i * ldc + j]);
      ASSERT_NEAR(y[i * ldc + j], want, 1e-5 * (static_cast<double>(c.k) + 1))
          << "ta=" << c.ta << " tb=" << c.tb << " m=" << c.m << " n=" << c.n << " k=" << c.k
          << " at (" << i << ", " << j << ")";
    }
  // The padding past n in each row of C is never written.
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = c.n; j < ldc; ++j) ASSERT_EQ(y[i * ldc + j], y0[i * ldc + j]);
}

TEST(Sgemm, OddSizesAllTransposes) {
  const int64_t sizes[] = {1, 7, 33, 130};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : sizes) expect_matches_naive({ta, tb, m, n, k, 1.f, 0.f, 0});
}

TEST(Sgemm, AlphaBetaAndLeadingDims) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      expect_matches_naive({ta, tb, 13, 29, 17, 0.5f, 1.f, 3});
      expect_matches_naive({ta, tb, 61, 19, 41, -1.5f, 0.25f, 5});
      expect_matches_naive({ta, tb, 6, 8, 9, 2.f, -1.f, 1});  // exactly one register tile
    }
}

TEST(Sgemm, SeveralKBlocksAndParallelTasks) {
  // K past one cache block (256), M and N past one task block: every loop runs more than once.
  expect_matches_naive({false, false, 200, 300, 600, 1.f, 0.f, 0});
  expect_matches_naive({true, true, 97, 515, 257, 0.75f, 0.5f, 2});
}

TEST(Sgemm, ThreadsDoNotChangeTheResult) {
  const int64_t m = 150, n = 420, k = 300;
  const auto a = random_values(m * k, 7), b = random_values(k * n, 8);
  std::vector<float> y1(m * n), y2(m * n);
  sgemm(false, false, {m, n, k}, 1.f, a.data(), k, b.data(), n, 0.f, y1.data(), n, true);
  sgemm(false, false, {m, n, k}, 1.f, a.data(), k, b.data(), n, 0.f, y2.data(), n, false);
  EXPECT_EQ(y1, y2);  // the same tiles in the same order: bitwise equal
}

TEST(Sgemm, BetaZeroIgnoresNaNInC) {
  const std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8};
  std::vector<float> c(4, std::numeric_limits<float>::quiet_NaN());
  sgemm(false, false, {2, 2, 2}, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{19, 22, 43, 50}));
}

TEST(Sgemm, EmptyKScalesC) {
  std::vector<float> c{1, 2, 3};
  sgemm(false, false, {1, 3, 0}, 1.f, nullptr, 1, nullptr, 3, 2.f, c.data(), 3);
  EXPECT_EQ(c, (std::vector<float>{2, 4, 6}));
  sgemm(false, false, {1, 3, 0}, 1.f, nullptr, 1, nullptr, 3, 0.f, c.data(), 3);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0}));
}

TEST(Sgemm, HandComputed) {
  // [[1,2,3],[4,5,6]] x [[1,0],[0,1],[1,1]] = [[4,5],[10,11]]; transposed operands alike.
  const std::vector<float> a{1, 2, 3, 4, 5, 6}, at{1, 4, 2, 5, 3, 6};
  const std::vector<float> b{1, 0, 0, 1, 1, 1}, bt{1, 0, 1, 0, 1, 1};
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> c(4);
      sgemm(ta, tb, {2, 2, 3}, 1.f, ta ? at.data() : a.data(), ta ? 2 : 3,
            tb ? bt.data() : b.data(), tb ? 3 : 2, 0.f, c.data(), 2);
      EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11})) << "ta=" << ta << " tb=" << tb;
    }
}

// Not a test: reports GFLOP/s for a ResNet-50 3x3 conv (as im2col GEMM) and BERT-base
// shapes. Run with --gtest_also_run_disabled_tests --gtest_filter='Sgemm.DISABLED_*'.
TEST(Sgemm, DISABLED_Benchmark) {
  const GemmShape shapes[] = {{256, 3136, 576}, {128, 3072, 768}, {128, 768, 768}, {64, 3136, 576}};
  for (const GemmShape s : shapes)
    for (bool parallel : {false, true}) {
      const auto a = random_values(static_cast<size_t>(s.m * s.k), 1);
      const auto b = random_values(static_cast<size_t>(s.k * s.n), 2);
      std::vector<float> c(static_cast<size_t>(s.m * s.n));
      auto once = [&] {
        sgemm(false, false, s, 1.f, a.data(), s.k, b.data(), s.n, 0.f, c.data(), s.n, parallel);
      };
      once();  // warm-up
      double best = 1e30;
      for (int rep = 0; rep < 10; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        once();
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::cout << s.m << "x" << s.n << "x" << s.k << (parallel ? " parallel: " : " 1 thread: ")
                << best * 1e3 << " ms, " << 2.0 * s.m * s.n * s.k / best * 1e-9 << " GFLOP/s\n";
    }
}

}  // namespace
