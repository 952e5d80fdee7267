// The ValueEmitter's op table (codegen/value_emitter_ops.cpp) against the op-traits table:
// every op the traits call emittable inline has a way to be emitted, and every row belongs
// to an emittable op.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ir/op_traits.h"
#include "ref/kernel.h"
#include "value_emitter_math.h"
#include "value_emitter_op.h"

namespace dc {
namespace {

// The index searches have their own file (value_emitter_index.cpp), dispatched before the table.
const std::set<std::string> kIndexSearches = {"GatherND", "ScatterND", "ScatterElements", "Scatter", "OneHot", "TopK"};

TEST(ValueEmitterOps, EveryEmittableOpHasARow) {
  int emittable = 0, rows = 0;
  for (const ref::OpDef& d : ref::all_ops()) {
    const std::string op(d.op);
    Node n;
    n.op = op;
    const bool row = op_row(op) != nullptr;
    rows += row;
    if (!is_emittable(op)) {
      EXPECT_FALSE(row) << op << " has a row but the traits table does not call it emittable";
      continue;
    }
    ++emittable;
    const bool formula = math_expression(n, {"x0", "x1"}, DType::f32).has_value();
    EXPECT_TRUE(row || formula || kIndexSearches.count(op)) << op << " is emittable but has no row";
  }
  EXPECT_GT(emittable, 60);
  EXPECT_GT(rows, 50);
  EXPECT_EQ(op_row("NoSuchOp"), nullptr);
}

}  // namespace
}  // namespace dc
