// MatMul workloads whose operands are computed by a Transpose that swaps the last two dims
// of a cluster input (the MatMul gradient's dY x B^T and A^T x dY), which gemm_tiled reads
// in place: A stored [.., K, M], B stored [.., N, K]. Shared by the CUDA-core and
// tensor-core tests (test_codegen_gemm.cpp, test_codegen_gemm_mma.cpp).
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

}  // namespace dc::testing
