// lower_einsum: the transformer forms become MatMul / Transpose / ReduceSum computing what the
// Einsum reference computes (seeded random inputs); other equations are refused naming the
// equation.
#include "ir/error.h"
#include "pass_testing.h"
#include "passes/lower_einsum.h"
#include "ref/executor.h"

namespace dc {
namespace {

using testing::add_input;
using testing::add_node;
using testing::attrs;
using testing::op_count;

Graph einsum(const std::string& eq, const std::vector<Shape>& shapes) {
  Graph g;
  std::vector<std::string> ins;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ins.push_back("x" + std::to_string(i));
    add_input(g, ins.back(), shapes[i]);
  }
  add_node(g, "Einsum", ins, {"y"}, attrs({{"equation", eq}}));
  g.outputs = {"y"};
  return g;
}

void expect_lowered(const std::string& eq, const std::vector<Shape>& shapes, int matmuls,
                    int transposes, int reduces) {
  SCOPED_TRACE(eq);
  const Graph typed = testing::with_types(einsum(eq, shapes));
  const Graph lowered = lower_einsum(typed);
  testing::expect_well_formed(lowered);
  EXPECT_EQ(op_count(lowered, "Einsum"), 0);
  EXPECT_EQ(op_count(lowered, "MatMul"), matmuls);
  EXPECT_EQ(op_count(lowered, "Transpose"), transposes);
  EXPECT_EQ(op_count(lowered, "ReduceSum"), reduces);
  testing::expect_same_outputs(typed, lowered, 2e-5f);
}

TEST(PassLowerEinsum, TransformerForms) {
  expect_lowered("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, 1, 0, 0);
  expect_lowered("bhid,bhjd->bhij", {{2, 3, 4, 8}, {2, 3, 5, 8}}, 1, 1, 0);  // K^T
  expect_lowered("bhij,bhjd->bhid", {{2, 3, 4, 5}, {2, 3, 5, 8}}, 1, 0, 0);
  expect_lowered("bnd,dh->bnh", {{2, 3, 8}, {8, 6}}, 1, 0, 0);
  expect_lowered("ij,jk", {{3, 4}, {4, 5}}, 1, 0, 0);           // implicit output "ik"
  expect_lowered("i,i", {{7}, {7}}, 1, 0, 0);                   // inner product
  expect_lowered("bij,bjk->bki", {{2, 3, 4}, {2, 4, 5}}, 1, 1, 0);
  expect_lowered("bij->bji", {{2, 3, 4}}, 0, 1, 0);
  expect_lowered("bij->bi", {{2, 3, 4}}, 0, 0, 1);
  expect_lowered("bij->jb", {{2, 3, 4}}, 0, 1, 1);
  expect_lowered("ij->", {{3, 4}}, 0, 0, 1);
}

TEST(PassLowerEinsum, RefusesOtherEquationsByName) {
  for (const auto& [eq, shapes] : std::vector<std::pair<std::string, std::vector<Shape>>>{
           {"ii->i", {{3, 3}}}, {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}}, {"ij,jk->k", {{2, 3}, {3, 4}}}}) {
    const Graph typed = testing::with_types(einsum(eq, shapes));
    try {
      lower_einsum(typed);
      ADD_FAILURE() << eq << " was lowered";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("equation '" + eq + "' is not supported"), std::string::npos) << e.what();
    }
  }
}

TEST(PassLowerEinsum, ReferenceTakesDiagonals) {
  // The reference itself computes every equation: a batch diagonal by hand.
  Graph g = einsum("bii->bi", {{2, 2, 2}});
  const auto out = ref::run_graph(testing::with_types(g),
                                  {{"x0", Tensor::from_vector<float>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}});
  EXPECT_EQ(out.at("y").to_float_vector(), (std::vector<float>{1, 4, 5, 8}));
}

}  // namespace
}  // namespace dc
