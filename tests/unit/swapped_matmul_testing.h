// MatMul workloads whose operands are computed by a Transpose that swaps the last two dims
// of a cluster input (the MatMul gradient's dY x B^T and A^T x dY), which gemm_tiled reads
// in place: A stored [.., K, M], B stored [.., N, K]; and Gemm workloads whose 2-D operands
// are, read in place with transA or transB flipped. Shared by the CUDA-core and tensor-core
// tests (test_codegen_gemm.cpp, test_codegen_gemm_mma.cpp).
#pragma once

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ir/shape.h"
#include "model_builder.h"

namespace dc::testing {

struct SwappedCase {
  const char* name;
  Shape a, b;           // the MatMul's operand shapes
  bool swap_a, swap_b;  // computed by a Transpose of an input stored with the last dims swapped
  bool in_place_a;      // false where A stays read through the Transpose (M folds A's batch)
};

// Transposed A, transposed B, both; batch dims broadcast; B without batch dims (M folds A's
// batch dims); odd sizes.
inline const SwappedCase kSwappedCases[] = {
    {"both_batch_broadcast", {2, 3, 40, 48}, {3, 48, 24}, true, true, true},
    {"a_odd", {2, 37, 29}, {2, 29, 45}, true, false, true},
    {"b_odd", {2, 37, 29}, {2, 29, 45}, false, true, false},
    {"b_folded", {2, 5, 40}, {40, 32}, false, true, false},  // dY x W: B without batch dims
    {"a_folded", {2, 6, 40}, {40, 32}, true, false, false},  // read through the Transpose
    {"a_two_dims", {36, 40}, {40, 32}, true, false, true},   // A^T x dY of a Linear layer
};

inline Workload swapped_matmul(const SwappedCase& c) {
  auto swapped = [](Shape s) {
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    return s;
  };
  auto swap_perm = [](size_t rank) {
    std::vector<int64_t> perm;
    for (size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int64_t>(d));
    std::swap(perm[rank - 1], perm[rank - 2]);
    Attributes a;
    a.set("perm", perm);
    return a;
  };
  ModelBuilder m;
  for (const auto& [name, shape, swap] : {std::tuple{"a", c.a, c.swap_a}, {"b", c.b, c.swap_b}}) {
    const std::string n = name;
    if (!swap) {
      m.input(n, shape);
      continue;
    }
    m.input(n + "_stored", swapped(shape));
    m.node("Transpose", {n + "_stored"}, n, shape, swap_perm(shape.size()));
  }
  Shape out = broadcast_shapes(Shape(c.a.begin(), c.a.end() - 2), Shape(c.b.begin(), c.b.end() - 2));
  out.push_back(c.a[c.a.size() - 2]);
  out.push_back(c.b.back());
  m.node("MatMul", {"a", "b"}, "y", out);
  return m.workload(ClusterKind::gemm);
}

struct SwappedGemmCase {
  bool trans_a, trans_b;  // the Gemm's flags
  bool swap_a, swap_b;    // operand computed by a 2-D Transpose of an input stored the other way
  std::string name() const {
    return std::string("transA ") + (trans_a ? "1" : "0") + " transB " + (trans_b ? "1" : "0") +
           (swap_a ? " A^T" : "") + (swap_b ? " B^T" : "");
  }
};

// Every flag pair with A, B and both transposed.
inline std::vector<SwappedGemmCase> swapped_gemm_cases() {
  std::vector<SwappedGemmCase> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& [sa, sb] : {std::pair{true, false}, {false, true}, {true, true}}) cases.push_back({ta, tb, sa, sb});
  return cases;
}

// Y [M, N] = 0.5 op(A) op(B) + 2 C (C [N]), M 37 (odd: rows past the tiles), K 40, N 44; a
// swapped operand is Transpose(perm [1, 0]) of "a_stored" / "b_stored".
inline constexpr int64_t kSwappedGemmM = 37, kSwappedGemmK = 40, kSwappedGemmN = 44;

inline Workload swapped_gemm(const SwappedGemmCase& c) {
  const int64_t m = kSwappedGemmM, k = kSwappedGemmK, n = kSwappedGemmN;
  const Shape a = c.trans_a ? Shape{k, m} : Shape{m, k}, b = c.trans_b ? Shape{n, k} : Shape{k, n};
  ModelBuilder mb;
  Attributes perm;
  perm.set("perm", std::vector<int64_t>{1, 0});
  for (const auto& [name, shape, swap] : {std::tuple{"a", a, c.swap_a}, {"b", b, c.swap_b}}) {
    const std::string nm = name;
    if (!swap) {
      mb.input(nm, shape);
      continue;
    }
    mb.input(nm + "_stored", {shape[1], shape[0]});
    mb.node("Transpose", {nm + "_stored"}, nm, shape, perm);
  }
  mb.weight("c", {n});
  Attributes at;
  at.set("transA", int64_t{c.trans_a ? 1 : 0});
  at.set("transB", int64_t{c.trans_b ? 1 : 0});
  at.set("alpha", 0.5f);
  at.set("beta", 2.f);
  mb.node("Gemm", {"a", "b", "c"}, "y", {m, n}, at);
  return mb.workload(ClusterKind::gemm);
}

}  // namespace dc::testing
