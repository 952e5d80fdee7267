// Generator refusals of the CUDA-core templates that are not the GEMM family. Their kernels'
// runs against the CPU reference are op cases (tests/support/op_cases_fp32.cpp), run by
// tests/unit/test_op_cases.cpp.
#include <gtest/gtest.h>

#include "generate.h"
#include "pass_testing.h"

namespace dc {
namespace {

using testing::add_input;
using testing::add_node;

TEST(CodegenRefusals, GeneratorGapsAreInternalErrors) {
  // Ops without naive code are listed; templates refuse workloads of another shape.
  Workload w;
  w.signature = "gap";
  add_input(w.graph, "x", {4});
  w.graph.tensors["y"] = {DType::f32, {4}};
  w.graph.tensors["z"] = {DType::f32, {4}};
  add_node(w.graph, "Foo", {"x"}, {"y"});
  add_node(w.graph, "Bar", {"y"}, {"z"});
  w.graph.outputs = {"z"};
  try {
    generate_reference(w);
    ADD_FAILURE() << "no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("Foo, Bar"), std::string::npos) << e.what();
  }
  Variant ew;
  ew.template_name = "elementwise";
  ew.params = {{"threads", 128}, {"elems_per_thread", 1}, {"vec", 1}};
  EXPECT_THROW(generate_kernel(w, ew), InternalError);
  Variant rr;
  rr.template_name = "row_reduce";
  rr.params = {{"threads_per_row", 32}, {"rows_per_block", 1}, {"vec", 1}, {"cache", 0}};
  EXPECT_THROW(generate_kernel(w, rr), InternalError);  // no reduction in it
  Variant pw;
  pw.template_name = "pool_window";
  pw.params = ew.params;
  EXPECT_THROW(generate_kernel(w, pw), InternalError);  // no window pool in it
}

}  // namespace
}  // namespace dc
