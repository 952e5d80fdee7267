// The op-traits table's reduction columns and the one reduced_axes (common/ir), and the
// other layers' op tables held to the traits by op name (docs/codegen.md, "Op traits").
#include <gtest/gtest.h>

#include "ir/error.h"
#include "ir/op_traits.h"
#include "ir/reduced_axes.h"
#include "passes/gradients/gradient_rules.h"

namespace dc {
namespace {

// One node reading x [2, 3, 4, 5]; `axes` (when given) a constant second input.
Graph one_node(const std::string& op, Attributes attrs = {}, const std::vector<int64_t>* axes = nullptr,
               bool runtime_axes = false) {
  Graph g;
  g.tensors["x"] = TensorInfo{DType::f32, {2, 3, 4, 5}};
  g.inputs = {"x"};
  Node n;
  n.name = "n";
  n.op = op;
  n.attrs = std::move(attrs);
  n.inputs = {"x"};
  if (axes || runtime_axes) {
    n.inputs.push_back("axes");
    g.tensors["axes"] = TensorInfo{DType::i64, {static_cast<int64_t>(axes ? axes->size() : 1)}};
    if (axes) g.initializers["axes"] = Tensor::from_vector<int64_t>({static_cast<int64_t>(axes->size())}, *axes);
    else g.inputs.push_back("axes");
  }
  n.outputs = {"y"};
  g.nodes.push_back(n);
  return g;
}

std::vector<int64_t> axes_of(const Graph& g) { return reduced_axes(g, g.nodes[0]).axes; }

TEST(OpTraits, EveryReducePatternOpHasItsAxesRuleAndOnlyThose) {
  int reductions = 0;
  for (const OpTraits& t : all_op_traits()) {
    const bool reduce = t.pattern == OpPattern::reduce;
    EXPECT_EQ(reduce, t.reduce_axes != ReduceAxes::none) << t.op;
    if (t.row_template) {
      EXPECT_TRUE(reduce) << t.op << ": the row template computes reductions only";
    }
    reductions += reduce;
  }
  EXPECT_GE(reductions, 20);
  EXPECT_TRUE(op_traits("ReduceMean").row_template);
  EXPECT_TRUE(op_traits("Softmax").row_template);
  EXPECT_FALSE(op_traits("InstanceNormalization").row_template);  // lowered before codegen
  EXPECT_EQ(op_traits("Softmax").reductions_per_row, 2);           // max and sum
  EXPECT_EQ(op_traits("RMSNormalization").reductions_per_row, 1);
  EXPECT_EQ(op_traits("LayerNormalization").stream_reads, 2);
}

TEST(OpTraits, EveryOpWithAGradientRuleHasARow) {
  for (const grad::GradRuleDef& r : grad::all_gradient_rules()) {
    if (r.op.starts_with("dc.")) continue;  // dc's own training ops
    EXPECT_EQ(op_traits(r.op).op, r.op) << r.op << " has a gradient rule but no row in the op-traits table";
  }
}

TEST(ReducedAxes, ReduceOpsFromTheAttributeTheConstantInputOrEveryAxis) {
  Attributes a;
  a.set("axes", std::vector<int64_t>{-1, 1, 1});
  EXPECT_EQ(axes_of(one_node("ReduceSum", a)), (std::vector<int64_t>{1, 3}));  // sorted, unique
  const std::vector<int64_t> in = {2, 0};
  EXPECT_EQ(axes_of(one_node("ReduceMax", {}, &in)), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(axes_of(one_node("ReduceMean")), (std::vector<int64_t>{0, 1, 2, 3}));
  Attributes noop;
  noop.set("noop_with_empty_axes", int64_t{1});
  const ReducedAxes r = reduced_axes(one_node("ReduceSum", noop), one_node("ReduceSum", noop).nodes[0]);
  EXPECT_TRUE(r.noop);
  EXPECT_TRUE(r.axes.empty());
  const Graph rt = one_node("ReduceSum", {}, nullptr, true);
  EXPECT_TRUE(reduced_axes(rt, rt.nodes[0]).runtime_axes);
  Attributes bad;
  bad.set("axes", std::vector<int64_t>{4});
  const Graph g = one_node("ReduceSum", bad);
  EXPECT_THROW(reduced_axes(g, g.nodes[0]), UserError);
}

TEST(ReducedAxes, NormalisationsAndPools) {
  EXPECT_EQ(axes_of(one_node("Softmax")), (std::vector<int64_t>{3}));
  Attributes legacy;
  legacy.set("dc_legacy_flatten", int64_t{1});
  EXPECT_EQ(axes_of(one_node("Softmax", legacy)), (std::vector<int64_t>{1, 2, 3}));  // opset < 13: axis 1 on
  Attributes ln;
  ln.set("axis", int64_t{2});
  EXPECT_EQ(axes_of(one_node("LayerNormalization", ln)), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(axes_of(one_node("GlobalAveragePool")), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(axes_of(one_node("InstanceNormalization")), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(axes_of(one_node("LpNormalization")), (std::vector<int64_t>{3}));
  const Graph relu = one_node("Relu");
  EXPECT_THROW(reduced_axes(relu, relu.nodes[0]), InternalError);
}

}  // namespace
}  // namespace dc
