// Gradient rules of elementwise, activation, reduction and data-movement ops against
// central finite differences in fp64 on the CPU reference (gradient_testing.h).
#include "gradient_testing.h"

namespace dc::testing {
namespace {

// One node `op` over f64 initializers a, b, ... (given shapes), all differentiated.
void check_op(const std::string& op, const std::vector<Shape>& shapes, Attributes a = {},
              double lo = -1, double hi = 1) {
  SCOPED_TRACE(op);
  Graph g;
  std::vector<std::string> names;
  for (size_t i = 0; i < shapes.size(); ++i) {
    names.push_back(std::string(1, static_cast<char>('a' + i)));
    add_initializer(g, names.back(), f64_tensor(shapes[i], 10 + static_cast<uint32_t>(i), lo, hi));
  }
  add_node(g, op, names, {"y"}, std::move(a));
  check_gradients(g, "y", std::set<std::string>(names.begin(), names.end()), fd_f64());
}

TEST(GradientRules, BinaryArithmeticWithBroadcasting) {
  check_op("Add", {{2, 3}, {3}});
  check_op("Sub", {{2, 1}, {2, 3}});
  check_op("Mul", {{2, 3, 4}, {3, 1}});
  check_op("Div", {{2, 3}, {2, 3}}, {}, 0.5, 2.0);
}

TEST(GradientRules, PowBaseAndExponent) { check_op("Pow", {{2, 3}, {3}}, {}, 0.5, 1.5); }

TEST(GradientRules, UnaryMath) {
  check_op("Neg", {{5}});
  check_op("Sqrt", {{5}}, {}, 0.5, 2.0);
  check_op("Reciprocal", {{5}}, {}, 0.5, 2.0);
  check_op("Exp", {{5}});
  check_op("Log", {{5}}, {}, 0.5, 2.0);
  check_op("Abs", {{7}});
  check_op("Identity", {{2, 2}});
}

TEST(GradientRules, Activations) {
  check_op("Relu", {{3, 4}});
  check_op("LeakyRelu", {{3, 4}}, attrs({{"alpha", 0.2f}}));
  check_op("Sigmoid", {{3, 4}}, {}, -3, 3);
  check_op("Tanh", {{3, 4}}, {}, -2, 2);
  check_op("Erf", {{3, 4}}, {}, -2, 2);
  check_op("HardSigmoid", {{3, 4}}, {}, -4, 4);
  check_op("HardSwish", {{3, 4}}, {}, -5, 5);
}

TEST(GradientRules, SiluAsMulOfSigmoid) {
  Graph g;
  add_initializer(g, "x", f64_tensor({2, 5}, 3, -3, 3));
  add_node(g, "Sigmoid", {"x"}, {"s"});
  add_node(g, "Mul", {"x", "s"}, {"y"});  // x read twice: the two gradients are summed
  check_gradients(g, "y", {"x"}, fd_f64());
}

TEST(GradientRules, ClipPassesInsideTheBounds) {
  Graph g;
  add_initializer(g, "x", f64_tensor({10}, 3, -2, 2));
  add_initializer(g, "lo", Tensor::scalar(-0.5));
  add_initializer(g, "hi", Tensor::scalar(0.7));
  add_node(g, "Clip", {"x", "lo", "hi"}, {"y"});
  check_gradients(g, "y", {"x"}, fd_f64());
}

TEST(GradientRules, Reductions) {
  for (const char* op : {"ReduceSum", "ReduceMean"}) {
    SCOPED_TRACE(op);
    Graph g;
    add_initializer(g, "x", f64_tensor({2, 3, 4}, 5));
    add_initializer(g, "axes", Tensor::from_vector<int64_t>({2}, {0, -1}));
    add_node(g, op, {"x", "axes"}, {"y"}, attrs({{"keepdims", int64_t{0}}}));
    check_gradients(g, "y", {"x"}, fd_f64());
  }
}

TEST(GradientRules, ReshapeFamilyAndTranspose) {
  Graph g;
  add_initializer(g, "x", f64_tensor({2, 3, 4}, 6));
  add_initializer(g, "shape", Tensor::from_vector<int64_t>({2}, {6, 4}));
  add_initializer(g, "axes", Tensor::from_vector<int64_t>({1}, {0}));
  add_node(g, "Reshape", {"x", "shape"}, {"r"});
  add_node(g, "Unsqueeze", {"r", "axes"}, {"u"});
  add_node(g, "Transpose", {"u"}, {"t"}, attrs({{"perm", std::vector<int64_t>{2, 0, 1}}}));
  add_initializer(g, "axes1", Tensor::from_vector<int64_t>({1}, {1}));
  add_node(g, "Squeeze", {"t", "axes1"}, {"s"});  // [4, 1, 6] -> [4, 6]
  add_node(g, "Flatten", {"s"}, {"y"}, attrs({{"axis", int64_t{1}}}));
  check_gradients(g, "y", {"x"}, fd_f64());
}

TEST(GradientRules, ExpandSumsBack) {
  Graph g;
  add_initializer(g, "x", f64_tensor({3, 1}, 7));
  add_initializer(g, "shape", Tensor::from_vector<int64_t>({3}, {2, 3, 4}));
  add_node(g, "Expand", {"x", "shape"}, {"y"});
  check_gradients(g, "y", {"x"}, fd_f64());
}

TEST(GradientRules, ConcatAndSplit) {
  Graph g;
  add_initializer(g, "a", f64_tensor({2, 3}, 8));
  add_initializer(g, "b", f64_tensor({2, 2}, 9));
  add_node(g, "Concat", {"a", "b"}, {"c"}, attrs({{"axis", int64_t{1}}}));
  add_initializer(g, "split", Tensor::from_vector<int64_t>({3}, {1, 3, 1}));
  add_node(g, "Split", {"c", "split"}, {"p", "q", "r"}, attrs({{"axis", int64_t{1}}}));
  add_node(g, "Mul", {"p", "r"}, {"pr"});  // q has no gradient: Split's rule fills zeros
  add_node(g, "Add", {"pr", "a"}, {"y"});
  check_gradients(g, "y", {"a", "b"}, fd_f64());
}

TEST(GradientRules, SliceAndPad) {
  Graph g;
  add_initializer(g, "x", f64_tensor({3, 6}, 10));
  add_initializer(g, "starts", Tensor::from_vector<int64_t>({2}, {1, -5}));
  add_initializer(g, "ends", Tensor::from_vector<int64_t>({2}, {3, 5}));
  add_node(g, "Slice", {"x", "starts", "ends"}, {"s"});
  add_initializer(g, "pads", Tensor::from_vector<int64_t>({4}, {1, 0, 0, 2}));
  add_node(g, "Pad", {"s", "pads"}, {"y"});
  check_gradients(g, "y", {"x"}, fd_f64());
}

TEST(GradientRules, WhereRoutesBothBranches) {
  Graph g;
  add_initializer(g, "c", Tensor::from_vector<bool>({2, 3}, {true, false, true, false, false, true}));
  add_initializer(g, "a", f64_tensor({2, 3}, 11));
  add_initializer(g, "b", f64_tensor({3}, 12));
  add_node(g, "Where", {"c", "a", "b"}, {"y"});
  check_gradients(g, "y", {"a", "b"}, fd_f64());
}

}  // namespace
}  // namespace dc::testing
