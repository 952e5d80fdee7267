// Workloads of a Linear layer's weight gradient with its bias gradient beside it: the GEMM
// and a ReduceSum of dY over the rows (the GEMM's k), which gemm_tiled computes as one more
// row of A or column of B whose elements are all 1 (ir/gemm_operand_sum.h). Shared by the
// CUDA-core and tensor-core tests (test_codegen_gemm.cpp, test_codegen_gemm_mma.cpp).
#pragma once

#include <string>
#include <vector>

#include "ir/workload.h"
#include "model_builder.h"

namespace dc::testing {

// The forms of dW that the gradient rules build (grad_linalg.cpp), x [R, K], dY [R, N]:
enum class OperandSumForm {
  matmul_xt_dy,  // MatMul(Transpose(x), dY) -> [K, N]: the sum of B, A's ones row
  gemm_dyt_x,    // Gemm(dY, x, transA) -> [N, K] (torch's Linear): the sum of A, B's ones column
  matmul_dyt_x,  // MatMul(Transpose(dY), x) -> [N, K]: the sum read through the Transpose
  gemm_xt_dy,    // Gemm(x, dY, transA) -> [K, N]: the sum of B
};

struct OperandSumCase {
  const char* name;
  OperandSumForm form;
  int64_t r, k, n;  // rows (the GEMM's reduction), input and output features
  bool keepdims;
};

// Odd sizes (no tile or vector divides them), aligned ones (vector loads and 16-byte copies),
// and a long K (split-K offered).
inline const OperandSumCase kOperandSumCases[] = {
    {"matmul_xt_dy_odd", OperandSumForm::matmul_xt_dy, 37, 29, 45, false},
    {"gemm_dyt_x_odd", OperandSumForm::gemm_dyt_x, 37, 29, 45, true},
    {"matmul_dyt_x_aligned", OperandSumForm::matmul_dyt_x, 64, 48, 40, false},
    {"gemm_xt_dy_aligned", OperandSumForm::gemm_xt_dy, 64, 32, 48, true},
    {"matmul_xt_dy_long_k", OperandSumForm::matmul_xt_dy, 520, 24, 40, true},
    {"gemm_dyt_x_long_k", OperandSumForm::gemm_dyt_x, 520, 40, 24, false},
};

inline Workload operand_sum_workload(const OperandSumCase& c) {
  ModelBuilder m;
  m.g.opset = 17;
  m.input("x", {c.r, c.k}).input("dy", {c.r, c.n});
  Attributes swap, trans_a, keep;
  swap.set("perm", std::vector<int64_t>{1, 0});
  trans_a.set("transA", int64_t{1});
  keep.set("keepdims", int64_t{c.keepdims ? 1 : 0});
  switch (c.form) {
    case OperandSumForm::matmul_xt_dy:
      m.node("Transpose", {"x"}, "xt", {c.k, c.r}, swap).node("MatMul", {"xt", "dy"}, "dw", {c.k, c.n});
      break;
    case OperandSumForm::gemm_dyt_x: m.node("Gemm", {"dy", "x"}, "dw", {c.n, c.k}, trans_a); break;
    case OperandSumForm::matmul_dyt_x:
      m.node("Transpose", {"dy"}, "dyt", {c.n, c.r}, swap).node("MatMul", {"dyt", "x"}, "dw", {c.n, c.k});
      break;
    case OperandSumForm::gemm_xt_dy: m.node("Gemm", {"x", "dy"}, "dw", {c.k, c.n}, trans_a); break;
  }
  m.g.initializers["axes"] = Tensor::from_vector<int64_t>({1}, {0});
  m.g.tensors["axes"] = {DType::i64, {1}};
  m.node("ReduceSum", {"dy", "axes"}, "db", c.keepdims ? Shape{1, c.n} : Shape{c.n}, keep);
  std::vector<size_t> all;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) all.push_back(i);
  return make_workload(m.g, all, ClusterKind::gemm);  // outputs: dW and db, read by no one
}

}  // namespace dc::testing
