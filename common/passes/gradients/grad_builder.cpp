#include "passes/gradients/grad_builder.h"

#include <algorithm>

#include "ir/error.h"

namespace dc::grad {

std::string GradBuilder::fresh(const std::string& what) {
  std::string name;
  do {
    name = str_cat(prefix_, context_, "/", what, counter_++);
  } while (g_.tensors.count(name) != 0);
  return name;
}

std::vector<std::string> GradBuilder::node(const std::string& op, std::vector<std::string> inputs,
                                           const std::vector<TensorInfo>& outputs, Attributes attrs) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  for (const TensorInfo& t : outputs) {
    n.outputs.push_back(fresh(op));
    g_.tensors[n.outputs.back()] = t;
  }
  n.name = n.outputs.empty() ? fresh(op) : n.outputs[0];
  g_.nodes.push_back(n);
  return n.outputs;
}

std::string GradBuilder::node1(const std::string& op, std::vector<std::string> inputs,
                               TensorInfo output, Attributes attrs) {
  return node(op, std::move(inputs), {std::move(output)}, std::move(attrs))[0];
}

std::string GradBuilder::constant(Tensor value) {
  const std::string name = fresh("const");
  g_.tensors[name] = TensorInfo{value.dtype(), value.shape()};
  g_.initializers[name] = std::move(value);
  return name;
}

std::string GradBuilder::scalar(double v, DType dt) {
  DC_INTERNAL_CHECK(dt == DType::f32 || dt == DType::f64, "scalar of dtype ", dtype_name(dt));
  return constant(dt == DType::f64 ? Tensor::scalar(v) : Tensor::scalar(static_cast<float>(v)));
}

std::string GradBuilder::ints(const std::vector<int64_t>& v) {
  return constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
}

std::string GradBuilder::binary(const std::string& op, const std::string& a, const std::string& b) {
  return node1(op, {a, b}, TensorInfo{info(a).dtype, broadcast_shapes(shape(a), shape(b))});
}

std::string GradBuilder::unary(const std::string& op, const std::string& x, Attributes attrs) {
  return node1(op, {x}, info(x), std::move(attrs));
}

std::string GradBuilder::compare(const std::string& op, const std::string& a, const std::string& b) {
  return node1(op, {a, b}, TensorInfo{DType::boolean, broadcast_shapes(shape(a), shape(b))});
}

std::string GradBuilder::where(const std::string& cond, const std::string& a, const std::string& b) {
  const Shape s = broadcast_shapes(shape(cond), broadcast_shapes(shape(a), shape(b)));
  return node1("Where", {cond, a, b}, TensorInfo{info(a).dtype, s});
}

std::string GradBuilder::reshape(const std::string& x, const Shape& to) {
  if (shape(x) == to) return x;
  return node1("Reshape", {x, ints(to)}, TensorInfo{info(x).dtype, to});
}

std::string GradBuilder::transpose(const std::string& x, const std::vector<int64_t>& perm) {
  // The Transpose of a Transpose that it undoes is the inner one's input: a rule's
  // transposed result that the next rule transposes back costs no kernel.
  if (const auto p = g_.producer(x); p && g_.nodes[*p].op == "Transpose") {
    const Node& t = g_.nodes[*p];
    std::vector<int64_t> inner = t.attrs.get_ints("perm", {});
    if (inner.empty())  // no perm: dims reversed
      for (size_t d = perm.size(); d-- > 0;) inner.push_back(static_cast<int64_t>(d));
    bool undone = inner.size() == perm.size();
    for (size_t d = 0; undone && d < perm.size(); ++d)
      undone = inner[static_cast<size_t>(perm[d])] == static_cast<int64_t>(d);
    if (undone) return t.input(0);
  }
  Shape out;
  for (int64_t p : perm) out.push_back(shape(x).at(static_cast<size_t>(p)));
  Attributes a;
  a.set("perm", perm);
  return node1("Transpose", {x}, TensorInfo{info(x).dtype, out}, a);
}

std::string GradBuilder::expand(const std::string& x, const Shape& to) {
  if (shape(x) == to) return x;
  return node1("Expand", {x, ints(to)}, TensorInfo{info(x).dtype, to});
}

std::vector<int64_t> batch_and_spatial_axes(size_t rank) {
  std::vector<int64_t> axes{0};
  for (size_t d = 2; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  return axes;
}

std::string GradBuilder::reduce_sum(const std::string& x, const std::vector<int64_t>& axes,
                                    bool keepdims) {
  if (axes.empty()) return x;
  Shape out;
  const Shape& in = shape(x);
  for (size_t d = 0; d < in.size(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (!reduced) out.push_back(in[d]);
    else if (keepdims) out.push_back(1);
  }
  Attributes a;
  a.set("keepdims", int64_t{keepdims ? 1 : 0});
  return node1("ReduceSum", {x, ints(axes)}, TensorInfo{info(x).dtype, out}, a);
}

std::string GradBuilder::sum_to(const std::string& x, const Shape& to) {
  const Shape& from = shape(x);
  if (from == to) return x;
  DC_INTERNAL_CHECK(from.size() >= to.size(), "sum_to: ", shape_str(from), " -> ", shape_str(to));
  const size_t lead = from.size() - to.size();
  std::vector<int64_t> axes;
  for (size_t d = 0; d < from.size(); ++d)
    if (d < lead || (to[d - lead] == 1 && from[d] != 1)) axes.push_back(static_cast<int64_t>(d));
  return reshape(reduce_sum(x, axes, true), to);
}

}  // namespace dc::grad
