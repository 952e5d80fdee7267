// GradBuilder: how a gradient rule adds its backward nodes to the training graph.
//
// Each call appends one node (named after the forward node being differentiated) whose
// outputs get fresh names and their types in Graph::tensors, so the graph stays typed
// without shape inference. The small compositions (sum_to, reshape, scale, ...) are the
// vocabulary the rules share.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace dc::grad {

// The batch and spatial axes {0, 2, 3, ...} of an [N, C, ...] tensor of `rank`: what a
// per-channel sum or statistic reduces over (bias gradients, BatchNorm).
std::vector<int64_t> batch_and_spatial_axes(size_t rank);

class GradBuilder {
 public:
  // Names are "<prefix><context>/<what><n>". The backward pass's are "grad/..." (recompute
  // and the plan's notes tell it apart by that prefix); a forward rewrite passes "".
  explicit GradBuilder(Graph& g, std::string prefix = "grad/") : g_(g), prefix_(std::move(prefix)) {}

  // The forward node whose gradient is being built: names the nodes added next.
  void set_context(const std::string& node_name) { context_ = node_name; }
  const Graph& graph() const { return g_; }
  const TensorInfo& info(const std::string& tensor) const { return g_.info(tensor); }
  const Shape& shape(const std::string& tensor) const { return g_.info(tensor).shape; }

  // A node of `op` with outputs of the given types; returns the output names.
  std::vector<std::string> node(const std::string& op, std::vector<std::string> inputs,
                                const std::vector<TensorInfo>& outputs, Attributes attrs = {});
  // A node with one output.
  std::string node1(const std::string& op, std::vector<std::string> inputs, TensorInfo output,
                    Attributes attrs = {});

  // A new constant initializer.
  std::string constant(Tensor value);
  // A rank-0 constant of float dtype `dt` (f32 or f64).
  std::string scalar(double v, DType dt);
  std::string ints(const std::vector<int64_t>& v);

  // Elementwise arithmetic with numpy broadcasting; the result has a's dtype.
  std::string add(const std::string& a, const std::string& b) { return binary("Add", a, b); }
  std::string sub(const std::string& a, const std::string& b) { return binary("Sub", a, b); }
  std::string mul(const std::string& a, const std::string& b) { return binary("Mul", a, b); }
  std::string div(const std::string& a, const std::string& b) { return binary("Div", a, b); }
  std::string binary(const std::string& op, const std::string& a, const std::string& b);
  std::string unary(const std::string& op, const std::string& x, Attributes attrs = {});
  std::string neg(const std::string& x) { return unary("Neg", x); }
  // x * v for a constant v.
  std::string scale(const std::string& x, double v) { return mul(x, scalar(v, info(x).dtype)); }
  // A bool tensor: op(a, b) for a comparison op (Greater, Less, ...).
  std::string compare(const std::string& op, const std::string& a, const std::string& b);
  // Where(cond, a, b) with a's dtype.
  std::string where(const std::string& cond, const std::string& a, const std::string& b);
  // A rank-0 zero of `like`'s dtype.
  std::string zero(const std::string& like) { return scalar(0.0, info(like).dtype); }

  std::string reshape(const std::string& x, const Shape& to);
  // Transpose(x, perm); the input of x's Transpose itself where perm undoes it.
  std::string transpose(const std::string& x, const std::vector<int64_t>& perm);
  std::string expand(const std::string& x, const Shape& to);
  std::string reduce_sum(const std::string& x, const std::vector<int64_t>& axes, bool keepdims);
  // x [N, C, ...] summed over its batch and spatial axes: [C].
  std::string sum_per_channel(const std::string& x) {
    return reduce_sum(x, batch_and_spatial_axes(shape(x).size()), false);
  }
  // The adjoint of broadcasting x's shape-`to` origin: sums over the broadcast dims and
  // reshapes to `to` (x itself when the shapes already match).
  std::string sum_to(const std::string& x, const Shape& to);

 private:
  std::string fresh(const std::string& what);

  Graph& g_;
  std::string prefix_;
  std::string context_;
  int64_t counter_ = 0;
};

}  // namespace dc::grad
