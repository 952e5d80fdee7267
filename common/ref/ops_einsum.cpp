// Einsum, every equation without an ellipsis (repeated letters take diagonals): a loop over
// every combination of the letters, summed in f64 and rounded once to the output dtype
// (f32 or f64). The lower_einsum pass maps the common forms onto MatMul / Transpose /
// ReduceSum; this kernel is their reference.
#include <algorithm>

#include "ir/error.h"
#include "ref/checked_op.h"
#include "ref/einsum.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

void check_einsum(const Node& n, const std::vector<const TensorInfo*>& in) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < in.size(); ++i) {
    DC_USER_CHECK(in[i] != nullptr, n.op, ": input ", i, " is missing");
    DC_USER_CHECK(in[i]->dtype == DType::f32 || in[i]->dtype == DType::f64, n.op, ": input ", i,
                  " has dtype ", dtype_name(in[i]->dtype), ", supported: f32, f64");
    DC_USER_CHECK(in[i]->dtype == in[0]->dtype, n.op, ": inputs have different dtypes");
    shapes.push_back(in[i]->shape);
  }
  DC_USER_CHECK(!in.empty(), n.op, ": no inputs");
  parse_einsum(n, shapes);
}

std::vector<Tensor> run_einsum(const Node& n, const Inputs& in) {
  std::vector<Shape> shapes;
  for (const Tensor& t : in) shapes.push_back(t.shape());
  const EinsumEquation e = parse_einsum(n, shapes);
  std::string letters = e.output;  // output letters outermost, then the summed ones
  for (const auto& [c, ext] : e.extent)
    if (e.output.find(c) == std::string::npos) letters += c;
  std::vector<std::vector<double>> x;
  for (const Tensor& t : in) {
    if (t.dtype() == DType::f64) x.emplace_back(t.data<double>(), t.data<double>() + t.numel());
    else { const auto f = t.to_float_vector(); x.emplace_back(f.begin(), f.end()); }
  }
  // Stride of each letter in each operand (repeated letters add up: a diagonal).
  std::vector<std::vector<int64_t>> stride(in.size(), std::vector<int64_t>(letters.size(), 0));
  for (size_t i = 0; i < in.size(); ++i) {
    const auto s = shape_strides(in[i].shape());
    for (size_t k = 0; k < e.inputs[i].size(); ++k) stride[i][letters.find(e.inputs[i][k])] += s[k];
  }
  Shape os;
  for (char c : e.output) os.push_back(e.extent.at(c));
  int64_t summed = 1;
  for (size_t l = e.output.size(); l < letters.size(); ++l) summed *= e.extent.at(letters[l]);
  std::vector<double> out(static_cast<size_t>(shape_numel(os)));
  std::vector<int64_t> idx(letters.size());
  for (int64_t o = 0; o < static_cast<int64_t>(out.size()); ++o) {
    double acc = 0;
    for (int64_t r = 0; r < summed; ++r) {
      int64_t a = o, b = r;  // the letters' values, innermost letter fastest
      for (size_t l = letters.size(); l-- > 0;) {
        int64_t& v = l < e.output.size() ? a : b;
        idx[l] = v % e.extent.at(letters[l]);
        v /= e.extent.at(letters[l]);
      }
      double p = 1;
      for (size_t i = 0; i < in.size(); ++i) {
        int64_t off = 0;
        for (size_t l = 0; l < letters.size(); ++l) off += idx[l] * stride[i][l];
        p *= x[i][static_cast<size_t>(off)];
      }
      acc += p;
    }
    out[static_cast<size_t>(o)] = acc;
  }
  if (in[0].dtype() == DType::f64) return {Tensor::from_vector<double>(os, out)};
  return {Tensor::from_vector<float>(os, std::vector<float>(out.begin(), out.end()))};
}

const OpDef kOps[] = {op_def<check_einsum, run_einsum>("Einsum")};

}  // namespace

std::span<const OpDef> einsum_ops() { return kOps; }

}  // namespace dc::ref
