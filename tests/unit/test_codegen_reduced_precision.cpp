// f16/bf16 storage in the generated source (storage structs, widening loads, rounding stores)
// and the worker's bound for it (variant_tolerance). The kernels' runs against the CPU
// reference at f16/bf16 are op cases (tests/support/op_cases_storage.cpp), run by
// tests/unit/test_op_cases.cpp.
#include <gtest/gtest.h>

#include "generate.h"
#include "ir/tolerance.h"
#include "op_cases.h"
#include "param_space.h"
#include "pass_testing.h"
#include "variant_tolerance.h"

namespace dc {
namespace {

using testing::add_input;
using testing::add_node;
using testing::attrs;
using testing::retyped;
using testing::whole;

TEST(ReducedPrecisionCodegen, StorageTypesInTheSource) {
  // Parameters are the prelude's storage structs; loads widen, stores round.
  Graph g;
  add_input(g, "x", {64});
  add_node(g, "Relu", {"x"}, {"y"});
  g.outputs = {"y"};
  const Graph typed = retyped(g, {{"x", DType::f16}, {"y", DType::bf16}});
  ref::TensorMap in;
  const Workload w = whole(typed, ClusterKind::elementwise, 80, &in);
  const GeneratedKernel k = generate_reference(w);
  EXPECT_NE(k.source.find("const dc_half* DC_RESTRICT in0"), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("dc_bfloat16* DC_RESTRICT out0"), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("dc_to_f32(in0["), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("dc_round_bf16("), std::string::npos) << k.source;
  EXPECT_NE(k.source.find("dc_from_f32<dc_bfloat16>("), std::string::npos) << k.source;
  // One rounding per computed f16 tensor: none for the Transpose (bits move), one for the
  // Relu (a float value of the compute type until rounded).
  Graph h;
  add_input(h, "x", {8, 4});
  add_node(h, "Transpose", {"x"}, {"t"});
  add_node(h, "Relu", {"t"}, {"r"});
  add_node(h, "Add", {"r", "t"}, {"s"});
  h.outputs = {"s"};
  const Workload hw = whole(retyped(h, {{"x", DType::f16}, {"t", DType::f16}, {"r", DType::f16},
                                        {"s", DType::f16}}), ClusterKind::elementwise, 81, &in);
  Variant v;
  v.template_name = "elementwise";
  v.params = {{"threads", 64}, {"vec", 1}, {"elems_per_thread", 1}};
  const std::string src = generate_kernel(hw, v).source;
  size_t rounds = 0;
  for (size_t p = src.find("dc_round_f16("); p != std::string::npos; p = src.find("dc_round_f16(", p + 1)) ++rounds;
  EXPECT_EQ(rounds, 2u + 1u) << src;  // the prelude's definition + Relu + Add
}

TEST(ReducedPrecisionCodegen, VariantToleranceFollowsTheWorkload) {
  // The worker's and tune's bound: K of the GEMM, the row of a reduction, 1 elementwise;
  // the output dtype of coarsest storage.
  Graph g;
  add_input(g, "a", {8, 300});
  add_input(g, "b", {300, 16});
  add_node(g, "MatMul", {"a", "b"}, {"c"});
  g.outputs = {"c"};
  ref::TensorMap in;
  const Workload mm = whole(retyped(g, {{"a", DType::f16}, {"b", DType::f16}, {"c", DType::f16}}),
                            ClusterKind::gemm, 90, &in);
  EXPECT_EQ(reduction_length(mm, analyze_workload(mm)), 300);
  const Tolerance t = variant_tolerance("fp16", mm);
  EXPECT_EQ(t.rtol, kernel_tolerance("fp16", DType::f16, 300).rtol);
  EXPECT_GT(t.rtol, variant_tolerance("fp32", mm).rtol);

  Graph h;
  add_input(h, "x", {4, 77});
  add_node(h, "Softmax", {"x"}, {"p"}, attrs({{"axis", int64_t{-1}}}));
  add_node(h, "Relu", {"p"}, {"o"});
  h.outputs = {"o", "p"};
  const Workload sm = whole(retyped(h, {{"p", DType::f32}, {"o", DType::bf16}}), ClusterKind::reduction, 91, &in);
  EXPECT_EQ(reduction_length(sm, analyze_workload(sm)), 77);
  EXPECT_EQ(variant_tolerance("fp32", sm).rtol, kernel_tolerance("fp32", DType::bf16, 77).rtol);
  const Workload op = whole(retyped(h, {}), ClusterKind::opaque, 92, &in);
  EXPECT_EQ(reduction_length(op, analyze_workload(op)), 77);

  Graph e;
  add_input(e, "x", {4, 77});
  add_node(e, "Relu", {"x"}, {"o"});
  e.outputs = {"o"};
  const Workload ew = whole(retyped(e, {}), ClusterKind::elementwise, 93, &in);
  EXPECT_EQ(reduction_length(ew, analyze_workload(ew)), 1);
  EXPECT_EQ(variant_tolerance("fp32", ew).rtol, 1e-5);
}

}  // namespace
}  // namespace dc
