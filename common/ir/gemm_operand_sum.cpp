#include "ir/gemm_operand_sum.h"

#include <vector>

#include "ir/reduced_axes.h"

namespace dc {

namespace {

// The input of the 2-D Transpose (perm [1, 0] or none) computing `t`; "" if none does.
std::string transpose_2d_input(const Graph& g, const std::string& t) {
  const auto p = g.producer(t);
  if (!p) return "";
  const Node& n = g.nodes[*p];
  if (n.op != "Transpose" || g.info(t).shape.size() != 2) return "";
  const std::vector<int64_t> perm = n.attrs.get_ints("perm", {});
  return perm.empty() || perm == std::vector<int64_t>{1, 0} ? n.input(0) : "";
}

// The axis of operand `s`'s stored [rows, cols] that the GEMM reduces over.
int64_t reduction_axis(const Node& gemm, size_t s) {
  const bool trans = gemm.op == "Gemm" && gemm.attrs.get_int(s == 0 ? "transA" : "transB", 0) != 0;
  const int64_t k_axis = s == 0 ? 1 : 0;  // A [M, K], B [K, N]
  return trans ? 1 - k_axis : k_axis;
}

// dc.ConvGradWeight(X, dY) and ReduceSum(dY) over axes 0, 2, 3, ...: the sum of its A.
std::optional<GemmOperandSum> conv_weight_grad_sum(const Graph& g, const Node& wgrad, const Node& sum) {
  if (sum.input(0) != wgrad.input(1)) return std::nullopt;
  const ReducedAxes ra = reduced_axes(g, sum);
  std::vector<int64_t> batch_and_spatial = {0};
  for (size_t d = 2; d < g.info(sum.input(0)).shape.size(); ++d) batch_and_spatial.push_back(static_cast<int64_t>(d));
  if (ra.noop || ra.runtime_axes || ra.axes != batch_and_spatial) return std::nullopt;
  return GemmOperandSum{0, false};
}

}  // namespace

std::optional<GemmOperandSum> gemm_operand_sum(const Graph& g, const Node& gemm, const Node& sum) {
  if (sum.op != "ReduceSum" || gemm.inputs.size() < 2) return std::nullopt;
  if (gemm.op == "dc.ConvGradWeight") return conv_weight_grad_sum(g, gemm, sum);
  if (gemm.op != "Gemm" && gemm.op != "MatMul") return std::nullopt;
  for (size_t s = 0; s < 2; ++s)
    if (g.info(gemm.input(s)).shape.size() != 2) return std::nullopt;
  const std::string& x = sum.input(0);
  if (g.info(x).shape.size() != 2) return std::nullopt;
  const ReducedAxes ra = reduced_axes(g, sum);
  if (ra.noop || ra.runtime_axes || ra.axes.size() != 1) return std::nullopt;
  for (size_t s = 0; s < 2; ++s) {
    const std::string& t = gemm.input(s);
    const bool through = t != x;
    if (through && transpose_2d_input(g, t) != x) continue;
    const int64_t axis = through ? 1 - reduction_axis(gemm, s) : reduction_axis(gemm, s);
    if (ra.axes[0] == axis) return GemmOperandSum{s, through};
  }
  return std::nullopt;
}

}  // namespace dc
