// Einsum equations: parsed once for the CPU reference (ops_einsum.cpp) and for the
// lower_einsum pass (passes/lower_einsum.cpp), which maps the forms transformers use onto
// MatMul / Transpose / ReduceSum.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace dc::ref {

struct EinsumEquation {
  std::vector<std::string> inputs;  // one letter per axis of each operand
  std::string output;               // explicit, or the implicit form's sorted single letters
  std::map<char, int64_t> extent;   // every letter's extent
};

// Parses `n`'s equation against its operands' shapes. UserError, naming the equation, for
// ellipses, malformed terms, rank mismatches and letters of different extents.
EinsumEquation parse_einsum(const Node& n, const std::vector<Shape>& shapes);

}  // namespace dc::ref
